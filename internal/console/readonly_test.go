package console_test

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/hookgate/hookgate/internal/access"
	"github.com/hookgate/hookgate/internal/console"
	"github.com/hookgate/hookgate/internal/store"
)

// readToken is the value of the read token named "ci-reader".
const readToken = "console-read-token-7c1e9a3b5d2f8e6a"

func readOptions() console.Config {
	return console.Config{AdminToken: token, ReadTokens: []access.Token{{Name: "ci-reader", Scope: access.Read, Value: readToken}}}
}

// signInWith signs c in with tok and returns the CSRF token of its session.
func (e *env) signInWith(c *http.Client, tok string) string {
	e.t.Helper()
	p := e.do(c, http.MethodPost, "/console/login", url.Values{"token": {tok}}, nil)
	if p.status != http.StatusSeeOther {
		e.t.Fatalf("sign-in: %d %s", p.status, p.body)
	}
	return csrfOf(e.t, e.do(c, http.MethodGet, "/console/", nil, nil))
}

// postForms are the forms of a page that POST, but sign-out's.
var postForms = regexp.MustCompile(`<form method="post" action="([^"]+)"`)

func changingForms(body string) []string {
	var out []string
	for _, m := range postForms.FindAllStringSubmatch(body, -1) {
		if m[1] != "/console/logout" {
			out = append(out, m[1])
		}
	}
	return out
}

