package console_test

import (
	"testing"

	"github.com/chromedp/chromedp"
)

// The search box in a real browser: typing a delivery ID opens that
// delivery's page, and so does typing its event ID.
func TestConsoleSearchInBrowser(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	e := newEnv(t, newOptions())
	e.ingestTyped("ord_2001", "order.created", "application/json", `{"order":2001}`)
	e.ingestTyped("ord_2002", "order.paid", "application/json", `{"order":2002}`)
	do := func(what string, steps ...chromedp.Action[chromedp.Void]) { t.Helper(); browse(t, ctx, what, steps...) }
	shown := func() string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#delivery-id`)))
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
		chromedp.WaitVisible(chromedp.CSS(`header input[name=q]`)),
	)
	do("find by delivery ID",
		chromedp.SendKeys(chromedp.CSS(`header input[name=q]`), "ord_2001"),
		chromedp.Submit(chromedp.CSS(`header input[name=q]`)),
		chromedp.WaitVisible(chromedp.CSS(`#delivery-id`)),
	)
	if id := shown(); id != "ord_2001" {
		t.Fatalf("searching ord_2001 opened delivery %q", id)
	}
	do("find by event ID",
		chromedp.Navigate(e.url+"/console/"), // a page without a delivery on it
		chromedp.WaitVisible(chromedp.CSS(`section.sender`)),
		chromedp.SendKeys(chromedp.CSS(`header input[name=q]`), e.eventOf("ord_2002").String()),
		chromedp.Submit(chromedp.CSS(`header input[name=q]`)),
		chromedp.WaitVisible(chromedp.CSS(`#delivery-id`)),
	)
	if id := shown(); id != "ord_2002" {
		t.Fatalf("searching ord_2002's event ID opened delivery %q", id)
	}
}
