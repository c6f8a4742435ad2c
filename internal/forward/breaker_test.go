package forward_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/forward"
	"github.com/hookgate/hookgate/internal/store"
	"github.com/hookgate/hookgate/internal/testing/queuetest"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// TestBreakerHoldsForwardsThroughAnOutage: a target that is down (503) for
// longer than its forwards' attempts would last opens its breaker once its
// failure rate has been high for half the window; the forwards then wait
// without using attempts while rounds of probes fail, and once it is back
// every forward is delivered, with attempts far below max_attempts. The
// breaker's state is recorded for the operator API.
func TestBreakerHoldsForwardsThroughAnOutage(t *testing.T) {
	testkit.Slow(t, "a target outage longer than the forwards' attempts")
	t.Parallel()
	tg, up := downTarget(t)
	e := newEnv(t, fmt.Sprintf("      - name: flaky\n        url: %s\n        timeout: 1s\n        max_attempts: 10\n        breaker_threshold: 2\n", tg.URL),
		envOpts{Work: true, BreakerWindow: 400 * time.Millisecond,
			Backoff: forward.Backoff{Base: 100 * time.Millisecond, Max: 400 * time.Millisecond}})
	const n = 6
	for i := range n {
		e.deliver(fmt.Sprintf("out-%d", i), []byte(`{}`), "application/json")
	}
	e.poll("the breaker to open", func() bool { return e.breaker("flaky") == forward.BreakerOpen },
		func() string { return fmt.Sprintf("%d requests", len(tg.Hits())) })
	// Stay down through rounds of failed probes, for longer than the
	// forwards' 10 attempts would last without the breaker (about 3.5s).
	first := tg.Hits()[0].At
	e.poll("probes to fail for longer than the attempts last", func() bool {
		return time.Since(first) > 5*time.Second && len(tg.Hits()) > 2*n
	}, func() string { return fmt.Sprintf("%d requests", len(tg.Hits())) })
	if g := e.gauge("hookgate_forward_breaker_open", map[string]string{"target": "flaky"}); g != 1 {
		t.Errorf("breaker gauge while open = %v, want 1", g)
	}
	up.Store(true)
	js := e.waitJobs(n)
	for _, j := range js {
		if j.State != "completed" {
			t.Errorf("job %d ended %s after the outage, want completed", j.ID, j.State)
		}
		if j.Attempt > 5 {
			t.Errorf("job %d used %d of 10 attempts: the outage burnt its attempts", j.ID, j.Attempt)
		}
	}
	e.poll("the breaker to close", func() bool { return e.breaker("flaky") == forward.BreakerClosed }, func() string { return "" })
	if g := e.gauge("hookgate_forward_breaker_open", map[string]string{"target": "flaky"}); g != 0 {
		t.Errorf("breaker gauge after recovery = %v, want 0", g)
	}
	if w := e.counter("hookgate_forward_waits_total", map[string]string{"target": "flaky", "reason": "breaker"}); w == 0 {
		t.Error("no forward waited for the breaker")
	}
}

