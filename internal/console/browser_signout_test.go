package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// In a real browser: a session copied into Chromium (as a stolen cookie
// would be) opens the console on two servers of one database; Sign out
// clicked there ends it, and the copy kept elsewhere is refused by both
// servers, a redeliver POST with it and its CSRF token too. Then a
// delivery whose ID is ".." is found, opened and downloaded by clicking
// its links, which the browser does not normalise away.
func TestConsoleSignOutAndDotIDsInBrowser(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	e := newEnv(t, newOptions())
	other := e.replica()
	e.ingest("..", "text/plain", "dot-dot body")
	c := e.client()
	csrf := e.signIn(c)
	cookie := c.Jar.Cookies(mustURL(t, e.url+"/console/"))[0]
	do := func(what string, steps ...chromedp.Action[chromedp.Void]) { t.Helper(); browse(t, ctx, what, steps...) }
	text := func(sel string) string { t.Helper(); return textOf(t, ctx, sel) }
	// Both test servers are on 127.0.0.1: one cookie, for both.
	do("copy the session into the browser",
		chromedp.Navigate(e.url+"/console/login"),
		chromedp.WaitVisible(chromedp.CSS(`#token`)),
	)
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(document.cookie = "`+cookie.Name+`=`+cookie.Value+`; path=/console", true)`)); err != nil {
		t.Fatal(err)
	}
	do("the copied session opens the other server",
		chromedp.Navigate(other.url+"/console/"),
		chromedp.WaitVisible(chromedp.CSS(`section.sender`)),
	)
	do("find the delivery .. and open it by its link",
		chromedp.Navigate(e.url+"/console/senders/orders/deliveries?delivery_id=.."),
		chromedp.WaitVisible(chromedp.CSS(`a.id`)),
		chromedp.Click(chromedp.CSS(`a.id`)),
		chromedp.WaitVisible(chromedp.CSS(`#delivery-id`)),
	)
	if id := text(`#delivery-id`); id != ".." {
		t.Fatalf("the link of delivery .. opened delivery %q", id)
	}
	href, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('a[href*="/body"]').href`))
	if err != nil {
		t.Fatal(err)
	}
	if p := e.do(c, http.MethodGet, strings.TrimPrefix(href, e.url), nil, nil); p.status != http.StatusOK || p.body != "dot-dot body" {
		t.Errorf("the raw body link of delivery .. (%s): %d %q", href, p.status, p.body)
	}
	do("sign out in the browser",
		chromedp.Navigate(e.url+"/console/"),
		chromedp.WaitVisible(chromedp.CSS(`form[action="/console/logout"] button`)),
		chromedp.Click(chromedp.CSS(`form[action="/console/logout"] button`)),
		chromedp.WaitVisible(chromedp.CSS(`#token`)),
	)
	for _, srv := range []*env{e, other} {
		if p := srv.do(withCookies(t, c, e, srv), http.MethodGet, "/console/", nil, nil); p.status != http.StatusSeeOther {
			t.Errorf("the copy of the signed-out cookie on %s: %d, want a redirect to the sign-in", srv.url, p.status)
		}
		p := srv.do(withCookies(t, c, e, srv), http.MethodPost, "/console/senders/orders/delivery/redeliver?id=..", url.Values{"csrf_token": {csrf}}, nil)
		if p.status != http.StatusForbidden {
			t.Errorf("a redeliver POST with the signed-out cookie on %s: %d, want 403", srv.url, p.status)
		}
	}
}
