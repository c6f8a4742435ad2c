package forward

import (
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/store"
	"github.com/hookgate/hookgate/internal/testing/pgtest"
)

// TestBreakerTransitionsAreRecordedInOrder: the breaker opens, and while
// that transition is still being written (a slow write, made so by a
// trigger), a probe succeeds and closes it. The closed state must be what
// target_breakers and the gauge show in the end, not the older "open".
func TestBreakerTransitionsAreRecordedInOrder(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool, _ := pgtest.NewDB(t)
	// Raw SQL on purpose: the trigger (a slow write of an "open") is the
	// race the test provokes, not a fixture.
	// (On Citus the function is created on every node, in two phases:
	// TwoPhaseFixture.)
	var err error
	pgtest.TwoPhaseFixture(pool, func() {
		_, err = pool.Exec(ctx, `CREATE FUNCTION slow_open() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.state = 'open' THEN PERFORM pg_sleep(0.5); END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER slow_open BEFORE INSERT OR UPDATE ON target_breakers FOR EACH ROW EXECUTE FUNCTION slow_open()`)
	})
	if err != nil {
		t.Fatal(err)
	}
	m := NewMetrics(prometheus.NewRegistry())
	g := newGuards(pool, 10, BreakerConfig{Probe: time.Second, Window: time.Second}, m, slog.New(slog.NewTextHandler(io.Discard, nil)))
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
	g := newGuards(nil, 100, BreakerConfig{Probe: time.Second, Window: time.Second}, m, nil)
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

// TestBreakerHistoryRecordsEveryTransition: a breaker that opens, probes
// in vain, probes again and closes leaves each transition in
// target_breaker_transitions, in order, with its time, its reason and the
// process, and its last state in target_breakers; a transition that could
// not be written (the table refused it) is kept and written with the next.
func TestBreakerHistoryRecordsEveryTransition(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool, _ := pgtest.NewDB(t)
	m := NewMetrics(prometheus.NewRegistry())
	g := newGuards(pool, 10, BreakerConfig{Probe: time.Second, Window: time.Second}, m, slog.New(slog.NewTextHandler(io.Discard, nil)))
	start := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	now := start
	g.now = func() time.Time { return now }
	gd := g.get("acme", &config.Target{Name: "t1", BreakerThreshold: 1})
	attempt := func(tried bool, res Result, errText string) admission {
		t.Helper()
		a := g.enter(gd, tried)
		if !a.ok {
			t.Fatalf("at %s: not admitted: %+v", now.Sub(start), a)
		}
		now = now.Add(time.Millisecond) // the attempt takes a while
		g.leave(ctx, gd, a, res, 0, errText)
		return a
	}
	attempt(false, ResultRetryable, "target answered 503")
	now = now.Add(600 * time.Millisecond)
	attempt(false, ResultRetryable, "target answered 503") // opens
	// The next write fails: the table refuses it for a moment.
	if _, err := pool.Exec(ctx, `ALTER TABLE target_breaker_transitions ADD CONSTRAINT refuse CHECK (state <> 'half-open') NOT VALID`); err != nil {
		t.Fatal(err)
	}
	now = gd.nextProbe
	if a := attempt(true, ResultRetryable, "connection refused"); !a.probe { // a round of probes fails
		t.Fatalf("the first attempt after the probe interval was not a probe: %+v", a)
	}
	if _, err := pool.Exec(ctx, `ALTER TABLE target_breaker_transitions DROP CONSTRAINT refuse`); err != nil {
		t.Fatal(err)
	}
	now = gd.nextProbe
	attempt(true, ResultDelivered, "") // half-open, then closed

	hist, err := store.New(pool).BreakerHistory(ctx, "acme", "t1", start.Add(-time.Hour), now.Add(time.Hour), 100, false)
	if err != nil {
		t.Fatal(err)
	}
	want := [][2]string{{"closed", "open"}, {"open", "half-open"}, {"half-open", "open"}, {"open", "half-open"}, {"half-open", "closed"}}
	if len(hist) != len(want) {
		t.Fatalf("history: %+v, want %d transitions %v", hist, len(want), want)
	}
	for i, tr := range hist {
		if tr.From != want[i][0] || tr.State != want[i][1] {
			t.Errorf("transition %d: %s → %s, want %s → %s", i, tr.From, tr.State, want[i][0], want[i][1])
		}
		if tr.Process != g.process || tr.Reason == "" {
			t.Errorf("transition %d: process %q, reason %q; want %q and a reason", i, tr.Process, tr.Reason, g.process)
		}
		if i > 0 && (tr.At.Before(hist[i-1].At) || tr.Seq <= hist[i-1].Seq) {
			t.Errorf("transition %d (%s, seq %d) is not after %d (%s, seq %d)", i, tr.At, tr.Seq, i-1, hist[i-1].At, hist[i-1].Seq)
		}
	}
	if !strings.Contains(hist[0].Reason, "2 of 2 attempts failed") || !strings.Contains(hist[0].Reason, "503") {
		t.Errorf("the opening's reason %q does not say why", hist[0].Reason)
	}
	if !strings.Contains(hist[2].Reason, "connection refused") {
		t.Errorf("the failed round's reason %q does not name its failure", hist[2].Reason)
	}
	if want := start.Add(602 * time.Millisecond); !hist[0].At.Equal(want) {
		t.Errorf("opened at %s, want %s", hist[0].At, want)
	}
	// Only the opening and the closing; and from the middle, the state
	// the breaker was in comes first.
	oc, err := store.New(pool).BreakerHistory(ctx, "acme", "t1", start.Add(-time.Hour), now.Add(time.Hour), 100, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(oc) != 2 || oc[0].State != "open" || oc[1].State != "closed" {
		t.Errorf("open/close history: %+v, want the opening and the closing", oc)
	}
	mid, err := store.New(pool).BreakerHistory(ctx, "acme", "t1", hist[2].At, now.Add(time.Hour), 100, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(mid) != 4 || mid[0] != hist[1] {
		t.Errorf("history from the failed round: %+v, want the transition before it and the last 3", mid)
	}
	bs, err := store.New(pool).Breakers(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if got := bs["t1"].State; got != BreakerClosed {
		t.Errorf("target_breakers shows %q, want closed", got)
	}
}
