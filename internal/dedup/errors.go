package dedup

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
)

// KeyConstraint is the constraint on which, and only on which, a conflict
// means a duplicate.
const KeyConstraint = "processed_messages_key"

var (
	// ErrPayloadMismatch means the key is held by a delivery whose request
	// body had a different SHA-256. Nothing was changed.
	ErrPayloadMismatch = errors.New("dedup: delivery ID reused with a different payload")
	// ErrInFlight means another transaction still held the key when the
	// in-flight wait ran out. Nothing was recorded; a retry can succeed.
	ErrInFlight = errors.New("dedup: delivery is still being processed")
)

// errExpired marks a claim that conflicted with a key whose retention has
// passed; it never leaves Run.
var errExpired = errors.New("expired key")

// unavailable wraps err with [ErrUnavailable] unless it is PostgreSQL's own
// answer. It is for a lost connection or an I/O error.
func unavailable(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}

// errClaimConflict marks a claim that failed with a unique violation of
// KeyConstraint; it never leaves Run.
var errClaimConflict = errors.New("claim conflict")

// classify wraps the first statement error by the statement that raised it.
// Only the claim can be in flight or a duplicate. With ON CONFLICT,
// PostgreSQL reports no conflict as an error. A database that does still
// gets a duplicate, read in a second round trip.
func classify(err error, at int, p *plan) error {
	switch {
	case at == p.claim && IsDuplicate(err):
		return errClaimConflict
	case at == p.claim && isLockTimeout(err):
		return fmt.Errorf("claim delivery: %w", ErrInFlight)
	case at == p.claim && p.folded:
		return fmt.Errorf("claim delivery and apply state change: %w", err)
	case at < p.changes:
		return fmt.Errorf("claim delivery: %w", err)
	case at < p.changesEnd:
		return fmt.Errorf("apply state change (statement %d): %w", at-p.changes+1, err)
	case at == p.read:
		return fmt.Errorf("read stored delivery: %w", err)
	default:
		return fmt.Errorf("commit delivery: %w", err)
	}
}

// IsDuplicate reports whether err wraps a unique violation of
// [KeyConstraint], or of a Citus shard's copy of it. Every other error is
// not a duplicate, nil included.
func IsDuplicate(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == pgerrcode.UniqueViolation && Constraint(pgErr) == KeyConstraint
}

// Constraint returns the name of the constraint e names, without a Citus
// shard's suffix ([BaseConstraint]). When Citus relays a unique violation
// without the field, the name comes from the message, in English only.
func Constraint(e *pgconn.PgError) string {
	name := e.ConstraintName
	if name == "" && e.Code == pgerrcode.UniqueViolation {
		name = quotedConstraint(e.Message)
	}
	return BaseConstraint(name)
}

// quotedConstraint returns the name in PostgreSQL's message `duplicate key
// value violates unique constraint "name"`, and "" for any other message.
func quotedConstraint(msg string) string {
	const prefix = `duplicate key value violates unique constraint "`
	if !strings.HasPrefix(msg, prefix) || !strings.HasSuffix(msg, `"`) || len(msg) < len(prefix)+2 {
		return ""
	}
	return msg[len(prefix) : len(msg)-1]
}

// BaseConstraint returns name without the suffix Citus gives a shard's copy
// of a constraint, name_<shard id>.
func BaseConstraint(name string) string {
	i := strings.LastIndexByte(name, '_')
	if i <= 0 || i == len(name)-1 {
		return name
	}
	for _, c := range name[i+1:] {
		if c < '0' || c > '9' {
			return name
		}
	}
	return name[:i]
}

// isLockTimeout reports whether err is lock_not_available (55P03), raised
// when lock_timeout expires.
func isLockTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == pgerrcode.LockNotAvailable
}
