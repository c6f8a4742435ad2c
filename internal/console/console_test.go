package console_test

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/riverqueue/river/rivertype"

	"github.com/hookgate/hookgate/internal/console"
	"github.com/hookgate/hookgate/internal/store"
	"github.com/hookgate/hookgate/internal/testing/queuetest"
	"github.com/hookgate/hookgate/internal/testing/storetest"
)

// Without an admin token every console page says how to enable it.
func TestConsoleDisabledWithoutToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t, console.Config{})
	c := e.client()
	for _, path := range []string{"/console/", "/console/login", "/console/senders/orders/deliveries"} {
		p := e.do(c, http.MethodGet, path, nil, nil)
		if p.status != http.StatusForbidden || !strings.Contains(p.body, "HOOKGATE_ADMIN_TOKEN") {
			t.Errorf("GET %s: %d, want 403 naming HOOKGATE_ADMIN_TOKEN: %.300s", path, p.status, p.body)
		}
	}
}

// Sign-in: a wrong token shows the form again with a message; the right
// one sets an HttpOnly, SameSite=Strict cookie on /console, not Secure over
// plain HTTP; pages need it; the session survives a restart with the same
// token and not with another.
func TestConsoleSignIn(t *testing.T) {
	t.Parallel()
	e := newEnv(t, console.Config{AdminToken: token})
	c := e.client()
	if p := e.do(c, http.MethodGet, "/console/", nil, nil); p.status != http.StatusSeeOther || p.header.Get("Location") != "/console/login" {
		t.Fatalf("signed out overview: %d %q, want a redirect to the sign-in", p.status, p.header.Get("Location"))
	}
	p := e.do(c, http.MethodPost, "/console/login", url.Values{"token": {"wrong-token-wrong-token-wrong-token"}}, nil)
	if p.status != http.StatusUnauthorized || !strings.Contains(p.body, "not the admin token") || !strings.Contains(p.body, `name="token"`) {
		t.Fatalf("wrong token: %d %.300s", p.status, p.body)
	}
	p = e.do(c, http.MethodPost, "/console/login", url.Values{"token": {token}}, nil)
	if p.status != http.StatusSeeOther {
		t.Fatalf("sign-in: %d", p.status)
	}
	set := p.header.Get("Set-Cookie")
	for _, want := range []string{console.CookieName + "=", "Path=/console", "HttpOnly", "SameSite=Strict", "Max-Age=43200"} {
		if !strings.Contains(set, want) {
			t.Errorf("Set-Cookie %q has no %q", set, want)
		}
	}
	if strings.Contains(set, "Secure") {
		t.Errorf("Set-Cookie %q is Secure over plain HTTP from an untrusted address", set)
	}
	p = e.do(c, http.MethodGet, "/console/", nil, nil)
	if p.status != http.StatusOK || !strings.Contains(p.body, "orders") {
		t.Fatalf("overview: %d %.300s", p.status, p.body)
	}
	for k, want := range map[string]string{
		"Content-Security-Policy": console.CSP, "X-Frame-Options": "DENY", "Referrer-Policy": "same-origin",
	} {
		if got := p.header.Get(k); got != want {
			t.Errorf("%s: %q, want %q", k, got, want)
		}
	}
	// A new console with the same token accepts the session, another token
	// does not.
	cookie := c.Jar.Cookies(mustURL(t, e.url+"/console/"))
	same := newEnv(t, console.Config{AdminToken: token})
	other := newEnv(t, console.Config{AdminToken: token + "-other"})
	for _, tc := range []struct {
		e    *env
		want int
	}{{same, http.StatusOK}, {other, http.StatusSeeOther}} {
		c2 := tc.e.client()
		c2.Jar.SetCookies(mustURL(t, tc.e.url+"/console/"), cookie)
		if p := tc.e.do(c2, http.MethodGet, "/console/", nil, nil); p.status != tc.want {
			t.Errorf("session on a restarted server (same token: %v): %d, want %d", tc.e == same, p.status, tc.want)
		}
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// Sessions expire.
func TestConsoleSessionExpires(t *testing.T) {
	t.Parallel()
	now := time.Now()
	clock := &now
	e := newEnv(t, console.Config{AdminToken: token, SessionTTL: time.Hour, Now: func() time.Time { return *clock }})
	c := e.client()
	e.signIn(c)
	later := now.Add(time.Hour + time.Second)
	clock = &later
	if p := e.do(c, http.MethodGet, "/console/", nil, nil); p.status != http.StatusSeeOther {
		t.Fatalf("an expired session: %d, want a redirect to sign in", p.status)
	}
}

// A trusted proxy's X-Forwarded-Proto: https makes the cookie Secure; the
// same header from anyone else does not.
func TestConsoleSecureCookieBehindTrustedProxy(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		trusted string
		secure  bool
	}{{"127.0.0.0/8", true}, {"10.0.0.0/8", false}} {
		proxies, err := console.ParseTrustedProxies(tc.trusted)
		if err != nil {
			t.Fatal(err)
		}
		e := newEnv(t, console.Config{AdminToken: token, TrustedProxies: proxies})
		p := e.do(e.client(), http.MethodPost, "/console/login", url.Values{"token": {token}}, map[string]string{"X-Forwarded-Proto": "https"})
		if got := strings.Contains(p.header.Get("Set-Cookie"), "Secure"); got != tc.secure {
			t.Errorf("trusted %s: Secure %v, want %v (%q)", tc.trusted, got, tc.secure, p.header.Get("Set-Cookie"))
		}
	}
	if _, err := console.ParseTrustedProxies("10.0.0.0/8, 192.0.2.1,::1"); err != nil {
		t.Error(err)
	}
	if _, err := console.ParseTrustedProxies("10.0.0.0/8,proxy.local"); err == nil {
		t.Error("a host name is accepted as a trusted proxy")
	}
}

// Repeated wrong tokens are answered 429; the right one still signs in.
func TestConsoleWrongTokensSlowedDown(t *testing.T) {
	t.Parallel()
	e := newEnv(t, console.Config{AdminToken: token})
	c := e.client()
	var p page
	for i := 0; i < 30; i++ {
		p = e.do(c, http.MethodPost, "/console/login", url.Values{"token": {"nope-nope-nope-nope-nope-nope-nope"}}, nil)
		if p.status == http.StatusTooManyRequests {
			break
		}
	}
	if p.status != http.StatusTooManyRequests || p.header.Get("Retry-After") == "" || !strings.Contains(p.body, "Too many wrong tokens") {
		t.Fatalf("after many wrong tokens: %d %q", p.status, p.header.Get("Retry-After"))
	}
	if p := e.do(c, http.MethodPost, "/console/login", url.Values{"token": {token}}, nil); p.status != http.StatusSeeOther {
		t.Errorf("the right token while limited: %d, want 303 (the right token is never limited)", p.status)
	}
}

// A state-changing POST is refused 403 without the CSRF token, with a
// wrong one, from another site (Sec-Fetch-Site or Origin) or without a
// session; it goes through with the token from this origin.
func TestConsoleCSRF(t *testing.T) {
	t.Parallel()
	e := newEnv(t, console.Config{AdminToken: token})
	e.ingest("csrf-1", "application/json", `{"n":1}`)
	c := e.client()
	csrf := e.signIn(c)
	path := "/console/senders/orders/deliveries/csrf-1/redeliver"
	for _, tc := range []struct {
		name string
		form url.Values
		hdr  map[string]string
	}{
		{"no token", url.Values{}, nil},
		{"wrong token", url.Values{"csrf_token": {csrf + "x"}}, nil},
		{"cross-site fetch", url.Values{"csrf_token": {csrf}}, map[string]string{"Sec-Fetch-Site": "cross-site"}},
		{"same-site fetch", url.Values{"csrf_token": {csrf}}, map[string]string{"Sec-Fetch-Site": "same-site"}},
		{"other origin", url.Values{"csrf_token": {csrf}}, map[string]string{"Origin": "https://evil.example"}},
		{"null origin", url.Values{"csrf_token": {csrf}}, map[string]string{"Origin": "null"}},
	} {
		if p := e.do(c, http.MethodPost, path, tc.form, tc.hdr); p.status != http.StatusForbidden {
			t.Errorf("%s: %d, want 403", tc.name, p.status)
		}
	}
	if p := e.do(e.client(), http.MethodPost, path, url.Values{"csrf_token": {csrf}}, nil); p.status != http.StatusForbidden {
		t.Errorf("no session: %d, want 403", p.status)
	}
	p := e.do(c, http.MethodPost, path, url.Values{"csrf_token": {csrf}}, map[string]string{"Origin": e.url, "Sec-Fetch-Site": "same-origin"})
	if p.status != http.StatusSeeOther || !strings.Contains(p.header.Get("Location"), "/console/senders/orders/deliveries/csrf-1?redelivered=1") {
		t.Fatalf("redeliver with the token: %d %q", p.status, p.header.Get("Location"))
	}
	// Sign-out is a POST with the token too.
	if p := e.do(c, http.MethodPost, "/console/logout", url.Values{}, nil); p.status != http.StatusForbidden {
		t.Errorf("sign-out without the token: %d, want 403", p.status)
	}
	if p := e.do(c, http.MethodPost, "/console/logout", url.Values{"csrf_token": {csrf}}, nil); p.status != http.StatusSeeOther {
		t.Errorf("sign-out: %d", p.status)
	}
	if p := e.do(c, http.MethodGet, "/console/", nil, nil); p.status != http.StatusSeeOther {
		t.Errorf("after sign-out the overview is %d, want a redirect", p.status)
	}
}

// The delivery page shows the delivery, its headers and body, escaped;
// the list finds it by ID and by time range; IDs with '/', '%', '<' work.
func TestConsoleDeliveryPages(t *testing.T) {
	t.Parallel()
	e := newEnv(t, console.Config{AdminToken: token})
	ids := []string{"plain-1", "a/b%c<i>", `<script>alert(1)</script>`}
	for _, id := range ids {
		e.ingest(id, "text/plain", "<script>alert('body')</script>")
	}
	e.ingest("json-1", "application/json", `{"order":42,"items":[1,2]}`)
	e.ingest("bin-1", "application/octet-stream", "\x00\x01\x02binary")
	big := strings.Repeat("0123456789abcdef", 8<<10) // 128 KiB
	e.ingest("big-1", "text/plain", big)
	c := e.client()
	e.signIn(c)

	for _, id := range ids {
		p := e.do(c, http.MethodGet, "/console/senders/orders/deliveries/"+url.PathEscape(id), nil, nil)
		if p.status != http.StatusOK {
			t.Fatalf("delivery %q: %d %.300s", id, p.status, p.body)
		}
		if strings.Contains(p.body, "<script>") || strings.Contains(p.body, "<i>") {
			t.Errorf("delivery %q: unescaped markup in the page", id)
		}
		if !strings.Contains(p.body, "&lt;script&gt;alert(&#39;body&#39;)&lt;/script&gt;") {
			t.Errorf("delivery %q: the body is not shown as text", id)
		}
		if !strings.Contains(p.body, "orders-svc") || !strings.Contains(p.body, "pending") {
			t.Errorf("delivery %q: its forward is not shown pending", id)
		}
		l := e.do(c, http.MethodGet, "/console/senders/orders/deliveries?delivery_id="+url.QueryEscape(id), nil, nil)
		if l.status != http.StatusOK || !strings.Contains(l.body, "/deliveries/"+url.PathEscape(id)+`"`) {
			t.Errorf("lookup %q: %d, no link to it", id, l.status)
		}
	}
	p := e.do(c, http.MethodGet, "/console/senders/orders/deliveries/json-1", nil, nil)
	if !strings.Contains(p.body, "\n  &#34;order&#34;: 42,") {
		t.Errorf("the JSON body is not pretty-printed: %.2000s", p.body)
	}
	p = e.do(c, http.MethodGet, "/console/senders/orders/deliveries/bin-1", nil, nil)
	if !strings.Contains(p.body, "00 01 02 62 69 6e") {
		t.Errorf("the binary body is not a hex dump")
	}
	raw := e.do(c, http.MethodGet, "/console/senders/orders/deliveries/bin-1/body", nil, nil)
	if raw.body != "\x00\x01\x02binary" || raw.header.Get("Content-Type") != "application/octet-stream" || !strings.HasPrefix(raw.header.Get("Content-Disposition"), "attachment") {
		t.Errorf("raw body: %q %q %q", raw.body, raw.header.Get("Content-Type"), raw.header.Get("Content-Disposition"))
	}
	p = e.do(c, http.MethodGet, "/console/senders/orders/deliveries/big-1", nil, nil)
	if strings.Contains(p.body, big[:70<<10]) || !strings.Contains(p.body, big[:60<<10]) || !strings.Contains(p.body, "the first 64 KiB of 131072 bytes") {
		t.Errorf("a 128 KiB body is not cut to 64 KiB with a note")
	}
	if raw := e.do(c, http.MethodGet, "/console/senders/orders/deliveries/big-1/body", nil, nil); raw.body != big {
		t.Errorf("the raw body of big-1 has %d bytes, want %d", len(raw.body), len(big))
	}
	if p := e.do(c, http.MethodGet, "/console/senders/orders/deliveries/nope", nil, nil); p.status != http.StatusNotFound {
		t.Errorf("unknown delivery: %d", p.status)
	}
	if p := e.do(c, http.MethodGet, "/console/senders/nobody/deliveries", nil, nil); p.status != http.StatusNotFound {
		t.Errorf("unknown sender: %d", p.status)
	}
	// The list: all five, newest first; a range in the future has none, one
	// in the past all; a bad time is 400.
	l := e.do(c, http.MethodGet, "/console/senders/orders/deliveries", nil, nil)
	if i, j := strings.Index(l.body, "big-1"), strings.Index(l.body, "plain-1"); i < 0 || j < 0 || i > j {
		t.Errorf("list is not newest first: bin-1 at %d, plain-1 at %d", i, j)
	}
	future := time.Now().Add(time.Hour).UTC().Format("2006-01-02T15:04")
	if l := e.do(c, http.MethodGet, "/console/senders/orders/deliveries?since="+future, nil, nil); strings.Contains(l.body, "bin-1") {
		t.Error("since an hour from now lists bin-1")
	}
	past := time.Now().Add(-time.Hour).UTC().Format("2006-01-02T15:04")
	if l := e.do(c, http.MethodGet, "/console/senders/orders/deliveries?since="+past+"&until="+future, nil, nil); !strings.Contains(l.body, "bin-1") || !strings.Contains(l.body, "plain-1") {
		t.Error("the last hour does not list bin-1 and plain-1")
	}
	if l := e.do(c, http.MethodGet, "/console/senders/orders/deliveries?until="+past, nil, nil); strings.Contains(l.body, "bin-1") {
		t.Error("until an hour ago lists bin-1")
	}
	if l := e.do(c, http.MethodGet, "/console/senders/orders/deliveries?since=yesterday", nil, nil); l.status != http.StatusBadRequest {
		t.Errorf("a bad time: %d", l.status)
	}
}

// The list pages with a cursor that keeps the filters.
func TestConsoleDeliveriesPaginate(t *testing.T) {
	t.Parallel()
	e := newEnv(t, console.Config{AdminToken: token})
	now := time.Now()
	if _, err := storetest.InsertGenerated(t.Context(), e.q.DB(), storetest.Generated{Sender: "orders", Prefix: "d", Width: 4, N: 120, Newest: now, Step: time.Second,
		ExpiresAt: now.Add(24 * time.Hour), Status: 202, Keys: true}); err != nil {
		t.Fatal(err)
	}
	c := e.client()
	e.signIn(c)
	seen := map[string]bool{}
	next := "/console/senders/orders/deliveries"
	for pages := 0; next != ""; pages++ {
		if pages > 5 {
			t.Fatal("more than 5 pages of 50 for 120 deliveries")
		}
		p := e.do(c, http.MethodGet, next, nil, nil)
		for _, m := range deliveryLink.FindAllStringSubmatch(p.body, -1) {
			if seen[m[1]] {
				t.Errorf("%s listed twice", m[1])
			}
			seen[m[1]] = true
		}
		next = ""
		if m := nextLink.FindStringSubmatch(p.body); m != nil {
			next = strings.ReplaceAll(m[1], "&amp;", "&")
		}
	}
	if len(seen) != 120 {
		t.Errorf("saw %d deliveries, want 120", len(seen))
	}
}

var (
	deliveryLink = regexp.MustCompile(`/console/senders/orders/deliveries/(d\d{4})"`)
	nextLink     = regexp.MustCompile(`rel="next" href="([^"]+)"`)
)

// The overview counts deliveries by stored status and forwards by state
// per target, with the breaker's state; the failed count links to the
// target's failed forwards, each with a Redeliver form.
func TestConsoleOverviewAndFailedForwards(t *testing.T) {
	t.Parallel()
	e := newEnv(t, console.Config{AdminToken: token})
	for _, id := range []string{"o-1", "o-2", "o-3"} {
		e.ingest(id, "application/json", `{}`)
	}
	e.failForwards("o-1", "target answered 410 Gone from http://127.0.0.1:9/hooks/orders")
	now := time.Now()
	if err := e.q.RecordBreaker(t.Context(), "orders", "orders-svc", store.BreakerOpen, &now, "connection refused"); err != nil {
		t.Fatal(err)
	}
	c := e.client()
	csrf := e.signIn(c)
	p := e.do(c, http.MethodGet, "/console/", nil, nil)
	for _, want := range []string{
		`<td>202</td><td class="num">3</td><td class="num">3</td>`,
		`breaker-open">open</span> <span class="since" data-opened-at="` + now.UTC().Format("2006-01-02T15:04:05.000Z07:00") + `">open since `,
		`)</span> <span class="error">connection refused</span>`,
		`<td class="num">2</td><td class="num">0</td><td class="num">0</td>`, // pending (the outbox), running, retrying
		`<a href="/console/senders/orders/targets/orders-svc/failed">1</a>`,
		"No deliveries in the last day.", // billing
	} {
		if !strings.Contains(p.body, want) {
			t.Errorf("the overview has no %s", want)
		}
	}
	p = e.do(c, http.MethodGet, "/console/senders/orders/targets/orders-svc/failed", nil, nil)
	for _, want := range []string{`/deliveries/o-1"`, "3 / 3", "<td>410</td>", `action="/console/senders/orders/deliveries/o-1/redeliver"`} {
		if !strings.Contains(p.body, want) {
			t.Errorf("the failed forwards page has no %s: %.3000s", want, p.body)
		}
	}
	if strings.Contains(p.body, "o-2") {
		t.Error("a pending forward is listed as failed")
	}
	if p := e.do(c, http.MethodGet, "/console/senders/orders/targets/nope/failed", nil, nil); p.status != http.StatusNotFound {
		t.Errorf("unknown target: %d", p.status)
	}

	// Redeliver all failed: without the CSRF token refused; with it, the
	// failed forward of o-1 is matched and a new forward job is enqueued.
	if p := e.do(c, http.MethodPost, "/console/senders/orders/targets/orders-svc/redeliver", url.Values{"since": {""}}, nil); p.status != http.StatusForbidden {
		t.Errorf("bulk redeliver without CSRF token: %d, want 403", p.status)
	}
	p = e.do(c, http.MethodPost, "/console/senders/orders/targets/orders-svc/redeliver",
		url.Values{"since": {""}, "csrf_token": {csrf}}, nil)
	loc := p.header.Get("Location")
	if p.status != http.StatusSeeOther || !strings.HasSuffix(loc, "/targets/orders-svc/failed?matched=1") {
		t.Fatalf("bulk redeliver: %d to %q, want 303 to the target's page with matched=1", p.status, loc)
	}
	if p := e.do(c, http.MethodGet, loc, nil, nil); !strings.Contains(p.body, "1 failed forwards are being sent again") {
		t.Errorf("the target's page after the bulk redeliver says nothing of it: %.2000s", p.body)
	}
}

// TestConsoleEventTypeFilter: a sender's deliveries filtered by an event
// type prefix list only those, show the type, and page on with the filter.
func TestConsoleEventTypeFilter(t *testing.T) {
	t.Parallel()
	e := newEnv(t, console.Config{AdminToken: token})
	e.ingestTyped("inv-1", "invoice.paid", "application/json", `{}`)
	e.ingestTyped("cus-1", "customer.created", "application/json", `{}`)
	e.ingestTyped("inv-2", "invoice.created", "application/json", `{}`)
	c := e.client()
	e.signIn(c)
	p := e.do(c, http.MethodGet, "/console/senders/orders/deliveries?event_type=invoice.", nil, nil)
	if p.status != http.StatusOK {
		t.Fatalf("filtered list: %d", p.status)
	}
	if !strings.Contains(p.body, "inv-1") || !strings.Contains(p.body, "inv-2") || strings.Contains(p.body, "cus-1") {
		t.Errorf("event type prefix invoice. lists the wrong deliveries: %.3000s", p.body)
	}
	if !strings.Contains(p.body, "invoice.paid") {
		t.Error("the list does not show the event type")
	}
	if d := e.do(c, http.MethodGet, "/console/senders/orders/deliveries/inv-1", nil, nil); !strings.Contains(d.body, "<dd>invoice.paid</dd>") {
		t.Error("the delivery page does not show the event type")
	}
	if p := e.do(c, http.MethodGet, "/console/senders/orders/deliveries?event_type=customer.created", nil, nil); !strings.Contains(p.body, "cus-1") || strings.Contains(p.body, "inv-1") {
		t.Error("an exact event type (as a prefix) lists the wrong deliveries")
	}
	future := time.Now().Add(time.Hour).UTC().Format("2006-01-02T15:04")
	if p := e.do(c, http.MethodGet, "/console/senders/orders/deliveries?event_type=invoice.&since="+future, nil, nil); strings.Contains(p.body, "inv-1") {
		t.Error("event type and a time range from an hour ahead still list inv-1")
	}
}

// Behind a trusted reverse proxy, a guesser's wrong tokens limit the
// guesser's address as X-Forwarded-For names it: the operator signs in with
// the right token from another address, and from the guesser's too.
func TestConsoleSignInBehindTrustedProxy(t *testing.T) {
	t.Parallel()
	proxies, err := console.ParseTrustedProxies("127.0.0.0/8")
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, console.Config{AdminToken: token, TrustedProxies: proxies})
	signIn := func(xff, tok string) page {
		return e.do(e.client(), http.MethodPost, "/console/login", url.Values{"token": {tok}}, map[string]string{"X-Forwarded-For": xff})
	}
	limited := 0
	for range 40 {
		switch p := signIn("203.0.113.5", "nope-nope-nope-nope-nope-nope-nope"); p.status {
		case http.StatusTooManyRequests:
			limited++
		case http.StatusUnauthorized:
		default:
			t.Fatalf("wrong token: %d", p.status)
		}
	}
	if limited < 20 {
		t.Errorf("the guesser got %d of 40 wrong tokens answered 429, want most", limited)
	}
	for _, xff := range []string{"198.51.100.7", "203.0.113.5"} {
		if p := signIn(xff, token); p.status != http.StatusSeeOther {
			t.Errorf("sign-in with the right token from %s: %d, want 303", xff, p.status)
		}
	}
	if p := signIn("198.51.100.8", "nope-nope-nope-nope-nope-nope-nope"); p.status != http.StatusUnauthorized {
		t.Errorf("another client's first wrong token: %d, want 401", p.status)
	}
}

