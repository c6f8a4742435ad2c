package forward

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/hookgate/hookgate/internal/testing/testkit"
	"github.com/prometheus/client_golang/prometheus"
)

// TestGateFollowsReloadedTargets: a target's max_in_flight and
// breaker_threshold changed by a reload apply from its next admission,
// with the forwards under way untouched; a guard made after the reload by
// an attempt that began with the old configuration takes the new one's
// settings; a target the reload removed keeps its guard as it was.
func TestGateFollowsReloadedTargets(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	from := testkit.ParseConfig(t, `senders:
  - name: acme
    preset: generic
    delivery_id: { header: X-Id }
    forward:
      - { name: t1, url: http://t1.internal/, max_in_flight: 1, breaker_threshold: 1 }
      - { name: t2, url: http://t2.internal/, max_in_flight: 1 }
      - { name: gone, url: http://gone.internal/, max_in_flight: 1 }
`)
	to := testkit.ParseConfig(t, `senders:
  - name: acme
    preset: generic
    delivery_id: { header: X-Id }
    forward:
      - { name: t1, url: http://t1.internal/, max_in_flight: 2, breaker_threshold: 7 }
      - { name: t2, url: http://t2.internal/, max_in_flight: 3 }
`)
	gate, err := NewGate(GateConfig{Capacity: 100, Breakers: DefaultBreakerConfig(), Metrics: NewMetrics(prometheus.NewRegistry()),
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t1, _ := from.Target("acme", "t1")
	gone, _ := from.Target("acme", "gone")
	first, ok, _, _ := gate.Acquire("acme", t1, false)
	if !ok {
		t.Fatal("the first forward to t1 was not admitted")
	}
	if _, ok, _, why := gate.Acquire("acme", t1, false); ok || why != "busy" {
		t.Fatalf("a second forward to t1 at max_in_flight 1: admitted %v (%s), want busy", ok, why)
	}
	goneTk, ok, _, _ := gate.Acquire("acme", gone, false)
	if !ok {
		t.Fatal("the forward to gone was not admitted")
	}

	gate.Reconfigure(to)
	second, ok, _, why := gate.Acquire("acme", t1, false) // an attempt of the old configuration
	if !ok {
		t.Fatalf("a second forward to t1 after max_in_flight 2 was reloaded: refused (%s)", why)
	}
	if _, ok, _, _ := gate.Acquire("acme", t1, false); ok {
		t.Error("a third forward to t1 admitted at max_in_flight 2")
	}
	gd := gate.g.get("acme", t1)
	gd.mu.Lock()
	threshold := gd.threshold
	gd.mu.Unlock()
	if threshold != 7 {
		t.Errorf("t1's breaker threshold after the reload: %d, want 7", threshold)
	}
	// t2 is first seen after the reload, by an attempt of the old
	// configuration: the guard takes the reloaded max_in_flight.
	oldT2, _ := from.Target("acme", "t2")
	for i := range 3 {
		if _, ok, _, why := gate.Acquire("acme", oldT2, false); !ok {
			t.Fatalf("forward %d to t2 at the reloaded max_in_flight 3: refused (%s)", i+1, why)
		}
	}
	if _, ok, _, _ := gate.Acquire("acme", gone, false); ok {
		t.Error("the removed target's guard changed: a second forward admitted at max_in_flight 1")
	}
	for _, tk := range []Ticket{first, second, goneTk} {
		tk.Done(ctx, ResultDelivered, 0, "")
	}
}
