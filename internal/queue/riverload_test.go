package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/rivertype"

	"github.com/hookgate/hookgate/internal/testing/pgtest"
	"github.com/hookgate/hookgate/internal/testing/queuetest"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// loadWorker works forward jobs as a target that answers at once would:
// each job after a couple of milliseconds, and every job of an odd ID is
// first snoozed for longer than River's scheduler interval (River writes
// it scheduled, for its scheduler), so that River's completer and
// scheduler both have work while a test runs.
type loadWorker struct {
	snoozed sync.Map
	done    atomic.Int64
}

func (w *loadWorker) Work(ctx context.Context, j Job) error {
	if j.ID%2 == 1 {
		if _, again := w.snoozed.LoadOrStore(j.ID, true); !again {
			return Snooze(riverSchedulerInterval + time.Second)
		}
	}
	t := time.NewTimer(2 * time.Millisecond)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
	}
	w.done.Add(1)
	return nil
}
func (*loadWorker) Timeout(Job) time.Duration { return 10 * time.Second }
func (*loadWorker) NextRetry(Job) time.Time   { return time.Now().Add(time.Minute) }

// loadYAML has the sender of the load tests, whose forwards go to targets
// t and u (never contacted: loadWorker works them).
const loadYAML = `senders:
  - name: acme
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    forward:
      - { name: t, url: "http://127.0.0.1:1/t", timeout: 5s }
      - { name: u, url: "http://127.0.0.1:1/u", timeout: 5s }
`

// finishedLoad fills River's table with n finished forward jobs (a week's
// history), analyzes it, and resets PostgreSQL's activity statistics (as a
// crash does): the statistics then say that no job waits, whatever the
// test inserts next, and autovacuum does not analyze again while it runs.
func finishedLoad(t *testing.T, pool *pgxpool.Pool, n int) {
	t.Helper()
	ctx := t.Context()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	for _, sql := range []string{
		`INSERT INTO river_job (state, attempt, max_attempts, attempted_at, created_at, finalized_at, scheduled_at, args, kind, metadata, queue, unique_key, unique_states)
SELECT 'completed', 1, 5, t, t, t + interval '80 ms', t,
  jsonb_build_object('sender', 'acme', 'target', 't', 'event_id', gen_random_uuid()::text, 'delivery_id', 'done-' || g),
  '` + ForwardKind + `', '{"output":{"attempt":1,"status":204}}', 'forward', sha256(('done-' || g)::bytea), B'11110001'
FROM generate_series(1, ` + fmt.Sprint(n) + `) g, LATERAL (SELECT now() - interval '6 days' + g * interval '1 ms' AS t) x`,
		`ANALYZE river_job`,
		// This session's counts reach the shared statistics before the
		// reset, not after it (lyingStats).
		`SELECT pg_stat_force_next_flush()`, `SELECT 1`, `SELECT pg_stat_reset()`,
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
}

// insertWaiting inserts n forward jobs of target in River's state, due at
// now() + due, each with a unique key as River gives them (unique while
// unfinished: uniqueStates' bits), named by prefix.
func insertWaiting(t *testing.T, pool *pgxpool.Pool, target string, state rivertype.JobState, due time.Duration, n int, prefix string) {
	t.Helper()
	if _, err := pool.Exec(t.Context(), `INSERT INTO river_job (state, attempt, max_attempts, created_at, scheduled_at, args, kind, queue, unique_key, unique_states, errors)
SELECT $1::river_job_state, CASE WHEN $1 = 'retryable' THEN 1 ELSE 0 END, 5, now(), now() + $2 * interval '1 millisecond' + g * interval '1 microsecond',
  jsonb_build_object('sender', 'acme', 'target', $3::text, 'event_id', gen_random_uuid()::text, 'delivery_id', $4 || g),
  '`+ForwardKind+`', 'forward', sha256(($4 || g)::bytea), B'11110001',
  CASE WHEN $1 = 'retryable' THEN ARRAY[jsonb_build_object('at', now(), 'attempt', 1, 'error', 'target answered 503')] END
FROM generate_series(1, $5::int) g`, string(state), due.Milliseconds(), target, prefix, n); err != nil {
		t.Fatal(err)
	}
}

// riverAlone returns a River client of loadYAML's sender working forwards
// with w on pool, at most workers at once, with hookgate's scheduling of
// due forwards off (River's scheduler alone makes them available), and
// that scheduling.
func riverAlone(t *testing.T, pool *pgxpool.Pool, w ForwardWorker, workers int) (*River, *forwardScheduler) {
	t.Helper()
	cfg := testkit.ParseConfig(t, loadYAML)
	cc := DefaultClientConfig(cfg)
	cc.Pool, cc.Senders, cc.Log, cc.Worker = pool, cfg, testkit.Logger(t), w
	cc.MaxWorkers = workers
	r, err := New(cc)
	if err != nil {
		t.Fatal(err)
	}
	sched := r.sched
	r.sched = nil
	return r, sched
}

// startRiver starts r and returns what stops it, cancelling its jobs.
func startRiver(t *testing.T, r *River) (stop func()) {
	t.Helper()
	if err := r.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := r.StopAndCancel(ctx); err != nil {
			t.Error(err)
		}
	}
}

