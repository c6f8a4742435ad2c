package dedup_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/dedup"
	"github.com/hookgate/hookgate/internal/pgtest"
)

// createApplied is the scratch table an Apply writes to, standing in for
// River's job table: one row per application, naming the event.
const createApplied = `CREATE TABLE applied (n bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, event_id uuid NOT NULL)`

// applyRecorder is an Apply that writes one row to applied on the delivery's
// transaction, counts its calls, and may then fail.
type applyRecorder struct {
	calls atomic.Int64
	// after, when set, runs on the transaction after the write; its error
	// is Apply's.
	after func(ctx context.Context, tx pgx.Tx) error
}

func (a *applyRecorder) apply(eventID uuid.UUID) dedup.Apply {
	return func(ctx context.Context, tx pgx.Tx) error {
		a.calls.Add(1)
		if _, err := tx.Exec(ctx, `INSERT INTO applied (event_id) VALUES ($1)`, eventID); err != nil {
			return fmt.Errorf("write applied: %w", err)
		}
		if a.after != nil {
			return a.after(ctx, tx)
		}
		return nil
	}
}

// singleConnPool returns a pool on dsn that holds at most one connection, so
// that every call reuses the connection the previous one released (unless it
// was closed), and that connection's backend PID.
func singleConnPool(t *testing.T, ctx context.Context, dsn string) (*pgxpool.Pool, int32) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	cfg.MinConns = 0
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, backendPID(t, ctx, pool)
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
		xact        string
	)
	err = conn.QueryRow(ctx, `SELECT pg_backend_pid(), current_setting('lock_timeout'),
		(SELECT coalesce(backend_xid::text, '') FROM pg_stat_activity WHERE pid = pg_backend_pid())`).Scan(&got, &lockTimeout, &xact)
	if err != nil {
		t.Fatalf("query on the released connection: %v (an aborted transaction left open?)", err)
	}
	if got != pid {
		t.Errorf("the pool's connection is backend %d, want %d: RunTx dropped the connection instead of returning it", got, pid)
	}
	if lockTimeout != "0" {
		t.Errorf("lock_timeout on the released connection = %q, want the session default 0 (transaction-local setting leaked)", lockTimeout)
	}
	if xact != "" {
		t.Errorf("the released connection holds transaction id %s", xact)
	}
}

func appliedRows(t *testing.T, ctx context.Context, pool *pgxpool.Pool) int {
	t.Helper()
	return count(t, ctx, pool, `SELECT count(*) FROM applied`)
}