// A read token signs in to the console, which shows it every page with no
// form that changes anything (the admin token's pages have them), and
// refuses every POST of its session with 403, but its sign-out, whatever
// the form: nothing is redelivered or paused, and everyone stays signed
// in. A session's scope is signed: turned into admin, the cookie is no
// session at all. Every sign-in and POST, done or refused, is in the
// audit trail with its token's name and client's address; the audit page
// lists them.
func TestConsoleReadSessionIsReadOnly(t *testing.T) {
	t.Parallel()
	e := newEnv(t, readOptions())
	e.ingest("d-1", "application/json", `{"n":1}`)
	e.failForwards("d-1", "target answered 500")
	const target = "/console/senders/orders/targets/orders-svc"
	pages := []string{"/console/", "/console/senders/orders/deliveries", "/console/senders/orders/deliveries/d-1",
		target + "/failed", "/console/search?q=d-1", "/console/audit"}

	admin, reader := e.client(), e.client()
	adminCSRF := e.signIn(admin)
	csrf := e.signInWith(reader, readToken)
	var adminForms int
	for _, path := range pages {
		p := e.do(reader, http.MethodGet, path, nil, nil)
		if p.status == http.StatusSeeOther { // the search's one hit
			p = e.do(reader, http.MethodGet, p.header.Get("Location"), nil, nil)
		}
		if p.status != http.StatusOK {
			t.Errorf("GET %s with the read session: %d", path, p.status)
			continue
		}
		if f := changingForms(p.body); len(f) > 0 {
			t.Errorf("GET %s with the read session shows forms that change things: %v", path, f)
		}
		if !strings.Contains(p.body, "ci-reader (read-only)") {
			t.Errorf("GET %s with the read session does not say it is read-only", path)
		}
		adminForms += len(changingForms(e.do(admin, http.MethodGet, path, nil, nil).body))
	}
	if adminForms < 5 {
		t.Fatalf("the admin's pages have %d forms that change things: the pages tested hold too few", adminForms)
	}

	jobs := e.forwardJobs("d-1")
	for _, path := range []string{
		"/console/senders/orders/deliveries/d-1/redeliver",
		"/console/senders/orders/delivery/redeliver?id=d-1",
		target + "/redeliver",
		target + "/pause",
		target + "/resume",
		"/console/logout-everywhere",
	} {
		form := url.Values{"csrf_token": {csrf}, "state": {"retrying"}, "reason": {"x"}}
		p := e.do(reader, http.MethodPost, path, form, nil)
		if p.status != http.StatusForbidden || !strings.Contains(p.body, `scope &#34;admin&#34;`) || !strings.Contains(p.body, "ci-reader") {
			t.Errorf("POST %s with the read session: %d, want 403 naming the scope and the token: %.300s", path, p.status, p.body)
		}
	}
	if n := e.forwardJobs("d-1"); n != jobs {
		t.Errorf("the read session's POSTs enqueued %d forwards", n-jobs)
	}
	if ps, err := e.q.TargetPauses(t.Context()); err != nil || len(ps) != 0 {
		t.Errorf("after the read session's POSTs: pauses %+v, %v; want none", ps, err)
	}
	if p := e.do(admin, http.MethodGet, "/console/", nil, nil); p.status != http.StatusOK {
		t.Errorf("the admin's session after the read session's POSTs: %d", p.status)
	}

	// The cookie's scope turned into admin is no session.
	var forged []*http.Cookie
	for _, ck := range reader.Jar.Cookies(mustURL(t, e.url+"/console/")) {
		ck.Value = strings.Replace(ck.Value, ".read.", ".admin.", 1)
		forged = append(forged, ck)
	}
	up := e.client()
	up.Jar.SetCookies(mustURL(t, e.url+"/console/"), forged)
	if p := e.do(up, http.MethodGet, "/console/", nil, nil); p.status != http.StatusSeeOther {
		t.Errorf("a read session's cookie made admin: %d, want a redirect to the sign-in", p.status)
	}
	if p := e.do(up, http.MethodPost, target+"/pause", url.Values{"csrf_token": {csrf}}, nil); p.status != http.StatusForbidden {
		t.Errorf("a pause with a read session's cookie made admin: %d, want 403", p.status)
	}

	// The admin's actions, then the read session's sign-out.
	for _, path := range []string{target + "/pause", target + "/resume", "/console/senders/orders/deliveries/d-1/redeliver"} {
		if p := e.do(admin, http.MethodPost, path, url.Values{"csrf_token": {adminCSRF}, "reason": {"migrating"}}, nil); p.status != http.StatusSeeOther {
			t.Fatalf("POST %s with the admin session: %d %.300s", path, p.status, p.body)
		}
	}
	if p := e.do(reader, http.MethodPost, "/console/logout", url.Values{"csrf_token": {csrf}}, nil); p.status != http.StatusSeeOther {
		t.Errorf("the read session's sign-out: %d", p.status)
	}

	page, err := e.q.ListAudit(t.Context(), store.AuditFilter{}, 100, "")
	if err != nil {
		t.Fatal(err)
	}
	type row struct{ token, action, outcome, detail, sender, target string }
	var got []row
	for i := len(page.Entries) - 1; i >= 0; i-- { // oldest first
		a := page.Entries[i]
		if a.Client != "127.0.0.1" {
			t.Errorf("audit row %+v: client %q, want 127.0.0.1", a, a.Client)
		}
		got = append(got, row{a.Token, a.Action, a.Outcome, a.Detail, a.Sender, a.Target})
	}
	want := []row{
		{"admin", "sign-in", "ok", "", "", ""},
		{"ci-reader", "sign-in", "ok", "", "", ""},
		{"ci-reader", "redeliver", "refused", "scope-missing", "orders", ""},
		{"ci-reader", "redeliver", "refused", "scope-missing", "orders", ""},
		{"ci-reader", "redeliver-bulk", "refused", "scope-missing", "orders", "orders-svc"},
		{"ci-reader", "pause", "refused", "scope-missing", "orders", "orders-svc"},
		{"ci-reader", "resume", "refused", "scope-missing", "orders", "orders-svc"},
		{"ci-reader", "sign-out-everywhere", "refused", "scope-missing", "", ""},
		{"admin", "pause", "ok", "", "orders", "orders-svc"},
		{"admin", "resume", "ok", "", "orders", "orders-svc"},
		{"admin", "redeliver", "ok", "", "orders", ""},
		{"ci-reader", "sign-out", "ok", "", "", ""},
	}
	if len(got) != len(want) {
		t.Fatalf("audit trail:\n%+v\nwant\n%+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("audit row %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	if a := page.Entries[1]; a.DeliveryID != "d-1" {
		t.Errorf("the admin's redelivery's row names delivery %q, want d-1", a.DeliveryID)
	}

	p := e.do(admin, http.MethodGet, "/console/audit?token=ci-reader", nil, nil)
	if p.status != http.StatusOK || strings.Count(p.body, `data-token="ci-reader"`) != 8 || strings.Contains(p.body, `data-token="admin"`) {
		t.Errorf("the audit page of ci-reader: %d, %d rows of ci-reader: %.2000s", p.status, strings.Count(p.body, `data-token="ci-reader"`), p.body)
	}
	for _, secret := range []string{readToken, token} {
		if strings.Contains(p.body, secret) {
			t.Error("the audit page shows a token's value")
		}
	}
}