// deadlocks returns how many deadlocks PostgreSQL has detected in the
// database of pool.
func deadlocks(t *testing.T, pool *pgxpool.Pool) int64 {
	t.Helper()
	var n int64
	if err := pool.QueryRow(t.Context(), `SELECT pg_stat_get_db_deadlocks(oid) FROM pg_database WHERE datname = current_database()`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// riverScheduling reports whether River's scheduler statement runs now,
// started after since.
func riverScheduling(t *testing.T, pool *pgxpool.Pool, since time.Time) bool {
	t.Helper()
	var n int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid() AND state = 'active' AND starts_with(query, $1) AND query_start > $2`,
		riverScheduleStatement, since).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// TestBreakerWakeNeverDeadlocks: the wake a target's breaker runs when it
// closes (WakeWaitingForwards) runs three times while River's scheduler
// makes the target's snoozed forwards available on statistics that say
// none waits (its statement holds them for seconds) and River's completer
// writes the outcomes of thousands of forwards (of the target and of
// another): the wake is never seen waiting for a lock, PostgreSQL detects
// no deadlock, and every forward is worked. The earlier wake waited behind
// the scheduler in every round, then updated the jobs River had fetched
// meanwhile, locking them as the completer wrote them in another order
// (2 deadlocks in 6 rounds, the completer's and the scheduler's).
// Hookgate's own scheduling of the forwards is off here, so that River's
// scheduler has them.
func TestBreakerWakeNeverDeadlocks(t *testing.T) {
	testkit.Slow(t, "River's completer and scheduler under load for half a minute")
	t.Parallel()
	pool, _ := pgtest.NewDB(t, pgtest.Conns(30))
	ctx := t.Context()
	finishedLoad(t, pool, 25000)
	before := deadlocks(t, pool)
	serverLog := pgtest.LogSince(t, pool)

	w := &loadWorker{}
	r, _ := riverAlone(t, pool, w, 50)
	const rounds, snoozed, others = 3, 1200, 2000
	for i := range rounds {
		// The target's forwards snoozed behind its breaker, due within
		// River's scheduler's look-ahead, and others that keep the
		// completer busy.
		inserted := time.Now()
		insertWaiting(t, pool, "t", rivertype.JobStateScheduled, 3*time.Second, snoozed, fmt.Sprintf("t%d-", i))
		insertWaiting(t, pool, "u", rivertype.JobStateAvailable, 0, others, fmt.Sprintf("u%d-", i))
		if i == 0 {
			defer startRiver(t, r)()
		}
		deadline := time.Now().Add(waitFor)
		for !riverScheduling(t, pool, inserted) {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: River's scheduler did not run within %s", i, waitFor)
			}
			time.Sleep(5 * time.Millisecond)
		}
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		waited := watchLockWaits(t, pool, wakeStatement)
		n, err := NewJobs(pool).WakeWaitingForwards(wctx, ForwardQueue, "acme", "t")
		if w, events := waited(); w > 0 {
			t.Errorf("round %d: the wake waited for a lock (%d times seen waiting, on %v)", i, w, events)
		}
		cancel()
		var pe *pgconn.PgError
		switch {
		case errors.As(err, &pe) && pe.Code == "40P01":
			t.Errorf("round %d: the wake deadlocked: %v", i, err)
		case err != nil:
			t.Fatalf("round %d: wake: %v", i, err)
		}
		t.Logf("round %d: woke %d forwards", i, n)
	}
	// Every forward is worked and recorded: none was lost.
	waitFinished(t, pool)
	if w.done.Load() != rounds*(snoozed+others) {
		t.Errorf("%d forwards worked, want %d", w.done.Load(), rounds*(snoozed+others))
	}
	if n := deadlocks(t, pool) - before; n > 0 {
		// The server's log names the statements of each deadlock (of any
		// test's database, while this one ran).
		t.Errorf("PostgreSQL detected %d deadlocks (River's completer or scheduler against the wake); the server's log:\n%s",
			n, pgtest.ReportsIn(serverLog, "deadlock detected", 5))
	}
}

// wakeStatement starts the text of wakeSQL, as pg_stat_activity shows it.
const wakeStatement = "UPDATE river_job SET state = $4::river_job_state, scheduled_at = CASE"

// watchLockWaits watches, every few milliseconds until the returned
// function is called, for a statement of this database whose text starts
// with prefix waiting for a lock on rows or transactions; the function
// returns how many times one was seen waiting, and the wait events seen.
// A wait to extend the table (wait event extend) is not counted: it
// orders nothing and cannot deadlock, and a busy machine shows it whenever
// inserts and updates grow river_job at once.
func watchLockWaits(t *testing.T, pool *pgxpool.Pool, prefix string) func() (int, []string) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	var (
		seen   int
		events []string
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			rows, err := pool.Query(ctx, `SELECT wait_event FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid() AND wait_event_type = 'Lock' AND wait_event <> 'extend'
  AND starts_with(query, $1)`, prefix)
			if err == nil {
				waits, err := pgx.CollectRows(rows, pgx.RowTo[string])
				if err == nil {
					seen += len(waits)
					for _, w := range waits {
						if !slices.Contains(events, w) {
							events = append(events, w)
						}
					}
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	return func() (int, []string) {
		cancel()
		<-done
		return seen, events
	}
}

// waitFinished waits until no forward job is unfinished (waiting or
// running).
func waitFinished(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		left, err := queuetest.New(pool).CountJobs(t.Context(), ForwardKind, waitingJobStates...)
		if err != nil {
			t.Fatal(err)
		}
		running, err := queuetest.New(pool).CountJobs(t.Context(), ForwardKind, rivertype.JobStateRunning)
		if err != nil {
			t.Fatal(err)
		}
		if left+running == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d forward jobs waiting and %d running after %s", left, running, waitFor)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitFor bounds the load tests' waits: a guard against hangs, not a
// timed assertion.
const waitFor = 2 * time.Minute

// TestStalledRiverSchedulerIsCancelled: on statistics that say no job
// waits, River's scheduler statement takes 3,000 due forwards (River's
// scheduler alone: hookgate's scheduling is off until then) and runs for
// seconds, holding them. Hookgate's pass then analyzes River's table and
// cancels the statement, and the forwards are worked: made available by
// hookgate's next passes, or by River's next run, planned on the new
// statistics.
func TestStalledRiverSchedulerIsCancelled(t *testing.T) {
	testkit.Slow(t, "River's scheduler stalled on lying statistics")
	t.Parallel()
	pool, _ := pgtest.NewDB(t, pgtest.Conns(20))
	ctx := t.Context()
	finishedLoad(t, pool, 25000)
	w := &loadWorker{}
	r, sched := riverAlone(t, pool, w, 20) // River's scheduler alone, until the passes below
	const due = 3000
	insertWaiting(t, pool, "t", rivertype.JobStateRetryable, -time.Second, due, "due-")
	defer startRiver(t, r)()
	deadline := time.Now().Add(waitFor)
	var cancelled int
	for cancelled == 0 {
		n, longest, err := sched.jobs.CancelStalledRiverSchedule(ctx, riverScheduleStall)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			cancelled = n
			t.Logf("cancelled River's scheduler statement after %s", longest)
		}
		if time.Now().After(deadline) {
			t.Fatalf("River's scheduler statement not cancelled within %s", waitFor)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if ok, err := sched.jobs.JobsAnalyzedSinceReset(ctx); err != nil || !ok {
		t.Errorf("river_job analyzed: %v, %v; want true", ok, err)
	}
	stop := sched.start(ctx)
	defer stop()
	waitFinished(t, pool)
	if w.done.Load() != due {
		t.Errorf("%d forwards worked, want %d", w.done.Load(), due)
	}
}
