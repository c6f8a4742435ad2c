package console_test

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestConsolePausesAndResumesATarget: on the target's page an operator
// pauses it (a POST with the session's CSRF token, a reason and no end):
// the page says it is paused by an operator, since when, why and by whom
// (the console and the client's address), and offers Resume; the
// overview's target list marks it paused; a delivery accepted meanwhile
// says its forward is held by the pause, and the target's page counts it.
// Resume ends the pause: the page offers Pause again, and the forward is
// no longer said to be held. A pause without the CSRF token, with a wrong
// one, or from another site pauses nothing (403); an end in the past or a
// reason too long is refused (400).
func TestConsolePausesAndResumesATarget(t *testing.T) {
	t.Parallel()
	e := newEnv(t, newOptions())
	c := e.client()
	csrf := e.signIn(c)
	const target = "/console/senders/orders/targets/orders-svc"

	for name, tc := range map[string]struct {
		form url.Values
		hdr  map[string]string
	}{
		"no CSRF token":    {url.Values{"reason": {"x"}}, nil},
		"a wrong token":    {url.Values{"reason": {"x"}, "csrf_token": {csrf + "x"}}, nil},
		"another site":     {url.Values{"reason": {"x"}, "csrf_token": {csrf}}, map[string]string{"Sec-Fetch-Site": "cross-site"}},
		"another origin":   {url.Values{"reason": {"x"}, "csrf_token": {csrf}}, map[string]string{"Origin": "https://evil.example"}},
		"not signed in":    {url.Values{"reason": {"x"}, "csrf_token": {csrf}}, nil},
		"resume, no token": {url.Values{}, nil},
	} {
		client, path := c, target+"/pause"
		if name == "not signed in" {
			client = e.client()
		}
		if strings.HasPrefix(name, "resume") {
			path = target + "/resume"
		}
		if p := e.do(client, http.MethodPost, path, tc.form, tc.hdr); p.status != http.StatusForbidden {
			t.Errorf("%s: %d, want 403", name, p.status)
		}
	}
	for name, form := range map[string]url.Values{
		"an end in the past":  {"until": {time.Now().Add(-time.Hour).UTC().Format("2006-01-02T15:04")}, "csrf_token": {csrf}},
		"an end not a time":   {"until": {"tomorrow"}, "csrf_token": {csrf}},
		"a reason too long":   {"reason": {strings.Repeat("x", 201)}, "csrf_token": {csrf}},
		"an unknown target":   {"csrf_token": {csrf}},
		"an unknown sender":   {"csrf_token": {csrf}},
		"a target of another": {"csrf_token": {csrf}},
	} {
		path, want := target+"/pause", http.StatusBadRequest
		switch name {
		case "an unknown target":
			path, want = "/console/senders/orders/targets/nope/pause", http.StatusNotFound
		case "an unknown sender":
			path, want = "/console/senders/nobody/targets/orders-svc/pause", http.StatusNotFound
		case "a target of another":
			path, want = "/console/senders/billing/targets/orders-svc/pause", http.StatusNotFound
		}
		if p := e.do(c, http.MethodPost, path, form, nil); p.status != want {
			t.Errorf("%s: %d, want %d: %.300s", name, p.status, want, p.body)
		}
	}
	if ps, err := e.q.TargetPauses(t.Context()); err != nil || len(ps) != 0 {
		t.Fatalf("after the refused requests: pauses %+v, %v; want none", ps, err)
	}

	p := e.do(c, http.MethodPost, target+"/pause", url.Values{"reason": {"orders-svc is being migrated"}, "until": {""}, "csrf_token": {csrf}}, nil)
	if p.status != http.StatusSeeOther || p.header.Get("Location") != target+"/failed?paused=1" {
		t.Fatalf("pause: %d to %q, want 303 to the target's page", p.status, p.header.Get("Location"))
	}
	page := e.do(c, http.MethodGet, p.header.Get("Location"), nil, nil)
	paused := regexp.MustCompile(`<span class="state paused">paused</span> by an operator since (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} UTC) \(orders-svc is being migrated\), until resumed; by admin via console \(127\.0\.0\.1\)`)
	m := paused.FindStringSubmatch(page.body)
	if m == nil || !strings.Contains(page.body, `id="resume"`) || strings.Contains(page.body, `id="pause"`) || !strings.Contains(page.body, "Paused: ") {
		t.Fatalf("the target's page after the pause does not say it is paused, and offer Resume: %.4000s", page.body)
	}
	since := m[1]
	if o := e.do(c, http.MethodGet, "/console/", nil, nil); !strings.Contains(o.body, `<span class="state paused" title="paused by an operator since `+since+` (orders-svc is being migrated)">paused</span>`) {
		t.Errorf("the overview does not mark the target paused: %.4000s", o.body)
	}

	e.ingest("p-1", "application/json", `{}`) // its forward waits in the outbox: pending
	held := "held: paused by an operator since " + since + " (orders-svc is being migrated)"
	if d := e.do(c, http.MethodGet, "/console/senders/orders/deliveries/p-1", nil, nil); !strings.Contains(d.body, `<span class="held">`+held+`</span>`) {
		t.Errorf("the delivery's page does not say %q: %.3000s", held, d.body)
	}
	page = e.do(c, http.MethodGet, target+"/failed", nil, nil)
	if !strings.Contains(page.body, `data-held="1"><span class="held">1 forwards `+held+`</span>`) || !strings.Contains(page.body, "once the target is resumed") {
		t.Errorf("the target's page does not count the held forward: %.4000s", page.body)
	}

	p = e.do(c, http.MethodPost, target+"/resume", url.Values{"csrf_token": {csrf}}, nil)
	if p.status != http.StatusSeeOther || p.header.Get("Location") != target+"/failed?resumed=1" {
		t.Fatalf("resume: %d to %q, want 303 to the target's page", p.status, p.header.Get("Location"))
	}
	page = e.do(c, http.MethodGet, p.header.Get("Location"), nil, nil)
	if !strings.Contains(page.body, "not paused") || !strings.Contains(page.body, `id="pause"`) || strings.Contains(page.body, "held-forwards") || !strings.Contains(page.body, "Resumed: ") {
		t.Errorf("the target's page after the resume: %.4000s", page.body)
	}
	if d := e.do(c, http.MethodGet, "/console/senders/orders/deliveries/p-1", nil, nil); strings.Contains(d.body, "held:") {
		t.Errorf("after the resume the delivery's page still says held: %.3000s", d.body)
	}
	if ps, err := e.q.TargetPauses(t.Context()); err != nil || len(ps) != 0 {
		t.Errorf("after the resume: pauses %+v, %v; want none", ps, err)
	}
}
