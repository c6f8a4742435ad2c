package forward_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/riverqueue/river/rivertype"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/dedup"
	"github.com/hookgate/hookgate/internal/events"
	"github.com/hookgate/hookgate/internal/forward"
	"github.com/hookgate/hookgate/internal/idempotency"
	"github.com/hookgate/hookgate/internal/queue"
	"github.com/hookgate/hookgate/internal/testing/queuetest"
	"github.com/hookgate/hookgate/internal/testing/storetest"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// TestForwardRetriesThenDeliversSigned: a target that answers the first two
// attempts of every event with 503 gets every event in the end, each with
// its own Idempotency-Key (the event ID, also the webhook-id), a valid
// Standard Webhooks signature, the identifying headers, the original body
// and Content-Type, and the target's extra headers. A second, unsigned
// target of the same sender gets its own forward of every event, unsigned.
// The jobs, their errors and the metrics name the targets by name: the
// signed target's URL, whose path is secret (secret_path) and which holds
// a query token, appears in none of them. (A URL with a password is
// refused at start-up: config.)
func TestForwardRetriesThenDeliversSigned(t *testing.T) {
	t.Parallel()
	signed := testkit.NewTarget(t, testkit.FailFirst(2, http.StatusServiceUnavailable))
	plain := testkit.NewTarget(t, testkit.Always(http.StatusNoContent))
	const (
		urlPassword = "fwd-pass-8c1e0b"
		urlToken    = "qtok-5d9a7f"
	)
	signedURL := signed.URL + "/hooks/" + urlPassword + "?token=" + urlToken
	// The breaker is kept shut here (its own tests are in breaker_test.go):
	// this test is about the retries of each forward.
	e := newEnv(t, fmt.Sprintf(`      - name: t10
        url: %s
        timeout: 2s
        max_attempts: 5
        breaker_threshold: 1000
        secret_path: true
        signing_secret: %s
        headers: { X-Target-Token: tok-123, X-Env: test }
      - name: t1
        url: %s
        timeout: 2s
`, signedURL, testSecret, plain.URL), envOpts{Work: true})

	const n = 10
	ct := "application/vnd.acme+json; charset=utf-8"
	byEvent := map[string]delivery{}
	for i := range n {
		id := fmt.Sprintf("evt-%02d", i)
		// Bytes a JSON re-encoding would change: the body must arrive as sent.
		body := fmt.Appendf(nil, "{ \"id\" : %q,\n \"n\": %d, \"x\": \"\\u00e9\xc3\xa9\" }", id, i)
		d := e.deliver(id, body, ct)
		byEvent[d.eventID] = d
	}
	js := e.waitJobs(2 * n)

	perTarget := map[string]int{}
	for _, j := range js {
		perTarget[j.Target]++
		for _, msg := range j.Errors {
			if leak := containsAny(msg, signed.Server(), urlPassword, urlToken); leak != "" {
				t.Errorf("job %d: attempt error %q contains %q of the target's URL", j.ID, msg, leak)
			}
		}
		if j.State != "completed" {
			t.Errorf("job %d (%s → %s): state %s, want completed; errors %q", j.ID, j.EventID, j.Target, j.State, j.Errors)
			continue
		}
		d, ok := byEvent[j.EventID]
		if !ok || j.DeliveryID != d.id {
			t.Errorf("job %d names event %s, delivery %s: not one of the accepted deliveries", j.ID, j.EventID, j.DeliveryID)
		}
		var out queue.Output
		if err := json.Unmarshal([]byte(j.Output), &out); err != nil || out.Status < 200 || out.Status > 299 || out.DeliveredAt.IsZero() {
			t.Errorf("job %d: recorded output %q, want the 2xx status and the delivery time", j.ID, j.Output)
		}
		switch j.Target {
		case "t10":
			if j.Attempt != 3 || len(j.Errors) != 2 {
				t.Errorf("job %d to the failing target: attempt %d with errors %q, want delivered at attempt 3 after two 503s", j.ID, j.Attempt, j.Errors)
			}
			for _, msg := range j.Errors {
				if !strings.Contains(msg, "503") {
					t.Errorf("job %d: attempt error %q does not name the 503", j.ID, msg)
				}
			}
		case "t1":
			if j.Attempt != 1 {
				t.Errorf("job %d to the healthy target: attempt %d, want 1", j.ID, j.Attempt)
			}
		default:
			t.Errorf("job %d forwards to %q, not a configured target", j.ID, j.Target)
		}
	}
	if perTarget["t10"] != n || perTarget["t1"] != n {
		t.Errorf("jobs per target %v, want %d for each of the two targets", perTarget, n)
	}

	check := func(tg *testkit.Target, wantPerKey int, signedTarget bool) {
		t.Helper()
		hits := tg.Hits()
		keys := map[string]int{}
		for _, h := range hits {
			keys[h.Header.Get("Idempotency-Key")]++
		}
		if len(keys) != n || len(hits) != n*wantPerKey {
			t.Errorf("target %s: %d requests with %d distinct Idempotency-Keys, want %d and %d", tg.URL, len(hits), len(keys), n*wantPerKey, n)
		}
		for _, h := range hits {
			key := h.Header.Get("Idempotency-Key")
			d, ok := byEvent[key]
			if !ok {
				t.Errorf("target %s: Idempotency-Key %q is no accepted event's ID", tg.URL, key)
				continue
			}
			if wh := h.Header.Get("webhook-id"); wh != key {
				t.Errorf("event %s: webhook-id %q, want the Idempotency-Key", key, wh)
			}
			if got := h.Header.Get("X-Hookgate-Sender"); got != "acme" {
				t.Errorf("event %s: X-Hookgate-Sender %q, want acme", key, got)
			}
			if got := h.Header.Get("X-Hookgate-Delivery-Id"); got != d.id {
				t.Errorf("event %s: X-Hookgate-Delivery-Id %q, want %q", key, got, d.id)
			}
			if got := h.Header.Get("Content-Type"); got != ct {
				t.Errorf("event %s: Content-Type %q, want the original %q", key, got, ct)
			}
			if got := h.Header.Get("Content-Encoding"); got != "identity" {
				t.Errorf("event %s: Content-Encoding %q, want the original \"identity\"", key, got)
			}
			if !bytes.Equal(h.Body, d.body) {
				t.Errorf("event %s: body %q, want the original bytes %q", key, h.Body, d.body)
			}
			if h.Header.Get("X-Delivery-Id") != "" {
				t.Errorf("event %s: the sender's own X-Delivery-Id header was forwarded", key)
			}
			if signedTarget {
				if h.Header.Get("X-Target-Token") != "tok-123" || h.Header.Get("X-Env") != "test" {
					t.Errorf("event %s: extra headers X-Target-Token %q, X-Env %q; want tok-123 and test",
						key, h.Header.Get("X-Target-Token"), h.Header.Get("X-Env"))
				}
				if why := verifyStandard(testKey, h.Header, h.Body, h.At); why != "" {
					t.Errorf("event %s: %s", key, why)
				}
				// The signature must not verify under another key.
				if verifyStandard([]byte("another key"), h.Header, h.Body, h.At) == "" {
					t.Errorf("event %s: the signature verifies under any key", key)
				}
			} else {
				if s := h.Header.Get("webhook-signature"); s != "" {
					t.Errorf("event %s: unsigned target got webhook-signature %q", key, s)
				}
				if h.Header.Get("X-Target-Token") != "" {
					t.Errorf("event %s: the other target's extra header leaked to this one", key)
				}
				if h.Header.Get("webhook-timestamp") == "" {
					t.Errorf("event %s: no webhook-timestamp", key)
				}
			}
		}
	}
	check(signed, 3, true)
	check(plain, 1, false)

	attempts := func(target, outcome string) float64 {
		return e.counter("hookgate_forward_attempts_total", map[string]string{"sender": "acme", "target": target, "outcome": outcome})
	}
	if r, d := attempts("t10", "retry"), attempts("t10", "delivered"); r != 2*n || d != n {
		t.Errorf("metrics for the failing target t10: %v retries and %v delivered, want %d and %d", r, d, 2*n, n)
	}
	if r, d := attempts("t1", "retry"), attempts("t1", "delivered"); r != 0 || d != n {
		t.Errorf("metrics for the healthy target t1: %v retries and %v delivered, want 0 and %d", r, d, n)
	}
	text := e.metricsText()
	for _, want := range []string{
		`hookgate_forward_attempts_total{outcome="delivered",sender="acme",target="t10"} 10`,
		`hookgate_forward_attempts_total{outcome="retry",sender="acme",target="t10"} 20`,
		`hookgate_forward_attempts_total{outcome="delivered",sender="acme",target="t1"} 10`,
		`hookgate_forward_duration_seconds_count{sender="acme",target="t10"} 30`,
		`hookgate_forward_duration_seconds_count{sender="acme",target="t1"} 10`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics has no line %q", want)
		}
	}
	if leak := containsAny(text, signed.Server(), plain.Server(), "127.0.0.1", "/hooks", "fwd-user", urlPassword, urlToken); leak != "" {
		t.Errorf("/metrics contains %q of a target's URL:\n%s", leak, text)
	}
}

