package handler

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/hookgate/hookgate/internal/dedup"
)

// TestClassifyStatuses: the one table maps known transient failures to 503
// "retry later" (409 for a key still in flight), and unknown errors —
// invariant violations, another constraint's violation, a bug — to 500, so
// that a sender is not told to retry a bug forever.
func TestClassifyStatuses(t *testing.T) {
	t.Parallel()
	pg := func(code string) error {
		return fmt.Errorf("apply state change (statement 1): %w", &pgconn.PgError{Code: code})
	}
	tests := []struct {
		name   string
		err    error
		status int
		slug   string
	}{
		{"connection lost", fmt.Errorf("delivery pipeline: %w: %w", dedup.ErrUnavailable, io.ErrUnexpectedEOF), http.StatusServiceUnavailable, "unavailable"},
		{"timeout", fmt.Errorf("claim delivery: %w", context.DeadlineExceeded), http.StatusServiceUnavailable, "unavailable"},
		{"serialization failure", pg(pgerrcode.SerializationFailure), http.StatusServiceUnavailable, "unavailable"},
		{"deadlock", pg(pgerrcode.DeadlockDetected), http.StatusServiceUnavailable, "unavailable"},
		{"lock timeout in a state change", pg(pgerrcode.LockNotAvailable), http.StatusServiceUnavailable, "unavailable"},
		{"server shutting down", pg(pgerrcode.AdminShutdown), http.StatusServiceUnavailable, "unavailable"},
		{"key in flight", fmt.Errorf("claim delivery: %w", dedup.ErrInFlight), http.StatusConflict, "in-flight"},
		{"payload mismatch", dedup.ErrPayloadMismatch, http.StatusUnprocessableEntity, "payload-mismatch"},
		{"invariant violation", errors.New("claim delivery: the claim took a key another delivery holds"), http.StatusInternalServerError, "internal"},
		{"another constraint", pg(pgerrcode.CheckViolation), http.StatusInternalServerError, "internal"},
		{"unknown error", errors.New("something else"), http.StatusInternalServerError, "internal"},
		{"a batch's panic", errors.New("claim delivery: panic: boom"), http.StatusInternalServerError, "internal"},
	}
	for _, tt := range tests {
		pe := classify(tt.err)
		if pe.typ.status != tt.status || pe.typ.slug != tt.slug {
			t.Errorf("%s: classify(%v) = %d %s; want %d %s", tt.name, tt.err, pe.typ.status, pe.typ.slug, tt.status, tt.slug)
		}
		if !errors.Is(pe, tt.err) {
			t.Errorf("%s: the problem does not carry its cause (logged with the request)", tt.name)
		}
		if db := dbProblem(tt.err); tt.status >= 500 && db.typ.status != tt.status {
			t.Errorf("%s: dbProblem(%v) = %d; want %d", tt.name, tt.err, db.typ.status, tt.status)
		}
	}
	if pe := dbProblem(errNoDB); pe.typ.status != http.StatusServiceUnavailable {
		t.Errorf("dbProblem(errNoDB) = %d; want 503", pe.typ.status)
	}
}
