package transport

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// TestParseRetryAfter: Retry-After in seconds or as an HTTP date, from
// now. A huge value saturates at maxRetryAfter (before, 99999999999999
// seconds × time.Second overflowed int64, and more digits than an int64
// holds read as no Retry-After at all); a negative or fractional number,
// a date in the past and garbage are no Retry-After.
func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		v    string
		want time.Duration
	}{
		{"", 0},
		{"0", 0},
		{"1", time.Second},
		{"120", 2 * time.Minute},
		{" 7 ", 7 * time.Second},
		{"31536000", maxRetryAfter}, // a year: the ceiling itself
		{"31536001", maxRetryAfter},
		{"99999999999999", maxRetryAfter},          // × 1e9 ns overflows int64
		{"9223372036854775807", maxRetryAfter},     // the largest int64
		{"99999999999999999999999", maxRetryAfter}, // more digits than an int64 holds
		{"-5", 0},
		{"+5", 0},
		{"1.5", 0},
		{"5s", 0},
		{"soon", 0},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{now.Add(-time.Hour).Format(http.TimeFormat), 0},
		{now.Format(http.TimeFormat), 0},
		{"Fri, 31 Dec 9999 23:59:59 GMT", maxRetryAfter}, // t.Sub(now) saturates at the largest Duration
		{"Wed, 02 Dec 2026 12:00:60 GMT", 0},             // not a date
	} {
		got := parseRetryAfter(tc.v, now)
		if got != tc.want {
			t.Errorf("parseRetryAfter(%q) = %v, want %v", tc.v, got, tc.want)
		}
		if got < 0 || got > maxRetryAfter {
			t.Errorf("parseRetryAfter(%q) = %v: out of [0, %v]", tc.v, got, maxRetryAfter)
		}
	}
}

// TestHTTPTransportClassifies: HTTP.Send's verdict of each kind
// of answer: a 2xx is delivered at the transport's clock; a 503 with
// Retry-After is retried after it and pauses the whole target, a 408's
// Retry-After is the forward's alone; another 4xx fails; a connection
// error is retried, without the URL's credentials in its error; a send cut
// short by the caller's limit or context has no verdict, one cut short by
// the target's timeout is retried.
func TestHTTPTransportClassifies(t *testing.T) {
	t.Parallel()
	tg := testkit.NewTarget(t, func(_ int, r *http.Request) testkit.Answer {
		switch r.Header.Get("X-Hookgate-Delivery-Id") {
		case "ok":
			return testkit.Answer{Status: http.StatusNoContent}
		case "busy":
			return testkit.Answer{Status: http.StatusServiceUnavailable, Header: http.Header{"Retry-After": {"3"}}}
		case "slow":
			return testkit.Answer{Status: http.StatusRequestTimeout, Header: http.Header{"Retry-After": {"2"}}}
		case "bad":
			return testkit.Answer{Status: http.StatusUnprocessableEntity}
		default:
			return testkit.Answer{Block: true}
		}
	})
	cfg := testkit.ParseConfig(t, `senders:
  - name: acme
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    forward:
      - { name: up, url: "`+tg.URL+`", timeout: 200ms }
      - { name: down, url: "http://127.0.0.1:1/hook/s3cret-pw?token=s3cret-tok", timeout: 1s, secret_path: true }
`)
	clock := time.Date(2026, 12, 2, 12, 0, 0, 0, time.FixedZone("X", 3600))
	tr := NewHTTP(NewHTTPClient(4), func() time.Time { return clock })
	up, down := testkit.ConfigTarget(t, cfg, "acme", "up"), testkit.ConfigTarget(t, cfg, "acme", "down")
	msg := func(target *config.Target, deliveryID string) Message {
		return Message{Sender: "acme", Target: target, EventID: uuid.New(), DeliveryID: deliveryID,
			Headers: map[string][]string{"Content-Type": {"application/json"}}, Body: []byte(`{}`)}
	}
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		m    Message
		want Sent // Err, At and Took compared below
	}{
		{"2xx", t.Context(), msg(up, "ok"), Sent{Verdict: VerdictDelivered, Status: http.StatusNoContent}},
		{"503 with Retry-After", t.Context(), msg(up, "busy"), Sent{Verdict: VerdictRetry, Status: http.StatusServiceUnavailable, RetryAfter: 3 * time.Second, PausesTarget: true}},
		{"408 with Retry-After", t.Context(), msg(up, "slow"), Sent{Verdict: VerdictRetry, Status: http.StatusRequestTimeout, RetryAfter: 2 * time.Second}},
		{"422", t.Context(), msg(up, "bad"), Sent{Verdict: VerdictFailed, Status: http.StatusUnprocessableEntity}},
		{"connection refused", t.Context(), msg(down, "x"), Sent{Verdict: VerdictRetry}},
		{"target's timeout", t.Context(), msg(up, "hang"), Sent{Verdict: VerdictRetry}},
		{"caller's limit", t.Context(), func() Message { m := msg(up, "hang"); m.Limit = 20 * time.Millisecond; return m }(), Sent{Verdict: VerdictNone}},
		{"context ended", cancelled, msg(up, "hang"), Sent{Verdict: VerdictNone}},
	} {
		got := tr.Send(tc.ctx, tc.m)
		if got.Verdict != tc.want.Verdict || got.Status != tc.want.Status || got.RetryAfter != tc.want.RetryAfter || got.PausesTarget != tc.want.PausesTarget {
			t.Errorf("%s: Send = %+v, want %+v", tc.name, got, tc.want)
		}
		if (got.Err == nil) != (tc.want.Verdict == VerdictDelivered) {
			t.Errorf("%s: Err = %v with verdict %s", tc.name, got.Err, got.Verdict)
		}
		if (tc.name == "target's timeout" || tc.name == "caller's limit") && !errors.Is(got.Err, context.DeadlineExceeded) {
			t.Errorf("%s: Err = %v, want it to say the deadline passed", tc.name, got.Err)
		}
		if got.Err != nil && strings.Contains(got.Err.Error(), "s3cret") {
			t.Errorf("%s: Err %q holds the URL's credentials", tc.name, got.Err)
		}
		if want := clock.UTC(); tc.want.Verdict == VerdictDelivered && !got.At.Equal(want) || got.At.Location() != time.UTC {
			t.Errorf("%s: At = %v, want %v (the transport's clock, UTC)", tc.name, got.At, want)
		}
	}
	// The delivered forward carried the identifying headers, the
	// timestamp of the transport's clock and the stored Content-Type.
	h := tg.Hits()[0].Header
	for k, want := range map[string]string{"Content-Type": "application/json", "X-Hookgate-Sender": "acme", "X-Hookgate-Delivery-Id": "ok",
		"Webhook-Timestamp": strconv.FormatInt(clock.Unix(), 10), "User-Agent": "hookgate"} {
		if got := h.Get(k); got != want {
			t.Errorf("the forward's %s is %q, want %q", k, got, want)
		}
	}
	if h.Get("Idempotency-Key") == "" || h.Get("Idempotency-Key") != h.Get("Webhook-Id") {
		t.Errorf("Idempotency-Key %q and Webhook-Id %q: want the event ID in both", h.Get("Idempotency-Key"), h.Get("Webhook-Id"))
	}
}