// containsAny returns the first of subs that s contains, or "".
func containsAny(s string, subs ...string) string {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return sub
		}
	}
	return ""
}

// TestForwardClientErrorFailsAtOnce: a 4xx other than 408 and 429 fails the
// forward at once: one request, the job cancelled at attempt 1, no retry;
// so does a redirect, which is an answer, not followed (its Location points
// back at the target: a followed redirect would be a second request).
func TestForwardClientErrorFailsAtOnce(t *testing.T) {
	t.Parallel()
	statuses := []int{400, 401, 403, 404, 410, 413, 422, 302, 307}
	tg := testkit.NewTarget(t, func(_ int, r *http.Request) testkit.Answer {
		var status int
		_, _ = fmt.Sscanf(r.Header.Get("X-Hookgate-Delivery-Id"), "status-%d", &status)
		if status/100 == 3 {
			return testkit.Answer{Status: status, Header: http.Header{"Location": {r.URL.Path}}}
		}
		return testkit.Answer{Status: status}
	})
	e := newEnv(t, fmt.Sprintf("      - name: t3\n        url: %s\n        timeout: 1s\n        max_attempts: 5\n", tg.URL), envOpts{Work: true})

	byEvent := map[string]int{}
	for _, s := range statuses {
		d := e.deliver(fmt.Sprintf("status-%d", s), []byte(`{}`), "application/json")
		byEvent[d.eventID] = s
	}
	for _, j := range e.waitJobs(len(statuses)) {
		s := byEvent[j.EventID]
		if j.State != "cancelled" || j.Attempt != 1 {
			t.Errorf("target answered %d: job state %s at attempt %d, want cancelled at attempt 1", s, j.State, j.Attempt)
		}
		if len(j.Errors) != 1 || !strings.Contains(j.Errors[0], fmt.Sprint(s)) {
			t.Errorf("target answered %d: job errors %q, want one naming the status", s, j.Errors)
		}
		if got := len(tg.HitsFor(j.EventID)); got != 1 {
			t.Errorf("target answered %d: it received %d requests, want exactly 1", s, got)
		}
		// The status is recorded as the attempt's output (river.RecordOutput),
		// not only in the error's text.
		var out queue.Output
		if err := json.Unmarshal([]byte(j.Output), &out); err != nil || out.Status != s || out.Attempt != 1 {
			t.Errorf("target answered %d: recorded output %q, want its status at attempt 1", s, j.Output)
		}
	}
	if f := e.counter("hookgate_forward_attempts_total", map[string]string{"outcome": "failed"}); f != float64(len(statuses)) {
		t.Errorf("failed attempts metric %v, want %d", f, len(statuses))
	}
}

