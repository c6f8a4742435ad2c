package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// The search box finds a delivery by its delivery ID, in any sender, and by
// its event ID, and goes to its page; nothing found is a 404 page saying
// so; hostile input is never a 5xx.
func TestConsoleSearch(t *testing.T) {
	t.Parallel()
	e := newEnv(t, newOptions())
	e.ingest("ord_77", "application/json", `{"order":77}`)
	e.ingest("..", "application/json", `{"order":0}`)
	c := e.client()
	e.signIn(c)
	find := func(q string) page {
		t.Helper()
		return e.do(c, http.MethodGet, "/console/search?q="+url.QueryEscape(q), nil, nil)
	}
	if p := find("ord_77"); p.status != http.StatusSeeOther || p.header.Get("Location") != "/console/senders/orders/deliveries/ord_77" {
		t.Errorf("by delivery ID: %d %q, want a redirect to its page", p.status, p.header.Get("Location"))
	}
	if p := find("  ord_77 "); p.status != http.StatusSeeOther {
		t.Errorf("by delivery ID with spaces around: %d, want a redirect", p.status)
	}
	ev := e.eventOf("ord_77")
	if p := find(ev.String()); p.status != http.StatusSeeOther || p.header.Get("Location") != "/console/senders/orders/deliveries/ord_77" {
		t.Errorf("by event ID: %d %q, want a redirect to the delivery's page", p.status, p.header.Get("Location"))
	}
	if p := find(".."); p.status != http.StatusSeeOther || p.header.Get("Location") != "/console/senders/orders/delivery?id=.." {
		t.Errorf("the delivery \"..\": %d %q, want its query-form page", p.status, p.header.Get("Location"))
	}
	if p := find("ord_404"); p.status != http.StatusNotFound || !strings.Contains(p.body, "No stored delivery") {
		t.Errorf("nothing found: %d %.300s, want a 404 saying so", p.status, p.body)
	}
	if p := find("0190f1c2-0000-7000-8000-000000000000"); p.status != http.StatusNotFound {
		t.Errorf("an unknown event ID: %d, want 404", p.status)
	}
	for _, q := range []string{"a\x00b", "\xff\xfe", strings.Repeat("x", 300), "a b"} {
		if p := find(q); p.status != http.StatusNotFound {
			t.Errorf("search %q: %d, want 404 (never a 5xx)", q, p.status)
		}
	}
	// One delivery ID in two senders: both listed, and that is
	// information, not an error.
	resp, err := e.srv.Client().Post(e.url+"/webhooks/billing", "application/json", strings.NewReader(`{"id":"ord_77"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if p := find("ord_77"); p.status != http.StatusOK || !strings.Contains(p.body, `<p class="notice" role="status">2 deliveries match.</p>`) || strings.Contains(p.body, `class="message"`) {
		t.Errorf("two matches: %d %.2000s, want both listed with a notice, not an error", p.status, p.body)
	}
	if p := find(""); p.status != http.StatusOK || !strings.Contains(p.body, `name="q"`) {
		t.Errorf("empty search: %d, want the search form", p.status)
	}
	// The box is on every page, for a signed-in operator only.
	if p := e.do(c, http.MethodGet, "/console/", nil, nil); !strings.Contains(p.body, `action="/console/search"`) {
		t.Error("the overview has no search box")
	}
	if p := e.do(e.client(), http.MethodGet, "/console/search?q=ord_77", nil, nil); p.status != http.StatusSeeOther || p.header.Get("Location") != "/console/login" {
		t.Errorf("signed out: %d %q, want the sign-in", p.status, p.header.Get("Location"))
	}
}
