package dedup_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/hookgate/hookgate/internal/dedup"
)

// TestTransient: the failures a retry may not meet (the database down or
// busy) are transient; an invariant violation, another constraint's
// violation, a syntax error or any unknown error is not.
func TestTransient(t *testing.T) {
	t.Parallel()
	pg := func(code string) error { return fmt.Errorf("apply state change: %w", &pgconn.PgError{Code: code}) }
	pg2 := func(severity, code, msg string) error {
		return fmt.Errorf("apply state change (statement 1): %w", &pgconn.PgError{Severity: severity, Code: code, Message: msg})
	}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"unavailable", fmt.Errorf("claim delivery: %w", dedup.ErrUnavailable), true},
		{"in flight", fmt.Errorf("claim delivery: %w", dedup.ErrInFlight), true},
		{"connection refused", connectionError(t), true},
		{"unexpected EOF", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), true},
		{"deadline", fmt.Errorf("x: %w", context.DeadlineExceeded), true},
		{"connection failure", pg(pgerrcode.ConnectionFailure), true},
		{"serialization failure", pg(pgerrcode.SerializationFailure), true},
		{"deadlock", pg(pgerrcode.DeadlockDetected), true},
		{"lock timeout", pg(pgerrcode.LockNotAvailable), true},
		{"statement timeout", pg(pgerrcode.QueryCanceled), true},
		{"admin shutdown", pg(pgerrcode.AdminShutdown), true},
		{"too many connections", pg(pgerrcode.TooManyConnections), true},
		// Seen when the database's disk filled: "could not extend file
		// ...: No space left on device". Freed, the retry is stored.
		{"disk full", pg(pgerrcode.DiskFull), true},
		{"out of memory", pg(pgerrcode.OutOfMemory), true},
		{"read-only standby", pg(pgerrcode.ReadOnlySQLTransaction), true},
		{"fatal of any code", pg2("FATAL", pgerrcode.InternalError, "terminating connection"), true},
		// Seen when a Citus coordinator's postmaster was killed under a
		// delivery's statement (the 500 it got is now a 503).
		{"citus coordinator died", pg2("ERROR", pgerrcode.InternalError, "postmaster was shut down, exiting"), true},
		{"nil", nil, false},
		{"invariant violation", errors.New("claim delivery: the claim took a key another delivery holds"), false},
		{"another constraint", pg(pgerrcode.UniqueViolation), false},
		{"check violation", pg(pgerrcode.CheckViolation), false},
		{"undefined table", pg(pgerrcode.UndefinedTable), false},
		{"internal error", pg2("ERROR", pgerrcode.InternalError, "cache lookup failed"), false},
		{"payload mismatch", dedup.ErrPayloadMismatch, false},
	}
	for _, tt := range tests {
		if got := dedup.Transient(tt.err); got != tt.want {
			t.Errorf("%s: Transient(%v) = %v; want %v", tt.name, tt.err, got, tt.want)
		}
	}
}
