package queue

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/rivertype"

	"github.com/hookgate/hookgate/internal/store"
	"github.com/hookgate/hookgate/internal/testing/queuetest"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// TestFailedForwardsCounted: a target's failed forwards are its failed
// jobs that no newer forward of their event followed, whether they were
// folded into their kept counts or not yet: a redelivery takes a failed
// forward out of the count in its own transaction, folded or not; a
// forward under way when it is redelivered is marked superseded at once,
// so that it does not count when it fails; one River held at that moment
// is marked once the redelivery goes ahead (MarkSupersededFailures). The
// fold counts each failure once, does not run while a marking holds its
// lock, and deletes the counts of hours River no longer keeps.
func TestFailedForwardsCounted(t *testing.T) {
	t.Parallel()
	pool, cfg, client := setup(t)
	ctx := t.Context()
	orders := sender(t, cfg, "orders")
	jobs := queuetest.New(pool)
	q := NewJobs(pool)

	failed := func(target string, events ...uuid.UUID) []int64 {
		t.Helper()
		var fwds []queuetest.NewForwardJob
		for _, e := range events {
			fwds = append(fwds, queuetest.NewForwardJob{Sender: "orders", Target: target, EventID: e, DeliveryID: "d", MaxAttempts: 3})
		}
		ids, err := jobs.InsertForwardJobs(ctx, ForwardQueue, queuetest.JobFixture{State: rivertype.JobStateDiscarded, Errors: []string{"target answered 503"}}, fwds...)
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	wantFailed := func(step string, want map[string]int64) {
		t.Helper()
		counts, err := q.CountForwards(ctx, "orders", false)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]int64{}
		for target, c := range counts {
			if c.Failed != 0 {
				got[target] = c.Failed
			}
		}
		if len(got) != len(want) {
			t.Fatalf("%s: failed forwards %v, want %v", step, got, want)
		}
		for target, n := range want {
			if got[target] != n {
				t.Fatalf("%s: failed forwards %v, want %v", step, got, want)
			}
		}
	}
	fold := func(step string, want int64) {
		t.Helper()
		n, ran, err := q.FoldFailedForwards(ctx, 2, time.Time{})
		if err != nil || !ran || n != want {
			t.Fatalf("%s: folded %d (ran %v, %v), want %d", step, n, ran, err, want)
		}
	}
	marked := func(id int64) bool {
		t.Helper()
		var ok bool
		if err := pool.QueryRow(ctx, `SELECT metadata ? $2 FROM river_job WHERE id = $1`, id, supersededKey).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	fail := func(id int64) { // as River's completer fails a job: no fixture's mark
		t.Helper()
		if _, err := pool.Exec(ctx, `UPDATE river_job SET state = $2, finalized_at = now(), attempt = max_attempts WHERE id = $1`, id, jobDiscarded); err != nil {
			t.Fatal(err)
		}
	}

	e := make([]uuid.UUID, 7)
	for i := range e {
		e[i] = newEventID(t)
	}
	f1 := failed("t1", e[0], e[1], e[2])
	failed("t2", e[3])
	wantFailed("not folded", map[string]int64{"t1": 3, "t2": 1})
	fold("first fold, in batches of 2", 4)
	fold("second fold", 0)
	wantFailed("folded", map[string]int64{"t1": 3, "t2": 1})

	// e0 redelivered: its failure to t1 no longer counts.
	if _, err := client.Redeliver(ctx, orders, e[0], "d"); err != nil {
		t.Fatal(err)
	}
	if !marked(f1[0]) {
		t.Fatalf("job %d, e0's failed forward to t1, is not marked superseded after e0's redelivery", f1[0])
	}
	wantFailed("e0 redelivered", map[string]int64{"t1": 2, "t2": 1})

	// e4 fails to t1 and is redelivered before a fold.
	f4 := failed("t1", e[4])
	wantFailed("e4 failed", map[string]int64{"t1": 3, "t2": 1})
	if _, err := client.Redeliver(ctx, orders, e[4], "d"); err != nil {
		t.Fatal(err)
	}
	wantFailed("e4 redelivered before a fold", map[string]int64{"t1": 2, "t2": 1})
	fold("after e4's redelivery", 0)
	if marked(f4[0]) != true {
		t.Fatalf("job %d, e4's failed forward, is not marked superseded", f4[0])
	}

	// e5's forward to t1 is under way when e5 is redelivered: it is marked
	// at once, and does not count when it fails.
	running, err := jobs.InsertForwardJobs(ctx, ForwardQueue, queuetest.JobFixture{State: rivertype.JobStateRunning, Attempt: 1},
		queuetest.NewForwardJob{Sender: "orders", Target: "t1", EventID: e[5], DeliveryID: "d", MaxAttempts: 3})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Redeliver(ctx, orders, e[5], "d"); err != nil {
		t.Fatal(err)
	}
	if !marked(running[0]) {
		t.Fatalf("job %d, e5's forward under way when e5 was redelivered, is not marked superseded", running[0])
	}
	fail(running[0])
	fold("after e5's forward failed", 0)
	wantFailed("e5's forward failed after its redelivery", map[string]int64{"t1": 2, "t2": 1})

	// e6's forward to t1 is under way and River holds it while e6 is
	// redelivered: it is left unmarked, fails, counts, and is marked when
	// the redelivery goes ahead.
	held, err := jobs.InsertForwardJobs(ctx, ForwardQueue, queuetest.JobFixture{State: rivertype.JobStateRunning, Attempt: 1},
		queuetest.NewForwardJob{Sender: "orders", Target: "t1", EventID: e[6], DeliveryID: "d", MaxAttempts: 3})
	if err != nil {
		t.Fatal(err)
	}
	holdRow(t, pool, held[0], func() {
		if _, err := client.Redeliver(ctx, orders, e[6], "d"); err != nil {
			t.Fatal(err)
		}
	})
	if marked(held[0]) {
		t.Fatalf("job %d, held while e6 was redelivered, is marked: the redelivery waited for it", held[0])
	}
	fail(held[0])
	fold("after e6's forward failed", 1)
	wantFailed("e6's held forward failed", map[string]int64{"t1": 3, "t2": 1})
	if err := q.MarkSupersededFailures(ctx, "orders", "t1", e[6]); err != nil {
		t.Fatal(err)
	}
	wantFailed("e6's redelivery went ahead", map[string]int64{"t1": 2, "t2": 1})

	// A fold does not run while a marking holds the counts' lock.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock_shared($1::int4, 0)`, countsLock); err != nil {
		t.Fatal(err)
	}
	failed("t2", newEventID(t))
	if n, ran, err := q.FoldFailedForwards(ctx, foldBatch, time.Time{}); err != nil || ran || n != 0 {
		t.Errorf("fold while a marking holds the lock: folded %d, ran %v, %v; want nothing, without waiting", n, ran, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	fold("after the marking", 1)
	wantFailed("folded again", map[string]int64{"t1": 2, "t2": 2})

	// The counts of the hours before the cutoff go; the failures not
	// folded yet still count.
	failed("t2", newEventID(t))
	if _, ran, err := q.FoldFailedForwards(ctx, 0, time.Now().Add(2*time.Hour)); err != nil || !ran {
		t.Fatalf("expiry: ran %v, %v", ran, err)
	}
	wantFailed("counts expired", map[string]int64{"t2": 1})
}

// holdRow locks job id's row FOR UPDATE in a transaction of its own (as
// River's completer holds a job it writes) while f runs.
func holdRow(t *testing.T, pool *pgxpool.Pool, id int64, f func()) {
	t.Helper()
	ctx := t.Context()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT 1 FROM river_job WHERE id = $1 FOR UPDATE`, id); err != nil {
		t.Fatal(err)
	}
	f()
}

// TestMarkingWaitsForFold: a redelivery whose failed forward a fold holds
// (it counts it, under countsLock) waits for the fold's COMMIT and then
// marks the forward and takes it out of its count, instead of skipping it
// as a job River holds: the failure does not count after the redelivery.
func TestMarkingWaitsForFold(t *testing.T) {
	t.Parallel()
	pool, cfg, client := setup(t)
	ctx := t.Context()
	q := NewJobs(pool)
	e := newEventID(t)
	ids, err := queuetest.New(pool).InsertForwardJobs(ctx, ForwardQueue, queuetest.JobFixture{State: rivertype.JobStateDiscarded, Errors: []string{"target answered 503"}},
		queuetest.NewForwardJob{Sender: "orders", Target: "t1", EventID: e, DeliveryID: "d", MaxAttempts: 3})
	if err != nil {
		t.Fatal(err)
	}

	// A fold under way: the lock, and the failed job, held; the fold's
	// statement itself, once the redelivery waits.
	fold, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = fold.Rollback(context.WithoutCancel(ctx)) }()
	var ok bool
	if err := fold.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock($1::int4, 0)`, countsLock).Scan(&ok); err != nil || !ok {
		t.Fatalf("take the counts' lock: %v, %v", ok, err)
	}
	if _, err := fold.Exec(ctx, `SELECT 1 FROM river_job WHERE id = $1 FOR UPDATE`, ids[0]); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := client.Redeliver(ctx, sender(t, cfg, "orders"), e, "d")
		done <- err
	}()
	testkit.Poll(t, 20*time.Second, "the redelivery to wait for the counts' lock", func() bool {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND wait_event = 'advisory'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	})
	rows, err := store.QueryUnder(ctx, fold, store.IndexOrderScans, foldSQL, foldBatch)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := pgx.CollectExactlyOneRow(rows, pgx.RowTo[int64]); err != nil || n != 1 {
		t.Fatalf("the fold counted %d, %v; want the failed forward", n, err)
	}
	if err := fold.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	counts, err := q.CountForwards(ctx, "orders", false)
	if err != nil {
		t.Fatal(err)
	}
	if c := counts["t1"]; c.Failed != 0 || c.Pending != 1 {
		t.Errorf("t1's counts after the redelivery %+v, want its failure superseded and the new forward pending", c)
	}
}
