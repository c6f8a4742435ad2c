package console_test

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestConsoleForwardsHeldByAPause: while a pause a worker recorded for a
// target (its 429 or 503 with Retry-After) has not ended, the target's
// unfinished forwards say they are held by it, and until when, on the
// delivery's page and, counted, on the target's page, though its breaker is
// closed; once it has ended they say nothing of it.
func TestConsoleForwardsHeldByAPause(t *testing.T) {
	t.Parallel()
	var clock atomic.Int64
	clock.Store(time.Now().UnixMicro())
	opts := newOptions()
	opts.Now = func() time.Time { return time.UnixMicro(clock.Load()) }
	e := newEnv(t, opts)
	e.ingest("p-1", "application/json", `{}`) // its forward waits in the outbox: pending
	until := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
	if err := e.q.RecordPause(t.Context(), "orders", "orders-svc", until, "target answered 503, Retry-After 1h0m0s"); err != nil {
		t.Fatal(err)
	}
	c := e.client()
	e.signIn(c)
	held := "held: paused until " + until.Format("2006-01-02 15:04:05.000 UTC") + " (target answered 503, Retry-After 1h0m0s)"
	if p := e.do(c, http.MethodGet, "/console/senders/orders/deliveries/p-1", nil, nil); !strings.Contains(p.body, `<span class="held">`+held+`</span>`) {
		t.Errorf("the delivery's page does not say %q: %.3000s", held, p.body)
	}
	target := e.do(c, http.MethodGet, "/console/senders/orders/targets/orders-svc/failed", nil, nil)
	if !strings.Contains(target.body, `data-held="1"><span class="held">1 forwards `+held+`</span>`) || !strings.Contains(target.body, "they go once it ends") {
		t.Errorf("the target's page does not count the held forward: %.4000s", target.body)
	}
	if !strings.Contains(target.body, "closed") {
		t.Errorf("the target's page does not show the breaker closed")
	}

	clock.Store(until.Add(time.Second).UnixMicro()) // the pause has ended
	if p := e.do(c, http.MethodGet, "/console/senders/orders/deliveries/p-1", nil, nil); strings.Contains(p.body, "held:") {
		t.Errorf("after the pause the delivery's page still says held: %.3000s", p.body)
	}
	if p := e.do(c, http.MethodGet, "/console/senders/orders/targets/orders-svc/failed", nil, nil); strings.Contains(p.body, "held-forwards") {
		t.Errorf("after the pause the target's page still counts held forwards")
	}
}
