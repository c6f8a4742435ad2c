package console_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/hookgate/hookgate/internal/forward"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// Every attempt in a real browser: a real worker forwards to a target
// that answers 500 with a body holding markup, then 503 with Retry-After,
// then 200. The delivery page lists the three attempts newest first, each
// with its outcome, status, error and cause; the 500's response, opened,
// shows its headers (the cookie redacted) and its body as text: the
// markup is shown, never run or rendered.
func TestConsoleAttemptsInBrowser(t *testing.T) {
	testkit.Slow(t, "drives a real browser and a real worker")
	t.Parallel()
	ctx := browser(t)
	var n atomic.Int32
	tg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch n.Add(1) {
		case 1:
			w.Header().Set("Set-Cookie", "sid=s3cret")
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte(`<h1 id="injected">down</h1><script>document.title="pwned"</script>`))
		case 2:
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("busy"))
		default:
			_, _ = w.Write([]byte("ok"))
		}
	}))
	t.Cleanup(tg.Close)
	yaml := fmt.Sprintf(`
senders:
  - name: orders
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    forward:
      - name: orders-svc
        url: %s
        timeout: 2s
        max_attempts: 5
        breaker_threshold: 1000
`, tg.URL)
	e := newEnvWith(t, yaml, newOptions(), workOpts{Work: true, Backoff: forward.Backoff{Base: 20 * time.Millisecond, Max: 50 * time.Millisecond},
		FetchPollInterval: 20 * time.Millisecond})
	e.startWorking()
	e.ingest("att-1", "application/json", `{}`)
	testkit.Poll(t, 2*time.Minute, "three attempts", func() bool { return n.Load() >= 3 })

	do := func(what string, steps ...chromedp.Action[chromedp.Void]) { t.Helper(); browse(t, ctx, what, steps...) }
	do("sign in",
		chromedp.Navigate(e.url+"/console/"),
		chromedp.WaitVisible(chromedp.CSS(`#token`)),
		chromedp.SendKeys(chromedp.CSS(`#token`), token),
		chromedp.Submit(chromedp.CSS(`#token`)),
		chromedp.WaitVisible(chromedp.CSS(`section.sender`)),
	)
	var rows []string
	testkit.Poll(t, time.Minute, "the delivery page to list three attempts, the newest delivered", func() bool {
		do("open the delivery", chromedp.Navigate(e.url+"/console/senders/orders/deliveries/att-1"), chromedp.WaitVisible(chromedp.CSS(`#attempts`)))
		var err error
		rows, err = chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('table.attempts tr.attempt')).map(r =>
  Array.from(r.querySelectorAll('td')).slice(3).map(td => td.textContent.trim()).join(' | '))`))
		if err != nil {
			t.Fatal(err)
		}
		return len(rows) == 3 && strings.HasPrefix(rows[0], "delivered")
	}, func() string { return fmt.Sprintf("rows %q", rows) })
	want := []string{
		"delivered | 200 |  | retry 2",
		"retry | 503 | target answered 503, Retry-After 1s | retry 1",
		"retry | 500 | target answered 500 | first attempt",
	}
	for i, w := range want {
		if rows[i] != w {
			t.Errorf("attempt row %d: %q, want %q", i, rows[i], w)
		}
	}
	// The forward reads delivered, with its time.
	if f := textOf(t, ctx, `table.forwards tbody tr`); !strings.Contains(f, "delivered") || !strings.Contains(f, " UTC") {
		t.Errorf("the forward's row: %q, want delivered with its time", f)
	}
	do("open the 500's response", chromedp.Click(chromedp.CSS(`table.attempts tr.answer:last-of-type summary`)), chromedp.WaitVisible(chromedp.CSS(`table.attempts tr.answer:last-of-type pre.body`)))
	body := textOf(t, ctx, `table.attempts tr.answer:last-of-type pre.body`)
	if body != `<h1 id="injected">down</h1><script>document.title="pwned"</script>` {
		t.Errorf("the 500's body shows %q, want its markup as text", body)
	}
	headers := textOf(t, ctx, `table.attempts tr.answer:last-of-type table.headers`)
	if !strings.Contains(headers, "Set-Cookie") || !strings.Contains(headers, "xxxxx") || strings.Contains(headers, "s3cret") {
		t.Errorf("the 500's headers show %q, want Set-Cookie redacted", headers)
	}
	injected, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.getElementById('injected') !== null || document.title === 'pwned'`))
	if err != nil {
		t.Fatal(err)
	}
	if injected {
		t.Error("the target's body was rendered as HTML")
	}
}
