package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/hookgate/hookgate/consumer"
	"github.com/hookgate/hookgate/internal/testing/patterntest"
	"github.com/hookgate/hookgate/internal/testing/pgtest"
)

func TestMain(m *testing.M) {
	if serviceMain() { // the child process of TestKilledUnderLoad
		return
	}
	goleak.VerifyTestMain(pgtest.M(m))
}

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// newDB returns a fresh database with the package's table (created by
// Migrate) and its DSN.
func newDB(t *testing.T) (*pgxpool.Pool, string) {
	t.Helper()
	pool, dsn := pgtest.NewDB(t)
	if err := consumer.Migrate(testCtx(t), pool); err != nil {
		t.Fatal(err)
	}
	return pool, dsn
}

// subject adapts Process to the pattern's suite: the change runs the
// suite's statements on the claiming transaction and answers the marker.
func subject(t *testing.T) patterntest.Subject {
	pool := patterntest.RacePool(t, testCtx(t))
	if err := consumer.Migrate(testCtx(t), pool); err != nil {
		t.Fatal(err)
	}
	p, err := consumer.New(pool, consumer.Config{InFlightWait: 30 * time.Second}) // generous: nothing may time out under -race
	if err != nil {
		t.Fatal(err)
	}
	return patterntest.Subject{
		Pool: pool,
		Apply: func(ctx context.Context, key string, c patterntest.Change) (patterntest.Outcome, error) {
			res, err := p.Process(ctx, "suite", key, func(ctx context.Context, tx pgx.Tx) (consumer.Response, error) {
				if _, err := tx.Exec(ctx, patterntest.MarkSQL, key, c.Marker); err != nil {
					return consumer.Response{}, err
				}
				if c.Fail {
					if _, err := tx.Exec(ctx, patterntest.FailSQL); err != nil {
						return consumer.Response{}, err
					}
				}
				if c.Other != "" {
					if _, err := tx.Exec(ctx, patterntest.OtherSQL, c.Other); err != nil {
						return consumer.Response{}, err
					}
				}
				return consumer.Response{Status: 200, ContentType: "text/plain", Body: []byte(c.Marker)}, nil
			})
			return patterntest.Outcome{New: !res.Duplicate, Response: string(res.Response.Body)}, err
		},
		Keys: func(ctx context.Context, key string) (int, error) { return keyRows(ctx, pool, "suite", key) },
	}
}

func keyRows(ctx context.Context, pool *pgxpool.Pool, name, id string) (int, error) {
	var n int
	err := pool.QueryRow(ctx, `SELECT count(*) FROM consumer_processed_messages WHERE consumer_name = $1 AND message_id = $2`, name, id).Scan(&n)
	return n, err
}

// TestPattern runs the pattern's suite, the one that proves internal/dedup,
// on Process.
func TestPattern(t *testing.T) {
	t.Parallel()
	patterntest.Run(t, subject)
}

// TestRaceHarnessDetectsNaiveImplementation is the suite's negative
// control: the naive pre-check pattern, through the same harness and
// checks, applies a change twice.
func TestRaceHarnessDetectsNaiveImplementation(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	patterntest.DetectsNaive(t, ctx, patterntest.RacePool(t, ctx))
}

// TestProcessStoresResponse: the stored response is the change's, byte for
// byte, and a duplicate returns it without running the change.
func TestProcessStoresResponse(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := newDB(t)
	want := consumer.Response{Status: 201, ContentType: "application/json", Body: []byte("{\"ok\":true}\n\x00\xff")}
	res, err := consumer.Process(ctx, pool, "orders", "evt-1", func(context.Context, pgx.Tx) (consumer.Response, error) { return want, nil })
	if err != nil || res.Duplicate {
		t.Fatalf("first: %+v, %v", res, err)
	}
	ran := false
	res, err = consumer.Process(ctx, pool, "orders", "evt-1", func(context.Context, pgx.Tx) (consumer.Response, error) {
		ran = true
		return consumer.Response{}, nil
	})
	if err != nil || !res.Duplicate || ran {
		t.Fatalf("repeat: %+v, %v, change ran %v; want a duplicate without running the change", res, err, ran)
	}
	if res.Response.Status != want.Status || res.Response.ContentType != want.ContentType || string(res.Response.Body) != string(want.Body) {
		t.Fatalf("stored response %+v, want %+v", res.Response, want)
	}
	// The same message ID for another consumer is another message.
	res, err = consumer.Process(ctx, pool, "billing", "evt-1", func(context.Context, pgx.Tx) (consumer.Response, error) { return want, nil })
	if err != nil || res.Duplicate {
		t.Fatalf("another consumer: %+v, %v; want new", res, err)
	}
}

