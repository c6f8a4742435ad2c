package forward_test

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/hookgate/hookgate/internal/queue"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// TestRedeliveryQueuedAfterTheFastPathStaysTheOne: a redelivery queued
// after the fast path's first attempt (after -1, a job) is older than the
// record of that attempt, which gets its ID when the attempt ends (a
// retryable River job, or a forward_delivered row). A second redelivery
// after that record must still find the first one waiting (already
// pending, its job), not take the record for the newest forward and queue
// another: the event would reach the target twice more instead of once.
// River works no job here (the env's client only inserts), so the queued
// redelivery stays as it is while the test looks.
func TestRedeliveryQueuedAfterTheFastPathStaysTheOne(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		status int // the fast path's attempt's answer
	}{
		{"attempt failed, retry scheduled", http.StatusServiceUnavailable},
		{"attempt delivered", http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e, release, d := heldFirstAttempt(t, "queued-1", tc.status)

			acme, _ := e.cfg.Sender("acme")
			ev := uuid.MustParse(d.eventID)
			redeliver := func() queue.Enqueued {
				t.Helper()
				jobs, err := e.river.Redeliver(t.Context(), acme, ev, d.id)
				if err != nil || len(jobs) != 1 {
					t.Fatalf("Redeliver = %+v, %v; want one forward", jobs, err)
				}
				return jobs[0]
			}
			first := redeliver()
			if !first.AfterCurrent || first.AlreadyPending || first.JobID == 0 {
				t.Fatalf("redelivery while the fast path runs = %+v; want a new job queued after the attempt", first)
			}
			close(release)
			testkit.Poll(t, waitTimeout, "the fast path to record its attempt", func() bool { return len(e.outbox()) == 0 },
				func() string { return "outbox: " + strings.Join(e.outbox(), ", ") })

			again := redeliver()
			if !again.AlreadyPending || again.AfterCurrent || again.JobID != first.JobID {
				t.Errorf("redelivery once the attempt is recorded = %+v; want already pending, job %d (the redelivery still waiting)", again, first.JobID)
			}
			var after []int64 // forwards not attempted yet besides the first redelivery
			for _, j := range e.jobs() {
				if j.ID != first.JobID && j.Attempt == 0 {
					after = append(after, j.ID)
				}
			}
			if len(after) != 0 {
				t.Errorf("new forwards besides the waiting redelivery %d: %v; want none", first.JobID, after)
			}
		})
	}
}

// TestConcurrentRedeliveriesAroundTheFastPathsRecord: 50 redeliveries
// of an event whose forward is the fast path's first attempt, in three
// bursts of concurrent ones: 20 while the target holds the attempt, 15
// from the moment it answers 503 (while the attempt's record, a
// retryable River job, is written) and 15 once it is recorded, queue
// exactly one new forward: one answer queues it after the attempt, every
// other finds it already pending.
func TestConcurrentRedeliveriesAroundTheFastPathsRecord(t *testing.T) {
	t.Parallel()
	e, release, d := heldFirstAttempt(t, "around-1", http.StatusServiceUnavailable)

	acme, _ := e.cfg.Sender("acme")
	ev := uuid.MustParse(d.eventID)
	var answers [][]queue.Enqueued
	// burst runs k redeliveries at once, released together, and keeps
	// their answers.
	burst := func(k int) {
		t.Helper()
		var (
			wg    sync.WaitGroup
			start = make(chan struct{})
			got   = make([][]queue.Enqueued, k)
			errs  = make([]error, k)
		)
		for i := range k {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				got[i], errs[i] = e.river.Redeliver(t.Context(), acme, ev, d.id)
			}()
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("redelivery %d: %v", i, err)
			}
		}
		answers = append(answers, got...)
	}
	burst(20)
	close(release)
	burst(15)
	testkit.Poll(t, waitTimeout, "the fast path to record its attempt", func() bool { return len(e.outbox()) == 0 },
		func() string { return "outbox: " + strings.Join(e.outbox(), ", ") })
	burst(15)

	var queued []queue.Enqueued
	pending := map[int64]int{}
	for _, a := range answers {
		for _, f := range a {
			switch {
			case f.AfterCurrent && !f.AlreadyPending:
				queued = append(queued, f)
			case f.AlreadyPending && !f.AfterCurrent:
				pending[f.JobID]++
			default:
				t.Errorf("redelivery answered %+v; want after the current attempt, or already pending", f)
			}
		}
	}
	if len(queued) != 1 {
		t.Fatalf("%d of %d redeliveries queued a new forward (%+v), want 1", len(queued), len(answers), queued)
	}
	if pending[queued[0].JobID] != len(answers)-1 || len(pending) != 1 {
		t.Errorf("already-pending answers by job: %v; want %d naming job %d", pending, len(answers)-1, queued[0].JobID)
	}
	var states []string
	for _, j := range e.jobs() {
		states = append(states, j.State)
	}
	if len(states) != 2 {
		t.Errorf("the event's forward jobs: %v; want 2 (the attempt's record, retryable, and the one redelivery)", states)
	}
}

// heldFirstAttempt delivers id to a fast-path gateway whose target holds
// the first POST until release is closed, then answers it status (every
// later POST 200), and returns once that POST has reached the target.
func heldFirstAttempt(t *testing.T, id string, status int) (*env, chan struct{}, delivery) {
	t.Helper()
	release := make(chan struct{})
	tg := testkit.NewTarget(t, func(n int, r *http.Request) testkit.Answer {
		if n == 1 {
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return testkit.Answer{Status: status}
		}
		return testkit.Answer{Status: http.StatusOK}
	})
	e := newFastEnv(t, "      - name: orders\n        url: "+tg.URL+"\n        timeout: 20s\n        max_attempts: 5\n",
		envOpts{}, fastOptions{lease: 40 * time.Second})
	d := e.deliver(id, []byte(`{}`), "application/json")
	testkit.Poll(t, waitTimeout, "the fast path's POST to reach the target", func() bool { return len(tg.Hits()) == 1 }, nil)
	return e, release, d
}
