package handler_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/hookgate/hookgate/internal/access"
	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/handler"
	"github.com/hookgate/hookgate/internal/sender"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// readToken is the value of the read token named readName.
const (
	readToken = "rd-token-8c2f4e6a1b-3d5f7a9c0e2b4d6f81"
	readName  = "ci-reader"
)

var readTokens = []access.Token{{Name: readName, Scope: access.Read, Value: readToken}}

// auditPage and auditEntry are GET /v1/audit's answer.
type (
	auditPage struct {
		Items      []auditEntry `json:"items"`
		NextCursor *string      `json:"next_cursor"`
	}
	auditEntry struct {
		ID         int64          `json:"id"`
		At         string         `json:"at"`
		Token      string         `json:"token"`
		Client     *string        `json:"client"`
		Action     string         `json:"action"`
		Sender     *string        `json:"sender"`
		Target     *string        `json:"target"`
		EventID    *uuid.UUID     `json:"event_id"`
		DeliveryID *string        `json:"delivery_id"`
		Outcome    string         `json:"outcome"`
		Detail     *string        `json:"detail"`
		Details    map[string]any `json:"details"`
	}
)

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// audit reads the whole audit trail with auth, newest first, page by page.
func (s *opServer) audit(auth string, query string) []auditEntry {
	s.t.Helper()
	var all []auditEntry
	path := "/v1/audit?limit=2"
	if query != "" {
		path += "&" + query
	}
	for range 100 {
		var p auditPage
		decode(s.t, s.do(s.opRequest(http.MethodGet, path, auth)), http.StatusOK, http.MethodGet, routeAudit, &p)
		all = append(all, p.Items...)
		if p.NextCursor == nil {
			return all
		}
		path = "/v1/audit?limit=2&cursor=" + url.QueryEscape(*p.NextCursor)
		if query != "" {
			path += "&" + query
		}
	}
	s.t.Fatal("the audit trail does not end")
	return nil
}

// A read token is refused 403 scope-missing on every operator route that
// is not a GET, as the generated router lists them (a new one cannot be
// forgotten), and on any other method and path under /v1; it gets what
// the admin token gets on every GET. Each refusal names the missing
// scope and the token's name, never its value, and is in the audit
// trail, refused, with the token's name and the client's address. The
// log lines name the token, and never hold its value.
func TestReadTokenRefusedOnEveryChangingEndpoint(t *testing.T) {
	t.Parallel()
	var logged testkit.LogBuffer
	s := newOpServer(t, opOptions{readTokens: readTokens, log: &logged})
	eventID := uuid.MustParse(s.accept("hdr", "d1", []byte(`{}`)))
	routes := operatorRoutes(t, s.router, "hdr", "d1", eventID)
	routes = append(routes,
		opRoute{http.MethodDelete, "(wrong method)", "/v1/senders"},
		opRoute{http.MethodPut, "(no route)", "/v1/no-such-thing"},
		opRoute{http.MethodPatch, "(no route)", "/v1/config"})
	reader := "Bearer " + readToken
	var changing, reading int
	for _, rt := range routes {
		r := s.do(s.opRequest(rt.method, rt.path, reader))
		if rt.method == http.MethodGet {
			reading++
			admin := s.call(rt.method, rt.path)
			if r.status != admin.status || admin.status == http.StatusForbidden {
				t.Errorf("%s %s with the read token: %s; the admin token got %d", rt.method, rt.path, r, admin.status)
			}
			if rt.pattern[0] == '/' {
				wantSpecBody(t, r, rt.method, rt.pattern)
			}
			continue
		}
		changing++
		p := wantProblem(t, r, http.StatusForbidden, "scope-missing")
		if rt.pattern[0] == '/' {
			wantSpecBody(t, r, rt.method, rt.pattern)
		}
		if !strings.Contains(p.Detail, `"admin"`) || !strings.Contains(p.Detail, `"`+readName+`"`) {
			t.Errorf("%s %s: detail %q does not name the scope missing and the token", rt.method, rt.path, p.Detail)
		}
		if strings.Contains(string(r.body), readToken) {
			t.Errorf("%s %s: the answer holds the token's value", rt.method, rt.path)
		}
	}
	if changing < 8 || reading < 8 {
		t.Fatalf("%d changing and %d reading requests: the router lists fewer routes than the API has", changing, reading)
	}

	// Nothing was changed: hdr has no targets, so a redelivery by the
	// admin token is refused 409, not done, whatever the read token did.
	got := s.audit(reader, "token="+readName)
	if len(got) != changing {
		t.Fatalf("the audit trail has %d rows of %s, want %d (one per refused request): %+v", len(got), readName, changing, got)
	}
	actions := map[string]int{}
	for _, e := range got {
		actions[e.Action]++
		if e.Outcome != "refused" || str(e.Detail) != "scope-missing" || str(e.Client) != "127.0.0.1" {
			t.Errorf("audit row %+v: want refused, scope-missing, from 127.0.0.1", e)
		}
	}
	for _, a := range []string{"redeliver", "redeliver-bulk", "pause", "resume", "reload", "other"} {
		if actions[a] == 0 {
			t.Errorf("no refused %s in the audit trail: %v", a, actions)
		}
	}
	log := logged.String()
	if strings.Contains(log, readToken) || strings.Contains(log, testToken) {
		t.Error("a token's value is in the log")
	}
	if !strings.Contains(log, "token="+readName) || !strings.Contains(log, "token=admin") {
		t.Errorf("the request log lines do not name the tokens:\n%.2000s", log)
	}
}

