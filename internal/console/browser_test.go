package console_test

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/hookgate/hookgate/internal/queue"
	"github.com/hookgate/hookgate/internal/store"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// screenshotsEnv names the directory the browser test writes its
// screenshots to (make screenshots sets it to docs/); none when unset.
const screenshotsEnv = "HOOKGATE_SCREENSHOTS_DIR"

// browser starts Debian's headless chromium with a fresh profile and
// returns a chromedp context on it, closed when the test ends. It skips
// the test, saying so, when chromium is not installed, and under -short
// (a browser suite is not in the fast tier).
func browser(t *testing.T) context.Context {
	t.Helper()
	testkit.Slow(t, "drives a real browser")
	bin, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("SKIPPED: Debian's chromium is not installed, so the console is not tested in a browser; install it with apt-get install chromium (.ci/run does, as root)")
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(bin),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.WithoutCancel(t.Context()), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancelCtx()
		cancelAlloc()
	})
	if err := chromedp.Do(ctx); err != nil { // starts the browser, without a timeout (chromedp.Run)
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// browse runs steps in the browser ctx, bounded by 30s, and fails the
// test with what it was doing and the page's HTML when they fail.
func browse(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(sctx, steps...); err != nil {
		html, _ := chromedp.Run(ctx, chromedp.OuterHTML(chromedp.CSS("html")))
		t.Fatalf("%s: %v; page: %.2000s", what, err, html)
	}
}

// textOf returns the text of the element sel of the browser's page.
func textOf(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("text of %s: %v", sel, err)
	}
	return v
}

