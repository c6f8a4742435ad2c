package forward_test

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/forward"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// TestHugeRetryAfterPausesTheTargetForTheMax: a real target answers the
// first forward 429 with Retry-After: 99999999999999 (which, multiplied
// into nanoseconds, overflowed int64 before and came out as about 55,660
// hours, capped at the backoff's Max), and 200 after. With
// --forward-retry-after-max 2s and a backoff Max of a minute, the whole
// target is paused for 2 s: neither that forward's retry nor three
// forwards delivered meanwhile (once the pause shows in target_breakers,
// as operators see it) reach it sooner, and all of them reach it
// well before the backoff's minute (the bound allows for the snooze's
// jitter, up to half the pause left, and River's polling). The first
// attempt is River's worker's, or the fast path's.
func TestHugeRetryAfterPausesTheTargetForTheMax(t *testing.T) {
	t.Parallel()
	const pause = 2 * time.Second
	// longest is far above what the pause and River's polling take and far
	// below the backoff's Max, which the old cap paused the target for.
	const longest = pause + 20*time.Second
	for _, fast := range []bool{false, true} {
		name := "River's worker"
		if fast {
			name = "the fast path"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var first atomic.Bool
			tg := testkit.NewTarget(t, func(int, *http.Request) testkit.Answer {
				if first.CompareAndSwap(false, true) {
					return testkit.Answer{Status: http.StatusTooManyRequests, Header: http.Header{"Retry-After": {"99999999999999"}}}
				}
				return testkit.Answer{Status: http.StatusOK}
			})
			forwardYAML := fmt.Sprintf("      - name: limited\n        url: %s\n        timeout: 5s\n        max_attempts: 5\n", tg.URL)
			opts := envOpts{Work: true, Backoff: forward.Backoff{Base: 10 * time.Millisecond, Max: time.Minute}, RetryAfterMax: pause}
			var e *env
			if fast {
				e = newFastEnv(t, forwardYAML, opts, fastOptions{})
			} else {
				e = newEnv(t, forwardYAML, opts)
			}
			e.deliver("pause-0", []byte(`{}`), "application/json")
			e.poll("the 429", func() bool { return len(tg.Hits()) > 0 && !tg.Hits()[0].AnswerAt.IsZero() }, func() string { return "" })
			// The gateway pauses the target once it has read the 429, and
			// then shows the pause to operators; on a busy machine that
			// comes a while after the target sent it. The forwards below
			// are accepted after that.
			e.poll("the target's pause shown", func() bool {
				var shown bool
				err := e.pool.QueryRow(t.Context(), `SELECT EXISTS (SELECT FROM target_breakers WHERE target = 'limited' AND paused_until IS NOT NULL)`).Scan(&shown)
				return err == nil && shown
			}, func() string { return "" })
			for i := 1; i <= 3; i++ {
				e.deliver(fmt.Sprintf("pause-%d", i), []byte(`{}`), "application/json")
			}
			for _, j := range e.waitJobs(4) {
				if j.State != "completed" {
					t.Errorf("job %+v: want completed", j)
				}
			}
			hits := tg.Hits()
			if len(hits) != 5 {
				t.Fatalf("the target received %d requests, want 5 (the 429, its retry and three more)", len(hits))
			}
			answered := hits[0].AnswerAt
			for _, h := range hits[1:] {
				if d := h.At.Sub(answered); d < pause || d > longest {
					t.Errorf("forward %s reached the target %v after the 429 with Retry-After: 99999999999999; want from %v (the pause, --forward-retry-after-max) to %v",
						h.Header.Get("X-Hookgate-Delivery-Id"), d, pause, longest)
				}
			}
		})
	}
}