// TestConsoleFailedNewestFirst: the target page lists its failed forwards
// by when they failed, newest first (not by job ID), with one error text
// per outcome: River's "JobCancelError: " prefix is not shown.
func TestConsoleFailedNewestFirst(t *testing.T) {
	t.Parallel()
	e := newEnv(t, newOptions())
	ctx := t.Context()
	sd, _ := e.cfg.Sender("orders")
	failed := map[string]time.Time{"f-old-job": time.Now().Add(-time.Minute), "f-new-job": time.Now().Add(-time.Hour)}
	for _, id := range []string{"f-old-job", "f-new-job"} { // job IDs in this order
		e.ingest(id, "application/json", `{}`)
		ev := e.eventOf(id)
		if _, err := storetest.DeleteOutboxOfEvent(ctx, e.q.DB(), "orders", ev); err != nil {
			t.Fatal(err)
		}
		jobs, err := e.rc.Redeliver(ctx, sd, ev, id)
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range jobs {
			if err := queuetest.New(e.pool).SetForwardJob(ctx, j.JobID, queuetest.JobFixture{State: rivertype.JobStateCancelled, Attempt: 1,
				Errors: []string{"JobCancelError: target answered 400"}, At: failed[id]}); err != nil {
				t.Fatal(err)
			}
		}
	}
	c := e.client()
	e.signIn(c)
	p := e.do(c, http.MethodGet, "/console/senders/orders/targets/orders-svc/failed", nil, nil)
	older, newer := strings.Index(p.body, "/deliveries/f-old-job\""), strings.Index(p.body, "/deliveries/f-new-job\"")
	if older < 0 || newer < 0 || older > newer {
		t.Errorf("failed forwards at %d (failed a minute ago) and %d (an hour ago): want the one that failed last first", older, newer)
	}
	if strings.Contains(p.body, "JobCancelError") || !strings.Contains(p.body, `<td class="error">target answered 400</td>`) {
		t.Errorf("the failed forwards' error: want \"target answered 400\" as the fast path records it: %.3000s", p.body)
	}
}
