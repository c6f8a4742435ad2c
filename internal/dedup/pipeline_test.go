package dedup_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/dedup"
	"github.com/hookgate/hookgate/internal/idempotency"
	"github.com/hookgate/hookgate/internal/testing/pgtest"
)

// prepared returns the connection's prepared statements with their
// preparation times, read with the simple protocol (which prepares nothing).
func prepared(t *testing.T, ctx context.Context, pool *pgxpool.Pool) string {
	t.Helper()
	rows, err := pool.Query(ctx, `SELECT name || ' ' || prepare_time::text FROM pg_prepared_statements ORDER BY name`, pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(names, "\n")
}

// TestRunOneRoundTripPerOutcome: once a connection has prepared the
// pipeline's statements, a first delivery, a replay, a first delivery
// after a replay, a payload mismatch, an in-flight wait and a failing
// state change each take exactly one round trip, and none of them, in any
// order, prepares a statement again (a failed statement must not make the
// connection drop its prepared statements).
func TestRunOneRoundTripPerOutcome(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	_, dsn := pgtest.NewDB(t)
	var writes atomic.Int64
	pool := pgtest.CountedPool(t, ctx, dsn, &writes)
	execSQL(t, ctx, pool, createRuns, `CREATE TABLE other (k text PRIMARY KEY)`, `INSERT INTO other VALUES ('taken')`)
	store := newStore(t, pool, dedup.Config{InFlightWait: 200 * time.Millisecond})
	failing := queueSQL(`INSERT INTO other VALUES ('taken')`) // another constraint's 23505

	n := 0
	key := func() idempotency.Key {
		n++
		return idempotency.Key{Sender: "rt", DeliveryID: "d" + string(rune('a'+n))}
	}
	first := func() idempotency.Delivery {
		d := newDelivery(t, key(), "p")
		res, err := store.Run(ctx, d, both(insertEvent(d, "p"), countRuns(d)))
		if err != nil || res.Replayed {
			t.Fatalf("first delivery: %+v, %v", res, err)
		}
		return d
	}
	type step struct {
		name string
		run  func() error
	}
	var held idempotency.Delivery
	steps := func() []step {
		return []step{
			{"first delivery", func() error { first(); return nil }},
			{"replay", func() error {
				d := first()
				again := newDelivery(t, d.Key, "p")
				res, err := store.Run(ctx, again, both(insertEvent(again, "p"), countRuns(again)))
				if err == nil && !res.Replayed {
					return errors.New("not replayed")
				}
				return err
			}},
			{"first delivery after a replay", func() error { first(); return nil }},
			{"payload mismatch", func() error {
				d := first()
				other := newDelivery(t, d.Key, "other")
				_, err := store.Run(ctx, other, insertEvent(other, "other"))
				if !errors.Is(err, dedup.ErrPayloadMismatch) {
					return errors.New("want ErrPayloadMismatch, got " + errString(err))
				}
				return nil
			}},
			{"in-flight wait", func() error {
				d := newDelivery(t, held.Key, "p")
				_, err := store.Run(ctx, d, insertEvent(d, "p"))
				if !errors.Is(err, dedup.ErrInFlight) {
					return errors.New("want ErrInFlight, got " + errString(err))
				}
				return nil
			}},
			{"failing state change", func() error {
				d := newDelivery(t, key(), "p")
				_, err := store.Run(ctx, d, both(insertEvent(d, "p"), failing))
				if err == nil || dedup.IsDuplicate(err) || errors.Is(err, dedup.ErrInFlight) {
					return errors.New("want a plain error, got " + errString(err))
				}
				if keyRows(t, ctx, pool, d.Key) != 0 {
					return errors.New("the failed delivery's key is stored")
				}
				return nil
			}},
			{"first delivery after a failure", func() error { first(); return nil }},
		}
	}
	held = newDelivery(t, idempotency.Key{Sender: "rt", DeliveryID: "held"}, "p")
	holder := holdKey(t, ctx, dsn, held)
	defer func() { _ = holder.Rollback(context.Background()) }()

	// Warm up: every statement gets prepared once.
	for _, s := range steps() {
		if err := s.run(); err != nil {
			t.Fatalf("warm-up %s: %v", s.name, err)
		}
	}
	before := prepared(t, ctx, pool)
	for _, s := range steps() {
		if err := s.run(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
	}
	if after := prepared(t, ctx, pool); after != before {
		t.Errorf("statements were prepared again:\nbefore:\n%s\nafter:\n%s", before, after)
	}

	// Round trips, Run alone.
	for _, tc := range []struct {
		name string
		run  func() (dedup.Result, error)
	}{
		{"first delivery", func() (dedup.Result, error) {
			d := newDelivery(t, key(), "p")
			return store.Run(ctx, d, both(insertEvent(d, "p"), countRuns(d)))
		}},
		{"replay", func() (dedup.Result, error) {
			d := newDelivery(t, idempotency.Key{Sender: "rt", DeliveryID: "d" + string(rune('a'+1))}, "p")
			return store.Run(ctx, d, both(insertEvent(d, "p"), countRuns(d)))
		}},
		{"first delivery after a replay", func() (dedup.Result, error) {
			d := newDelivery(t, key(), "p")
			return store.Run(ctx, d, both(insertEvent(d, "p"), countRuns(d)))
		}},
		{"payload mismatch", func() (dedup.Result, error) {
			d := newDelivery(t, idempotency.Key{Sender: "rt", DeliveryID: "d" + string(rune('a'+1))}, "other")
			return store.Run(ctx, d, insertEvent(d, "other"))
		}},
		{"in-flight wait", func() (dedup.Result, error) {
			d := newDelivery(t, held.Key, "p")
			return store.Run(ctx, d, insertEvent(d, "p"))
		}},
		{"failing state change", func() (dedup.Result, error) {
			d := newDelivery(t, key(), "p")
			return store.Run(ctx, d, both(insertEvent(d, "p"), failing))
		}},
	} {
		w0 := writes.Load()
		_, _ = tc.run()
		if got := writes.Load() - w0; got != 1 {
			t.Errorf("%s: %d writes to PostgreSQL, want 1 (one round trip)", tc.name, got)
		}
	}
}

func errString(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}

// TestRunFailureLeavesConnectionClean: after a failing state change and an
// in-flight wait, the pool's one connection is returned (not dropped), idle
// outside any transaction, with the transaction-local lock timeout gone.
func TestRunFailureLeavesConnectionClean(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	_, dsn := pgtest.NewDB(t)
	var writes atomic.Int64
	pool := pgtest.CountedPool(t, ctx, dsn, &writes)
	store := newStore(t, pool, dedup.Config{InFlightWait: 100 * time.Millisecond})
	pid := backendPID(t, ctx, pool)

	d := newDelivery(t, idempotency.Key{Sender: "c", DeliveryID: "fails"}, "p")
	if _, err := store.Run(ctx, d, both(insertEvent(d, "p"), queueSQL(`SELECT 1/0`))); err == nil {
		t.Fatal("Run with a failing statement succeeded")
	}
	assertConnClean(t, ctx, pool, pid)

	held := newDelivery(t, idempotency.Key{Sender: "c", DeliveryID: "held"}, "p")
	holder := holdKey(t, ctx, dsn, held)
	defer func() { _ = holder.Rollback(context.Background()) }()
	d = newDelivery(t, held.Key, "p")
	if _, err := store.Run(ctx, d, insertEvent(d, "p")); !errors.Is(err, dedup.ErrInFlight) {
		t.Fatalf("Run on a held key: %v, want ErrInFlight", err)
	}
	assertConnClean(t, ctx, pool, pid)
}

func backendPID(t *testing.T, ctx context.Context, pool *pgxpool.Pool) int32 {
	t.Helper()
	var pid int32
	if err := pool.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatalf("pg_backend_pid on the pool: %v", err)
	}
	return pid
}

// assertConnClean checks that the pool's only connection is the one with
// backend PID pid (it was returned to the pool, not dropped), that it is idle
// outside any transaction (pgx's view and PostgreSQL's), that it answers
// queries, and that the delivery's transaction-local lock_timeout did not
// survive the transaction.
func assertConnClean(t *testing.T, ctx context.Context, pool *pgxpool.Pool, pid int32) {
	t.Helper()
	if st := pool.Stat(); st.TotalConns() != 1 || st.AcquiredConns() != 0 {
		t.Errorf("pool: %d connections, %d acquired; want 1 idle", st.TotalConns(), st.AcquiredConns())
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	defer conn.Release()
	if s := conn.Conn().PgConn().TxStatus(); s != 'I' {
		t.Errorf("connection transaction status %q, want 'I' (idle, no transaction open)", s)
	}
	var (
		got         int32
		lockTimeout string
	)
	err = conn.QueryRow(ctx, `SELECT pg_backend_pid(), current_setting('lock_timeout')`).Scan(&got, &lockTimeout)
	if err != nil {
		t.Fatalf("query on the released connection: %v (an aborted transaction left open?)", err)
	}
	if got != pid {
		t.Errorf("the pool's connection is backend %d, want %d: Run dropped the connection instead of returning it", got, pid)
	}
	if lockTimeout != "0" {
		t.Errorf("lock_timeout on the released connection = %q, want the session default 0 (transaction-local setting leaked)", lockTimeout)
	}
}
