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

// TestConsolePauseInBrowser: a real target answers 503 with Retry-After:
// 60, the worker pauses it (its breaker stays closed), and in a real
// browser the delivery's page says its forward is held by the pause, until
// when and why, and the target's page counts it; the deliveries list says
// it is retrying.
func TestConsolePauseInBrowser(t *testing.T) {
	testkit.Slow(t, "drives a real browser and a real worker")
	t.Parallel()
	ctx := browser(t)
	tg := testkit.NewTarget(t, func(int, *http.Request) testkit.Answer {
		return testkit.Answer{Status: http.StatusServiceUnavailable, Header: http.Header{"Retry-After": {"60"}}}
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
        breaker_threshold: 1000
`, tg.URL)
	e := newEnvWith(t, yaml, newOptions(), workOpts{Work: true, Backoff: forward.Backoff{Base: 20 * time.Millisecond, Max: 50 * time.Millisecond},
		FetchPollInterval: 20 * time.Millisecond})
	e.startWorking()
	e.ingest("paused-1", "application/json", `{}`)
	var b store.BreakerState
	testkit.Poll(t, 30*time.Second, "the pause to be recorded", func() bool {
		bs, err := e.q.Breakers(t.Context(), "orders")
		if err != nil {
			t.Fatal(err)
		}
		b = bs["orders-svc"]
		return !b.PausedUntil.IsZero()
	}, func() string { return fmt.Sprintf("breaker %+v, %d requests", b, len(tg.Hits())) })
	until := regexp.QuoteMeta(b.PausedUntil.UTC().Format("2006-01-02 15:04:05.000 UTC"))

	do := func(what string, steps ...chromedp.Action[chromedp.Void]) { t.Helper(); browse(t, ctx, what, steps...) }
	do("sign in and open the delivery",
		chromedp.Navigate(e.url+"/console/"),
		chromedp.WaitVisible(chromedp.CSS(`#token`)),
		chromedp.SendKeys(chromedp.CSS(`#token`), token),
		chromedp.Submit(chromedp.CSS(`#token`)),
		chromedp.WaitVisible(chromedp.CSS(`section.sender`)),
		chromedp.Navigate(e.url+"/console/senders/orders/deliveries/paused-1"),
		chromedp.WaitVisible(chromedp.CSS(`table.forwards`)),
	)
	row := textOf(t, ctx, `table.forwards tbody tr`)
	if !regexp.MustCompile(`retrying\s+held: paused until ` + until + ` \(target answered 503.*Retry-After`).MatchString(row) {
		t.Errorf("the delivery's forward: %q, want retrying, held by the pause until %s", row, b.PausedUntil)
	}
	do("open the target's page",
		chromedp.Navigate(e.url+"/console/senders/orders/targets/orders-svc/failed"),
		chromedp.WaitVisible(chromedp.CSS(`p.held-forwards`)),
	)
	if held := textOf(t, ctx, `p.held-forwards`); !regexp.MustCompile(`^1 forwards held: paused until ` + until).MatchString(held) {
		t.Errorf("the target's page: %q, want 1 forward held by the pause until %s", held, b.PausedUntil)
	}
	if badge := textOf(t, ctx, `dl.facts`); !strings.Contains(badge, "closed") {
		t.Errorf("the target's facts: %q, want its breaker closed", badge)
	}
	do("open the deliveries list", chromedp.Navigate(e.url+"/console/senders/orders/deliveries"), chromedp.WaitVisible(chromedp.CSS(`td.forwards`)))
	if s := textOf(t, ctx, `td.forwards`); s != "1 retrying" {
		t.Errorf("the list says %q of the delivery's forwards, want 1 retrying", s)
	}
}