// reparse is a ConfigReloader that puts yaml in force in live, as the
// gateway's reloader puts its file in force.
type reparse struct {
	t    *testing.T
	live *sender.Live
	yaml string
}

func (r *reparse) ReloadConfig(string) (handler.ConfigReload, error) {
	cfg, err := config.Parse([]byte(r.yaml), func(string) (string, bool) { return "", false })
	if err != nil {
		return handler.ConfigReload{}, err
	}
	from := r.live.Snapshot()
	to := sender.MustCompile(cfg).Snapshot()
	r.live.Swap(to)
	return handler.ConfigReload{From: from, To: to, Changes: config.Diff(from.Config(), to.Config())}, nil
}

// Every operator action of the API is in the audit trail, newest first,
// with its token's name, its client's address, what it concerns and its
// outcome; a failed one as refused, with its problem type. Read tokens
// read the trail, filtered by action or token, page by page.
func TestAuditRecordsOperatorActions(t *testing.T) {
	t.Parallel()
	target := testkit.NewTarget(t, testkit.Sequence(http.StatusOK))
	yaml := fmt.Sprintf(`
senders:
  - name: fwd
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    forward:
      - name: svc
        url: %s/hook
`, target.Server())
	rl := &reparse{t: t, yaml: yaml}
	s := newOpServer(t, opOptions{yaml: yaml, readTokens: readTokens, reloader: rl})
	rl.live = s.live
	eventID := s.accept("fwd", "d-1", []byte(`{}`))
	admin := s.from(t, "127.0.0.7")
	call := func(method, path, body string) reply {
		t.Helper()
		req := s.newRequest(method, path, []byte(body))
		req.Header.Set("Authorization", "Bearer "+testToken)
		return admin.do(req)
	}
	for _, c := range []struct {
		method, path, body string
		status             int
	}{
		{http.MethodPost, "/v1/events/" + eventID + "/redeliver", "", http.StatusAccepted},
		{http.MethodPost, "/v1/senders/fwd/targets/svc/redeliver", `{"state":"failed"}`, http.StatusAccepted},
		{http.MethodPost, "/v1/senders/fwd/targets/svc/pause", `{"reason":"migrating"}`, http.StatusOK},
		{http.MethodPost, "/v1/senders/fwd/targets/svc/resume", "", http.StatusOK},
		{http.MethodPost, "/v1/config/reload", "", http.StatusOK},
		{http.MethodPost, "/v1/senders/fwd/targets/nope/pause", "", http.StatusNotFound},
	} {
		if r := call(c.method, c.path, c.body); r.status != c.status {
			t.Fatalf("%s %s: %s, want %d", c.method, c.path, r, c.status)
		}
	}
	got := s.audit("Bearer "+readToken, "token=admin")
	want := []struct{ action, sender, target, outcome, detail string }{
		{"pause", "fwd", "nope", "refused", "not-found"},
		{"reload", "", "", "ok", ""},
		{"resume", "fwd", "svc", "ok", ""},
		{"pause", "fwd", "svc", "ok", ""},
		{"redeliver-bulk", "fwd", "svc", "ok", ""},
		{"redeliver", "fwd", "", "ok", ""},
	}
	if len(got) != len(want) {
		t.Fatalf("the audit trail has %d rows of admin, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		e := got[i]
		if e.Token != "admin" || str(e.Client) != "127.0.0.7" || e.Action != w.action || str(e.Sender) != w.sender || str(e.Target) != w.target ||
			e.Outcome != w.outcome || str(e.Detail) != w.detail {
			t.Errorf("row %d = %s from %s: %s %s/%s %s %s\nwant admin from 127.0.0.7, %+v", i, e.Token, str(e.Client), e.Action, str(e.Sender), str(e.Target), e.Outcome, str(e.Detail), w)
		}
		if i > 0 && e.ID >= got[i-1].ID {
			t.Errorf("row %d (id %d) is not older than row %d (id %d)", i, e.ID, i-1, got[i-1].ID)
		}
	}
	if r := got[5]; r.EventID == nil || r.EventID.String() != eventID || str(r.DeliveryID) != "d-1" || r.Details["forwards"] != float64(1) {
		t.Errorf("the redelivery's row %+v does not name its event, delivery and forwards", r)
	}
	if r := got[3]; r.Details["reason"] != "migrating" {
		t.Errorf("the pause's row %+v does not keep its reason", r)
	}
	if r := got[4]; r.Details["state"] != "failed" {
		t.Errorf("the bulk redelivery's row %+v does not keep its state", r)
	}
	if r := got[1]; r.Details["hash"] == nil || r.Details["changed"] == nil {
		t.Errorf("the reload's row %+v does not keep its hashes", r)
	}
	if pauses := s.audit("Bearer "+testToken, "action=pause"); len(pauses) != 2 {
		t.Errorf("action=pause: %d rows, want 2", len(pauses))
	}
	r := s.call(http.MethodGet, "/v1/audit?cursor=eyJqIjoxfQ")
	wantOpProblem(t, r, http.StatusBadRequest, "invalid-parameter", http.MethodGet, routeAudit)
}
