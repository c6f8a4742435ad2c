package forward

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/config"
)

// TestFairShareLeavesRoomForEveryTarget: targets that hang come one after
// another, each taking every slot it is given and never giving one back.
// However many come, a target that arrives after them still gets forwards
// through, and no target holds more than half the capacity.
func TestFairShareLeavesRoomForEveryTarget(t *testing.T) {
	t.Parallel()
	const capacity = 100
	g := newGuards(nil, capacity, DefaultBreakerConfig(), nil, nil)
	now := time.Now()
	g.now = func() time.Time { return now }
	for i := range 12 {
		gd := g.get("acme", &config.Target{Name: fmt.Sprintf("hang%d", i), BreakerThreshold: 5})
		held := 0
		for g.enter(gd, false).ok {
			held++
		}
		if held > capacity/2 {
			t.Errorf("hanging target %d took %d of %d slots, want at most half", i, held, capacity)
		}
		now = now.Add(100 * time.Millisecond)
		fresh := g.get("other", &config.Target{Name: fmt.Sprintf("ok%d", i), BreakerThreshold: 5})
		a := g.enter(fresh, false)
		if !a.ok {
			t.Fatalf("after %d hanging targets took %d slots, a healthy target got none (%s)", i+1, g.fair.total, a.why)
		}
		g.leave(context.Background(), fresh, a, ResultDelivered, 0, "")
	}
}

// TestFairNeverExceedsCapacity: many goroutines sending to many targets at
// once never have more than the capacity, nor a target more than its
// max_in_flight, under way.
func TestFairNeverExceedsCapacity(t *testing.T) {
	t.Parallel()
	const capacity = 16
	g := newGuards(nil, capacity, DefaultBreakerConfig(), nil, nil)
	targets := make([]*guard, 6)
	for i := range targets {
		targets[i] = g.get("acme", &config.Target{Name: fmt.Sprint("t", i), MaxInFlight: 3, BreakerThreshold: 5})
	}
	var total, peak atomic.Int64
	per := make([]atomic.Int64, len(targets))
	var wg sync.WaitGroup
	for w := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				k := (w + i) % len(targets)
				a := g.enter(targets[k], false)
				if !a.ok {
					continue
				}
				n := total.Add(1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				if c := per[k].Add(1); c > 3 {
					t.Errorf("target %d has %d forwards under way, max_in_flight is 3", k, c)
				}
				per[k].Add(-1)
				total.Add(-1)
				g.leave(context.Background(), targets[k], a, ResultDelivered, 0, "")
			}
		}()
	}
	wg.Wait()
	if p := peak.Load(); p > capacity {
		t.Errorf("%d forwards under way at once, capacity %d", p, capacity)
	}
	if g.fair.total != 0 {
		t.Errorf("%d slots still taken after every forward ended", g.fair.total)
	}
}

// TestBusyWaitFollowsTheTargetsAttempts: a forward that finds its target at
// its limit waits about as long as the target's attempts under way have
// been running: with 10 of them started 2s ago, 2 to 3s, not more.
func TestBusyWaitFollowsTheTargetsAttempts(t *testing.T) {
	t.Parallel()
	g := newGuards(nil, 100, DefaultBreakerConfig(), nil, nil)
	now := time.Now()
	g.now = func() time.Time { return now }
	gd := g.get("acme", &config.Target{Name: "slow", MaxInFlight: 10, BreakerThreshold: 5})
	for range 10 {
		if a := g.enter(gd, false); !a.ok {
			t.Fatalf("enter below max_in_flight = %+v", a)
		}
	}
	now = now.Add(2 * time.Second)
	a := g.enter(gd, false)
	if a.ok || a.why != "busy" {
		t.Fatalf("enter at max_in_flight = %+v, want busy", a)
	}
	if a.wait < 2*time.Second || a.wait > 3*time.Second {
		t.Errorf("a forward of a target whose 10 attempts have run for 2s waits %v, want 2s to 3s", a.wait)
	}
}
