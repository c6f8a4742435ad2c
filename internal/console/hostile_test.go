package console_test

import (
	"encoding/base64"
	"encoding/json"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
)

// Console paths and filters holding what no delivery can have (NUL,
// invalid UTF-8, control characters, over-long values) are answered 400 or
// 404, never 5xx, and never reach PostgreSQL as such.
func TestConsoleHostileInputIsNot5xx(t *testing.T) {
	t.Parallel()
	e := newEnv(t, newOptions())
	e.ingest("ok-1", "application/json", `{"n":1}`)
	c := e.client()
	csrf := e.signIn(c)
	crafted := func(d string) string {
		raw, err := json.Marshal(map[string]any{"t": 1764547200000000, "d": d})
		if err != nil {
			t.Fatal(err)
		}
		return base64.RawURLEncoding.EncodeToString(raw)
	}
	long := strings.Repeat("a", 256)
	gets := []string{
		"/console/senders/orders/deliveries/a%00b",
		"/console/senders/orders/deliveries/a%00b/body",
		"/console/senders/orders/deliveries/%FF%FE",
		"/console/senders/orders/deliveries/%FF%FE/body",
		"/console/senders/orders/deliveries/a%0Ab",
		"/console/senders/orders/deliveries/" + long,
		"/console/senders/orders/deliveries/" + long + "/body",
		"/console/senders/orders/deliveries?delivery_id=a%00b",
		"/console/senders/orders/deliveries?delivery_id=%FF%FE",
		"/console/senders/orders/deliveries?delivery_id=" + long,
		"/console/senders/orders/deliveries?event_type=%FF%FE",
		"/console/senders/orders/deliveries?event_type=a%00b",
		"/console/senders/orders/deliveries?event_type=" + strings.Repeat("a", 1000),
		"/console/senders/orders/deliveries?cursor=" + crafted("a\u0000b"),
		"/console/senders/orders/deliveries?event_type=x&cursor=" + crafted("a\u0000b"),
		"/console/senders/orders/deliveries?since=%00",
		"/console/senders/%00/deliveries",
		"/console/senders/%FF/deliveries/x",
		"/console/senders/orders/targets/%00/failed",
		"/console/senders/orders/delivery?id=a%00b",
		"/console/senders/orders/delivery/body?id=%FF",
	}
	for _, path := range gets {
		p := e.do(c, http.MethodGet, path, nil, nil)
		if p.status != http.StatusBadRequest && p.status != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 400 or 404: %.300s", path, p.status, p.body)
		}
	}
	for _, path := range []string{
		"/console/senders/orders/deliveries/a%00b/redeliver",
		"/console/senders/orders/deliveries/%FF%FE/redeliver",
		"/console/senders/orders/delivery/redeliver?id=a%00b",
	} {
		p := e.do(c, http.MethodPost, path, url.Values{"csrf_token": {csrf}}, nil)
		if p.status != http.StatusBadRequest && p.status != http.StatusNotFound {
			t.Errorf("POST %s: %d, want 400 or 404: %.300s", path, p.status, p.body)
		}
	}
	// The filters still find what exists.
	if p := e.do(c, http.MethodGet, "/console/senders/orders/deliveries?delivery_id=ok-1", nil, nil); p.status != http.StatusOK || !strings.Contains(p.body, "ok-1") {
		t.Errorf("the delivery ID filter: %d", p.status)
	}
}

var hrefRe = regexp.MustCompile(`(?:href|action)="([^"]+)"`)

// links returns the page's links and form actions, unescaped as a browser
// reads them and resolved against base as a browser resolves them (dot
// segments removed).
func links(t *testing.T, base string, p page) []string {
	t.Helper()
	b, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range hrefRe.FindAllStringSubmatch(p.body, -1) {
		ref, err := url.Parse(html.UnescapeString(m[1]))
		if err != nil {
			t.Fatalf("link %q: %v", m[1], err)
		}
		u := b.ResolveReference(ref)
		out = append(out, u.RequestURI())
	}
	return out
}

// Deliveries whose ID is "." or ".." (ingest accepts them) can be opened,
// downloaded and redelivered from the console by following its links, which
// survive a browser's removal of dot segments.
func TestConsoleDotDeliveryIDs(t *testing.T) {
	t.Parallel()
	e := newEnv(t, newOptions())
	c := e.client()
	csrf := e.signIn(c)
	for _, id := range []string{".", ".."} {
		e.ingest(id, "text/plain", "dot body "+id)
		list := e.do(c, http.MethodGet, "/console/senders/orders/deliveries?delivery_id="+url.QueryEscape(id), nil, nil)
		var page string
		for _, l := range links(t, e.url+"/console/senders/orders/deliveries", list) {
			if strings.Contains(l, "delivery") && strings.Contains(l, "id=") {
				page = l
			}
		}
		if page == "" {
			t.Fatalf("%q: no link to the delivery in the list: %v", id, links(t, e.url+"/console/senders/orders/deliveries", list))
		}
		p := e.do(c, http.MethodGet, page, nil, nil)
		if p.status != http.StatusOK || !strings.Contains(p.body, "dot body "+id) {
			t.Fatalf("%q: the delivery's page %s: %d", id, page, p.status)
		}
		var body, redeliver string
		for _, l := range links(t, e.url+page, p) {
			switch {
			case strings.Contains(l, "/body"):
				body = l
			case strings.Contains(l, "/redeliver"):
				redeliver = l
			}
		}
		if b := e.do(c, http.MethodGet, body, nil, nil); b.status != http.StatusOK || b.body != "dot body "+id {
			t.Errorf("%q: the raw body %s: %d %q", id, body, b.status, b.body)
		}
		jobs := e.forwardJobs(id)
		r := e.do(c, http.MethodPost, redeliver, url.Values{"csrf_token": {csrf}}, nil)
		if r.status != http.StatusSeeOther {
			t.Fatalf("%q: redeliver %s: %d", id, redeliver, r.status)
		}
		if n := e.forwardJobs(id); n != jobs+1 {
			t.Errorf("%q: forward jobs %d after redeliver, want %d", id, n, jobs+1)
		}
		back := e.do(c, http.MethodGet, r.header.Get("Location"), nil, nil)
		if back.status != http.StatusOK || !strings.Contains(back.body, "dot body "+id) {
			t.Errorf("%q: the page after redeliver (%s): %d", id, r.header.Get("Location"), back.status)
		}
	}
}

// /console/static/ serves its files and lists nothing, signed in or not.
func TestConsoleStaticListsNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, newOptions())
	signedIn := e.client()
	e.signIn(signedIn)
	for _, c := range []*http.Client{e.client(), signedIn} {
		for _, path := range []string{"/console/static/", "/console/static", "/console/static/.", "/console/static/./", "/console/static//", "/console/static/%2e/", "/console/static/console.css/"} {
			p := e.do(c, http.MethodGet, path, nil, nil)
			if p.status == http.StatusOK || strings.Contains(p.body, "console.css") && !strings.Contains(p.body, "<link") {
				t.Errorf("GET %s: %d %.200s, want no listing", path, p.status, p.body)
			}
		}
		if p := e.do(c, http.MethodGet, "/console/static/console.css", nil, nil); p.status != http.StatusOK || !strings.Contains(p.header.Get("Content-Type"), "text/css") {
			t.Errorf("the stylesheet: %d %q", p.status, p.header.Get("Content-Type"))
		}
	}
}