// TestForwardRetryableStatuses: 408, 429, 500, 502, 503 and 504 are retried;
// the second attempt, answered 200, delivers.
func TestForwardRetryableStatuses(t *testing.T) {
	t.Parallel()
	statuses := []int{408, 429, 500, 502, 503, 504}
	tg := testkit.NewTarget(t, func(n int, r *http.Request) testkit.Answer {
		if n > 1 {
			return testkit.Answer{Status: http.StatusOK}
		}
		var status int
		_, _ = fmt.Sscanf(r.Header.Get("X-Hookgate-Delivery-Id"), "status-%d", &status)
		return testkit.Answer{Status: status}
	})
	e := newEnv(t, fmt.Sprintf("      - name: t4\n        url: %s\n        timeout: 1s\n        max_attempts: 5\n        breaker_threshold: 1000\n", tg.URL), envOpts{Work: true})
	byEvent := map[string]int{}
	for _, s := range statuses {
		d := e.deliver(fmt.Sprintf("status-%d", s), []byte(`{}`), "application/json")
		byEvent[d.eventID] = s
	}
	for _, j := range e.waitJobs(len(statuses)) {
		s := byEvent[j.EventID]
		if j.State != "completed" || j.Attempt != 2 {
			t.Errorf("first answer %d: job state %s at attempt %d (errors %q), want completed at attempt 2", s, j.State, j.Attempt, j.Errors)
		}
		if got := len(tg.HitsFor(j.EventID)); got != 2 {
			t.Errorf("first answer %d: %d requests, want 2", s, got)
		}
	}
}

// TestForwardTimeoutRetriesThenDiscards: a target that never answers makes
// every attempt time out; after max_attempts (3) the forward fails
// (discarded) having sent exactly 3 requests.
func TestForwardTimeoutRetriesThenDiscards(t *testing.T) {
	t.Parallel()
	tg := testkit.NewTarget(t, func(int, *http.Request) testkit.Answer { return testkit.Answer{Block: true} })
	e := newEnv(t, fmt.Sprintf("      - name: t5\n        url: %s\n        timeout: 300ms\n        max_attempts: 3\n", tg.URL), envOpts{Work: true})
	d := e.deliver("never-answered", []byte(`{"a":1}`), "application/json")

	js := e.waitJobs(1)
	j := js[0]
	if j.State != "discarded" || j.Attempt != 3 || j.MaxAttempts != 3 {
		t.Errorf("job state %s at attempt %d of %d, want discarded at attempt 3 of 3", j.State, j.Attempt, j.MaxAttempts)
	}
	if len(j.Errors) != 3 {
		t.Errorf("job errors %q, want one per attempt (3)", j.Errors)
	}
	for _, msg := range j.Errors {
		if !strings.Contains(msg, "deadline exceeded") && !strings.Contains(msg, "Timeout") && !strings.Contains(msg, "timeout") {
			t.Errorf("attempt error %q does not say the attempt timed out", msg)
		}
		// The error names the target, not its URL (which may hold secrets).
		if !strings.Contains(msg, `"t5"`) || strings.Contains(msg, "/hooks") {
			t.Errorf("attempt error %q: want it to name the target t5 and not its URL %s", msg, tg.URL)
		}
	}
	if got := len(tg.HitsFor(d.eventID)); got != 3 {
		t.Errorf("target received %d requests, want exactly 3 (max_attempts)", got)
	}
	if got := len(tg.Hits()); got != 3 {
		t.Errorf("target received %d requests in all, want 3", got)
	}
}

