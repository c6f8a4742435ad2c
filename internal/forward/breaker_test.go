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
)

// TestBreakerHoldsForwardsThroughAnOutage: a target that is down (503) for
// longer than its forwards' attempts would last opens its breaker; the
// forwards then wait without using attempts while single probes fail, and
// once it is back every forward is delivered, with attempts far below
// max_attempts. The breaker's state is recorded for the operator API.
func TestBreakerHoldsForwardsThroughAnOutage(t *testing.T) {
	t.Parallel()
	var up atomic.Bool
	tg := newTarget(t, func(int, *http.Request) answer {
		if up.Load() {
			return answer{status: http.StatusOK}
		}
		return answer{status: http.StatusServiceUnavailable}
	})
	e := newEnv(t, fmt.Sprintf("      - name: flaky\n        url: %s\n        timeout: 1s\n        max_attempts: 4\n        breaker_threshold: 2\n", tg.url),
		forward.Options{Work: true})
	const n = 6
	for i := range n {
		e.deliver(fmt.Sprintf("out-%d", i), []byte(`{}`), "application/json")
	}
	e.poll("the breaker to open", func() bool { return e.breaker("flaky") == forward.BreakerOpen },
		func() string { return fmt.Sprint(tg.requests()) })
	// Stay down through several failed probes: far longer than the
	// forwards' 4 attempts with a 10-100ms backoff would last.
	e.poll("probes to fail for longer than the attempts last", func() bool { return len(tg.requests()) > n },
		func() string { return fmt.Sprintf("%d requests", len(tg.requests())) })
	if g := e.gauge("hookgate_forward_breaker_open", map[string]string{"target": "flaky"}); g != 1 {
		t.Errorf("breaker gauge while open = %v, want 1", g)
	}
	up.Store(true)
	js := e.waitJobs(n)
	for _, j := range js {
		if j.State != "completed" {
			t.Errorf("job %d ended %s after the outage, want completed", j.ID, j.State)
		}
		if j.Attempt > 2 {
			t.Errorf("job %d used %d of 4 attempts: the outage burnt its attempts", j.ID, j.Attempt)
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
	tg := newTarget(t, func(int, *http.Request) answer {
		if first.CompareAndSwap(false, true) {
			return answer{status: http.StatusTooManyRequests, header: http.Header{"Retry-After": {"1"}}}
		}
		return answer{status: http.StatusOK}
	})
	e := newEnv(t, fmt.Sprintf("      - name: limited\n        url: %s\n        timeout: 1s\n", tg.url),
		forward.Options{Work: true, Backoff: forward.Backoff{Base: 10 * time.Millisecond, Max: 5 * time.Second}})
	e.deliver("ra-0", []byte(`{}`), "application/json")
	e.poll("the 429", func() bool { return len(tg.requests()) > 0 }, func() string { return "" })
	for i := 1; i <= 3; i++ {
		e.deliver(fmt.Sprintf("ra-%d", i), []byte(`{}`), "application/json")
	}
	e.waitJobs(4)
	hits := tg.requests()
	pausedUntil := hits[0].at.Add(time.Second)
	for _, h := range hits[1:] {
		if h.at.Before(pausedUntil) {
			t.Errorf("a forward reached the target %s after its 429 with Retry-After: 1", h.at.Sub(hits[0].at))
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
	e := newEnv(t, fmt.Sprintf("      - name: slow\n        url: %s\n        timeout: 5s\n        max_in_flight: 2\n", srv.URL), forward.Options{Work: true, MaxWorkers: 50})
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
`, hang.URL, ok.URL), forward.Options{Work: true, MaxWorkers: 4})
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