// TestRunTxFirstDeliveryCommitsTogether: the claim, the queued Change and the
// Apply's writes are one transaction. Inside Apply, the claim and the event
// are visible on the transaction and invisible to any other connection; after
// RunTx all three are committed.
func TestRunTxFirstDeliveryCommitsTogether(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	check, dsn := pgtest.NewDB(t)
	execSQL(t, ctx, check, createApplied)
	pool, pid := singleConnPool(t, ctx, dsn)
	store := dedup.New(pool, 0)
	key := dedup.Key{Sender: "github", DeliveryID: "runtx-first"}
	d := newDelivery(t, key, "payload")

	var rec applyRecorder
	var inside struct{ keyOnTx, eventOnTx, keyOutside, eventOutside int }
	rec.after = func(ctx context.Context, tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM processed_messages WHERE sender = $1 AND delivery_id = $2),
			(SELECT count(*) FROM webhook_events WHERE sender = $1 AND delivery_id = $2)`, key.Sender, key.DeliveryID).
			Scan(&inside.keyOnTx, &inside.eventOnTx); err != nil {
			return err
		}
		inside.keyOutside = keyRows(t, ctx, check, key)
		inside.eventOutside = eventRows(t, ctx, check, key)
		return nil
	}
	res, err := store.RunTx(ctx, d, insertEvent(d, "payload"), rec.apply(d.EventID))
	if err != nil {
		t.Fatalf("RunTx: %v", err)
	}
	if res.Replayed || res.EventID != d.EventID || !equalResponse(res.Response, d.Response) {
		t.Errorf("RunTx = %+v, want the delivery's own new result", res)
	}
	if n := rec.calls.Load(); n != 1 {
		t.Errorf("Apply called %d times, want 1", n)
	}
	if inside.keyOnTx != 1 || inside.eventOnTx != 1 {
		t.Errorf("inside Apply, the transaction sees %d key rows and %d events, want 1 and 1 (Apply must run on the claim's transaction)",
			inside.keyOnTx, inside.eventOnTx)
	}
	if inside.keyOutside != 0 || inside.eventOutside != 0 {
		t.Errorf("inside Apply, another connection sees %d key rows and %d events, want 0 and 0 (committed before Apply?)",
			inside.keyOutside, inside.eventOutside)
	}
	assertStored(t, ctx, check, d)
	if n := eventRows(t, ctx, check, key); n != 1 {
		t.Errorf("webhook_events rows = %d, want 1", n)
	}
	if n := count(t, ctx, check, `SELECT count(*) FROM applied WHERE event_id = $1`, d.EventID); n != 1 {
		t.Errorf("Apply's rows = %d, want 1", n)
	}
	assertConnClean(t, ctx, pool, pid)
}

// TestRunTxDuplicate: a duplicate replays the stored response without calling
// Apply or writing anything, and its connection goes back to the pool clean.
func TestRunTxDuplicate(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	check, dsn := pgtest.NewDB(t)
	execSQL(t, ctx, check, createApplied)
	pool, pid := singleConnPool(t, ctx, dsn)
	store := dedup.New(pool, 0)
	key := dedup.Key{Sender: "github", DeliveryID: "runtx-dup"}

	first := newDelivery(t, key, "payload")
	var rec applyRecorder
	if res, err := store.RunTx(ctx, first, insertEvent(first, "payload"), rec.apply(first.EventID)); err != nil || res.Replayed {
		t.Fatalf("first RunTx = %+v, %v; want a new delivery", res, err)
	}
	before := snapshot(t, ctx, check, key)

	for i := range 3 {
		again := newDelivery(t, key, "payload") // new EventID and response, same key and body
		var dup applyRecorder
		res, err := store.RunTx(ctx, again, insertEvent(again, "payload"), dup.apply(again.EventID))
		if err != nil {
			t.Fatalf("duplicate %d: RunTx: %v", i+1, err)
		}
		if !res.Replayed || res.EventID != first.EventID || !equalResponse(res.Response, first.Response) {
			t.Errorf("duplicate %d: RunTx = %+v, want a replay of the first delivery (event %s)", i+1, res, first.EventID)
		}
		if n := dup.calls.Load(); n != 0 {
			t.Errorf("duplicate %d: Apply called %d times, want 0", i+1, n)
		}
		assertConnClean(t, ctx, pool, pid)
	}
	if after := snapshot(t, ctx, check, key); after != before {
		t.Errorf("the key row changed under duplicates:\n before %s\n after  %s", before, after)
	}
	if n := eventRows(t, ctx, check, key); n != 1 {
		t.Errorf("webhook_events rows = %d, want 1", n)
	}
	if n := appliedRows(t, ctx, check); n != 1 {
		t.Errorf("Apply's rows = %d, want 1 (the first delivery's)", n)
	}
	// The mismatch path also ends with a clean connection.
	other := newDelivery(t, key, "another payload")
	var mis applyRecorder
	if _, err := store.RunTx(ctx, other, insertEvent(other, "another payload"), mis.apply(other.EventID)); !errors.Is(err, dedup.ErrPayloadMismatch) {
		t.Errorf("same key, other body: err = %v, want ErrPayloadMismatch", err)
	}
	if mis.calls.Load() != 0 {
		t.Error("Apply was called for a payload mismatch")
	}
	assertConnClean(t, ctx, pool, pid)
}

// TestRunTxApplyFails: Apply writes, then fails. Nothing persists — no key,
// no event, no Apply write — the error is Apply's, and a retry is accepted
// as new on the same (clean) connection.
func TestRunTxApplyFails(t *testing.T) {
	t.Parallel()
	injected := errors.New("injected apply failure")
	tests := []struct {
		name  string
		after func(ctx context.Context, tx pgx.Tx) error
		want  func(error) bool
	}{
		{"go error", func(context.Context, pgx.Tx) error { return injected },
			func(err error) bool { return errors.Is(err, injected) }},
		{"sql error", func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `SELECT 1/0`)
			return err
		}, func(err error) bool {
			var pgErr *pgconn.PgError
			return errors.As(err, &pgErr) && pgErr.Code == "22012"
		}},
		{"other unique violation", func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO uniq VALUES (1)`)
			return err
		}, func(err error) bool {
			var pgErr *pgconn.PgError
			return errors.As(err, &pgErr) && pgErr.Code == "23505" && !dedup.IsDuplicate(err)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			check, dsn := pgtest.NewDB(t)
			execSQL(t, ctx, check, createApplied, `CREATE TABLE uniq (v int PRIMARY KEY)`, `INSERT INTO uniq VALUES (1)`)
			pool, pid := singleConnPool(t, ctx, dsn)
			store := dedup.New(pool, 0)
			key := dedup.Key{Sender: "github", DeliveryID: "runtx-apply-fails"}
			d := newDelivery(t, key, "payload")

			rec := applyRecorder{after: tt.after}
			res, err := store.RunTx(ctx, d, insertEvent(d, "payload"), rec.apply(d.EventID))
			assertFailed(t, res, err)
			if !tt.want(err) {
				t.Errorf("err = %v, want it to wrap Apply's failure", err)
			}
			if n := rec.calls.Load(); n != 1 {
				t.Errorf("Apply called %d times, want 1", n)
			}
			if n := appliedRows(t, ctx, check); n != 0 {
				t.Errorf("Apply's rows after the failure = %d, want 0", n)
			}
			assertConnClean(t, ctx, pool, pid)
			assertRetrySucceeds(t, check, store, key) // no key, no event; the retry is new

			var retry applyRecorder
			d2 := newDelivery(t, dedup.Key{Sender: "github", DeliveryID: "runtx-after-failure"}, "payload")
			if res, err := store.RunTx(ctx, d2, insertEvent(d2, "payload"), retry.apply(d2.EventID)); err != nil || res.Replayed {
				t.Fatalf("a RunTx after the failure = %+v, %v; want a new delivery", res, err)
			}
			if n := appliedRows(t, ctx, check); n != 1 {
				t.Errorf("Apply's rows after a good RunTx = %d, want 1", n)
			}
			assertConnClean(t, ctx, pool, pid)
		})
	}
}