// TestForwardRetryAfterIsHonoured: a 429 or 503 with Retry-After: 1 schedules
// the retry at least a second after the answer, even though the backoff
// alone would retry within 100ms. The check compares the target's own
// timestamps (when it answered, when the retry arrived) and the job's
// scheduled_at: it is a behavioural check, not a performance assertion.
func TestForwardRetryAfterIsHonoured(t *testing.T) {
	t.Parallel()
	tg := testkit.NewTarget(t, func(n int, r *http.Request) testkit.Answer {
		if n > 1 {
			return testkit.Answer{Status: http.StatusOK}
		}
		status := http.StatusTooManyRequests
		if strings.HasSuffix(r.Header.Get("X-Hookgate-Delivery-Id"), "503") {
			status = http.StatusServiceUnavailable
		}
		return testkit.Answer{Status: status, Header: http.Header{"Retry-After": {"1"}}}
	})
	// The backoff's Max bounds Retry-After too; it is above 1s here.
	e := newEnv(t, fmt.Sprintf("      - name: t6\n        url: %s\n        timeout: 1s\n        max_attempts: 5\n", tg.URL),
		envOpts{Work: true, Backoff: forward.Backoff{Base: 10 * time.Millisecond, Max: 5 * time.Second}})
	ids := map[string]string{}
	for _, id := range []string{"ra-429", "ra-503"} {
		ids[e.deliver(id, []byte(`{}`), "application/json").eventID] = id
	}
	for _, j := range e.waitJobs(2) {
		id := ids[j.EventID]
		if j.State != "completed" || j.Attempt != 2 {
			t.Errorf("%s: job state %s at attempt %d (errors %q), want completed at attempt 2", id, j.State, j.Attempt, j.Errors)
			continue
		}
		hits := tg.HitsFor(j.EventID)
		if len(hits) != 2 {
			t.Errorf("%s: %d requests, want 2", id, len(hits))
			continue
		}
		answered := hits[0].AnswerAt
		if gap := hits[1].At.Sub(answered); gap < time.Second {
			t.Errorf("%s: the retry arrived %v after the Retry-After: 1 answer, want at least 1s", id, gap)
		}
		// scheduled_at is when the retry was scheduled for (the worker reads
		// the clock after the answer arrived; PostgreSQL keeps microseconds).
		if min := answered.Add(time.Second).Truncate(time.Microsecond); j.ScheduledAt.Before(min) {
			t.Errorf("%s: scheduled_at %s, want at least the answer's time + 1s (%s)", id, j.ScheduledAt, min)
		}
		if len(j.Errors) != 1 || !strings.Contains(j.Errors[0], "Retry-After") {
			t.Errorf("%s: attempt errors %q, want one naming the Retry-After", id, j.Errors)
		}
	}
}

// TestForwardRecordsStatusAndRetryAfter: a retrying forward shows the
// target's last status and Retry-After as its attempt recorded them
// (river.RecordOutput), through the operators' queries (package store).
func TestForwardRecordsStatusAndRetryAfter(t *testing.T) {
	t.Parallel()
	tg := testkit.NewTarget(t, func(int, *http.Request) testkit.Answer {
		return testkit.Answer{Status: http.StatusServiceUnavailable, Header: http.Header{"Retry-After": {"120"}}}
	})
	// The backoff's Max (1 minute) bounds the wait: the job stays retrying.
	e := newEnv(t, fmt.Sprintf("      - name: t7\n        url: %s\n        timeout: 1s\n        max_attempts: 5\n        breaker_threshold: 1000\n", tg.URL),
		envOpts{Work: true, Backoff: forward.Backoff{Base: 10 * time.Millisecond, Max: time.Minute}})
	d := e.deliver("ra-120", []byte(`{}`), "application/json")
	var fwds []queue.Forward
	e.poll("the forward to be retrying after its first attempt", func() bool {
		var err error
		fwds, err = queue.NewJobs(e.pool).EventForwards(t.Context(), "acme", uuid.MustParse(d.eventID))
		return err == nil && len(fwds) == 1 && fwds[0].State == queue.StateRetrying
	}, func() string { return fmt.Sprintf("forwards: %+v", fwds) })
	f := fwds[0]
	if f.Attempts != 1 || f.LastStatus != http.StatusServiceUnavailable || f.LastRetryAfter != 2*time.Minute {
		t.Errorf("forward = %+v, want attempt 1 with last status 503 and Retry-After 2m", f)
	}
}