// TestRetryAfterPausesTheTarget: a 429 with Retry-After holds back every
// forward to that target, not just the one that got it.
func TestRetryAfterPausesTheTarget(t *testing.T) {
	t.Parallel()
	var first atomic.Bool
	tg := testkit.NewTarget(t, func(int, *http.Request) testkit.Answer {
		if first.CompareAndSwap(false, true) {
			return testkit.Answer{Status: http.StatusTooManyRequests, Header: http.Header{"Retry-After": {"1"}}}
		}
		return testkit.Answer{Status: http.StatusOK}
	})
	e := newEnv(t, fmt.Sprintf("      - name: limited\n        url: %s\n        timeout: 1s\n", tg.URL),
		envOpts{Work: true, Backoff: forward.Backoff{Base: 10 * time.Millisecond, Max: 5 * time.Second}})
	e.deliver("ra-0", []byte(`{}`), "application/json")
	e.poll("the 429", func() bool { return len(tg.Hits()) > 0 }, func() string { return "" })
	// The target saw the request before the worker read its answer: wait
	// until the worker has paused the target (it records the pause for
	// operators after it holds the target's forwards), so that the next
	// deliveries come after the pause, not during the answer's way back.
	e.poll("the pause recorded", func() bool {
		var paused bool
		err := e.pool.QueryRow(t.Context(), `SELECT EXISTS (SELECT FROM target_breakers WHERE target = 'limited' AND paused_until IS NOT NULL)`).Scan(&paused)
		return err == nil && paused
	}, func() string { return "" })
	for i := 1; i <= 3; i++ {
		e.deliver(fmt.Sprintf("ra-%d", i), []byte(`{}`), "application/json")
	}
	e.waitJobs(4)
	hits := tg.Hits()
	pausedUntil := hits[0].At.Add(time.Second)
	for _, h := range hits[1:] {
		if h.At.Before(pausedUntil) {
			t.Errorf("a forward reached the target %s after its 429 with Retry-After: 1", h.At.Sub(hits[0].At))
		}
	}
}

// TestMaxInFlightIsNeverExceeded: a slow target with max_in_flight 2 never
// has more than 2 forwards at once from a worker with many free workers,
// and still receives them all.
func TestMaxInFlightIsNeverExceeded(t *testing.T) {
	t.Parallel()
	var cur, peak, got atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := cur.Add(1)
		defer cur.Add(-1)
		for p := peak.Load(); c > p && !peak.CompareAndSwap(p, c); p = peak.Load() {
		}
		time.Sleep(50 * time.Millisecond) // a slow target, so that forwards overlap
		got.Add(1)
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	e := newEnv(t, fmt.Sprintf("      - name: slow\n        url: %s\n        timeout: 5s\n        max_in_flight: 2\n", srv.URL), envOpts{Work: true, MaxWorkers: 50})
	const n = 12
	for i := range n {
		e.deliver(fmt.Sprintf("mif-%d", i), []byte(`{}`), "application/json")
	}
	e.waitJobs(n)
	if p := peak.Load(); p > 2 {
		t.Errorf("the target had %d forwards at once, max_in_flight is 2", p)
	}
	if g := got.Load(); g != n {
		t.Errorf("the target received %d forwards, want %d", g, n)
	}
}

// TestHangingTargetDoesNotStarveOthers: with few workers, a target that
// never answers holds only its max_in_flight of them; another target of the
// same sender keeps receiving its forwards meanwhile.
func TestHangingTargetDoesNotStarveOthers(t *testing.T) {
	t.Parallel()
	done := make(chan struct{})
	var hangs atomic.Int64
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hangs.Add(1)
		select {
		case <-done:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(hang.Close)
	var mu sync.Mutex
	seen := map[string]bool{}
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.Header.Get("Idempotency-Key")] = true
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(ok.Close)
	e := newEnv(t, fmt.Sprintf(`      - name: hang
        url: %s
        timeout: 60s
        max_in_flight: 2
      - name: ok
        url: %s
        timeout: 5s
`, hang.URL, ok.URL), envOpts{Work: true, MaxWorkers: 4})
	t.Cleanup(func() { close(done) }) // before the workers stop: they wait for their forwards
	const n = 20
	for i := range n {
		e.deliver(fmt.Sprintf("starve-%d", i), []byte(`{}`), "application/json")
	}
	e.poll("the healthy target to receive every forward while the other hangs", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == n
	}, func() string { mu.Lock(); defer mu.Unlock(); return fmt.Sprintf("%d of %d received", len(seen), n) })
	if got := hangs.Load(); got > 2 {
		t.Errorf("the hanging target holds %d forwards at once, max_in_flight is 2", got)
	}
}

// breaker returns the recorded breaker state of the target of sender acme.
func (e *env) breaker(target string) string {
	e.t.Helper()
	bs, err := store.New(e.pool).Breakers(context.Background(), "acme")
	if err != nil {
		e.t.Fatal(err)
	}
	if b, ok := bs[target]; ok {
		return b.State
	}
	return forward.BreakerClosed
}

