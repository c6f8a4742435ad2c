package forward_test

import (
	"context"
	"crypto/md5"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/rivertype"

	"github.com/hookgate/hookgate/internal/forward"
	"github.com/hookgate/hookgate/internal/queue"
	"github.com/hookgate/hookgate/internal/testing/queuetest"
	"github.com/hookgate/hookgate/internal/testing/storetest"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// TestOutageBacklogComesBackWithoutRiversScheduler: a target is down while
// 10,000 of its forwards wait — 3,000 pending (never attempted), 3,500
// snoozed behind its breaker for five minutes and 3,500 waiting for a retry
// an hour away — on a River table holding 200,000 delivered forwards and
// statistics that saw none waiting (as after a crash), and River's
// scheduler never runs (another process is River's leader). The pending
// ones fail, the breaker opens; the target comes back, a probe closes the
// breaker, and every one of the 10,000 forwards is delivered: hookgate
// makes them available itself (the breaker's wake, its own scheduling of
// due forwards), never through River's scheduler. Before, the snoozed and
// retrying forwards waited for River's scheduler (here: for ever). The
// time from the target's return to the last delivery is logged.
func TestOutageBacklogComesBackWithoutRiversScheduler(t *testing.T) {
	testkit.Slow(t, "10,000 forwards after an outage, on a table of 200,000 finished jobs")
	t.Parallel()
	tg, up := downTarget(t)
	const (
		pending, snoozed, retrying = 3000, 3500, 3500
		waiting                    = pending + snoozed + retrying
		history                    = 200000
	)
	keys := make([]string, waiting)
	setup := func(pool *pgxpool.Pool) {
		ctx := t.Context()
		conn, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Release()
		if _, err := storetest.InsertGenerated(ctx, conn, storetest.Generated{Sender: "acme", Prefix: "w", N: waiting,
			Newest: time.Now(), Step: time.Millisecond, Events: true}); err != nil {
			t.Fatal(err)
		}
		jobs := queuetest.New(conn)
		if err := jobs.InsertFinishedForwardJobs(ctx, queue.ForwardQueue, "acme", "down", history); err != nil {
			t.Fatal(err)
		}
		if err := queue.NewJobs(conn).AnalyzeJobs(ctx); err != nil {
			t.Fatal(err)
		}
		group := func(from, n int, f queuetest.JobFixture) {
			js := make([]queuetest.NewForwardJob, n)
			for i := range js {
				id := fmt.Sprintf("w%d", from+i+1)
				event := uuid.UUID(md5.Sum([]byte("acme/" + id))) // store.Generated's event IDs
				keys[from+i] = event.String()
				js[i] = queuetest.NewForwardJob{Sender: "acme", Target: "down", DeliveryID: id, EventID: event, MaxAttempts: 10}
			}
			if _, err := jobs.InsertForwardJobs(ctx, queue.ForwardQueue, f, js...); err != nil {
				t.Fatal(err)
			}
		}
		group(0, pending, queuetest.JobFixture{})
		group(pending, snoozed, queuetest.JobFixture{State: rivertype.JobStateScheduled, Attempt: 1, Errors: []string{},
			ScheduledAt: time.Now().Add(5 * time.Minute)})
		group(pending+snoozed, retrying, queuetest.JobFixture{State: rivertype.JobStateRetryable, Attempt: 1,
			Errors: []string{"target answered 503"}, ScheduledAt: time.Now().Add(time.Hour)})
		if err := jobs.ResetStatistics(ctx); err != nil {
			t.Fatal(err)
		}
		if err := jobs.HoldLeadership(ctx, "another-process", time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	e := newEnv(t, fmt.Sprintf("      - name: down\n        url: %s\n        timeout: 5s\n        max_attempts: 10\n", tg.URL),
		envOpts{Work: true, Backoff: forward.DefaultBackoff, BreakerProbe: forward.DefaultProbeInterval,
			BreakerWindow: 2 * time.Second, Setup: setup})
	e.poll("the breaker to open", func() bool { return e.breaker("down") == forward.BreakerOpen },
		func() string { return fmt.Sprintf("%d requests", len(tg.Hits())) })
	up.Store(true)
	back := time.Now()
	deadline := back.Add(2 * time.Minute) // a guard against hangs, not a timed assertion
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for delivered(tg, keys) < waiting {
		if time.Now().After(deadline) {
			t.Fatalf("2 minutes after the target came back %d of %d forwards had arrived (breaker %s)", delivered(tg, keys), waiting, e.breaker("down"))
		}
		<-tick.C
	}
	t.Logf("all %d waiting forwards arrived %v after the target came back", waiting, time.Since(back).Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for {
		n, err := queuetest.New(e.pool).CountJobs(ctx, queue.ForwardKind, rivertype.JobStateCompleted)
		if err != nil {
			t.Fatal(err)
		}
		if n == history+waiting {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d of %d forward jobs completed", n, history+waiting)
		case <-tick.C:
		}
	}
}
