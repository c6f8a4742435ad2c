package queue

import (
	"context"
	"testing"
	"time"

	"github.com/riverqueue/river/rivertype"

	"github.com/hookgate/hookgate/internal/testing/pgtest"
	"github.com/hookgate/hookgate/internal/testing/queuetest"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// capture is a ForwardWorker that hands each job it works to jobs and
// delivers it.
type capture struct{ jobs chan Job }

func (c capture) Work(_ context.Context, j Job) error { c.jobs <- j; return nil }
func (capture) Timeout(Job) time.Duration             { return 10 * time.Second }
func (capture) NextRetry(Job) time.Time               { return time.Now().Add(time.Minute) }

// TestWorkerSeesTakeover: a running forward job of a process that is gone,
// taken over, reaches its next worker marked TakenOver, at its next
// attempt; a job retried after a failed attempt is not marked.
func TestWorkerSeesTakeover(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDB(t)
	ctx := t.Context()
	jobs := queuetest.New(pool)
	taken, err := jobs.InsertForwardJobs(ctx, ForwardQueue, queuetest.JobFixture{State: rivertype.JobStateRunning, Attempt: 1, AttemptedBy: []string{"hookgate:host:1:gone"},
		ScheduledAt: time.Now().Add(-time.Minute)}, queuetest.NewForwardJob{Sender: "orders", Target: "t1", DeliveryID: "taken", MaxAttempts: 3})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := jobs.InsertForwardJobs(ctx, ForwardQueue, queuetest.JobFixture{State: rivertype.JobStateAvailable, Attempt: 1, Errors: []string{"target answered 500"},
		ScheduledAt: time.Now().Add(-time.Minute)},
		queuetest.NewForwardJob{Sender: "orders", Target: "t1", DeliveryID: "plain", MaxAttempts: 3})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := NewJobs(pool).TakeOverJobs(ctx, "hookgate:", time.Second, 10); err != nil || len(got) != 1 {
		t.Fatalf("TakeOverJobs = %+v, %v; want the gone process's job", got, err)
	}
	cfg := testkit.ParseConfig(t, statesYAML)
	seen := capture{jobs: make(chan Job, 2)}
	cc := DefaultClientConfig(cfg)
	cc.Pool, cc.Senders, cc.Worker, cc.Log = pool, cfg, seen, testkit.Logger(t)
	startClient(t, cc)
	got := map[int64]Job{}
	for len(got) < 2 {
		select {
		case j := <-seen.jobs:
			got[j.ID] = j
		case <-time.After(time.Minute): // a guard against a hang, not a timed assertion
			t.Fatalf("worked %+v; want both jobs", got)
		}
	}
	if j := got[taken[0]]; !j.TakenOver || j.Attempt != 2 {
		t.Errorf("the taken-over job: %+v; want TakenOver at attempt 2", j)
	}
	if j := got[plain[0]]; j.TakenOver || j.Attempt != 2 {
		t.Errorf("the retried job: %+v; want its attempt 2, not taken over", j)
	}
}

// startClient starts a River client of cc working its queues, stopped when
// the test ends.
func startClient(t *testing.T, cc ClientConfig) *River {
	t.Helper()
	client, err := New(cc)
	if err != nil {
		t.Fatal(err)
	}
	if err := client.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := client.Stop(sctx); err != nil {
			t.Errorf("stop River: %v", err)
		}
	})
	return client
}