// TestHTTPTransportKeepsTheAnswer: Send gives back the response's headers
// and the first MaxKeptBody bytes of its body, whatever the verdict; a
// longer body is read no further than maxResponseBytes, and an empty one
// keeps nothing.
func TestHTTPTransportKeepsTheAnswer(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("0123456789abcdef", 1024) // 16 KiB
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Header.Get("X-Hookgate-Delivery-Id") {
		case "long":
			w.Header().Set("X-Trace", "t-1")
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte(long))
		case "short":
			_, _ = w.Write([]byte("ok"))
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	}))
	t.Cleanup(srv.Close)
	cfg := testkit.ParseConfig(t, `senders:
  - name: acme
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    forward:
      - { name: up, url: "`+srv.URL+`", timeout: 5s }
`)
	tr := NewHTTP(NewHTTPClient(4), time.Now)
	up := testkit.ConfigTarget(t, cfg, "acme", "up")
	send := func(id string) Sent {
		return tr.Send(t.Context(), Message{Sender: "acme", Target: up, EventID: uuid.New(), DeliveryID: id, Body: []byte(`{}`)})
	}
	if s := send("long"); s.Verdict != VerdictRetry || string(s.Body) != long[:MaxKeptBody] || s.Header["X-Trace"][0] != "t-1" {
		t.Errorf("long: %d bytes kept, header %v, verdict %s; want the first %d bytes and the headers", len(s.Body), s.Header, s.Verdict, MaxKeptBody)
	}
	if s := send("short"); s.Verdict != VerdictDelivered || string(s.Body) != "ok" || http.Header(s.Header).Get("Content-Length") != "2" {
		t.Errorf("short: %+v; want the body and headers", s)
	}
	if s := send("empty"); s.Verdict != VerdictDelivered || s.Body != nil {
		t.Errorf("empty: body %q; want none", s.Body)
	}
}
