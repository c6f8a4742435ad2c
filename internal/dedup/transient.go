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

// Transient reports whether err is a failure that a later retry of the same
// request may not meet: ErrUnavailable and ErrInFlight, a lost or refused
// connection (I/O errors), a timeout or cancellation, and the PostgreSQL
// errors of a busy or failing-over server (connection exceptions,
// serialization failures and deadlocks, a lock or statement timeout,
// insufficient resources, an administrator's shutdown, a read-only standby,
// any error of severity FATAL or PANIC (the server ended the session,
// whatever its code), and Citus's "postmaster was shut down, exiting"
// (XX000, an ERROR: the coordinator's postmaster died under a statement
// that waited on a worker).
// Every other error, nil included, is not transient: an invariant violation,
// another constraint's violation, a bug — a retry meets it again.
// citusPostmasterDied is the message of the error Citus raises in a
// statement waiting on a worker when the coordinator's postmaster dies.
const citusPostmasterDied = "postmaster was shut down, exiting"

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
