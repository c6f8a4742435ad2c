package forward_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/forward"
	"github.com/hookgate/hookgate/internal/store"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// pauseTarget pauses acme's target (until until, none when zero) as the
// operator API does, and waits until e's Pauses hold it.
func (e *env) pauseTarget(target string, until time.Time) store.TargetPause {
	e.t.Helper()
	p, err := store.New(e.pool).PauseTarget(e.t.Context(), store.TargetPause{Sender: "acme", Target: target, Until: until, Reason: "migration", By: "test"})
	if err != nil {
		e.t.Fatal(err)
	}
	e.pauses.Poke()
	e.poll("the pause to be read", func() bool { _, ok := e.pauses.Paused("acme", target, time.Now()); return ok }, nil)
	return p
}

// jobsOf returns the forward jobs of acme's target.
func (e *env) jobsOf(target string) []job {
	e.t.Helper()
	var out []job
	for _, j := range e.jobs() {
		if j.Target == target {
			out = append(out, j)
		}
	}
	return out
}

// TestOperatorPauseHoldsForwardsUntilResumed: an operator pauses one of
// two targets. Deliveries are still accepted; the other target gets its
// forwards from the fast path; the paused one's are not leased (handed to
// the relay), and River's worker snoozes each of them without using an
// attempt (reason operator), the breaker untouched: nothing reaches the
// paused target. Once resumed, every held forward reaches it, once, at
// its first attempt.
func TestOperatorPauseHoldsForwardsUntilResumed(t *testing.T) {
	t.Parallel()
	held, free := testkit.NewTarget(t, testkit.Always(http.StatusOK)), testkit.NewTarget(t, testkit.Always(http.StatusOK))
	e := newFastEnv(t, fmt.Sprintf("      - name: held\n        url: %s\n        max_attempts: 3\n      - name: free\n        url: %s\n", held.URL, free.URL),
		envOpts{Work: true, Pauses: true}, fastOptions{})
	e.pauseTarget("held", time.Time{})
	if g := e.gauge("hookgate_target_paused", map[string]string{"sender": "acme", "target": "held"}); g != 1 {
		t.Errorf("hookgate_target_paused{target=held} = %v, want 1", g)
	}
	const n = 20
	var events []string
	for i := range n {
		events = append(events, e.deliver(fmt.Sprintf("held-%02d", i), []byte(`{}`), "application/json").eventID)
	}
	e.poll("the free target's forwards", func() bool { return len(free.Delivered()) == n }, func() string { return fmt.Sprint(len(free.Delivered())) })
	var js []job
	e.poll("every held forward snoozed by the pause", func() bool {
		js = e.jobsOf("held")
		if len(js) != n {
			return false
		}
		for _, j := range js {
			if j.State != "scheduled" || j.Attempt != 0 || len(j.Errors) != 0 {
				return false
			}
		}
		return true
	}, func() string { return fmt.Sprintf("jobs %+v", js) })
	if hits := held.Hits(); len(hits) != 0 {
		t.Errorf("the paused target received %d requests, want none", len(hits))
	}
	if w := e.counter("hookgate_forward_waits_total", map[string]string{"target": "held", "reason": forward.WaitOperator}); w < n {
		t.Errorf("hookgate_forward_waits_total{target=held,reason=operator} = %v, want at least %d", w, n)
	}
	if got := e.counter("hookgate_forward_fast_path_total", map[string]string{"result": "delivered"}); got != n {
		t.Errorf("hookgate_forward_fast_path_total{result=delivered} = %v, want %d (the free target's only: the paused one's are not leased)", got, n)
	}
	bs, err := store.New(e.pool).Breakers(t.Context(), "acme")
	if err != nil {
		t.Fatal(err)
	}
	if b, ok := bs["held"]; ok || e.gauge("hookgate_forward_breaker_open", map[string]string{"target": "held"}) != 0 {
		t.Errorf("the paused target's breaker: %+v (recorded %v); want untouched", b, ok)
	}

	if _, ok, err := store.New(e.pool).ResumeTarget(t.Context(), "acme", "held"); err != nil || !ok {
		t.Fatalf("resume: %v, %v", ok, err)
	}
	e.pauses.Poke()
	e.poll("every held forward to reach the resumed target", func() bool { return len(held.Delivered()) == n },
		func() string { return fmt.Sprintf("%d of %d; jobs %+v", len(held.Delivered()), n, e.jobsOf("held")) })
	for _, ev := range events {
		if got := held.HitsFor(ev); len(got) != 1 {
			t.Errorf("event %s reached the resumed target %d times, want once", ev, len(got))
		}
	}
	for _, j := range e.waitJobs(2 * n) {
		if j.Target == "held" && (j.State != "completed" || j.Attempt != 1) {
			t.Errorf("job %+v: want completed at its first attempt", j)
		}
	}
	if g := e.gauge("hookgate_target_paused", map[string]string{"sender": "acme", "target": "held"}); g != 0 {
		t.Errorf("hookgate_target_paused{target=held} after the resume = %v, want 0", g)
	}
}

// TestOperatorPauseEndsAtItsUntil: a pause with an end holds the target's
// forwards until then, and releases them without a resume: none reaches
// the target before the end, every one after it; the ended pause is
// deleted.
func TestOperatorPauseEndsAtItsUntil(t *testing.T) {
	t.Parallel()
	tg := testkit.NewTarget(t, testkit.Always(http.StatusOK))
	e := newFastEnv(t, "      - name: held\n        url: "+tg.URL+"\n", envOpts{Work: true, Pauses: true}, fastOptions{})
	until := time.Now().Add(2 * time.Second)
	e.pauseTarget("held", until)
	const n = 5
	for i := range n {
		e.deliver(fmt.Sprintf("until-%d", i), []byte(`{}`), "application/json")
	}
	e.poll("every forward to reach the target after the pause", func() bool { return len(tg.Delivered()) == n },
		func() string { return fmt.Sprintf("%d of %d; jobs %+v", len(tg.Delivered()), n, e.jobs()) })
	for _, h := range tg.Hits() {
		if h.At.Before(until) {
			t.Errorf("forward %s reached the target at %s, before the pause's end %s", h.Key(), h.At.Format(time.StampMilli), until.Format(time.StampMilli))
		}
	}
	e.poll("the ended pause to be deleted", func() bool {
		ps, err := store.New(e.pool).TargetPauses(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return len(ps) == 0
	}, nil)
}
