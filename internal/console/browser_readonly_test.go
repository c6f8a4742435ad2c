package console_test

import (
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// In a real browser: a read token signs in, and the delivery's page and
// the target's page have no button that changes anything (no Redeliver,
// no Pause, no Resume, no Sign out everywhere), only Sign out; the nav
// says who signed in, read-only, and the audit page lists the sign-in.
func TestConsoleReadSessionInBrowser(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	e := newEnv(t, readOptions())
	e.ingest("d-1", "application/json", `{"n":1}`)
	e.failForwards("d-1", "target answered 500")
	do := func(what string, steps ...chromedp.Action[chromedp.Void]) { t.Helper(); browse(t, ctx, what, steps...) }
	buttons := func(where string) {
		t.Helper()
		got, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('form[method="post"] button')).map(b => b.textContent.trim())`))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Join(got, ",") != "Sign out" {
			t.Errorf("%s: the buttons that POST are %q, want Sign out only", where, got)
		}
	}
	do("sign in with the read token",
		chromedp.Navigate(e.url+"/console/"),
		chromedp.WaitVisible(chromedp.CSS(`#token`)),
		chromedp.SendKeys(chromedp.CSS(`#token`), readToken),
		chromedp.Submit(chromedp.CSS(`#token`)),
		chromedp.WaitVisible(chromedp.CSS(`section.sender`)),
	)
	if who := textOf(t, ctx, `span.who`); who != "ci-reader (read-only)" {
		t.Errorf("the nav says %q, want ci-reader (read-only)", who)
	}
	buttons("the overview")
	do("open the delivery", chromedp.Navigate(e.url+"/console/senders/orders/deliveries/d-1"), chromedp.WaitVisible(chromedp.CSS(`#delivery-id`)))
	buttons("the delivery's page")
	do("open the target", chromedp.Navigate(e.url+"/console/senders/orders/targets/orders-svc/failed"), chromedp.WaitVisible(chromedp.CSS(`table.failed`)))
	buttons("the target's page")
	if hint := textOf(t, ctx, `p.read-only`); !strings.Contains(hint, "read token") {
		t.Errorf("the target's page says %q, want why it has no forms", hint)
	}
	do("open the audit page by its link",
		chromedp.Click(chromedp.CSS(`nav a[href="/console/audit"]`)),
		chromedp.WaitVisible(chromedp.CSS(`table.audit`)),
	)
	buttons("the audit page")
	if row := textOf(t, ctx, `table.audit tbody tr`); !strings.Contains(row, "ci-reader") || !strings.Contains(row, "sign-in") || !strings.Contains(row, "ok") {
		t.Errorf("the audit page's newest row: %q, want ci-reader's sign-in", row)
	}
}
