package console_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/hookgate/hookgate/internal/forward"
	"github.com/hookgate/hookgate/internal/store"
	"github.com/hookgate/hookgate/internal/testing/pgtest"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// startWorking starts e's River client working forwards and a relay of
// the outbox into it, as a worker process does; both stop when the test
// ends (the relay first).
func (e *env) startWorking() {
	e.t.Helper()
	if err := e.rc.Start(context.Background()); err != nil {
		e.t.Fatalf("start River: %v", err)
	}
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := e.rc.Stop(ctx); err != nil {
			e.t.Errorf("stop River: %v", err)
		}
	})
	rc := forward.DefaultRelayConfig()
	rc.Interval = 10 * time.Millisecond
	rc.Pool, rc.Queue, rc.Senders, rc.Log = e.pool, e.rc, e.cfg, testkit.Logger(e.t)
	rc.Distributed = pgtest.Citus()
	relay, err := forward.NewRelay(rc)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		relay.Run(ctx)
	}()
	e.t.Cleanup(func() {
		cancel()
		<-done
	})
}

// The target page in a real browser, with a real target that fails: its
// forwards' attempts get 503 until the breaker has opened and a round of
// probes has failed, then 200, and the breaker closes. The page draws the
// breaker's timeline (closed, open, closed again, with a mark where it
// opened and where it closed), lists the transitions with their reasons,
// newest first, and draws the target's latency from the attempts. With
// HOOKGATE_SCREENSHOTS_DIR set it writes console-target.png there.
func TestConsoleBreakerHistoryInBrowser(t *testing.T) {
	testkit.Slow(t, "drives a real browser and a real worker")
	t.Parallel()
	ctx := browser(t)
	var up atomic.Bool
	tg := testkit.NewTarget(t, func(int, *http.Request) testkit.Answer {
		if up.Load() {
			return testkit.Answer{Status: http.StatusOK}
		}
		return testkit.Answer{Status: http.StatusServiceUnavailable}
	})
	yaml := fmt.Sprintf(`
senders:
  - name: orders
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    forward:
      - name: orders-svc
        url: %s
        timeout: 1s
        max_attempts: 20
        breaker_threshold: 2
`, tg.URL)
	opts := newOptions()
	now := shotClock() // the charts' axes and the breaker's timeline are the same in every run
	opts.Now = now
	e := newEnvWith(t, yaml, opts, workOpts{Work: true, BreakerWindow: 400 * time.Millisecond, BreakerProbe: 200 * time.Millisecond,
		Backoff: forward.Backoff{Base: 50 * time.Millisecond, Max: 200 * time.Millisecond}, FetchPollInterval: 20 * time.Millisecond})
	e.startWorking()
	began := time.Now() // the screenshot's times count from here (steadyText)
	for i := range 5 {
		e.ingest(fmt.Sprintf("brk-%d", i), "application/json", `{}`)
	}
	history := func() []store.BreakerTransition {
		h, err := e.q.BreakerHistory(t.Context(), "orders", "orders-svc", now().Add(-time.Hour), now().Add(time.Hour), 100, false)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	describe := func() string { return fmt.Sprintf("%d requests, history %+v", len(tg.Hits()), history()) }
	testkit.Poll(t, 30*time.Second, "the breaker to open and a round of probes to fail", func() bool {
		for _, tr := range history() {
			if tr.From == store.BreakerHalfOpen && tr.State == store.BreakerOpen {
				return true
			}
		}
		return false
	}, describe)
	up.Store(true)
	testkit.Poll(t, 30*time.Second, "the breaker to close", func() bool {
		bs, err := e.q.Breakers(t.Context(), "orders")
		return err == nil && bs["orders-svc"].State == store.BreakerClosed && len(tg.Delivered()) == 5
	}, describe)
	// The target answers before the worker counts the attempt: flush until
	// the counts hold all 5 delivered attempts.
	testkit.Poll(t, 30*time.Second, "the 5 delivered attempts to be counted", func() bool {
		if err := e.traffic.Flush(t.Context()); err != nil {
			t.Fatal(err)
		}
		buckets, err := e.q.Traffic(t.Context(), "orders", now().Add(-2*time.Hour), now().Add(time.Hour), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		for _, b := range buckets {
			if b.Target == "orders-svc" && b.Kind == store.TrafficDelivered {
				n += b.N
			}
		}
		return n >= 5
	}, describe)
	hist := history()

	do := func(what string, steps ...chromedp.Action[chromedp.Void]) { t.Helper(); browse(t, ctx, what, steps...) }
	do("sign in and open the target's page",
		chromedp.Navigate(e.url+"/console/"),
		chromedp.WaitVisible(chromedp.CSS(`#token`)),
		chromedp.SendKeys(chromedp.CSS(`#token`), token),
		chromedp.Submit(chromedp.CSS(`#token`)),
		chromedp.WaitVisible(chromedp.CSS(`section.sender`)),
		chromedp.Navigate(e.url+"/console/senders/orders/targets/orders-svc/failed"),
		chromedp.WaitVisible(chromedp.CSS(`div.timelines figure.timeline`)),
	)
	if dir := os.Getenv(screenshotsEnv); dir != "" {
		// The target's address and this process's name in the breaker's
		// history differ from run to run and machine to machine.
		host, _ := os.Hostname()
		steady := steadyText(began, map[string]string{
			strings.TrimPrefix(tg.Server(), "http://"): "127.0.0.1:40000",
			host + "/" + strconv.Itoa(os.Getpid()):     "worker-1/4242",
		})
		if err := chromedp.Do(ctx, steady); err != nil {
			t.Fatal(err)
		}
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := writeScreenshot(filepath.Join(dir, "console-target.png"), png); err != nil {
			t.Fatal(err)
		}
	}
	// The timelines: segments in time order with their states, and the
	// marks of the opening and the closing.
	timelines, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('div.timelines[data-target=orders-svc] figure.timeline')).map(f =>
  f.dataset.span + ': ' + Array.from(f.querySelectorAll('svg rect.seg')).sort((a, b) => a.dataset.from.localeCompare(b.dataset.from)).map(r => r.dataset.state).join(',') +
  ' marks ' + Array.from(f.querySelectorAll('svg line.mark')).map(l => l.dataset.state).join(','))`))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(timelines, "\n"), "hour: closed,open,closed marks open,closed\nday: closed,open,closed marks open,closed"; got != want {
		t.Errorf("the breaker's timelines:\n%s\nwant\n%s\n(history %+v)", got, want, hist)
	}
	// The mark of the opening says why, on hover.
	why, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('figure.timeline[data-span=hour] line.mark-open title').textContent`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(why, "closed → open") || !strings.Contains(why, "503") {
		t.Errorf("the opening's mark is titled %q, want the transition and its reason", why)
	}
	// The table: every transition, newest first, with its reason.
	rows, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('table.transitions tbody tr')).map(r =>
  r.dataset.from + '>' + r.dataset.state + ' ' + r.querySelector('td.reason').textContent)`))
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(hist) {
		t.Fatalf("the page lists %d transitions %q, the history holds %d", len(rows), rows, len(hist))
	}
	for i, tr := range hist {
		row := rows[len(rows)-1-i]
		if !strings.HasPrefix(row, tr.From+">"+tr.State+" ") || !strings.Contains(row, tr.Reason) {
			t.Errorf("row %d: %q, want %s → %s: %s", len(rows)-1-i, row, tr.From, tr.State, tr.Reason)
		}
	}
	if !strings.HasPrefix(rows[0], "half-open>closed a probe was answered (delivered)") || !strings.HasPrefix(rows[len(rows)-1], "closed>open ") ||
		!strings.Contains(rows[len(rows)-1], "503") {
		t.Errorf("newest %q, oldest %q: want the probe that closed it first and the opening (with the 503) last", rows[0], rows[len(rows)-1])
	}
	// The breaker is shown closed; the latency chart has the attempts' p50
	// and p95, and counts the failed attempts.
	if state := textOf(t, ctx, `dl.facts span.state`); state != "closed" {
		t.Errorf("the breaker is shown %q, want closed", state)
	}
	lat, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(f => f.dataset.p50Ms + ' ' + f.dataset.p95Ms + ' ' + f.dataset.totalFailed + ' ' + f.dataset.totalDelivered)(document.querySelector('div.charts[data-target=orders-svc] figure[data-span=hour]'))`))
	if err != nil {
		t.Fatal(err)
	}
	var p50, p95 float64
	var failed, delivered int
	if _, err := fmt.Sscanf(lat, "%g %g %d %d", &p50, &p95, &failed, &delivered); err != nil || p50 <= 0 || p95 < p50 || failed < 2 || delivered < 5 {
		t.Errorf("the target's hour chart: p50 p95 failed delivered = %q (%v), want latencies and the attempts", lat, err)
	}
}
