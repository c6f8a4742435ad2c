package forward

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river/rivertype"

	"github.com/hookgate/hookgate/internal/queue"
	"github.com/hookgate/hookgate/internal/store"
	"github.com/hookgate/hookgate/internal/testing/pgtest"
	"github.com/hookgate/hookgate/internal/testing/queuetest"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// A job River shows as running on behalf of this process, whose attempt
// started past the stale time, and that none of its workers runs (a
// fetch whose answer was cut off) is made available again; a job one of
// its workers runs, one whose work has ended while River may still be
// writing its outcome, one whose attempt started just now, and another
// process's are left alone. A finished job is forgotten once the database
// shows it finished.
func TestTakeoverReleasesJobsItsWorkersDoNotRun(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDB(t)
	ctx := t.Context()
	q := store.New(pool)
	const me = ProcessIDPrefix + "host:1:me"
	tk, err := NewTakeover(TakeoverConfig{ID: me, HeartbeatEvery: 100 * time.Millisecond, Stale: 5 * time.Second,
		DB: pool, Jobs: queue.NewJobs(pool), Registerer: prometheus.NewRegistry(), Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	other := ProcessIDPrefix + "host:2:other"
	if err := q.Heartbeat(ctx, other, time.Now(), 0); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Minute)
	job := func(by string, at time.Time) int64 {
		ids, err := queuetest.New(pool).InsertForwardJobs(ctx, queue.ForwardQueue, queuetest.JobFixture{State: rivertype.JobStateRunning, Attempt: 1, At: at, AttemptedBy: []string{by}},
			queuetest.NewForwardJob{Sender: "acme", Target: "t", DeliveryID: "d", MaxAttempts: 5})
		if err != nil {
			t.Fatal(err)
		}
		return ids[0]
	}
	lost, working, finishing, fresh, others := job(me, old), job(me, old), job(me, old), job(me, time.Now().Add(time.Hour)), job(other, old)

	// The queue tells the takeover which jobs its workers run
	// (queue.JobTracker): one is under way, one has just finished.
	tk.Started(working)
	tk.Started(finishing)
	tk.Finished(finishing)

	// A look has a second for its statements. On a busy machine one can
	// run out of it; the gateway's loop (Run) logs that and looks again
	// at its next tick, and so does this test.
	var released []int64
	var lookErr error
	lastErr := func() string { return fmt.Sprintf("the last look's error: %v", lookErr) }
	testkit.Poll(t, time.Minute, "the lost job to be released", func() bool {
		if err := q.Heartbeat(ctx, other, time.Now(), 0); err != nil { // the other process lives
			t.Fatal(err)
		}
		taken, err := tk.Once(ctx)
		if err != nil {
			lookErr = err
			return false
		}
		for _, j := range taken {
			released = append(released, j.JobID)
		}
		return len(released) > 0
	}, lastErr)
	if !slices.Equal(released, []int64{lost}) {
		t.Errorf("released %v, want only the lost job %d (working %d, finishing %d, fresh %d, another process's %d)",
			released, lost, working, finishing, fresh, others)
	}
	jobs, err := queuetest.New(pool).ForwardJobs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		want := rivertype.JobStateRunning
		if j.ID == lost {
			want = rivertype.JobStateAvailable
		}
		if j.State != want {
			t.Errorf("job %d: %s, want %s", j.ID, j.State, want)
		}
	}

	// The finishing job's outcome is written: forgotten at the next look.
	if err := queuetest.New(pool).SetForwardJob(ctx, finishing, queuetest.JobFixture{State: rivertype.JobStateCompleted, Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	lookErr = nil
	testkit.Poll(t, time.Minute, "a look that ends without an error", func() bool {
		_, lookErr = tk.Once(ctx)
		return lookErr == nil
	}, lastErr)
	tk.mu.Lock()
	_, kept := tk.finishing[finishing]
	tk.mu.Unlock()
	if kept {
		t.Error("a finished job whose outcome the database shows is still remembered as finishing")
	}
	tk.Finished(working)
}

// While a look for jobs to take over fails (here it waits for a lock on
// river_job past its budget) and the heartbeat still succeeds, Run logs the
// look's failure once, never as a failed heartbeat, and logs when a look
// succeeds again.
func TestTakeoverRunLogsAFailedLookApartFromTheHeartbeat(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDB(t)
	ctx := t.Context()
	var logs testkit.LogBuffer
	const me = ProcessIDPrefix + "host:1:me"
	tk, err := NewTakeover(TakeoverConfig{ID: me, HeartbeatEvery: 50 * time.Millisecond, Stale: 200 * time.Millisecond,
		DB: pool, Jobs: queue.NewJobs(pool), Registerer: prometheus.NewRegistry(), Log: logs.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	lock, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lock.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := lock.Exec(ctx, `LOCK TABLE river_job IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); tk.Run(rctx) }()
	defer func() { stop(); <-done }()

	const lookFailed, lookBack, beatFailed = "the look for jobs to take over failed", "the look for jobs to take over succeeded again", "forward heartbeat failed"
	testkit.Poll(t, time.Minute, "the failed look to be logged", func() bool { return strings.Contains(logs.String(), lookFailed) }, logs.String)
	// Two more heartbeats: the look between them failed too.
	seen := func() time.Time {
		var at time.Time
		if err := pool.QueryRow(ctx, `SELECT seen_at FROM forward_processes WHERE id = $1`, me).Scan(&at); err != nil {
			t.Fatal(err) // raw SQL: the heartbeat's time is what the test examines
		}
		return at
	}
	for range 2 {
		before := seen()
		testkit.Poll(t, time.Minute, "the next heartbeat", func() bool { return seen().After(before) }, logs.String)
	}
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	testkit.Poll(t, time.Minute, "a look to succeed again", func() bool { return strings.Contains(logs.String(), lookBack) }, logs.String)
	stop()
	<-done
	out := logs.String()
	if n := strings.Count(out, lookFailed); n != 1 {
		t.Errorf("the look's failure logged %d times for one outage, want once:\n%s", n, out)
	}
	// The warning says what failed once: its err is the look's cause.
	if n := strings.Count(out, "look for jobs to take over"); n != 2 {
		t.Errorf("%q in the log %d times, want 2 (the failure's warning and the success's line, no repeat in the error):\n%s", "look for jobs to take over", n, out)
	}
	// A heartbeat may fail on its own on a busy machine (its budget is a
	// second); the look's failure must never be reported as one.
	for line := range strings.Lines(out) {
		if strings.Contains(line, beatFailed) && strings.Contains(line, "look for jobs to take over") {
			t.Errorf("a failed look logged as a failed heartbeat: %s", line)
		}
	}
}
