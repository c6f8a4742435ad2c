package forward

import (
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/pgtest"
	"github.com/hookgate/hookgate/internal/store"
)

// TestBreakerTransitionsAreRecordedInOrder: the breaker opens, and while
// that transition is still being written (a slow write, made so by a
// trigger), a probe succeeds and closes it. The closed state must be what
// target_breakers and the gauge show in the end, not the older "open".
func TestBreakerTransitionsAreRecordedInOrder(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool, _ := pgtest.NewDB(t)
	if _, err := pool.Exec(ctx, `CREATE FUNCTION slow_open() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.state = 'open' THEN PERFORM pg_sleep(0.5); END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER slow_open BEFORE INSERT OR UPDATE ON target_breakers FOR EACH ROW EXECUTE FUNCTION slow_open()`); err != nil {
		t.Fatal(err)
	}
	m := NewMetrics(prometheus.NewRegistry())
	g := newGuards(pool, 10, BreakerTiming{Probe: time.Second, Window: time.Second}, m, slog.New(slog.NewTextHandler(io.Discard, nil)))
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	g.now = func() time.Time { return time.Unix(0, clock.Load()) }
	gd := g.get("acme", &config.Target{Name: "t1", BreakerThreshold: 1})

	// Failures for half the window open the breaker; the write is slow.
	a := g.enter(gd, false)
	g.leave(ctx, gd, a, ResultRetryable, 0, "target answered 503")
	clock.Add(int64(600 * time.Millisecond))
	opened := make(chan struct{})
	go func() {
		defer close(opened)
		a := g.enter(gd, false)
		g.leave(ctx, gd, a, ResultRetryable, 0, "target answered 503")
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		gd.mu.Lock()
		st := gd.state
		gd.mu.Unlock()
		if st == BreakerOpen {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the breaker did not open")
		}
		time.Sleep(time.Millisecond)
	}
	// The probe is due and succeeds: the breaker closes.
	clock.Add(int64(time.Hour))
	p := g.enter(gd, true)
	if !p.ok || !p.probe {
		t.Fatalf("enter after the probe interval = %+v, want the probe", p)
	}
	g.leave(ctx, gd, p, ResultDelivered, 0, "")
	<-opened

	bs, err := store.New(pool).Breakers(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if got := bs["t1"].State; got != BreakerClosed {
		t.Errorf("target_breakers shows %q after the breaker opened and then closed, want %q", got, BreakerClosed)
	}
	var gauge dto.Metric
	if err := m.breakerOpen.WithLabelValues("acme", "t1").Write(&gauge); err != nil {
		t.Fatal(err)
	}
	if v := gauge.GetGauge().GetValue(); v != 0 {
		t.Errorf("hookgate_forward_breaker_open = %v after the breaker closed, want 0", v)
	}
}

// TestBreakerProbesPreferAttemptedForwards: an open breaker's round of
// probes lets several forwards through, those already attempted first (a
// forward never attempted waits while the round is young), holds the rest
// back, and closes on the first probe that gets an answer. A round whose
// probes all fail waits longer for the next one, never more than 3s.
func TestBreakerProbesPreferAttemptedForwards(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	m := NewMetrics(prometheus.NewRegistry())
	g := newGuards(nil, 100, BreakerTiming{Probe: time.Second, Window: time.Second}, m, nil)
	now := time.Now()
	g.now = func() time.Time { return now }
	gd := g.get("acme", &config.Target{Name: "t1", BreakerThreshold: 1})
	fail := func() {
		a := g.enter(gd, false)
		if !a.ok {
			t.Fatalf("enter while closed = %+v", a)
		}
		g.leave(ctx, gd, a, ResultRetryable, 0, "target answered 503")
	}
	fail()
	now = now.Add(600 * time.Millisecond)
	fail()
	if gd.state != BreakerOpen {
		t.Fatalf("after failures for half the window the breaker is %s, want open", gd.state)
	}
	if a := g.enter(gd, true); a.ok {
		t.Fatal("a forward went through an open breaker before its probe was due")
	}

	for round, wait := range []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 3 * time.Second} {
		now = gd.nextProbe
		if got := gd.probeWait; got != wait {
			t.Errorf("round %d: probes %v apart, want %v", round, got, wait)
		}
		if a := g.enter(gd, false); a.ok {
			t.Fatalf("round %d: a forward never attempted probed while attempted ones may come", round)
		}
		var probes []admission
		for range 5 {
			if a := g.enter(gd, true); a.ok {
				if !a.probe {
					t.Fatalf("round %d: admitted %+v, want a probe", round, a)
				}
				probes = append(probes, a)
			}
		}
		if len(probes) != breakerProbes {
			t.Fatalf("round %d: %d probes went through, want %d", round, len(probes), breakerProbes)
		}
		for _, p := range probes {
			if snooze := g.leave(ctx, gd, p, ResultRetryable, 0, "target answered 503"); snooze <= 0 {
				t.Errorf("round %d: a failed probe was not snoozed", round)
			}
		}
		if gd.state != BreakerOpen {
			t.Fatalf("round %d: after its probes failed the breaker is %s, want open", round, gd.state)
		}
	}

	// Late in a round with no attempted forward coming, a new one probes;
	// its success closes the breaker.
	now = gd.nextProbe.Add(gd.probeWait)
	a := g.enter(gd, false)
	if !a.ok || !a.probe {
		t.Fatalf("a new forward late in the round = %+v, want a probe", a)
	}
	g.leave(ctx, gd, a, ResultDelivered, 0, "")
	if gd.state != BreakerClosed {
		t.Fatalf("after a probe succeeded the breaker is %s, want closed", gd.state)
	}
	if a := g.enter(gd, false); !a.ok {
		t.Fatalf("after the breaker closed a forward was held back: %+v", a)
	}
}
