package forward

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/store"
)

// TestGateHoldsAPausedTarget: while an operator's pause of a target holds
// (as its Pauses last read them), the gate admits none of its forwards,
// through Acquire (River's worker, a forward tried before or not) or
// AcquireFirst (the fast path), says why ("operator") and holds it back
// (HeldBack); the forward waits until the pause's end, at most
// maxPausedWait (jittered). Another target flows. The breaker is not
// touched: no transition. Once the end has passed (the gate's clock), the
// target's forwards are admitted, before any read of the pauses.
func TestGateHoldsAPausedTarget(t *testing.T) {
	t.Parallel()
	var clock atomic.Int64
	start := time.Date(2026, 11, 30, 5, 0, 0, 0, time.UTC)
	clock.Store(start.UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	p := &Pauses{}
	pauses := map[[2]string]store.TargetPause{
		{"acme", "held"}:  {Sender: "acme", Target: "held", Since: start.Add(-time.Hour), Until: start.Add(10 * time.Second), Reason: "migration"},
		{"acme", "ended"}: {Sender: "acme", Target: "ended", Since: start.Add(-time.Hour), Until: start.Add(-time.Second)},
		{"acme", "long"}:  {Sender: "acme", Target: "long", Since: start},
	}
	p.snap.Store(&pauses)
	gate, err := NewGate(GateConfig{Capacity: 10, Breakers: DefaultBreakerConfig(), Metrics: NewMetrics(prometheus.NewRegistry()),
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: now, Pauses: p})
	if err != nil {
		t.Fatal(err)
	}
	held, ended, long := &config.Target{Name: "held"}, &config.Target{Name: "ended"}, &config.Target{Name: "long"}

	for _, tried := range []bool{false, true} {
		if _, ok, wait, why := gate.Acquire("acme", held, tried); ok || why != WaitOperator || wait < 10*time.Second || wait > 15*time.Second {
			t.Errorf("Acquire (tried %v) of a paused target: ok %v, wait %s, why %q; want refused for about the 10 s left, why operator", tried, ok, wait, why)
		}
	}
	if _, ok, _, why := gate.AcquireFirst("acme", held); ok || why != WaitOperator {
		t.Errorf("AcquireFirst of a paused target: ok %v, why %q; want refused, why operator", ok, why)
	}
	if h, why := gate.HeldBack("acme", held); !h || why != WaitOperator {
		t.Errorf("HeldBack of a paused target: %v, %q; want held, operator", h, why)
	}
	if _, ok, wait, why := gate.Acquire("acme", long, false); ok || why != WaitOperator || wait < maxPausedWait || wait > maxPausedWait*3/2 {
		t.Errorf("Acquire of a target paused until resumed: ok %v, wait %s, why %q; want refused for about %s", ok, wait, why, maxPausedWait)
	}
	tk, ok, _, _ := gate.Acquire("acme", ended, false)
	if !ok {
		t.Fatal("a target whose pause has ended is not admitted")
	}
	tk.Done(context.Background(), ResultDelivered, 0, "")
	gd := gate.g.get("acme", held)
	if gd.state != BreakerClosed || gd.seq != 0 || gd.running != 0 {
		t.Errorf("the paused target's breaker: %s after %d transitions, %d running; want closed, untouched", gd.state, gd.seq, gd.running)
	}

	clock.Store(start.Add(10 * time.Second).UnixNano()) // the pause's end
	if h, _ := gate.HeldBack("acme", held); h {
		t.Error("HeldBack: still held at the end of the pause")
	}
	tk, ok, _, why := gate.AcquireFirst("acme", held)
	if !ok {
		t.Fatalf("AcquireFirst at the end of the pause: refused (%s)", why)
	}
	tk.Done(context.Background(), ResultDelivered, 0, "")

	var none *Pauses // a gate without pauses holds nothing
	if _, ok := none.Paused("acme", "held", start); ok {
		t.Error("nil Pauses: a pause holds")
	}
}
