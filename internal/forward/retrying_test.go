package forward_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/hookgate/hookgate/internal/forward"
	"github.com/hookgate/hookgate/internal/queue"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// checkRetrying reads the forward of event id to target through the
// operators' reads (the JSON API and the console read with them) and checks
// that each says it is retrying, after attempt 1 failed with status: its
// state, its target's counts, and the lists of retrying forwards (it) and
// of pending ones (not it).
func checkRetrying(t *testing.T, e *env, target, id string, status int) {
	t.Helper()
	jobs := queue.NewJobs(e.pool)
	fwds, err := jobs.EventForwards(t.Context(), "acme", uuid.MustParse(id))
	if err != nil {
		t.Fatal(err)
	}
	if len(fwds) != 1 || fwds[0].State != queue.StateRetrying || fwds[0].Attempts != 1 || fwds[0].LastStatus != status {
		t.Errorf("the event's forwards: %+v, want one retrying after attempt 1 (last status %d)", fwds, status)
	}
	counts, err := jobs.CountForwards(t.Context(), "acme", true)
	if err != nil {
		t.Fatal(err)
	}
	if c := counts[target]; c != (queue.Counts{Retrying: 1}) {
		t.Errorf("the target's counts: %+v, want 1 retrying and nothing else", c)
	}
	for state, want := range map[queue.State]int{queue.StateRetrying: 1, queue.StatePending: 0} {
		pg, err := jobs.ListTargetForwards(t.Context(), queue.Filter{Sender: "acme", Target: target, State: state}, 10, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(pg.Forwards) != want {
			t.Errorf("the target's %s forwards: %+v, want %d", state, pg.Forwards, want)
		}
	}
}

// TestRetryingBetweenRetries: a forward whose first attempt got a 500 and
// whose retry is due within River's scheduler interval is left available
// by River's executor (as River does with every retry due that soon), and
// reads retrying until that retry, not pending; then delivered.
func TestRetryingBetweenRetries(t *testing.T) {
	t.Parallel()
	tg := testkit.NewTarget(t, testkit.FailFirst(1, http.StatusInternalServerError))
	// A retry 2 to 4 s after the failed attempt: below River's scheduler
	// interval (5 s), so River leaves the job available.
	e := newEnv(t, fmt.Sprintf("      - name: t1\n        url: %s\n        timeout: 1s\n        max_attempts: 5\n        breaker_threshold: 1000\n", tg.URL),
		envOpts{Work: true, Backoff: forward.Backoff{Base: 4 * time.Second, Max: 4 * time.Second}})
	d := e.deliver("between-retries", []byte(`{}`), "application/json")
	var js []job
	e.poll("the job to wait for its retry after a failed attempt", func() bool {
		js = e.jobs()
		return len(js) == 1 && js[0].Attempt == 1 && len(js[0].Errors) == 1
	}, func() string { return fmt.Sprintf("jobs: %+v", js) })
	if js[0].State != "available" || !js[0].ScheduledAt.After(time.Now()) {
		t.Errorf("job %+v: want available with its retry in the future, as River leaves a retry due within its scheduler's interval", js[0])
	}
	checkRetrying(t, e, "t1", d.eventID, http.StatusInternalServerError)
	if len(tg.HitsFor(d.eventID)) != 1 {
		t.Fatalf("the retry came before the reads; they were not between retries")
	}
	e.poll("the retry to deliver the forward", func() bool {
		fwds, err := queue.NewJobs(e.pool).EventForwards(t.Context(), "acme", uuid.MustParse(d.eventID))
		return err == nil && len(fwds) == 1 && fwds[0].State == queue.StateDelivered
	}, func() string { return fmt.Sprintf("jobs: %+v", e.jobs()) })
}

// TestFastPathFailureReadsRetrying: the fast path's failed first attempt
// is recorded as River's job of a retry due soon (available, its error
// kept) and reads retrying, like River's own; a forward not attempted yet
// reads pending.
func TestFastPathFailureReadsRetrying(t *testing.T) {
	t.Parallel()
	tg := testkit.NewTarget(t, testkit.Always(http.StatusInternalServerError))
	// No River worker: the recorded job stays as the fast path left it.
	e := newFastEnv(t, "      - name: orders\n        url: "+tg.URL+"\n        max_attempts: 5\n", envOpts{}, fastOptions{})
	d := e.deliver("fast-500", []byte(`{}`), "application/json")
	var js []job
	e.poll("the fast path to record its failed attempt", func() bool {
		js = e.jobs()
		return len(js) == 1
	}, func() string { return fmt.Sprintf("jobs: %+v", js) })
	if js[0].State != "available" || js[0].Attempt != 1 || len(js[0].Errors) != 1 {
		t.Errorf("job %+v: want available after attempt 1 with its error", js[0])
	}
	checkRetrying(t, e, "orders", d.eventID, http.StatusInternalServerError)

	// A forward not attempted (relayed into River, no fast path) is pending.
	p := newEnv(t, "      - name: orders\n        url: "+tg.URL+"\n", envOpts{})
	p.runRelay(p.newRelay(0))
	pd := p.deliver("not-attempted", []byte(`{}`), "application/json")
	p.poll("the relay to insert the job", func() bool { return len(p.jobs()) == 1 }, func() string { return fmt.Sprintf("outbox: %v", p.outbox()) })
	jobs := queue.NewJobs(p.pool)
	fwds, err := jobs.EventForwards(t.Context(), "acme", uuid.MustParse(pd.eventID))
	if err != nil {
		t.Fatal(err)
	}
	if len(fwds) != 1 || fwds[0].State != queue.StatePending || fwds[0].Attempts != 0 {
		t.Errorf("the forward not attempted: %+v, want pending at attempt 0", fwds)
	}
	for state, want := range map[queue.State]int{queue.StateRetrying: 0, queue.StatePending: 1} {
		pg, err := jobs.ListTargetForwards(t.Context(), queue.Filter{Sender: "acme", Target: "orders", State: state}, 10, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(pg.Forwards) != want {
			t.Errorf("%s forwards: %+v, want %d", state, pg.Forwards, want)
		}
	}
}
