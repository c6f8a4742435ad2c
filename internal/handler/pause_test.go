package handler_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/queue"
	"github.com/hookgate/hookgate/internal/store"
	"github.com/hookgate/hookgate/internal/testing/queuetest"
)

// pausesYAML: sender fwd forwards to targets a and b.
const pausesYAML = `
senders:
  - name: fwd
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    forward:
      - name: a
        url: http://127.0.0.1:1/a
      - name: b
        url: http://127.0.0.1:1/b
`

// targetPause is the answer of POST …/pause and …/resume.
type targetPause struct {
	Sender string     `json:"sender"`
	Target string     `json:"target"`
	Paused bool       `json:"paused"`
	Since  *time.Time `json:"since"`
	Until  *time.Time `json:"until"`
	Reason *string    `json:"reason"`
	By     *string    `json:"by"`
}

// postJSON posts body (none when "") to path with the admin token.
func (s *opServer) postJSON(path, body string) reply {
	s.t.Helper()
	req := s.opRequest(http.MethodPost, path, "Bearer "+testToken)
	if body != "" {
		req.Body = nopCloser{strings.NewReader(body)}
		req.ContentLength = int64(len(body))
		req.Header.Set("Content-Type", "application/json")
	}
	return s.do(req)
}

// TestPauseAndResumeATarget: POST …/pause pauses a target (200, as
// openapi.yaml says), with its reason, its end and who did it (the operator
// API and the client's address), and the target list shows the pause
// while it holds, as do the target's waiting forwards (held), in a
// delivery's forwards and in the target's; pausing again keeps when it began and takes the new
// reason and end (an empty body: none); POST …/resume ends it (200, not
// paused) and the list shows none; resuming again answers the same. The
// other target is never paused.
func TestPauseAndResumeATarget(t *testing.T) {
	t.Parallel()
	s := newOpServer(t, opOptions{yaml: pausesYAML})
	until := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	var p targetPause
	decode(t, s.postJSON("/v1/senders/fwd/targets/a/pause", `{"reason":"orders-svc is being migrated","until":"`+until.Format(time.RFC3339)+`"}`),
		http.StatusOK, http.MethodPost, routeTargetPause, &p)
	if !p.Paused || p.Sender != "fwd" || p.Target != "a" || p.Since == nil || p.Until == nil || !p.Until.Equal(until) ||
		p.Reason == nil || *p.Reason != "orders-svc is being migrated" || p.By == nil || *p.By != "admin via operator API (127.0.0.1)" {
		t.Fatalf("pause answer: %+v; want paused since now until %s, with the reason, by the operator API from 127.0.0.1", p, until)
	}
	since := *p.Since
	ts := s.targets("fwd")
	if pa := ts["a"].Pause; pa == nil || !pa.Since.Equal(since) || pa.Until == nil || !pa.Until.Equal(until) || pa.Reason != "orders-svc is being migrated" || pa.By != "admin via operator API (127.0.0.1)" {
		t.Errorf("target list, a's pause: %+v; want the pause", pa)
	}
	if ts["b"].Pause != nil {
		t.Errorf("target list, b's pause: %+v; want none", ts["b"].Pause)
	}

	// The forwards held by the pause say so: a delivery's (in the outbox)
	// and a target's forward (a job waiting for its first attempt).
	s.accept("fwd", "d-1", []byte(`{}`))
	if _, err := queuetest.New(s.pool).InsertForwardJobs(t.Context(), queue.ForwardQueue, queuetest.JobFixture{},
		queuetest.NewForwardJob{Sender: "fwd", Target: "a", DeliveryID: "d-0", MaxAttempts: 5}); err != nil {
		t.Fatal(err)
	}
	held := "paused by an operator since " + since.UTC().Format("2006-01-02 15:04:05.000 UTC") + " (orders-svc is being migrated)"
	heldOf := func() (delivery, listed map[string]*string) {
		var d deliveryRecord
		decode(t, s.call(http.MethodGet, "/v1/senders/fwd/deliveries/d-1"), http.StatusOK, http.MethodGet, routeDelivery, &d)
		delivery = map[string]*string{}
		for _, f := range d.Forwards {
			delivery[f.Target] = f.Held
		}
		listed = map[string]*string{}
		for _, f := range s.forwardPage("fwd", "a", "").Items {
			listed[f.DeliveryID] = f.Held
		}
		return delivery, listed
	}
	delivery, listed := heldOf()
	if h := delivery["a"]; h == nil || *h != held {
		t.Errorf("the delivery's forward to a: held %v, want %q", h, held)
	}
	if h := delivery["b"]; h != nil {
		t.Errorf("the delivery's forward to b: held %q, want null", *h)
	}
	if h := listed["d-0"]; h == nil || *h != held {
		t.Errorf("a's forward listed: held %v, want %q", h, held)
	}

	decode(t, s.postJSON("/v1/senders/fwd/targets/a/pause", ""), http.StatusOK, http.MethodPost, routeTargetPause, &p)
	if !p.Paused || p.Since == nil || !p.Since.Equal(since) || p.Until != nil || p.Reason == nil || *p.Reason != "" {
		t.Errorf("paused again without a body: %+v; want paused since %s still, until resumed, no reason", p, since)
	}

	for range 2 {
		decode(t, s.postJSON("/v1/senders/fwd/targets/a/resume", ""), http.StatusOK, http.MethodPost, routeTargetResume, &p)
		if p.Paused || p.Sender != "fwd" || p.Target != "a" || p.Since != nil || p.Until != nil || p.Reason != nil || p.By != nil {
			t.Errorf("resume answer: %+v; want not paused", p)
		}
		if pa := s.targets("fwd")["a"].Pause; pa != nil {
			t.Errorf("target list after the resume, a's pause: %+v; want none", pa)
		}
	}
	if delivery, listed := heldOf(); delivery["a"] != nil || listed["d-0"] != nil {
		t.Errorf("after the resume, the forwards to a are still held: %v, %v", delivery["a"], listed["d-0"])
	}
}

