package console_test

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/hookgate/hookgate/internal/forward"
	"github.com/hookgate/hookgate/internal/store"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// A staged outage in a real browser: a real worker forwards to a real
// target that answers 503 to everything, so its breaker opens and probes
// round after round (two transitions a round) until the opening has long
// left the 50 latest transitions. The target's page then says since when
// the breaker is open, pins the transition that opened it first in the
// history, and draws its charts with labelled axes.
func TestConsoleOutageInBrowser(t *testing.T) {
	testkit.Slow(t, "drives a real browser and a real worker")
	t.Parallel()
	ctx := browser(t)
	tg := testkit.NewTarget(t, func(int, *http.Request) testkit.Answer {
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
        max_attempts: 50
        breaker_threshold: 2
`, tg.URL)
	e := newEnvWith(t, yaml, newOptions(), workOpts{Work: true, BreakerWindow: 200 * time.Millisecond,
		BreakerProbe: 30 * time.Millisecond, BreakerMaxProbe: 60 * time.Millisecond,
		Backoff: forward.Backoff{Base: 20 * time.Millisecond, Max: 50 * time.Millisecond}, FetchPollInterval: 20 * time.Millisecond})
	e.startWorking()
	for i := range 8 {
		e.ingest(fmt.Sprintf("out-%d", i), "application/json", `{}`)
	}
	history := func() []store.BreakerTransition {
		h, err := e.q.BreakerHistory(t.Context(), "orders", "orders-svc", time.Now().Add(-time.Hour), time.Now().Add(time.Hour), 1000, false)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	describe := func() string { return fmt.Sprintf("%d requests, %d transitions", len(tg.Hits()), len(history())) }
	testkit.Poll(t, 60*time.Second, "the breaker to open and probe more than 30 rounds", func() bool {
		return len(history()) > 70
	}, describe)
	if err := e.traffic.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	hist := history()
	opening := hist[0]
	if opening.From != store.BreakerClosed || opening.State != store.BreakerOpen {
		t.Fatalf("the first transition is %s → %s, want closed → open", opening.From, opening.State)
	}

	do := func(what string, steps ...chromedp.Action[chromedp.Void]) { t.Helper(); browse(t, ctx, what, steps...) }
	do("sign in and open the target's page",
		chromedp.Navigate(e.url+"/console/"),
		chromedp.WaitVisible(chromedp.CSS(`#token`)),
		chromedp.SendKeys(chromedp.CSS(`#token`), token),
		chromedp.Submit(chromedp.CSS(`#token`)),
		chromedp.WaitVisible(chromedp.CSS(`section.sender`)),
	)
	// The overview's badge says since when.
	if since := textOf(t, ctx, `table.targets span.since`); !strings.HasPrefix(since, "open since "+opening.At.UTC().Format("2006-01-02 15:04:05.000 UTC")) {
		t.Errorf("the overview's breaker badge says %q, want open since %s", since, opening.At.UTC())
	}
	do("open the target's page",
		chromedp.Navigate(e.url+"/console/senders/orders/targets/orders-svc/failed"),
		chromedp.WaitVisible(chromedp.CSS(`div.timelines figure.timeline`)),
	)
	if since := textOf(t, ctx, `dl.facts span.since`); !strings.HasPrefix(since, "open since "+opening.At.UTC().Format("2006-01-02 15:04:05.000 UTC")) {
		t.Errorf("the target page's breaker badge says %q, want open since %s", since, opening.At.UTC())
	}
	// The forwards held by the open breaker say so: on the target page,
	// and on a delivery's page. Its forward may be running just then (a
	// probe, or a held forward the worker is snoozing again: with these
	// short waits each comes back every few hundred milliseconds), so the
	// deliveries are looked at until one of them is waiting.
	held, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(p => p ? p.dataset.held + ' ' + p.textContent : '')(document.querySelector('p.held-forwards'))`))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^[1-9]\d* [1-9]\d* forwards held: breaker (open|half-open) \(open since ` + regexp.QuoteMeta(opening.At.UTC().Format("2006-01-02 15:04:05.000 UTC")) + `\)`).MatchString(held) {
		t.Errorf("the target page's held forwards: %q, want how many are held by the breaker, open since its opening", held)
	}
	var heldShown []string
	for i := range 8 {
		id := fmt.Sprintf("out-%d", 7-i)
		do("open delivery "+id, chromedp.Navigate(e.url+"/console/senders/orders/deliveries/"+id), chromedp.WaitVisible(chromedp.CSS(`h2`)))
		got, err := chromedp.Run(ctx, chromedp.Evaluate[string](`Array.from(document.querySelectorAll('table.forwards tbody tr')).map(r => r.textContent.replace(/\s+/g, ' ')).join('|')`))
		if err != nil {
			t.Fatal(err)
		}
		heldShown = append(heldShown, id+": "+got)
		if strings.Contains(got, "held: breaker") {
			break
		}
	}
	if last := heldShown[len(heldShown)-1]; !strings.Contains(last, "held: breaker") || !strings.Contains(last, "open since "+opening.At.UTC().Format("2006-01-02 15:04:05.000 UTC")) {
		t.Errorf("the deliveries' forwards: %q, want one held by the breaker, open since its opening", heldShown)
	}
	// The deliveries list says what each delivery's forward is doing: one
	// that failed waits behind the breaker for its retry (retrying), one
	// snoozed before its first attempt is pending, a probe just then is
	// running.
	// Which of them is retrying at a given moment depends on the workers'
	// timing: on a busy machine all may be running for a while. The list
	// is read again until one is.
	var states []string
	retrying := 0
	testkit.Poll(t, time.Minute, "a delivery's forward listed as retrying", func() bool {
		do("open the deliveries list", chromedp.Navigate(e.url+"/console/senders/orders/deliveries"), chromedp.WaitVisible(chromedp.CSS(`table.deliveries`)))
		var err error
		states, err = chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('table.deliveries td.forwards')).map(td => td.textContent)`))
		if err != nil {
			t.Fatal(err)
		}
		retrying = 0
		for _, s := range states {
			if s == "1 retrying" {
				retrying++
			}
		}
		return retrying > 0
	})
	for _, s := range states {
		if s != "1 retrying" && s != "1 running" && s != "1 pending" {
			t.Errorf("a delivery's forwards in the list: %q, want 1 retrying, 1 running or 1 pending", s)
		}
	}
	if len(states) != 8 || retrying == 0 {
		t.Errorf("the deliveries list's forwards: %q, want 8, retrying", states)
	}
	do("back to the target's page",
		chromedp.Navigate(e.url+"/console/senders/orders/targets/orders-svc/failed"),
		chromedp.WaitVisible(chromedp.CSS(`div.timelines figure.timeline`)),
	)
	// The charts have a time axis (UTC, every 10 minutes for the hour,
	// every 4 hours for the day) and their scales' values, as SVG text.
	axes, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('div.charts[data-target=orders-svc] figure.chart')).map(f =>
  f.dataset.span + ' time=' + Array.from(f.querySelectorAll('svg text.axis-time')).map(t => t.textContent).join(',') +
  ' counts=' + f.querySelectorAll('svg text.axis-count').length + ' latency=' + f.querySelectorAll('svg text.axis-latency').length +
  ' caption=' + f.querySelector('figcaption').textContent)`))
	if err != nil {
		t.Fatal(err)
	}
	timeRE := regexp.MustCompile(`(?s)^(hour time=(\d\d:\d0,){5}\d\d:\d0|day time=(\d\d:00|[A-Z][a-z]{2} \d\d?)(,(\d\d:00|[A-Z][a-z]{2} \d\d?)){5}) counts=[12] latency=2 caption=.*failed attempts`)
	if len(axes) != 2 {
		t.Errorf("the target's charts: %q, want two", axes)
	}
	for _, a := range axes {
		if !timeRE.MatchString(a) {
			t.Errorf("chart %q: want a time axis labelled every 10 minutes (hour) or 4 hours (day), the counts' and latencies' values, and failed attempts in the legend", a)
		}
	}
	// The history's first row is the opening, pinned, however many rounds
	// of probes came after it; then the 50 latest.
	rows, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('table.transitions tbody tr')).map(r =>
  (r.dataset.pinned || '') + ' ' + r.dataset.from + '>' + r.dataset.state + ' ' + r.querySelector('td.reason').textContent)`))
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 51 {
		t.Errorf("the history lists %d rows, want the pinned opening and the 50 latest", len(rows))
	}
	if len(rows) == 0 || !strings.HasPrefix(rows[0], "opening closed>open ") || !strings.Contains(rows[0], "503") {
		t.Errorf("the history's first row is %q, want the pinned closed → open with its 503 (rows %q)", rows[0], rows)
	}
	for _, r := range rows[1:] {
		if strings.HasPrefix(r, "opening ") || strings.Contains(r, " closed>open ") {
			t.Errorf("row %q: the opening is listed twice", r)
		}
	}
}
