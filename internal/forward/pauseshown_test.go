package forward_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/store"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// TestPauseIsRecordedForOperators: a target answering 503 with
// Retry-After: 30 pauses it in the worker process, and the pause is
// recorded beside its breaker (closed) for operators: until about 30 s
// after the answer, with the answer as its reason; a later answer of the
// same pause does not move it back.
func TestPauseIsRecordedForOperators(t *testing.T) {
	t.Parallel()
	tg := testkit.NewTarget(t, func(int, *http.Request) testkit.Answer {
		return testkit.Answer{Status: http.StatusServiceUnavailable, Header: http.Header{"Retry-After": {"30"}}}
	})
	e := newEnv(t, fmt.Sprintf("      - name: paused\n        url: %s\n        timeout: 1s\n        max_attempts: 5\n        breaker_threshold: 1000\n", tg.URL),
		envOpts{Work: true})
	before := time.Now()
	e.deliver("pause-shown", []byte(`{}`), "application/json")
	var b store.BreakerState
	e.poll("the pause to be recorded", func() bool {
		bs, err := store.New(e.pool).Breakers(t.Context(), "acme")
		if err != nil {
			t.Fatal(err)
		}
		b = bs["paused"]
		return !b.PausedUntil.IsZero()
	}, func() string { return fmt.Sprintf("breaker %+v, %d requests", b, len(tg.Hits())) })
	if b.State != store.BreakerClosed || b.PausedUntil.Before(before.Add(30*time.Second)) || b.PausedUntil.After(time.Now().Add(31*time.Second)) ||
		!strings.Contains(b.PauseReason, "503") || !strings.Contains(b.PauseReason, "Retry-After") {
		t.Errorf("breaker %+v: want closed, paused until 30 s after the answer, the reason naming the 503 and its Retry-After", b)
	}
	// An earlier end is not recorded over a later one.
	if err := store.New(e.pool).RecordPause(t.Context(), "acme", "paused", b.PausedUntil.Add(-10*time.Second), "target answered 429, Retry-After 20s"); err != nil {
		t.Fatal(err)
	}
	bs, err := store.New(e.pool).Breakers(t.Context(), "acme")
	if err != nil {
		t.Fatal(err)
	}
	if got := bs["paused"]; !got.PausedUntil.Equal(b.PausedUntil) || got.PauseReason != b.PauseReason {
		t.Errorf("after an earlier pause: %+v, want the later one kept (%s)", got, b.PausedUntil)
	}
}