// The console in a real browser: sign in, find a delivery by its ID, open
// it, see its failed forward, click Redeliver and see a forward pending
// again; a body with a script shows as text and runs nothing; a POST
// without the CSRF token is refused. With HOOKGATE_SCREENSHOTS_DIR set it
// writes console-overview.png and console-delivery.png there.
func TestConsoleInBrowser(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	began := time.Now() // the screenshots' times count from here (steadyText)
	opts := newOptions()
	opts.Now = shotClock() // the charts' axes are the same in every run
	e := newEnv(t, opts)
	e.ingestTyped("ord_1001", "order.created", "application/json", `{"order":1001,"customer":"ada@example.com","items":[{"sku":"BK-42","qty":2}],"total":"31.90"}`)
	e.ingestTyped("ord_1002", "order.paid", "application/json", `{"order":1002,"total":"12.00"}`)
	e.ingest("xss-1", "text/html", `<script>document.title='pwned'</script><img src=x onerror="document.title='pwned'">`)
	e.failForwards("ord_1001", "target answered 503 Service Unavailable")
	// The failed forward's attempts, as its worker would have recorded
	// them, at fixed times: the screenshot shows them.
	at := time.Date(2026, 11, 29, 19, 36, 39, 480_000_000, time.UTC)
	for i, a := range []store.Attempt{
		{Cause: store.CauseFirst, Attempt: 1, Took: 41 * time.Millisecond},
		{Cause: store.CauseRetry, Attempt: 2, Took: 38 * time.Millisecond, StartedAt: at.Add(2 * time.Second)},
		{Cause: store.CauseRetry, Attempt: 3, Took: 40 * time.Millisecond, StartedAt: at.Add(6 * time.Second)},
	} {
		a.Sender, a.EventID, a.Target, a.Status = "orders", e.eventOf("ord_1001"), "orders-svc", http.StatusServiceUnavailable
		if a.StartedAt.IsZero() {
			a.StartedAt = at
		}
		a.Outcome, a.Error = "retry", "target answered 503 Service Unavailable"
		if i == 2 {
			a.Outcome = "failed"
		}
		a.Header = map[string][]string{"Content-Type": {"text/plain; charset=utf-8"}, "Retry-After": {"2"}}
		a.Body = []byte("orders-svc is restarting\n")
		if err := store.New(e.pool).RecordAttempt(t.Context(), a, 20); err != nil {
			t.Fatal(err)
		}
	}
	// For the charts: a replay, two refusals and forward attempts, counted
	// by the server's recorder and flushed into traffic_minutes.
	for _, d := range []struct {
		id, body string
		want     int
	}{{"ord_1002", `{"order":1002,"total":"12.00"}`, http.StatusAccepted}, {"", "{}", http.StatusBadRequest}, {"ord_1002", `{"changed":true}`, http.StatusUnprocessableEntity}} {
		req, _ := http.NewRequest(http.MethodPost, e.url+"/webhooks/orders", strings.NewReader(d.body))
		if d.id != "" {
			req.Header.Set("X-Delivery-Id", d.id)
		}
		req.Header.Set("X-Event-Type", "order.paid")
		resp, err := e.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != d.want {
			t.Fatalf("post %q: %d, want %d", d.id, resp.StatusCode, d.want)
		}
	}
	e.traffic.Forward("orders", "orders-svc", true, 30*time.Millisecond)
	e.traffic.Forward("orders", "orders-svc", true, 50*time.Millisecond)
	e.traffic.Forward("orders", "orders-svc", false, 10*time.Second)
	if err := e.traffic.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}

	shots := os.Getenv(screenshotsEnv)
	shoot := func(name string) chromedp.Action[chromedp.Void] {
		return func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
			if shots == "" {
				return chromedp.Void{}, nil
			}
			if _, err := steadyText(began, nil)(ctx, tg); err != nil {
				return chromedp.Void{}, err
			}
			png, err := chromedp.FullScreenshot(100)(ctx, tg)
			if err != nil {
				return chromedp.Void{}, err
			}
			return chromedp.Void{}, writeScreenshot(filepath.Join(shots, name), png)
		}
	}
	do := func(what string, steps ...chromedp.Action[chromedp.Void]) { t.Helper(); browse(t, ctx, what, steps...) }
	text := func(sel string) string { t.Helper(); return textOf(t, ctx, sel) }
	title := func() string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Title())
		if err != nil {
			t.Fatal(err)
		}
		return v
	}

	do("sign in",
		chromedp.Navigate(e.url+"/console/"),
		chromedp.WaitVisible(chromedp.CSS(`#token`)),
		chromedp.SendKeys(chromedp.CSS(`#token`), token),
		chromedp.Submit(chromedp.CSS(`#token`)),
		chromedp.WaitVisible(chromedp.CSS(`section.sender`)),
		shoot("console-overview.png"),
	)
	// The charts: 60 minutes and 24 hours per sender and per target, drawn
	// as SVG, with the counts the server saw (3 accepted, 1 replayed, 2
	// refused; 2 forwards delivered, 1 failed).
	charts, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('div.charts figure.chart')).map(f =>
  f.parentElement.dataset.sender + '/' + (f.parentElement.dataset.target || '') + ' ' + f.dataset.span + ' bars=' + f.querySelectorAll('svg g.bucket').length +
  ' drawn=' + f.querySelectorAll('svg g.bucket rect:not(.slot)').length +
  ' accepted=' + (f.dataset.totalAccepted || 0) + ' replayed=' + (f.dataset.totalReplayed || 0) + ' refused=' + (f.dataset.totalRefused || 0) +
  ' delivered=' + (f.dataset.totalDelivered || 0) + ' failed=' + (f.dataset.totalFailed || 0) + ' latency=' + f.querySelectorAll('svg polyline.latency-p50, svg polyline.latency-p95').length +
  (f.dataset.p50Ms ? ' p50=' + f.dataset.p50Ms + ' p95=' + f.dataset.p95Ms : ''))`))
	if err != nil {
		t.Fatal(err)
	}
	wantCharts := []string{
		"orders/ hour bars=60 drawn=3 accepted=3 replayed=1 refused=2 delivered=0 failed=0 latency=0",
		"orders/ day bars=24 drawn=3 accepted=3 replayed=1 refused=2 delivered=0 failed=0 latency=0",
		// Latencies 30, 50 and 10,000 ms: p50 and p95 estimated in their
		// histogram buckets (35, 50] and (6000, 10000] ms.
		"undefined/orders-svc hour bars=60 drawn=2 accepted=0 replayed=0 refused=0 delivered=2 failed=1 latency=2 p50=42.5 p95=9400.0",
		"undefined/orders-svc day bars=24 drawn=2 accepted=0 replayed=0 refused=0 delivered=2 failed=1 latency=2 p50=42.5 p95=9400.0",
		"billing/ hour bars=60 drawn=0 accepted=0 replayed=0 refused=0 delivered=0 failed=0 latency=0",
		"billing/ day bars=24 drawn=0 accepted=0 replayed=0 refused=0 delivered=0 failed=0 latency=0",
	}
	if strings.Join(charts, "\n") != strings.Join(wantCharts, "\n") {
		t.Errorf("the overview's charts:\n%s\nwant\n%s", strings.Join(charts, "\n"), strings.Join(wantCharts, "\n"))
	}
	// The bar of this minute says what it counts, on hover.
	tip, err := chromedp.Run(ctx, chromedp.Evaluate[string](`Array.from(document.querySelectorAll('div.charts[data-sender=orders] figure[data-span=hour] g.bucket')).filter(g => g.dataset.accepted === '3').map(g => g.querySelector('title').textContent).join('|')`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(tip, "accepted 3, replayed 1, refused 2") {
		t.Errorf("the bar of this minute is titled %q, want its counts", tip)
	}
	// The overview's target row shows the last hour's p50 and p95.
	if lat := text(`table.targets td.latency`); lat != "≈ 42 ms / ≈ 9400 ms" {
		t.Errorf("the overview's latency of orders-svc: %q, want p50 ≈ 42 ms / p95 ≈ 9400 ms", lat)
	}
	// The target's page draws the same forward charts, with the latency lines.
	do("target page",
		chromedp.Navigate(e.url+"/console/senders/orders/targets/orders-svc/failed"),
		chromedp.WaitVisible(chromedp.CSS(`div.charts[data-target=orders-svc] figure.chart`)),
	)
	target, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('div.charts[data-target=orders-svc] figure.chart')).map(f =>
  f.dataset.span + ' bars=' + f.querySelectorAll('svg g.bucket').length + ' delivered=' + f.dataset.totalDelivered + ' failed=' + f.dataset.totalFailed +
  ' latency=' + f.querySelectorAll('svg polyline.latency-p50, svg polyline.latency-p95').length + ' ' + Array.from(f.querySelectorAll('svg g.bucket title')).map(t => t.textContent).filter(t => t.includes('delivered attempts 2')).map(t => t.replace(/^.*UTC: /, '')).join('|'))`))
	if err != nil {
		t.Fatal(err)
	}
	// The bucket's p50 and p95, and its mean latency: (30 + 50 + 10000) ms / 3.
	if got, want := strings.Join(target, "\n"), "hour bars=60 delivered=2 failed=1 latency=2 delivered attempts 2, failed attempts 1, latency p50 ≈ 42 ms, p95 ≈ 9400 ms, mean 3360 ms\nday bars=24 delivered=2 failed=1 latency=2 delivered attempts 2, failed attempts 1, latency p50 ≈ 42 ms, p95 ≈ 9400 ms, mean 3360 ms"; got != want {
		t.Errorf("the target page's charts:\n%s\nwant\n%s", got, want)
	}
	do("find by ID",
		chromedp.Navigate(e.url+"/console/senders/orders/deliveries"),
		chromedp.WaitVisible(chromedp.CSS(`input[name=delivery_id]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name=delivery_id]`), "ord_1001"),
		chromedp.Submit(chromedp.CSS(`input[name=delivery_id]`)),
		// The list page already links ord_1001: wait for the answer to the
		// search (its input's value attribute holds the ID; typing sets
		// only the property), or the click may land on the page the
		// submit is replacing ("Could not find node with given id").
		chromedp.WaitVisible(chromedp.CSS(`input[name=delivery_id][value="ord_1001"]`)),
		chromedp.WaitVisible(chromedp.CSS(`a.id[href$="/deliveries/ord_1001"]`)),
		chromedp.Click(chromedp.CSS(`a.id[href$="/deliveries/ord_1001"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#delivery-id`)),
		shoot("console-delivery.png"),
	)
	if id := text(`#delivery-id`); id != "ord_1001" {
		t.Fatalf("the delivery page shows delivery %q", id)
	}
	if fw := text(`table.forwards tbody`); !strings.Contains(fw, "failed") || strings.Contains(fw, "pending") {
		t.Fatalf("before Redeliver the forwards are %q, want one failed", fw)
	}
	do("redeliver",
		chromedp.Click(chromedp.CSS(`#redeliver`)),
		chromedp.WaitVisible(chromedp.CSS(`p.notice`)),
	)
	if msg, fw := text(`p.notice`), text(`table.forwards tbody`); !strings.Contains(msg, "1 new forward") || !strings.Contains(fw, "pending") || !strings.Contains(fw, "failed") {
		t.Errorf("after Redeliver: notice %q, forwards %q; want the failed one and a pending one", msg, fw)
	}

	do("script as text",
		chromedp.Navigate(e.url+"/console/senders/orders/deliveries/xss-1"),
		chromedp.WaitVisible(chromedp.CSS(`pre.body-text`)),
	)
	n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('main script, main img').length`))
	if err != nil {
		t.Fatal(err)
	}
	if body, tt := text(`pre.body-text`), title(); !strings.Contains(body, "<script>document.title='pwned'</script>") || tt == "pwned" || n != 0 {
		t.Errorf("a body with a script: shown %q, title %q, %d script/img elements in the page", body, tt, n)
	}

	do("POST without the CSRF token",
		chromedp.Navigate(e.url+"/console/senders/orders/deliveries/ord_1002"),
		chromedp.WaitVisible(chromedp.CSS(`#redeliver`)),
	)
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(document.querySelector('form[action$="/redeliver"] input[name=csrf_token]').remove(), true)`)); err != nil {
		t.Fatal(err)
	}
	do("POST without the CSRF token: submit",
		chromedp.Click(chromedp.CSS(`#redeliver`)),
		chromedp.WaitVisible(chromedp.CSS(`p.message`)),
	)
	if msg, tt := text(`p.message`), title(); !strings.Contains(msg, "CSRF token is missing or wrong") || !strings.HasPrefix(tt, "Forbidden") {
		t.Errorf("a POST without the CSRF token: title %q, message %q", tt, msg)
	}
	jobs, err := queue.NewJobs(e.pool).EventForwards(t.Context(), "orders", e.eventOf("ord_1002"))
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 1 || jobs[0].JobID != 0 {
		t.Errorf("the refused POST redelivered: forwards %+v", jobs)
	}
}