// downTarget returns a target that answers 503 until up is set, and 200
// from then on.
func downTarget(t *testing.T) (tg *testkit.Target, up *atomic.Bool) {
	t.Helper()
	up = new(atomic.Bool)
	tg = testkit.NewTarget(t, func(int, *http.Request) testkit.Answer {
		if up.Load() {
			return testkit.Answer{Status: http.StatusOK}
		}
		return testkit.Answer{Status: http.StatusServiceUnavailable}
	})
	return tg, up
}

// delivered returns how many of keys received a 2xx from tg.
func delivered(tg *testkit.Target, keys []string) int {
	ok := tg.Delivered()
	n := 0
	for _, k := range keys {
		if ok[k] > 0 {
			n++
		}
	}
	return n
}

// TestFlakyTargetGetsEveryEvent: a target that fails the first two attempts
// of every event (503) and answers the third with 200 fails two of every
// three attempts. With the default breaker and backoff it still receives
// every event, each exactly once with a 200: the breaker opens on a failure
// rate sustained over its window, not on a burst of first attempts, and
// when it opens its probes take forwards already attempted first.
func TestFlakyTargetGetsEveryEvent(t *testing.T) {
	t.Parallel()
	tg := testkit.NewTarget(t, testkit.FailFirst(2, http.StatusServiceUnavailable))
	e := newEnv(t, fmt.Sprintf("      - name: flaky\n        url: %s\n        timeout: 5s\n", tg.URL),
		envOpts{Work: true, Backoff: forward.DefaultBackoff, BreakerProbe: forward.DefaultProbeInterval})
	const n = 100
	keys := make([]string, n)
	for i := range n {
		keys[i] = e.deliver(fmt.Sprintf("flaky-%d", i), []byte(`{}`), "application/json").eventID
	}
	e.poll("every event to reach the flaky target", func() bool { return delivered(tg, keys) == n },
		func() string {
			return fmt.Sprintf("%d of %d delivered, %d requests, breaker %s", delivered(tg, keys), n, len(tg.Hits()), e.breaker("flaky"))
		})
	for _, k := range keys {
		oks := 0
		for _, h := range tg.HitsFor(k) {
			if h.Status == http.StatusOK {
				oks++
			}
		}
		if oks != 1 {
			t.Errorf("event %s got %d answers 200, want 1", k, oks)
		}
	}
}

