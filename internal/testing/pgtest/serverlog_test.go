package pgtest_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/hookgate/hookgate/internal/testing/pgtest"
)

// TestLogSinceShowsADeadlocksStatements: two transactions take two rows'
// locks in opposite orders; PostgreSQL ends one with a deadlock. The
// server's log since LogSince holds its report, and Reports gives it with
// both statements, which only the server's log names.
func TestLogSinceShowsADeadlocksStatements(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDB(t, pgtest.Conns(4))
	ctx := t.Context()
	if _, err := pool.Exec(ctx, `CREATE TABLE pair (id int PRIMARY KEY); INSERT INTO pair VALUES (1), (2)`); err != nil {
		t.Fatal(err)
	}
	since := pgtest.LogSince(t, pool)
	a, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := pool.Begin(ctx)
	if err != nil {
		_ = a.Rollback(ctx)
		t.Fatal(err)
	}
	for tx, sql := range map[pgx.Tx]string{a: `SELECT id FROM pair WHERE id = 1 FOR UPDATE /* first of a */`, b: `SELECT id FROM pair WHERE id = 2 FOR UPDATE /* first of b */`} {
		if _, err := tx.Exec(ctx, sql); err != nil {
			_, _ = a.Rollback(ctx), b.Rollback(ctx)
			t.Fatal(err)
		}
	}
	// Each goroutine owns its transaction from here: the deadlock's
	// victim must roll back to free its lock for the other.
	errs := make(chan error, 2)
	for tx, sql := range map[pgx.Tx]string{a: `SELECT id FROM pair WHERE id = 2 FOR UPDATE /* then a */`, b: `SELECT id FROM pair WHERE id = 1 FOR UPDATE /* then b */`} {
		go func() {
			_, err := tx.Exec(ctx, sql)
			_ = tx.Rollback(ctx)
			errs <- err
		}()
	}
	deadlocked := 0
	for range 2 {
		var pe *pgconn.PgError
		if err := <-errs; errors.As(err, &pe) && pe.Code == "40P01" {
			deadlocked++
		}
	}
	if deadlocked != 1 {
		t.Fatalf("%d of the two transactions deadlocked, want 1", deadlocked)
	}
	log, err := since()
	if err != nil {
		t.Skip(err)
	}
	reports := pgtest.Reports(log, "deadlock detected", 10)
	for _, r := range reports {
		if strings.Contains(r, "/* then a */") && strings.Contains(r, "/* then b */") {
			return
		}
	}
	t.Errorf("no report of the deadlock naming both statements among %d: %q", len(reports), reports)
}