// TestRunTxChangeFails: when the queued Change fails, Apply is not called and
// nothing persists.
func TestRunTxChangeFails(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	check, dsn := pgtest.NewDB(t)
	execSQL(t, ctx, check, createApplied)
	pool, pid := singleConnPool(t, ctx, dsn)
	store := dedup.New(pool, 0)
	key := dedup.Key{Sender: "github", DeliveryID: "runtx-change-fails"}
	d := newDelivery(t, key, "payload")

	var rec applyRecorder
	res, err := store.RunTx(ctx, d, both(insertEvent(d, "payload"), queueSQL(`SELECT 1/0`)), rec.apply(d.EventID))
	assertFailed(t, res, err)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "22012" {
		t.Errorf("err = %v, want it to wrap the Change's SQLSTATE 22012", err)
	}
	if n := rec.calls.Load(); n != 0 {
		t.Errorf("Apply called %d times after the Change failed, want 0", n)
	}
	if n := appliedRows(t, ctx, check); n != 0 {
		t.Errorf("Apply's rows = %d, want 0", n)
	}
	assertConnClean(t, ctx, pool, pid)
	assertRetrySucceeds(t, check, store, key)
}

// TestRunTxCommitFails: Apply's write violates a deferred constraint, so the
// COMMIT itself fails. The error is reported and nothing persists.
func TestRunTxCommitFails(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	check, dsn := pgtest.NewDB(t)
	execSQL(t, ctx, check, createApplied,
		`CREATE TABLE scratch (v int CONSTRAINT scratch_v_key UNIQUE DEFERRABLE INITIALLY DEFERRED)`,
		`INSERT INTO scratch VALUES (1)`)
	pool, _ := singleConnPool(t, ctx, dsn)
	store := dedup.New(pool, 0)
	key := dedup.Key{Sender: "github", DeliveryID: "runtx-commit-fails"}
	d := newDelivery(t, key, "payload")

	rec := applyRecorder{after: func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO scratch VALUES (1)`) // fine now, fails at COMMIT
		return err
	}}
	res, err := store.RunTx(ctx, d, insertEvent(d, "payload"), rec.apply(d.EventID))
	assertFailed(t, res, err)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "23505" || pgErr.ConstraintName != "scratch_v_key" {
		t.Errorf("err = %v, want it to wrap the unique violation of scratch_v_key raised at COMMIT", err)
	}
	if n := appliedRows(t, ctx, check); n != 0 {
		t.Errorf("Apply's rows = %d, want 0", n)
	}
	if st := pool.Stat(); st.AcquiredConns() != 0 {
		t.Errorf("%d connections still acquired after RunTx", st.AcquiredConns())
	}
	if _, err := pool.Exec(ctx, `SELECT 1`); err != nil {
		t.Errorf("the pool is unusable after a failed COMMIT: %v", err)
	}
	assertRetrySucceeds(t, check, store, key)
}

// TestRunTxConcurrentSameKey races RunTx calls of one key: one key row, one
// event, one Apply write, and every caller answers with the winner's result.
func TestRunTxConcurrentSameKey(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := racePool(t)
	execSQL(t, ctx, pool, createApplied)
	store := dedup.New(pool, 30*time.Second) // generous: nothing may time out under -race
	for round := 1; round <= 3; round++ {
		var rec applyRecorder
		run := func(ctx context.Context, d dedup.Delivery, change dedup.Change) (dedup.Result, error) {
			return store.RunTx(ctx, d, change, rec.apply(d.EventID))
		}
		key := dedup.Key{Sender: "github", DeliveryID: fmt.Sprintf("runtx-race-%d", round)}
		attempts := race(ctx, t, run, key, samePayload)
		v := raceViolations(ctx, t, pool, key, attempts)
		if n := rec.calls.Load(); n != 1 {
			v = append(v, fmt.Sprintf("Apply called %d times, want 1", n))
		}
		var winner uuid.UUID
		for _, a := range attempts {
			if a.err == nil && !a.res.Replayed {
				winner = a.d.EventID
			}
		}
		if n := count(t, ctx, pool, `SELECT count(*) FROM applied WHERE event_id = $1`, winner); n != 1 {
			v = append(v, fmt.Sprintf("Apply rows of the winner's event = %d, want 1", n))
		}
		if n := appliedRows(t, ctx, pool); n != round {
			v = append(v, fmt.Sprintf("Apply rows in all = %d, want %d (one per round)", n, round))
		}
		if len(v) > 0 {
			t.Fatalf("round %d:\n%s", round, strings.Join(v, "\n"))
		}
	}
	// Every connection of the pool is usable afterwards: none was left in an
	// aborted transaction.
	conns := make([]*pgxpool.Conn, 0, racers)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for range pool.Stat().TotalConns() {
		c, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatalf("acquire: %v", err)
		}
		conns = append(conns, c)
		if s := c.Conn().PgConn().TxStatus(); s != 'I' {
			t.Errorf("a pooled connection has transaction status %q, want 'I'", s)
		}
		if _, err := c.Exec(ctx, `SELECT 1`); err != nil {
			t.Errorf("a pooled connection fails SELECT 1: %v", err)
		}
	}
}

// TestRunTxInFlight: while another transaction holds the key, RunTx gives up
// after the in-flight wait with ErrInFlight, without calling Apply or
// recording anything; once the holder rolls back, the delivery is new.
func TestRunTxInFlight(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	check, dsn := pgtest.NewDB(t)
	execSQL(t, ctx, check, createApplied)
	pool, pid := singleConnPool(t, ctx, dsn)
	store := dedup.New(pool, 100*time.Millisecond)
	key := dedup.Key{Sender: "github", DeliveryID: "runtx-in-flight"}

	holder := holdKey(t, ctx, dsn, newDelivery(t, key, "payload"))
	d := newDelivery(t, key, "payload")
	var rec applyRecorder
	res, err := store.RunTx(ctx, d, insertEvent(d, "payload"), rec.apply(d.EventID))
	if !errors.Is(err, dedup.ErrInFlight) {
		t.Fatalf("RunTx while the key is held = %+v, %v; want ErrInFlight", res, err)
	}
	if res.Replayed {
		t.Error("Replayed = true for an in-flight delivery")
	}
	if n := rec.calls.Load(); n != 0 {
		t.Errorf("Apply called %d times for an in-flight delivery, want 0", n)
	}
	assertConnClean(t, ctx, pool, pid)
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n := keyRows(t, ctx, check, key) + eventRows(t, ctx, check, key) + appliedRows(t, ctx, check); n != 0 {
		t.Errorf("%d rows recorded for the in-flight delivery, want none", n)
	}

	d2 := newDelivery(t, key, "payload")
	var rec2 applyRecorder
	res, err = store.RunTx(ctx, d2, insertEvent(d2, "payload"), rec2.apply(d2.EventID))
	if err != nil || res.Replayed || res.EventID != d2.EventID {
		t.Fatalf("RunTx after the holder rolled back = %+v, %v; want a new delivery", res, err)
	}
	if rec2.calls.Load() != 1 || appliedRows(t, ctx, check) != 1 {
		t.Errorf("Apply called %d times, %d rows; want 1 and 1", rec2.calls.Load(), appliedRows(t, ctx, check))
	}
	assertStored(t, ctx, check, d2)
}

// TestRunTxWaitsForCommittingHolder: a RunTx that waits on a key held by a
// transaction that then commits replays it, without calling Apply.
func TestRunTxWaitsForCommittingHolder(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	check, dsn := pgtest.NewDB(t)
	execSQL(t, ctx, check, createApplied)
	store := dedup.New(check, 30*time.Second)
	key := dedup.Key{Sender: "github", DeliveryID: "runtx-waits"}

	first := newDelivery(t, key, "payload")
	holder := holdKey(t, ctx, dsn, first)
	d := newDelivery(t, key, "payload")
	var rec applyRecorder
	done := make(chan outcome, 1)
	go func() {
		res, err := store.RunTx(ctx, d, insertEvent(d, "payload"), rec.apply(d.EventID))
		done <- outcome{res, err}
	}()
	waitUntilBlocked(t, ctx, check, done)
	if err := holder.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var o outcome
	select {
	case o = <-done:
	case <-ctx.Done():
		t.Fatal("RunTx did not return after the holder committed")
	}
	if o.err != nil || !o.res.Replayed || o.res.EventID != first.EventID {
		t.Fatalf("RunTx after the holder committed = %+v, %v; want a replay of event %s", o.res, o.err, first.EventID)
	}
	if n := rec.calls.Load(); n != 0 {
		t.Errorf("Apply called %d times for a duplicate, want 0", n)
	}
	if n := appliedRows(t, ctx, check); n != 0 {
		t.Errorf("Apply's rows = %d, want 0", n)
	}
}

// TestRunTxApplyNeedsPool: RunTx with an Apply on a Querier that is not a
// pool fails before touching the database.
func TestRunTxApplyNeedsPool(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	check, dsn := pgtest.NewDB(t)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	store := dedup.New(conn, 0)
	key := dedup.Key{Sender: "github", DeliveryID: "runtx-conn"}
	d := newDelivery(t, key, "payload")
	called := false
	res, err := store.RunTx(ctx, d, insertEvent(d, "payload"), func(context.Context, pgx.Tx) error { called = true; return nil })
	assertFailed(t, res, err)
	if called {
		t.Error("Apply was called")
	}
	if n := keyRows(t, ctx, check, key); n != 0 {
		t.Errorf("processed_messages rows = %d, want 0", n)
	}
}

// TestRunTxContextCancelledInApply: the caller's context ends while Apply
// runs. Nothing persists, and the pool stays usable.
func TestRunTxContextCancelledInApply(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	check, dsn := pgtest.NewDB(t)
	execSQL(t, ctx, check, createApplied)
	pool, _ := singleConnPool(t, ctx, dsn)
	store := dedup.New(pool, 0)
	key := dedup.Key{Sender: "github", DeliveryID: "runtx-cancel"}
	d := newDelivery(t, key, "payload")

	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rec := applyRecorder{after: func(ctx context.Context, tx pgx.Tx) error {
		cancel()
		_, err := tx.Exec(ctx, `INSERT INTO applied (event_id) VALUES (gen_random_uuid())`)
		return err
	}}
	res, err := store.RunTx(rctx, d, insertEvent(d, "payload"), rec.apply(d.EventID))
	if err == nil || res.Replayed {
		t.Fatalf("RunTx with its context cancelled in Apply = %+v, %v; want an error", res, err)
	}
	if n := appliedRows(t, ctx, check); n != 0 {
		t.Errorf("Apply's rows = %d, want 0", n)
	}
	if st := pool.Stat(); st.AcquiredConns() != 0 {
		t.Errorf("%d connections still acquired after RunTx", st.AcquiredConns())
	}
	if _, err := pool.Exec(ctx, `SELECT 1`); err != nil {
		t.Errorf("the pool is unusable after the cancelled RunTx: %v", err)
	}
	assertRetrySucceeds(t, check, store, key)
}

// TestRunTxApplyPanics: a panic in Apply propagates to the caller (the HTTP
// server recovers it), and leaves nothing committed and no connection stuck
// in the transaction.
func TestRunTxApplyPanics(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	check, dsn := pgtest.NewDB(t)
	execSQL(t, ctx, check, createApplied)
	pool, _ := singleConnPool(t, ctx, dsn)
	store := dedup.New(pool, 0)
	key := dedup.Key{Sender: "github", DeliveryID: "runtx-panic"}
	d := newDelivery(t, key, "payload")

	rec := applyRecorder{after: func(context.Context, pgx.Tx) error { panic("injected") }}
	func() {
		defer func() {
			if r := recover(); r == nil {
				t.Error("RunTx returned normally, want Apply's panic")
			}
		}()
		_, _ = store.RunTx(ctx, d, insertEvent(d, "payload"), rec.apply(d.EventID))
	}()
	if n := appliedRows(t, ctx, check); n != 0 {
		t.Errorf("Apply's rows = %d, want 0", n)
	}
	if st := pool.Stat(); st.AcquiredConns() != 0 {
		t.Errorf("%d connections still acquired after the panic", st.AcquiredConns())
	}
	var lockTimeout string
	if err := pool.QueryRow(ctx, `SELECT current_setting('lock_timeout')`).Scan(&lockTimeout); err != nil {
		t.Fatalf("the pool is unusable after the panic: %v", err)
	}
	if lockTimeout != "0" {
		t.Errorf("lock_timeout = %q on the pool's connection after the panic, want 0: the delivery's transaction is still open", lockTimeout)
	}
	assertRetrySucceeds(t, check, store, key)
}