// TestPauseRefusals: an unknown sender or target is 404; a body that is
// not JSON, a JSON value that is not the request's object, an unknown
// member, a time that is not RFC 3339, a reason over 200 characters or
// with a control character, an end that is not in the future, a body over
// 4 KiB are 400, each a problem as openapi.yaml says, and none pauses
// anything. Without the token: 401.
func TestPauseRefusals(t *testing.T) {
	t.Parallel()
	s := newOpServer(t, opOptions{yaml: pausesYAML})
	for _, path := range []string{"/v1/senders/nobody/targets/a/pause", "/v1/senders/nobody/targets/a/resume"} {
		wantOpProblem(t, s.postJSON(path, ""), http.StatusNotFound, "unknown-sender", http.MethodPost, routeTargetPause)
	}
	for _, path := range []string{"/v1/senders/fwd/targets/zz/pause", "/v1/senders/fwd/targets/zz/resume"} {
		wantOpProblem(t, s.postJSON(path, ""), http.StatusNotFound, "not-found", http.MethodPost, routeTargetPause)
	}
	past := time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)
	for name, tc := range map[string]struct{ body, detail string }{
		"not JSON":            {`reason=x`, "JSON object"},
		"an array":            {`["x"]`, "JSON object"},
		"an unknown member":   {`{"reason":"x","by":"me"}`, "no other members"},
		"a time not RFC 3339": {`{"until":"tomorrow"}`, "RFC 3339"},
		"a number as reason":  {`{"reason":42}`, "JSON object"},
		"a reason too long":   {`{"reason":"` + strings.Repeat("x", 201) + `"}`, "at most 200"},
		"a control character": {`{"reason":"two\nlines"}`, "control character"},
		"an end in the past":  {`{"until":"` + past + `"}`, "not in the future"},
		"a body over 4 KiB":   {`{"reason":"x"}` + strings.Repeat(" ", 4<<10), "JSON object"},
	} {
		p := wantOpProblem(t, s.postJSON("/v1/senders/fwd/targets/a/pause", tc.body), http.StatusBadRequest, "invalid-parameter", http.MethodPost, routeTargetPause)
		if !strings.Contains(p.Detail, tc.detail) {
			t.Errorf("%s: detail %q does not say %q", name, p.Detail, tc.detail)
		}
	}
	r := s.do(s.opRequest(http.MethodPost, "/v1/senders/fwd/targets/a/pause", ""))
	wantOpProblem(t, r, http.StatusUnauthorized, "unauthorized", http.MethodPost, routeTargetPause)
	ps, err := store.New(s.pool).TargetPauses(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 0 {
		t.Errorf("after the refusals: pauses %+v; want none", ps)
	}
}
