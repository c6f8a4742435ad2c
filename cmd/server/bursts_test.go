package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/hookgate/hookgate/internal/testing/pgtest"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// TestHealthyTargetsUnderConcurrentBursts is the burst, sent as
// users send it, concurrently, to the real binary with default settings:
// sender acme forwards to two targets that never answer (timeout 5 m,
// longer than the test) beside a healthy one; sender slow to two slow
// targets (slowUntil: 200 after 3 s, and none before the healthy forwards
// are in), receiving 150 deliveries at a concurrency of 16; and, once that
// burst is under way, sender other receives 60 deliveries (concurrency 16)
// for its healthy target, while acme receives 60 more. Every forward to
// the two healthy targets arrives, once, while the hung targets still hold
// theirs: in the fast path (the default), and with the fast path off,
// through the relay and River's workers alone. A FIFO in front of
// per-target limits fails this: the healthy forwards wait behind the slow
// targets' hundreds, for answers that do not come, and the test fails as a
// stall. The time from each delivery's 202 to its forward's arrival is
// logged, not bounded: a bound of 2 s fails on a busy machine. make bench
// measures that time at a steady rate, with no bad target beside.
func TestHealthyTargetsUnderConcurrentBursts(t *testing.T) {
	testkit.Slow(t, "a burst of hundreds of deliveries to hung and slow targets")
	t.Parallel()
	bin := buildBinary(t)
	for _, tc := range []struct {
		name  string
		flags []string
	}{
		{"fast path", nil},
		{"River only", []string{"--forward-fast-path=false"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			burstsScenario(t, bin, tc.flags)
		})
	}
}

func burstsScenario(t *testing.T, bin string, flags []string) {
	_, dsn := pgtest.NewDB(t)
	hang1, hang2 := testkit.NewTarget(t, block), testkit.NewTarget(t, block)
	healthyIn := make(chan struct{})
	slow1, slow2 := testkit.NewTarget(t, slowUntil(healthyIn)), testkit.NewTarget(t, slowUntil(healthyIn))
	var healthyOnce sync.Once
	releaseSlow := func() { healthyOnce.Do(func() { close(healthyIn) }) }
	t.Cleanup(releaseSlow)
	acmeOK, otherOK := testkit.NewTarget(t, testkit.Always(http.StatusOK)), testkit.NewTarget(t, testkit.Always(http.StatusOK))
	cfg := writeConfig(t, fmt.Sprintf(`senders:
  - name: acme
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    forward:
      - { name: hang1, url: %s, timeout: 5m }
      - { name: hang2, url: %s, timeout: 5m }
      - { name: ok, url: %s }
  - name: slow
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    forward:
      - { name: slow1, url: %s }
      - { name: slow2, url: %s }
  - name: other
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    forward:
      - { name: ok, url: %s }
`, hang1.URL, hang2.URL, acmeOK.URL, slow1.URL, slow2.URL, otherOK.URL))
	addr := freeAddr(t)
	p := startBinaryWith(t, bin, dsn, addr, cfg, flags...)
	c := newClient(t)
	base := "http://" + addr
	waitHealthy(t, c, base, p)

	var (
		mu       sync.Mutex
		accepted = map[string]time.Time{} // by event ID: when its 202 arrived
		events   = map[string][]string{}  // by sender
	)
	// burst delivers n deliveries to sender (IDs prefix-000 …), conc at a
	// time, and calls started once half of them were accepted.
	burst := func(sender, prefix string, n, conc int, started func()) error {
		var g errgroup.Group
		g.SetLimit(conc)
		var once sync.Once
		for i := range n {
			g.Go(func() error {
				id := fmt.Sprintf("%s-%03d", prefix, i)
				ev, err := deliverTo(c, base, sender, id)
				if err != nil {
					return err
				}
				mu.Lock()
				accepted[ev] = time.Now()
				events[sender] = append(events[sender], ev)
				half := len(events[sender]) >= n/2 // of this burst's or an earlier one
				mu.Unlock()
				if half && started != nil {
					once.Do(started)
				}
				return nil
			})
		}
		return g.Wait()
	}
	var all errgroup.Group
	acmeFirst := make(chan struct{})
	slowUnderWay := make(chan struct{})
	all.Go(func() error { return burst("acme", "acme1", 60, 16, func() { close(acmeFirst) }) })
	all.Go(func() error {
		<-acmeFirst // the hung targets hold their forwards already
		return burst("slow", "slow", 150, 16, func() { close(slowUnderWay) })
	})
	all.Go(func() error {
		<-slowUnderWay
		var both errgroup.Group
		both.Go(func() error { return burst("other", "other", 60, 16, nil) })
		both.Go(func() error { return burst("acme", "acme2", 60, 16, nil) })
		return both.Wait()
	})
	if err := all.Wait(); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name   string
		tg     *testkit.Target
		sender string
	}{{"acme/ok", acmeOK, "acme"}, {"other/ok", otherOK, "other"}} {
		mu.Lock()
		want := slices.Clone(events[tc.sender])
		mu.Unlock()
		testkit.Poll(t, stallTimeout, tc.name+" to receive every forward", func() bool {
			got := tc.tg.Delivered()
			for _, ev := range want {
				if got[ev] == 0 {
					return false
				}
			}
			return true
		})
		got := tc.tg.Delivered()
		for _, ev := range want {
			if got[ev] != 1 {
				t.Errorf("%s: event %s answered 2xx %d times, want once", tc.name, ev, got[ev])
			}
		}
		var lat []time.Duration
		for _, h := range tc.tg.Hits() {
			if h.Status != http.StatusOK {
				continue
			}
			mu.Lock()
			at := accepted[h.Key()]
			mu.Unlock()
			lat = append(lat, h.At.Sub(at))
		}
		slices.Sort(lat)
		p50, p99, worst := lat[len(lat)/2], lat[len(lat)*99/100], lat[len(lat)-1]
		t.Logf("%s: %d forwards, from 202 to arrival p50 %v, p99 %v, max %v", tc.name, len(lat), p50, p99, worst)
	}
	checkStillHeld(t, hang1, hang2)
	releaseSlow()
	h1, _ := hang1.InFlight()
	h2, _ := hang2.InFlight()
	s1, _ := slow1.InFlight()
	s2, _ := slow2.InFlight()
	t.Logf("held at the end: hang1 %d, hang2 %d, slow1 %d, slow2 %d; slow targets answered %d and %d", h1, h2, s1, s2, len(slow1.Delivered()), len(slow2.Delivered()))
}

// deliverTo delivers id to sender (delivery ID in X-Delivery-Id) and
// returns its event ID; an error unless it was accepted (202) or replayed.
func deliverTo(c *http.Client, base, sender, id string) (string, error) {
	req, err := http.NewRequest(http.MethodPost, base+"/webhooks/"+sender, bytes.NewReader(bodyFor(id)))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Delivery-Id", id)
	r, err := do(c, req)
	if err != nil {
		return "", err
	}
	if r.status != http.StatusAccepted {
		return "", fmt.Errorf("deliver %s to %s: %d %s", id, sender, r.status, r.body)
	}
	var a acceptedBody
	if err := json.Unmarshal(r.body, &a); err != nil {
		return "", fmt.Errorf("deliver %s to %s: %w", id, sender, err)
	}
	return a.EventID, nil
}
