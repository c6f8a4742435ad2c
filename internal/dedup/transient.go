package dedup

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrUnavailable means the database could not be reached, or the connection
// was lost while a delivery's transaction was on its way. In the second case
// the transaction may have committed: the sender's retry replays it if it
// did, and does the work if it did not.
var ErrUnavailable = errors.New("dedup: database unavailable")

// ErrOutcomeUnknown is with [ErrUnavailable] when the connection was lost,
// or the wait for PostgreSQL's answer ran out, after the delivery's
// transaction, its COMMIT included, was sent: it may have committed. The
// sender's retry with the same delivery ID is answered from the stored
// delivery if it did, and stores it if it did not.
var ErrOutcomeUnknown = errors.New("dedup: the delivery's transaction may have committed")

// citusPostmasterDied is the message of the error Citus raises in a
// statement waiting on a worker when the coordinator's postmaster dies.
const citusPostmasterDied = "postmaster was shut down, exiting"

// Transient reports whether err is a failure that a retry of the same
// request may not meet. Those are [ErrUnavailable] and [ErrInFlight], a lost
// or refused connection, a timeout or cancellation, and the errors of a busy
// or failing-over server. The last are connection exceptions, serialization
// failures and deadlocks, lock and statement timeouts, insufficient
// resources, an administrator's shutdown, a read-only standby, any FATAL or
// PANIC, and Citus's "postmaster was shut down". Every other error is not
// transient, nil included: a retry meets it again.
func Transient(err error) bool {
	if err == nil {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		code := pgErr.Code
		return pgErr.Severity == "FATAL" || pgErr.Severity == "PANIC" ||
			code == pgerrcode.InternalError && pgErr.Message == citusPostmasterDied ||
			pgerrcode.IsConnectionException(code) ||
			pgerrcode.IsTransactionRollback(code) || // serialization failure, deadlock
			pgerrcode.IsInsufficientResources(code) ||
			pgerrcode.IsOperatorIntervention(code) || // query canceled (statement timeout), shutdown
			code == pgerrcode.LockNotAvailable ||
			code == pgerrcode.ReadOnlySQLTransaction
	}
	var (
		netErr     net.Error
		connectErr *pgconn.ConnectError
	)
	switch {
	case errors.Is(err, ErrUnavailable), errors.Is(err, ErrInFlight),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, net.ErrClosed), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.EPIPE),
		errors.As(err, &netErr), errors.As(err, &connectErr):
		return true
	}
	return pgconn.Timeout(err) || pgconn.SafeToRetry(err)
}