// TestDeliveryResumesSoonAfterAnOutage: a target is down (503) for long
// enough that its breaker is open and its waiting forwards snooze for many
// seconds. The test moves the snoozes that end after the next round of
// probes an hour ahead: only the breaker's wake, when a probe closes it,
// can bring those forwards back while the test runs. Once the target is
// back every forward arrives, answered 200 once, and the outage did not
// use up their attempts. The time from the target's return to the last
// arrival is logged, not bounded: a bound of 12 s failed on a busy
// machine. make bench has no outage figure.
func TestDeliveryResumesSoonAfterAnOutage(t *testing.T) {
	testkit.Slow(t, "a long target outage (about 30 s)")
	t.Parallel()
	tg, up := downTarget(t)
	e := newEnv(t, fmt.Sprintf("      - name: down\n        url: %s\n        timeout: 5s\n", tg.URL),
		envOpts{Work: true, Backoff: forward.DefaultBackoff, BreakerProbe: forward.DefaultProbeInterval})
	const n = 20
	keys := make([]string, n)
	for i := range n {
		keys[i] = e.deliver(fmt.Sprintf("down-%d", i), []byte(`{}`), "application/json").eventID
	}
	e.poll("the breaker to open", func() bool { return e.breaker("down") == forward.BreakerOpen },
		func() string { return fmt.Sprintf("%d requests", len(tg.Hits())) })
	// Stay down for 20 s, and until at least half the forwards wait an
	// hour. A forward due within 5 s is left alone: the rounds of probes
	// (at most 3 s apart, jittered by half) take theirs from those, and
	// the breaker closes only once a probe is answered.
	opened := time.Now()
	var held int64
	e.poll("the outage to last, with forwards snoozed behind the open breaker", func() bool {
		moved, err := queuetest.New(e.pool).PostponeWaitingForwards(t.Context(), 5*time.Second, 10*time.Minute, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		held += moved
		return time.Since(opened) > 20*time.Second && held >= n/2
	}, func() string { return fmt.Sprintf("%d forwards moved an hour ahead; jobs %+v", held, e.jobs()) })
	up.Store(true)
	back := time.Now()
	e.poll("every forward to reach the target once it is back", func() bool { return delivered(tg, keys) == n },
		func() string {
			return fmt.Sprintf("%d of %d forwards arrived (breaker %s); jobs %+v", delivered(tg, keys), n, e.breaker("down"), e.jobs())
		})
	t.Logf("all %d forwards arrived %v after the target came back (%d had been moved an hour ahead)", n, time.Since(back).Round(time.Millisecond), held)
	for _, k := range keys {
		if oks := tg.Delivered()[k]; oks != 1 {
			t.Errorf("event %s answered 200 %d times, want once", k, oks)
		}
	}
	for _, j := range e.waitJobs(n) {
		if j.State != "completed" || j.Attempt > 6 {
			t.Errorf("job %d: %s after %d attempts, want completed after a few of its 20", j.ID, j.State, j.Attempt)
		}
	}
}

// TestFlakyTargetBehindAnOpenBreakerGetsEveryEvent: a target is down until
// its breaker opens, and then fails the first two requests of every event
// (counting those of the outage) before it answers 200. Its breaker's
// probes, which take forwards already attempted first, succeed and close
// it, and every event arrives, the ones delivered while it was open too.
func TestFlakyTargetBehindAnOpenBreakerGetsEveryEvent(t *testing.T) {
	t.Parallel()
	var down atomic.Bool
	down.Store(true)
	tg := testkit.NewTarget(t, func(n int, _ *http.Request) testkit.Answer {
		if down.Load() || n <= 2 {
			return testkit.Answer{Status: http.StatusServiceUnavailable}
		}
		return testkit.Answer{Status: http.StatusOK}
	})
	e := newEnv(t, fmt.Sprintf("      - name: flaky\n        url: %s\n        timeout: 5s\n", tg.URL),
		envOpts{Work: true, BreakerProbe: forward.DefaultProbeInterval, BreakerWindow: time.Second,
			Backoff: forward.Backoff{Base: 100 * time.Millisecond, Max: time.Second}})
	var keys []string
	for i := range 20 {
		keys = append(keys, e.deliver(fmt.Sprintf("open-%d", i), []byte(`{}`), "application/json").eventID)
	}
	e.poll("the breaker to open", func() bool { return e.breaker("flaky") == forward.BreakerOpen },
		func() string { return fmt.Sprintf("%d requests", len(tg.Hits())) })
	for i := range 20 {
		keys = append(keys, e.deliver(fmt.Sprintf("while-open-%d", i), []byte(`{}`), "application/json").eventID)
	}
	// Forwards wait for the breaker while the target is still down (once
	// it is back, a probe may close the breaker before any forward is
	// held, and the test would not exercise the wait).
	e.poll("a forward to wait for the open breaker", func() bool {
		return e.counter("hookgate_forward_waits_total", map[string]string{"target": "flaky", "reason": "breaker"}) > 0
	}, func() string { return fmt.Sprintf("breaker %s, %d requests", e.breaker("flaky"), len(tg.Hits())) })
	down.Store(false)
	e.poll("every event to reach the flaky target", func() bool { return delivered(tg, keys) == len(keys) },
		func() string {
			return fmt.Sprintf("%d of %d delivered, %d requests, breaker %s", delivered(tg, keys), len(keys), len(tg.Hits()), e.breaker("flaky"))
		})
}