// TestForwardConnectionRefusedIsRetried: a target whose port refuses
// connections is retried until it listens, and then gets the forward.
func TestForwardConnectionRefusedIsRetried(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	url := "http://" + addr + "/hooks"
	e := newEnv(t, fmt.Sprintf("      - name: t7\n        url: %s\n        timeout: 1s\n        max_attempts: 50\n", url), envOpts{Work: true})
	d := e.deliver("refused", []byte(`{}`), "application/json")

	// Wait for an attempt that was refused, then listen on the port.
	e.poll("a refused attempt", func() bool {
		js := e.jobs()
		return len(js) == 1 && len(js[0].Errors) > 0
	}, func() string { return fmt.Sprintf("jobs: %+v", e.jobs()) })
	l, err = net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen again on %s: %v", addr, err)
	}
	var mu sync.Mutex
	var keys []string
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	})}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	t.Cleanup(func() {
		_ = srv.Close()
		<-served //nolint:errcheck // ErrServerClosed, after Close
	})

	j := e.waitJobs(1)[0]
	if j.State != "completed" || j.Attempt < 2 {
		t.Fatalf("job state %s at attempt %d, want completed after at least one retry", j.State, j.Attempt)
	}
	for _, msg := range j.Errors {
		if !strings.Contains(msg, "connection refused") {
			t.Errorf("attempt error %q, want connection refused", msg)
		}
		if !strings.Contains(msg, `"t7"`) || strings.Contains(msg, "/hooks") {
			t.Errorf("attempt error %q: want it to name the target t7 and not its URL %s", msg, url)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(keys) != 1 || keys[0] != d.eventID {
		t.Errorf("the target received Idempotency-Keys %q, want exactly [%s]", keys, d.eventID)
	}
}

// TestDuplicateDeliveriesEnqueueOneForward: the same delivery posted five
// times, one after the other or all at once, is one event and one forward
// job, and the target receives it once.
func TestDuplicateDeliveriesEnqueueOneForward(t *testing.T) {
	t.Parallel()
	tg := testkit.NewTarget(t, testkit.Always(http.StatusOK))
	e := newEnv(t, fmt.Sprintf("      - name: t8\n        url: %s\n        timeout: 1s\n", tg.URL), envOpts{Work: true})

	body := []byte(`{"id":"dup-seq"}`)
	first := e.deliver("dup-seq", body, "application/json")
	for i := range 4 {
		d := e.deliver("dup-seq", body, "application/json")
		if !d.replayed || d.eventID != first.eventID {
			t.Errorf("sequential duplicate %d: replayed %v, event %s; want a replay of %s", i+1, d.replayed, d.eventID, first.eventID)
		}
	}

	var wg sync.WaitGroup
	results := make([]delivery, 5)
	errs := make([]error, 5)
	start := make(chan struct{})
	for i := range results {
		wg.Go(func() {
			<-start
			results[i], errs[i] = e.tryDeliver("dup-conc", []byte(`{"id":"dup-conc"}`), "application/json")
		})
	}
	close(start)
	wg.Wait()
	fresh := 0
	for i, err := range errs {
		if err != nil {
			t.Fatalf("concurrent duplicate %d: %v", i, err)
		}
		if !results[i].replayed {
			fresh++
		}
		if results[i].eventID != results[0].eventID {
			t.Errorf("concurrent duplicates answered events %s and %s", results[0].eventID, results[i].eventID)
		}
	}
	if fresh != 1 {
		t.Errorf("%d of the concurrent duplicates were accepted as new, want 1", fresh)
	}

	js := e.waitJobs(2)
	perEvent := map[string]int{}
	for _, j := range js {
		perEvent[j.EventID]++
		if j.State != "completed" {
			t.Errorf("job %d: state %s, want completed", j.ID, j.State)
		}
	}
	if perEvent[first.eventID] != 1 || perEvent[results[0].eventID] != 1 {
		t.Errorf("forward jobs per event %v, want one for each of %s and %s", perEvent, first.eventID, results[0].eventID)
	}
	for _, ev := range []string{first.eventID, results[0].eventID} {
		if got := len(tg.HitsFor(ev)); got != 1 {
			t.Errorf("event %s: the target received %d requests, want 1", ev, got)
		}
	}
	var events int
	if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM webhook_events`).Scan(&events); err != nil {
		t.Fatal(err)
	}
	if events != 2 {
		t.Errorf("webhook_events rows = %d, want 2", events)
	}
}

// TestRolledBackDeliveryQueuesNoForward: the outbox rows of a delivery's
// forwards are written in the delivery's transaction, so a delivery that
// fails after they were written — a later statement of the state change, or
// the COMMIT — or before — a statement of the state change ahead of them —
// leaves no outbox row, and the relay finds nothing to make a job of. A
// delivery that commits leaves exactly one outbox row per target, a
// duplicate adds none (before or after the relay), and the relay makes one
// job of each row.
func TestRolledBackDeliveryQueuesNoForward(t *testing.T) {
	t.Parallel()
	e := newEnv(t, `      - name: t11
        url: http://127.0.0.1:9/a
      - name: t2
        url: http://127.0.0.1:9/b
`, envOpts{}) // insert only: nothing is worked, and no relay runs but the test's
	ctx := t.Context()
	if _, err := e.pool.Exec(ctx, `CREATE TABLE scratch (v int CONSTRAINT scratch_v_key UNIQUE DEFERRABLE INITIALLY DEFERRED)`); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(ctx, `INSERT INTO scratch VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	sender, _ := e.cfg.Sender("acme")
	store, err := dedup.New(dedup.Config{Pool: e.pool, InFlightWait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	relay := e.newRelay(0)

	newDelivery := func(id string) idempotency.Delivery {
		eventID := uuid.Must(uuid.NewV7())
		now := time.Now().UTC().Truncate(time.Microsecond)
		return idempotency.Delivery{
			Key:           idempotency.Key{Sender: "acme", DeliveryID: id},
			RequestSHA256: [32]byte{1},
			EventID:       eventID,
			Response:      idempotency.Response{Status: 202, ContentType: "application/json", Body: []byte(`{}`)},
			ReceivedAt:    now,
			ExpiresAt:     now.Add(time.Hour),
		}
	}
	insertEvent := func(b *dedup.Batch, d idempotency.Delivery) {
		events.QueueInsert(b, events.Event{ID: d.EventID, Sender: d.Sender, DeliveryID: d.DeliveryID,
			ReceivedAt: d.ReceivedAt, Headers: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{}`)})
	}
	queueOutbox := func(b *dedup.Batch, d idempotency.Delivery) {
		forward.QueueOutbox(b, d.EventID, d.DeliveryID, d.ReceivedAt, sender.TargetNames(), forward.Lease{})
	}
	// assertRows fails the transaction (division by zero) unless it sees n
	// outbox rows of d's event.
	assertRows := func(b *dedup.Batch, d idempotency.Delivery, n int) {
		b.Queue(`SELECT 1 / (count(*) = $3)::int FROM forward_outbox WHERE sender = $1 AND event_id = $2`, d.Sender, [16]byte(d.EventID), n)
	}
	tests := []struct {
		name     string
		change   func(d idempotency.Delivery) dedup.Change
		wantCode string // the SQLSTATE of the failure
	}{
		{"statement fails after the outbox rows", func(d idempotency.Delivery) dedup.Change {
			return func(b *dedup.Batch) {
				insertEvent(b, d)
				queueOutbox(b, d)
				// Division by zero exactly when the transaction sees the two rows.
				b.Queue(`SELECT 1 / (count(*) - 2)::int FROM forward_outbox WHERE sender = $1 AND event_id = $2`, d.Sender, [16]byte(d.EventID))
			}
		}, "22012"},
		{"commit fails", func(d idempotency.Delivery) dedup.Change {
			return func(b *dedup.Batch) {
				insertEvent(b, d)
				queueOutbox(b, d)
				assertRows(b, d, 2)
				b.Queue(`INSERT INTO scratch VALUES (1)`) // deferred: fails at COMMIT
			}
		}, "23505"},
		{"state change fails before the outbox rows", func(d idempotency.Delivery) dedup.Change {
			return func(b *dedup.Batch) {
				insertEvent(b, d)
				b.Queue(`SELECT 1/0`)
				queueOutbox(b, d)
			}
		}, "22012"},
	}
	count := func(table string) int {
		t.Helper()
		var n int
		if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, tt := range tests {
		d := newDelivery("rolled-back-" + strings.ReplaceAll(tt.name, " ", "-"))
		res, err := store.Run(ctx, d, tt.change(d))
		var pgErr *pgconn.PgError
		if err == nil || res.Replayed || !errors.As(err, &pgErr) || pgErr.Code != tt.wantCode {
			t.Fatalf("%s: Run = %+v, %v; want an error with SQLSTATE %s", tt.name, res, err, tt.wantCode)
		}
		if tt.name == "commit fails" && pgErr.ConstraintName != "scratch_v_key" {
			t.Errorf("%s: err = %v, want the deferred violation raised at COMMIT", tt.name, err)
		}
		if rows := e.outbox(); len(rows) != 0 {
			t.Fatalf("%s: outbox rows after the rollback %v, want none", tt.name, rows)
		}
		if n, err := relay.Once(ctx); n != 0 || err != nil {
			t.Errorf("%s: relay moved %d rows (%v) after the rollback, want 0", tt.name, n, err)
		}
		if js := e.jobs(); len(js) != 0 {
			t.Fatalf("%s: %d forward jobs after the rollback, want 0: %+v", tt.name, len(js), js)
		}
		if keys, evs := count("processed_messages"), count("webhook_events"); keys != 0 || evs != 0 {
			t.Fatalf("%s: %d keys and %d events after the rollback, want 0", tt.name, keys, evs)
		}
	}

	// Control: the same change commits its two outbox rows; a duplicate adds
	// none (its transaction sees none of its event, or the replay fails).
	d := newDelivery("committed")
	change := func(d idempotency.Delivery, wantRows int) dedup.Change {
		return func(b *dedup.Batch) {
			insertEvent(b, d)
			queueOutbox(b, d)
			assertRows(b, d, wantRows)
		}
	}
	if res, err := store.Run(ctx, d, change(d, 2)); err != nil || res.Replayed {
		t.Fatalf("committed delivery: Run = %+v, %v", res, err)
	}
	wantRows := []string{d.EventID.String() + "/t11", d.EventID.String() + "/t2"}
	if rows := e.outbox(); !slices.Equal(rows, wantRows) {
		t.Fatalf("outbox after the commit %v, want one row per target %v", rows, wantRows)
	}
	duplicate := func(when string) {
		t.Helper()
		dup := newDelivery("committed")
		res, err := store.Run(ctx, dup, change(dup, 0))
		if err != nil || !res.Replayed || res.EventID != d.EventID {
			t.Fatalf("duplicate %s: Run = %+v, %v; want a replay of event %s", when, res, err, d.EventID)
		}
	}
	duplicate("before the relay")
	if rows := e.outbox(); !slices.Equal(rows, wantRows) {
		t.Fatalf("outbox after a duplicate %v, want still %v", rows, wantRows)
	}
	if js := e.jobs(); len(js) != 0 {
		t.Fatalf("%d forward jobs before any relay, want 0", len(js))
	}
	if n, err := relay.Once(ctx); n != 2 || err != nil {
		t.Fatalf("relay moved %d rows (%v), want 2", n, err)
	}
	if rows := e.outbox(); len(rows) != 0 {
		t.Fatalf("outbox after the relay %v, want empty", rows)
	}
	duplicate("after the relay")
	if rows := e.outbox(); len(rows) != 0 {
		t.Fatalf("outbox after a duplicate that followed the relay %v, want empty", rows)
	}
	if n, err := relay.Once(ctx); n != 0 || err != nil {
		t.Errorf("relay moved %d rows (%v) after the duplicate, want 0", n, err)
	}
	js := e.jobs()
	if len(js) != 2 {
		t.Fatalf("%d forward jobs, want 2 (one per target): %+v", len(js), js)
	}
	targets := map[string]bool{}
	for _, j := range js {
		targets[j.Target] = true
		if j.EventID != d.EventID.String() || j.DeliveryID != "committed" || j.State != "available" || j.MaxAttempts != config.DefaultForwardMaxAttempts {
			t.Errorf("job %+v: want event %s, delivery committed, available, %d attempts", j, d.EventID, config.DefaultForwardMaxAttempts)
		}
	}
	if !targets["t11"] || !targets["t2"] {
		t.Errorf("jobs target %v, want both configured targets t11 and t2", targets)
	}
}

// TestNoTargetsQueuesNothing: a sender without targets gets no outbox rows
// and no forward jobs; QueueOutbox queues no statement for it.
func TestNoTargetsQueuesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "", envOpts{})
	sender, _ := e.cfg.Sender("acme")
	var b dedup.Batch
	forward.QueueOutbox(&b, uuid.Must(uuid.NewV7()), "x", time.Now(), sender.TargetNames(), forward.Lease{})
	if b.Len() != 0 {
		t.Errorf("QueueOutbox for a sender without targets queued %d statements, want 0", b.Len())
	}
	e.deliver("no-targets", []byte(`{}`), "application/json")
	if rows := e.outbox(); len(rows) != 0 {
		t.Errorf("outbox rows %v for a sender without targets, want none", rows)
	}
	if n, err := e.newRelay(0).Once(t.Context()); n != 0 || err != nil {
		t.Errorf("relay moved %d rows (%v), want 0", n, err)
	}
	if js := e.jobs(); len(js) != 0 {
		t.Errorf("%d forward jobs for a sender without targets, want 0", len(js))
	}
}

// TestForwardOfMissingEventIsCancelledAndOfMissingTargetHeld: a job whose
// event is no longer stored fails at once; one whose target (or sender)
// the configuration in force does not have (a reload removed it, or
// another worker knows it during a deploy) is held while its event is
// stored: it waits without using an attempt, neither failed nor retried,
// and counts as a wait of reason target_removed; once its event is gone
// (retention), it fails too. None makes any request.
func TestForwardOfMissingEventIsCancelledAndOfMissingTargetHeld(t *testing.T) {
	t.Parallel()
	tg := testkit.NewTarget(t, testkit.Always(http.StatusOK))
	e := newEnv(t, fmt.Sprintf("      - name: t9\n        url: %s\n        timeout: 1s\n", tg.URL), envOpts{Work: true})
	ctx := t.Context()
	// Stored events of acme and of a sender no longer configured.
	stored := map[string]uuid.UUID{}
	for _, sender := range []string{"acme", "removed"} {
		if _, err := storetest.InsertGenerated(ctx, e.pool, storetest.Generated{Sender: sender, Prefix: "held-", N: 1, Newest: time.Now(), Step: time.Second, Events: true}); err != nil {
			t.Fatal(err)
		}
		var id uuid.UUID
		if err := e.pool.QueryRow(ctx, `SELECT id FROM webhook_events WHERE sender = $1`, sender).Scan(&id); err != nil {
			t.Fatal(err)
		}
		stored[sender] = id
	}
	if _, err := queuetest.New(e.pool).InsertForwardJobs(ctx, queue.ForwardQueue, queuetest.JobFixture{State: rivertype.JobStateAvailable},
		queuetest.NewForwardJob{Sender: "acme", EventID: uuid.Must(uuid.NewV7()), DeliveryID: "gone", Target: "t9", MaxAttempts: 5},
		queuetest.NewForwardJob{Sender: "acme", EventID: stored["acme"], DeliveryID: "elsewhere", Target: "removed", MaxAttempts: 5},
		queuetest.NewForwardJob{Sender: "removed", EventID: stored["removed"], DeliveryID: "nobody", Target: "t9", MaxAttempts: 5},
		queuetest.NewForwardJob{Sender: "acme", EventID: uuid.Must(uuid.NewV7()), DeliveryID: "gone-removed", Target: "removed", MaxAttempts: 5}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var js []job
	e.poll("the jobs of gone events to be cancelled and the others held", func() bool {
		js = e.jobs()
		done := 0
		for _, j := range js {
			gone := strings.HasPrefix(j.DeliveryID, "gone")
			if gone && j.State == "cancelled" || !gone && j.State == "scheduled" && j.ScheduledAt.After(start.Add(30*time.Second)) {
				done++
			}
		}
		return done == 4
	}, func() string { return fmt.Sprintf("jobs: %+v", js) })
	for _, j := range js {
		switch {
		case j.DeliveryID == "gone" && j.Attempt != 1:
			t.Errorf("job %+v: want cancelled at attempt 1", j)
		case !strings.HasPrefix(j.DeliveryID, "gone") && (j.Attempt != 0 || len(j.Errors) != 0):
			t.Errorf("job %+v: want held with no attempt used and no error", j)
		}
	}
	if n := len(tg.Hits()); n != 0 {
		t.Errorf("the target received %d requests, want 0", n)
	}
}

// TestLegacyJobNamingTargetByURL: a job queued by a version that named
// targets by URL (args.URL, no args.target) is still delivered to the target
// with that URL, counted under the target's name, and listed with it.
func TestLegacyJobNamingTargetByURL(t *testing.T) {
	t.Parallel()
	tg := testkit.NewTarget(t, func(int, *http.Request) testkit.Answer { return testkit.Answer{Status: 200} })
	e := newEnv(t, fmt.Sprintf("      - name: legacy\n        url: %s?token=LEGACYTOKEN\n        timeout: 1s\n", tg.URL), envOpts{Work: true})
	// An event stored without outbox row (as before the outbox), and its
	// job queued as the previous version did.
	ctx := context.Background()
	d := delivery{eventID: uuid.Must(uuid.NewV7()).String()}
	if err := storetest.InsertEvent(ctx, e.pool, events.Event{ID: uuid.MustParse(d.eventID), Sender: "acme", DeliveryID: "legacy-1", ReceivedAt: time.Now(),
		Headers: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"a":1}`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := queuetest.New(e.pool).InsertForwardJobs(ctx, queue.ForwardQueue, queuetest.JobFixture{}, queuetest.NewForwardJob{
		Sender: "acme", EventID: uuid.MustParse(d.eventID), DeliveryID: "legacy-1", URL: tg.URL + "?token=LEGACYTOKEN", MaxAttempts: 3,
	}); err != nil {
		t.Fatal(err)
	}
	js := e.waitJobs(1)
	if js[0].State != "completed" {
		t.Fatalf("legacy job ended %s, want completed: %+v", js[0].State, js[0])
	}
	if got := len(tg.HitsFor(d.eventID)); got != 1 {
		t.Errorf("the target received %d forwards of the event, want 1", got)
	}
	if n := e.counter("hookgate_forward_attempts_total", map[string]string{"target": "legacy", "outcome": "delivered"}); n != 1 {
		t.Errorf("delivered attempts under the target's name = %v, want 1", n)
	}
	if strings.Contains(e.metricsText(), "LEGACYTOKEN") {
		t.Error("/metrics shows the legacy job's URL token")
	}
	list, err := queue.NewJobs(e.pool).EventForwards(ctx, "acme", uuid.MustParse(d.eventID))
	if err != nil {
		t.Fatalf("List with a legacy job: %v", err)
	}
	if len(list) != 1 || list[0].Target != "" || list[0].LegacyURL == "" || list[0].State != queue.StateDelivered {
		t.Fatalf("List = %+v, want the delivered legacy job with its URL", list)
	}
}

// TestTargetHeadersWinOverTheSenders: a header the target's configuration
// sets is sent as configured, even when the sender's request carried the same
// header (Content-Type, Content-Encoding) with another value.
func TestTargetHeadersWinOverTheSenders(t *testing.T) {
	t.Parallel()
	tg := testkit.NewTarget(t, testkit.Always(http.StatusOK))
	e := newEnv(t, fmt.Sprintf("      - name: typed\n        url: %s\n        headers: { Content-Type: application/x-ours, Content-Encoding: identity }\n", tg.URL), envOpts{Work: true})
	d := e.deliver("hdr-1", []byte(`{"a":1}`), "application/json")
	e.waitJobs(1)
	hs := tg.HitsFor(d.eventID)
	if len(hs) != 1 {
		t.Fatalf("the target received %d forwards, want 1", len(hs))
	}
	if got := hs[0].Header.Get("Content-Type"); got != "application/x-ours" {
		t.Errorf("Content-Type %q, want the target's application/x-ours over the sender's application/json", got)
	}
}
