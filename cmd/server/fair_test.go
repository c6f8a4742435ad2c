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

	"github.com/hookgate/hookgate/internal/testing/pgtest"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// TestHealthyTargetsKeepTheirPaceBesideHungAndSlowOnes: the real binary
// with default settings forwards the events of sender acme to two targets
// that never answer (timeout 5 m, longer than the test), two slow ones
// (slowUntil: 200 after 3 s, and none before the healthy forwards are in)
// and a healthy one, and the events of sender other to another healthy
// target. Every forward to both healthy targets arrives, once, while the
// hung targets still hold their first attempts: no target, and no group of
// them, holds the workers the others need. A forward starved by the bad
// targets would wait for answers that do not come, and the test fails as
// a stall. The time from each delivery's 202 to its forward's arrival is
// logged, not bounded (milliseconds on an idle machine; bounds of 2 s and
// 5 s fail on a busy one): make bench measures it, at a steady rate with
// no bad target beside.
func TestHealthyTargetsKeepTheirPaceBesideHungAndSlowOnes(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	_, dsn := pgtest.NewDB(t)
	hang1, hang2 := testkit.NewTarget(t, block), testkit.NewTarget(t, block)
	healthyIn := make(chan struct{})
	slow1, slow2 := testkit.NewTarget(t, slowUntil(healthyIn)), testkit.NewTarget(t, slowUntil(healthyIn))
	var healthyOnce sync.Once
	releaseSlow := func() { healthyOnce.Do(func() { close(healthyIn) }) }
	t.Cleanup(releaseSlow)
	ok, other := testkit.NewTarget(t, testkit.Always(http.StatusOK)), testkit.NewTarget(t, testkit.Always(http.StatusOK))
	cfg := writeConfig(t, senderConfig+fmt.Sprintf(`    forward:
      - { name: hang1, url: %s, timeout: 5m }
      - { name: hang2, url: %s, timeout: 5m }
      - { name: slow1, url: %s, timeout: 10s }
      - { name: slow2, url: %s, timeout: 10s }
      - { name: ok, url: %s, timeout: 10s }
  - name: other
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    forward:
      - { name: ok, url: %s, timeout: 10s }
`, hang1.URL, hang2.URL, slow1.URL, slow2.URL, ok.URL, other.URL))
	addr := freeAddr(t)
	p := startBinaryWith(t, bin, dsn, addr, cfg)
	c := newClient(t)
	base := "http://" + addr
	waitHealthy(t, c, base, p)

	// 120 deliveries to acme and 60 to other, interleaved; when each was
	// accepted, by event ID.
	const nAcme, nOther = 120, 60
	accepted := map[string]time.Time{}
	var acmeEvents, otherEvents []string
	for i := range nAcme {
		id := fmt.Sprintf("fair-%03d", i)
		r, err := deliver(t.Context(), c, base, id, bodyFor(id))
		if err != nil {
			t.Fatal(err)
		}
		a, err := parseAccepted(r, id)
		if err != nil {
			t.Fatal(err)
		}
		accepted[a.EventID] = time.Now()
		acmeEvents = append(acmeEvents, a.EventID)
		if i%2 == 1 {
			ev := deliverOther(t, c, base, fmt.Sprintf("other-%03d", i/2))
			accepted[ev] = time.Now()
			otherEvents = append(otherEvents, ev)
		}
	}

	missing := func(tg *testkit.Target, events []string) int {
		got := tg.Delivered()
		n := 0
		for _, ev := range events {
			if got[ev] == 0 {
				n++
			}
		}
		return n
	}
	testkit.Poll(t, stallTimeout, "every forward to the healthy targets", func() bool { return missing(ok, acmeEvents)+missing(other, otherEvents) == 0 },
		func() string {
			return fmt.Sprintf("%d of %d forwards to acme's healthy target and %d of %d to other's have not arrived",
				missing(ok, acmeEvents), nAcme, missing(other, otherEvents), nOther)
		})
	checkStillHeld(t, hang1, hang2)
	releaseSlow()
	for _, tc := range []struct {
		name   string
		tg     *testkit.Target
		events []string
	}{{"acme/ok", ok, acmeEvents}, {"other/ok", other, otherEvents}} {
		got := tc.tg.Delivered()
		for _, ev := range tc.events {
			if got[ev] != 1 {
				t.Errorf("%s: event %s answered 2xx %d times, want once", tc.name, ev, got[ev])
			}
		}
		var lat []time.Duration
		for _, h := range tc.tg.Hits() {
			if h.Status == http.StatusOK {
				lat = append(lat, h.At.Sub(accepted[h.Key()]))
			}
		}
		slices.Sort(lat)
		p50, p90, worst := lat[len(lat)/2], lat[len(lat)*9/10], lat[len(lat)-1]
		t.Logf("%s: %d forwards, from 202 to arrival p50 %v, p90 %v, max %v", tc.name, len(lat), p50, p90, worst)
	}
	hung1, _ := hang1.InFlight()
	hung2, _ := hang2.InFlight()
	held1, _ := slow1.InFlight()
	held2, _ := slow2.InFlight()
	t.Logf("forwards held at the end: hang1 %d, hang2 %d, slow1 %d, slow2 %d", hung1, hung2, held1, held2)
}

// slowUntil is a slow target: it answers 200 after 3 s, and not before
// healthyIn is closed (once every healthy forward has arrived), however
// slow the machine. A FIFO in front of the per-target limits would make the
// healthy forwards wait for its answers: they would never arrive, and the
// test would fail as a stall.
func slowUntil(healthyIn <-chan struct{}) testkit.Decide {
	return func(_ int, r *http.Request) testkit.Answer {
		timer := time.NewTimer(3 * time.Second)
		defer timer.Stop()
		select {
		case <-timer.C:
		case <-r.Context().Done():
			return testkit.Answer{Block: true} // the client is gone: no answer
		}
		select {
		case <-healthyIn:
		case <-r.Context().Done():
			return testkit.Answer{Block: true}
		}
		return testkit.Answer{Status: http.StatusOK}
	}
}

// checkStillHeld fails the test unless each of the hung targets holds
// every forward it received (the hits are read first: a forward that
// arrives meanwhile only adds to those held).
func checkStillHeld(t *testing.T, hung ...*testkit.Target) {
	t.Helper()
	for i, h := range hung {
		received := len(h.Hits())
		if held, _ := h.InFlight(); held == 0 || held < received {
			t.Errorf("hung target %d holds %d of the %d forwards it received, want all of them: the healthy forwards must arrive while the hung targets hold theirs", i+1, held, received)
		}
	}
}

// deliverOther delivers id to sender other and returns its event ID.
func deliverOther(t *testing.T, c *http.Client, base, id string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/webhooks/other", bytes.NewReader(bodyFor(id)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Delivery-Id", id)
	r, err := do(c, req)
	if err != nil {
		t.Fatal(err)
	}
	if r.status != http.StatusAccepted {
		t.Fatalf("deliver %s to other: %d %s", id, r.status, r.body)
	}
	var a acceptedBody
	if err := json.Unmarshal(r.body, &a); err != nil {
		t.Fatalf("deliver %s to other: %v", id, err)
	}
	return a.EventID
}
