package handler_test

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// attemptRecord is an attempt as GET /v1/events/{event_id}/attempts shows
// it (decode rejects unknown fields).
type attemptRecord struct {
	Target       string              `json:"target"`
	StartedAt    time.Time           `json:"started_at"`
	DurationMs   float64             `json:"duration_ms"`
	Outcome      string              `json:"outcome"`
	Cause        string              `json:"cause"`
	CauseText    string              `json:"cause_text"`
	Attempt      int                 `json:"attempt"`
	Actor        *string             `json:"actor"`
	JobID        *int64              `json:"job_id"`
	Status       *int                `json:"status"`
	Ack          *string             `json:"ack"`
	Error        *string             `json:"error"`
	Headers      map[string][]string `json:"headers"`
	BodyEncoding string              `json:"body_encoding"`
	Body         string              `json:"body"`
}

type eventAttempts struct {
	EventID  string          `json:"event_id"`
	Sender   string          `json:"sender"`
	Attempts []attemptRecord `json:"attempts"`
}

// TestOperatorEventAttempts: a target answering 500 with a body, then 503
// with Retry-After, then 200 with a body that is not UTF-8: the API lists
// the three attempts newest first, each with its answer and cause, the
// credential-like headers redacted, the bodies as received (escaped text,
// or base64 when not UTF-8).
func TestOperatorEventAttempts(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	tg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch n.Add(1) {
		case 1:
			w.Header().Set("Set-Cookie", "sid=s3cret")
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte(`<script>alert("x")</script>`))
		case 2:
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("busy"))
		default:
			_, _ = w.Write([]byte{0xff, 0xfe, 'o', 'k'})
		}
	}))
	t.Cleanup(tg.Close)
	s := newOpServer(t, opOptions{work: true, yaml: fmt.Sprintf(`
senders:
  - name: fwd
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    forward:
      - name: t1
        url: %s
        max_attempts: 5
        breaker_threshold: 1000
`, tg.URL)})
	ev := s.accept("fwd", "d-attempts", []byte(`{"a":1}`))
	var got eventAttempts
	testkit.Poll(t, 2*time.Minute, "three attempts", func() bool {
		decode(t, s.call(http.MethodGet, "/v1/events/"+ev+"/attempts"), http.StatusOK, http.MethodGet, routeAttempts, &got)
		return len(got.Attempts) == 3
	}, func() string { return fmt.Sprintf("%+v", got) })
	if got.EventID != ev || got.Sender != "fwd" {
		t.Errorf("event %s of %s, want %s of fwd", got.EventID, got.Sender, ev)
	}
	a := got.Attempts
	for i, w := range []struct {
		outcome, cause, causeText string
		status                    int
		encoding, body            string
	}{
		{"delivered", "retry", "retry 2", 200, "base64", base64.StdEncoding.EncodeToString([]byte{0xff, 0xfe, 'o', 'k'})},
		{"retry", "retry", "retry 1", 503, "text", "busy"},
		{"retry", "first", "first attempt", 500, "text", `<script>alert("x")</script>`},
	} {
		if a[i].Outcome != w.outcome || a[i].Cause != w.cause || a[i].CauseText != w.causeText || a[i].Status == nil || *a[i].Status != w.status ||
			a[i].BodyEncoding != w.encoding || a[i].Body != w.body || a[i].Target != "t1" || a[i].JobID == nil {
			t.Errorf("attempt %d: %+v; want %+v", i, a[i], w)
		}
	}
	if a[0].Error != nil || a[1].Error == nil || *a[1].Error != "target answered 503, Retry-After 1s" || a[1].Headers["Retry-After"][0] != "1" {
		t.Errorf("newest attempts: %+v, %+v", a[0], a[1])
	}
	if c := a[2].Headers["Set-Cookie"]; len(c) != 1 || c[0] != "xxxxx" {
		t.Errorf("the 500's Set-Cookie: %q, want it redacted", c)
	}
	raw := s.call(http.MethodGet, "/v1/events/"+ev+"/attempts")
	if strings.Contains(string(raw.body), "s3cret") {
		t.Errorf("the attempts show a credential-like header's value: %s", raw.body)
	}
	// The delivery's forward reads delivered, at the time of the newest
	// attempt.
	var d deliveryRecord
	testkit.Poll(t, 2*time.Minute, "the forward to settle", func() bool {
		d = s.delivery("fwd", "d-attempts")
		return settled(d)
	}, func() string { return fmt.Sprintf("%+v", d.Forwards) })
	if len(d.Forwards) != 1 || d.Forwards[0].DeliveredAt == nil || d.Forwards[0].Attempts != 3 {
		t.Errorf("forwards: %+v; want one delivered at its third attempt", d.Forwards)
	}
}
