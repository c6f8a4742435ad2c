package console_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookgate/hookgate/internal/console"
	"github.com/hookgate/hookgate/internal/dedup"
	"github.com/hookgate/hookgate/internal/handler"
	"github.com/hookgate/hookgate/internal/queue"
	"github.com/hookgate/hookgate/internal/sender"
	"github.com/hookgate/hookgate/internal/testing/queuetest"
)

// replica returns a second server on e's database with a console of its
// own, as another hookgate process with the same admin token would be.
func (e *env) replica() *env {
	e.t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	opts := e.opts
	opts.Senders, opts.Queries, opts.Log = e.cfg, e.q, log
	cons, err := console.New(opts)
	if err != nil {
		e.t.Fatal(err)
	}
	ingest, err := dedup.New(dedup.Config{Pool: e.pool, InFlightWait: 5 * time.Second})
	if err != nil {
		e.t.Fatal(err)
	}
	hc := handler.DefaultConfig()
	hc.AdminToken, hc.Queries, hc.Redeliverer, hc.Console = e.opts.AdminToken, e.q, e.rc, cons
	hc.ReadTokens = e.opts.ReadTokens
	hc.Forwards = queue.NewJobs(e.pool)
	hc.Senders, hc.Ingest, hc.Ready, hc.Registry, hc.Log = sender.MustCompile(e.cfg), ingest, func(context.Context) error { return nil }, prometheus.NewRegistry(), log
	h, err := handler.New(hc)
	if err != nil {
		e.t.Fatal(err)
	}
	srv := httptest.NewServer(h.Router())
	e.t.Cleanup(srv.Close)
	r := *e
	r.url, r.srv = srv.URL, srv
	return &r
}

// forwardJobs counts the River jobs of the orders delivery id.
func (e *env) forwardJobs(id string) int {
	e.t.Helper()
	jobs, err := queuetest.New(e.pool).ForwardJobs(e.t.Context())
	if err != nil {
		e.t.Fatal(err)
	}
	n, ev := 0, e.eventOf(id).String()
	for _, j := range jobs {
		if j.EventID == ev {
			n++
		}
	}
	return n
}

// withCookies returns a client that sends cookies (copied from c's jar at
// e) to r's server, as a copy of the cookie would be sent.
func withCookies(t *testing.T, c *http.Client, from, to *env) *http.Client {
	t.Helper()
	c2 := to.client()
	c2.Jar.SetCookies(mustURL(t, to.url+"/console/"), c.Jar.Cookies(mustURL(t, from.url+"/console/")))
	return c2
}

// After sign-out, a copy of the session's cookie is refused, by this
// server and by another one on the same database, and a redeliver POST
// with it and its CSRF token is refused and enqueues nothing.
func TestConsoleSignOutRevokesTheSession(t *testing.T) {
	t.Parallel()
	e := newEnv(t, newOptions())
	e.ingest("so-1", "application/json", `{"n":1}`)
	other := e.replica()
	c := e.client()
	csrf := e.signIn(c)
	stolen := withCookies(t, c, e, e)          // a copy of the cookie, for this server
	stolenThere := withCookies(t, c, e, other) // and for the other one
	if p := other.do(stolenThere, http.MethodGet, "/console/", nil, nil); p.status != http.StatusOK {
		t.Fatalf("the other server refuses a valid session: %d", p.status)
	}
	if p := e.do(c, http.MethodPost, "/console/logout", url.Values{"csrf_token": {csrf}}, nil); p.status != http.StatusSeeOther {
		t.Fatalf("sign-out: %d", p.status)
	}
	jobs := e.forwardJobs("so-1")
	for _, tc := range []struct {
		name string
		e    *env
		c    *http.Client
	}{{"this server", e, stolen}, {"another server", other, stolenThere}} {
		if p := tc.e.do(tc.c, http.MethodGet, "/console/", nil, nil); p.status != http.StatusSeeOther || p.header.Get("Location") != "/console/login" {
			t.Errorf("%s: the signed-out cookie opens the overview: %d %q, want a redirect to the sign-in", tc.name, p.status, p.header.Get("Location"))
		}
		if p := tc.e.do(tc.c, http.MethodGet, "/console/senders/orders/deliveries/so-1", nil, nil); p.status != http.StatusSeeOther {
			t.Errorf("%s: the signed-out cookie opens a delivery: %d", tc.name, p.status)
		}
		p := tc.e.do(tc.c, http.MethodPost, "/console/senders/orders/deliveries/so-1/redeliver", url.Values{"csrf_token": {csrf}}, nil)
		if p.status != http.StatusForbidden {
			t.Errorf("%s: redeliver with the signed-out cookie and its CSRF token: %d, want 403", tc.name, p.status)
		}
	}
	if n := e.forwardJobs("so-1"); n != jobs {
		t.Errorf("forward jobs of so-1: %d after the refused redelivers, want %d (unchanged)", n, jobs)
	}
	// Signing in again works.
	e.signIn(e.client())
}

// "Sign out everywhere" ends every session, in every browser and on every
// server on the database; a sign-in after it works.
func TestConsoleSignOutEverywhere(t *testing.T) {
	t.Parallel()
	e := newEnv(t, newOptions())
	other := e.replica()
	a, b := e.client(), other.client()
	csrfA := e.signIn(a)
	other.signIn(b)
	aThere := withCookies(t, a, e, other)
	if p := e.do(a, http.MethodPost, "/console/logout-everywhere", url.Values{}, nil); p.status != http.StatusForbidden {
		t.Errorf("sign out everywhere without the CSRF token: %d, want 403", p.status)
	}
	if p := e.do(a, http.MethodGet, "/console/", nil, nil); p.status != http.StatusOK {
		t.Fatalf("the session ended without a CSRF token: %d", p.status)
	}
	if p := e.do(a, http.MethodPost, "/console/logout-everywhere", url.Values{"csrf_token": {csrfA}}, nil); p.status != http.StatusSeeOther {
		t.Fatalf("sign out everywhere: %d", p.status)
	}
	for name, tc := range map[string]struct {
		e *env
		c *http.Client
	}{"its own copy elsewhere": {other, aThere}, "another browser's session": {other, b}} {
		if p := tc.e.do(tc.c, http.MethodGet, "/console/", nil, nil); p.status != http.StatusSeeOther {
			t.Errorf("%s: %d after sign out everywhere, want a redirect to the sign-in", name, p.status)
		}
	}
	c := other.client()
	other.signIn(c)
	if p := e.do(withCookies(t, c, other, e), http.MethodGet, "/console/", nil, nil); p.status != http.StatusOK {
		t.Errorf("a sign-in after sign out everywhere: %d on the other server, want 200", p.status)
	}
}
