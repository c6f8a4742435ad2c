package console_test

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestConsolePauseButtonsInBrowser: in a real browser an operator opens a
// target's page, writes a reason and an end, and clicks Pause: the page
// says the target is paused by an operator, since when, why, until when
// and by whom, and offers Resume; a delivery accepted meanwhile says its
// forward is held by the pause. Resume ends it: the page says the target
// is not paused and offers Pause again, and the delivery's forward is no
// longer held.
func TestConsolePauseButtonsInBrowser(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	e := newEnv(t, newOptions())
	until := time.Now().Add(2 * time.Hour).UTC().Truncate(time.Minute)
	do := func(what string, steps ...chromedp.Action[chromedp.Void]) { t.Helper(); browse(t, ctx, what, steps...) }
	do("sign in and pause the target",
		chromedp.Navigate(e.url+"/console/"),
		chromedp.WaitVisible(chromedp.CSS(`#token`)),
		chromedp.SendKeys(chromedp.CSS(`#token`), token),
		chromedp.Submit(chromedp.CSS(`#token`)),
		chromedp.WaitVisible(chromedp.CSS(`section.sender`)),
		chromedp.Navigate(e.url+"/console/senders/orders/targets/orders-svc/failed"),
		chromedp.WaitVisible(chromedp.CSS(`#pause`)),
		chromedp.SendKeys(chromedp.CSS(`#pause-reason`), "orders-svc is being migrated"),
		chromedp.SetValue(chromedp.CSS(`input[name="until"]`), until.Format("2006-01-02T15:04")),
		chromedp.Click(chromedp.CSS(`#pause`)),
		chromedp.WaitVisible(chromedp.CSS(`#resume`)),
	)
	want := regexp.MustCompile(`^paused by an operator since \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} UTC \(orders-svc is being migrated\), until ` +
		regexp.QuoteMeta(until.Format("2006-01-02 15:04:05.000 UTC")) + `; by admin via console \(127\.0\.0\.1\)$`)
	if got := textOf(t, ctx, `dd.pause`); !want.MatchString(got) {
		t.Errorf("the target's pause: %q, want %s", got, want)
	}
	if got := textOf(t, ctx, `p.notice`); !strings.HasPrefix(got, "Paused:") {
		t.Errorf("the notice after Pause: %q", got)
	}

	e.ingest("paused-1", "application/json", `{}`)
	do("open the delivery", chromedp.Navigate(e.url+"/console/senders/orders/deliveries/paused-1"), chromedp.WaitVisible(chromedp.CSS(`table.forwards`)))
	if row := textOf(t, ctx, `table.forwards tbody tr`); !regexp.MustCompile(`pending\s+held: paused by an operator since .* \(orders-svc is being migrated\)`).MatchString(row) {
		t.Errorf("the delivery's forward: %q, want pending, held by the operator's pause", row)
	}

	do("resume the target",
		chromedp.Navigate(e.url+"/console/senders/orders/targets/orders-svc/failed"),
		chromedp.WaitVisible(chromedp.CSS(`#resume`)),
		chromedp.Click(chromedp.CSS(`#resume`)),
		chromedp.WaitVisible(chromedp.CSS(`#pause`)),
	)
	if got := textOf(t, ctx, `dd.pause`); got != "not paused" {
		t.Errorf("the target's pause after Resume: %q, want not paused", got)
	}
	do("open the delivery again", chromedp.Navigate(e.url+"/console/senders/orders/deliveries/paused-1"), chromedp.WaitVisible(chromedp.CSS(`table.forwards`)))
	if row := textOf(t, ctx, `table.forwards tbody tr`); strings.Contains(row, "held") {
		t.Errorf("the delivery's forward after Resume: %q, want no longer held", row)
	}
}