// TestProcessInFlight: a delivery of a message whose key another
// transaction holds waits the in-flight wait, then gets ErrInFlight and
// records nothing; once the holder rolls back, the message is new.
func TestProcessInFlight(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := newDB(t)
	holder, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The holder claims the key through Process on its transaction (a
	// savepoint, released): the key stays held until holder ends.
	if _, err := consumer.Process(ctx, holder, "c", "held", func(context.Context, pgx.Tx) (consumer.Response, error) {
		return consumer.Response{}, nil
	}); err != nil {
		t.Fatal(err)
	}
	p, err := consumer.New(pool, consumer.Config{InFlightWait: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ran := false
	_, err = p.Process(ctx, "c", "held", func(context.Context, pgx.Tx) (consumer.Response, error) {
		ran = true
		return consumer.Response{}, nil
	})
	if !errors.Is(err, consumer.ErrInFlight) || ran {
		t.Fatalf("held key: %v (change ran: %v), want ErrInFlight", err, ran)
	}
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := p.Process(ctx, "c", "held", func(context.Context, pgx.Tx) (consumer.Response, error) { return consumer.Response{Status: 200}, nil })
	if err != nil || res.Duplicate {
		t.Fatalf("after the holder rolled back: %+v, %v; want new", res, err)
	}
}

// TestInFlightWaitBoundsTheChange: the in-flight wait is the transaction's
// lock_timeout, so it bounds the change's own statements too. A change
// whose UPDATE waits on a row another transaction holds fails with
// SQLSTATE 55P03 (lock_not_available) after the wait: an ordinary error of
// the change, returned as it is (not ErrInFlight), with everything rolled
// back, so that the message is new on the retry.
func TestInFlightWaitBoundsTheChange(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := newDB(t)
	if _, err := pool.Exec(ctx, `CREATE TABLE stock (sku text PRIMARY KEY, n int NOT NULL); INSERT INTO stock VALUES ('BK-42', 10)`); err != nil {
		t.Fatal(err)
	}
	holder, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback(ctx) }()
	if _, err := holder.Exec(ctx, `UPDATE stock SET n = n - 1 WHERE sku = 'BK-42'`); err != nil {
		t.Fatal(err)
	}
	p, err := consumer.New(pool, consumer.Config{InFlightWait: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	change := func(ctx context.Context, tx pgx.Tx) (consumer.Response, error) {
		_, err := tx.Exec(ctx, `UPDATE stock SET n = n - 2 WHERE sku = 'BK-42'`)
		return consumer.Response{Status: 204}, err
	}
	begun := time.Now()
	_, err = p.Process(ctx, "c", "busy-row", change)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != pgerrcode.LockNotAvailable || errors.Is(err, consumer.ErrInFlight) {
		t.Fatalf("a change waiting on a busy row: %v, want the change's own 55P03 (not ErrInFlight)", err)
	}
	if waited := time.Since(begun); waited > 10*time.Second {
		t.Errorf("the change waited %v, not about the in-flight wait", waited)
	}
	if n, err := keyRows(ctx, pool, "c", "busy-row"); err != nil || n != 0 {
		t.Fatalf("after the change failed: %d key rows (%v), want none", n, err)
	}
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := p.Process(ctx, "c", "busy-row", change)
	if err != nil || res.Duplicate {
		t.Fatalf("the retry once the row is free: %+v, %v; want new", res, err)
	}
}

// TestProcessRejectsInvalidKeys: keys PostgreSQL's text cannot hold, or
// over the limit, are refused before any statement.
func TestProcessRejectsInvalidKeys(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := newDB(t)
	long := make([]byte, consumer.MaxMessageIDBytes+1)
	for i := range long {
		long[i] = 'a'
	}
	for _, k := range [][2]string{{"", "id"}, {"c", ""}, {"c", "a\x00b"}, {"c", "\xff\xfe"}, {"c", string(long)}} {
		_, err := consumer.Process(ctx, pool, k[0], k[1], func(context.Context, pgx.Tx) (consumer.Response, error) {
			return consumer.Response{}, nil
		})
		if !errors.Is(err, consumer.ErrInvalidMessageID) {
			t.Errorf("Process(%q, %q) = %v, want ErrInvalidMessageID", k[0], k[1], err)
		}
	}
	if n, err := keyRows(ctx, pool, "c", "a\x00b"); err == nil && n != 0 {
		t.Fatal("an invalid key was stored")
	}
}

// TestProcessResponseTooLarge: a response over MaxResponseBytes rolls the
// change back and records nothing.
func TestProcessResponseTooLarge(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := newDB(t)
	_, err := consumer.Process(ctx, pool, "c", "big", func(ctx context.Context, tx pgx.Tx) (consumer.Response, error) {
		return consumer.Response{Status: 200, Body: make([]byte, consumer.MaxResponseBytes+1)}, nil
	})
	if !errors.Is(err, consumer.ErrResponseTooLarge) {
		t.Fatalf("err = %v, want ErrResponseTooLarge", err)
	}
	if n, err := keyRows(ctx, pool, "c", "big"); err != nil || n != 0 {
		t.Fatalf("%d key rows (%v), want 0", n, err)
	}
}

// TestIsDuplicate: only a unique violation of the package's constraint is
// a duplicate.
func TestIsDuplicate(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"the key's conflict", &pgconn.PgError{Code: pgerrcode.UniqueViolation, ConstraintName: consumer.Constraint}, true},
		{"wrapped", fmt.Errorf("insert: %w", &pgconn.PgError{Code: pgerrcode.UniqueViolation, ConstraintName: consumer.Constraint}), true},
		{"another constraint", &pgconn.PgError{Code: pgerrcode.UniqueViolation, ConstraintName: "orders_pkey"}, false},
		{"another code", &pgconn.PgError{Code: pgerrcode.SerializationFailure, ConstraintName: consumer.Constraint}, false},
		{"not from PostgreSQL", errors.New(consumer.Constraint), false},
		{"nil", nil, false},
	} {
		if got := consumer.IsDuplicate(c.err); got != c.want {
			t.Errorf("%s: IsDuplicate = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestDeleteProcessedBefore deletes only the consumer's rows older than
// the horizon, up to the limit, oldest first; a deleted ID is new again.
func TestDeleteProcessedBefore(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := newDB(t)
	// Raw SQL: Process stamps processed_at with now(); only an INSERT puts
	// rows in the past (the consumer package has no fixture builders).
	if _, err := pool.Exec(ctx, `INSERT INTO consumer_processed_messages (consumer_name, message_id, processed_at) VALUES
('c', 'old1', now() - interval '10 days'), ('c', 'old2', now() - interval '9 days'), ('c', 'new', now()),
('other', 'old', now() - interval '10 days')`); err != nil {
		t.Fatal(err)
	}
	horizon := time.Now().Add(-7 * 24 * time.Hour)
	n, err := consumer.DeleteProcessedBefore(ctx, pool, "c", horizon, 1)
	if err != nil || n != 1 {
		t.Fatalf("first pass deleted %d (%v), want 1", n, err)
	}
	if k, _ := keyRows(ctx, pool, "c", "old1"); k != 0 {
		t.Fatal("the oldest row was not deleted first")
	}
	n, err = consumer.DeleteProcessedBefore(ctx, pool, "c", horizon, 10)
	if err != nil || n != 1 {
		t.Fatalf("second pass deleted %d (%v), want 1", n, err)
	}
	for _, k := range [][2]string{{"c", "new"}, {"other", "old"}} {
		if n, _ := keyRows(ctx, pool, k[0], k[1]); n != 1 {
			t.Errorf("%v was deleted", k)
		}
	}
	res, err := consumer.Process(ctx, pool, "c", "old1", func(context.Context, pgx.Tx) (consumer.Response, error) { return consumer.Response{}, nil })
	if err != nil || res.Duplicate {
		t.Fatalf("a deleted ID: %+v, %v; want new", res, err)
	}
}

// TestMigrateTwice: Migrate is idempotent.
func TestMigrateTwice(t *testing.T) {
	t.Parallel()
	pool, _ := newDB(t)
	if err := consumer.Migrate(testCtx(t), pool); err != nil {
		t.Fatal("second Migrate:", err)
	}
}
