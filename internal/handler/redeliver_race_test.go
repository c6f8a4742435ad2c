package handler_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/hookgate/hookgate/internal/testing/queuetest"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// TestConcurrentRedeliveriesQueueOneForwardPerTarget: 50 concurrent
// POST /v1/events/{id}/redeliver of one event while its forwards to two
// targets are running (each target holds the request) queue exactly one
// new forward per target, after the one under way: one answer per target
// says after_current with the new job, every other says already_pending
// with that same job. Redeliveries of one event serialise on the
// database (a transaction-scoped advisory lock of the event), so the
// check of the event's forwards and the insert of the new one cannot
// interleave with another redelivery's (before, 50 such requests queued
// several extra forwards).
func TestConcurrentRedeliveriesQueueOneForwardPerTarget(t *testing.T) {
	t.Parallel()
	hold := testkit.NewTarget(t, func(int, *http.Request) testkit.Answer { return testkit.Answer{Block: true} })
	s := newOpServer(t, opOptions{work: true, yaml: fmt.Sprintf(`
senders:
  - name: fwd
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    forward:
      - name: orders
        url: %s/orders
        timeout: 60s
      - name: ledger
        url: %s/ledger
        timeout: 60s
`, hold.Server(), hold.Server())})
	t.Cleanup(hold.Release) // before River stops
	ev := s.accept("fwd", "race-1", []byte(`{}`))
	testkit.Poll(t, pollTimeout, "both forwards to reach their targets (and be held there)", func() bool { return len(hold.Hits()) == 2 })

	const n = 50
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		answers = make([]redelivery, n)
		errs    = make([]error, n)
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := s.opRequest(http.MethodPost, "/v1/events/"+ev+"/redeliver", "Bearer "+testToken)
			<-start
			r, err := s.send(req)
			if err == nil && r.status != http.StatusAccepted {
				err = fmt.Errorf("status %d: %s", r.status, r.body)
			}
			if err == nil {
				err = json.Unmarshal(r.body, &answers[i])
			}
			errs[i] = err
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("redelivery %d: %v", i, err)
		}
	}

	// The event's jobs: per target the one under way and one new one.
	jobs, err := queuetest.New(s.pool).ForwardJobs(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	perTarget := map[string][]int64{}
	for _, j := range jobs {
		if j.EventID == ev {
			perTarget[j.Target] = append(perTarget[j.Target], j.ID)
		}
	}
	for _, target := range []string{"orders", "ledger"} {
		if got := len(perTarget[target]); got != 2 {
			t.Errorf("after %d concurrent redeliveries the event has %d forward jobs to %s (%v), want 2: the one under way and one redelivery", n, got, target, perTarget[target])
		}
	}

	// The answers: per target one new job after the current one, and
	// already_pending naming that job everywhere else.
	for _, target := range []string{"orders", "ledger"} {
		var queued []int64
		pending := map[int64]int{}
		for _, a := range answers {
			for _, f := range a.Forwards {
				switch {
				case f.Target != target:
				case f.AfterCurrent && !f.AlreadyPending:
					queued = append(queued, f.JobID)
				case f.AlreadyPending && !f.AfterCurrent:
					pending[f.JobID]++
				default:
					t.Errorf("redelivery to %s answered %+v; want after_current or already_pending", target, f)
				}
			}
		}
		if len(queued) != 1 {
			t.Errorf("%d of %d answers queued a new forward to %s (jobs %v), want 1", len(queued), n, target, queued)
			continue
		}
		if pending[queued[0]] != n-1 || len(pending) != 1 {
			t.Errorf("already_pending answers to %s by job: %v; want %d naming job %d", target, pending, n-1, queued[0])
		}
	}
}
