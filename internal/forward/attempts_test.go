package forward_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookgate/hookgate/internal/access"
	"github.com/hookgate/hookgate/internal/forward/transport"
	"github.com/hookgate/hookgate/internal/queue"
	"github.com/hookgate/hookgate/internal/redact"
	"github.com/hookgate/hookgate/internal/store"
	"github.com/hookgate/hookgate/internal/testing/brokertest"
)

// answering500then503then200 is a target that answers its first request
// 500 with a body and credential-like headers, its second 503 with
// Retry-After: 1, and every later one 200.
func answering500then503then200(t *testing.T) *httptest.Server {
	t.Helper()
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch n.Add(1) {
		case 1:
			w.Header().Set("Set-Cookie", "session=s3cret-cookie")
			w.Header().Set("X-Api-Key", "s3cret-key")
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte("boom: <b>database</b> down"))
		case 2:
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("busy, come back"))
		default:
			_, _ = w.Write([]byte(`{"ok":true}`))
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// attemptsOf polls until the event's forwards are all finished, and
// returns their attempts, newest first.
func (e *env) attemptsOf(eventID string, n int) []store.Attempt {
	e.t.Helper()
	var as []store.Attempt
	e.poll(fmt.Sprintf("%d attempts of event %s", n, eventID), func() bool {
		var err error
		as, err = store.New(e.pool).EventAttempts(e.t.Context(), "acme", uuid.MustParse(eventID))
		if err != nil {
			e.t.Fatal(err)
		}
		return len(as) >= n
	}, func() string { return fmt.Sprintf("attempts: %+v", as) })
	return as
}

// TestEveryAttemptKeptWithItsAnswer: a target answering 500 with a body,
// then 503 with Retry-After, then 200 leaves three attempts, newest
// first, each with its status, error, cause, headers (credential-like ones
// redacted) and body as received.
func TestEveryAttemptKeptWithItsAnswer(t *testing.T) {
	t.Parallel()
	tg := answering500then503then200(t)
	e := newEnv(t, fmt.Sprintf("      - name: t1\n        url: %s\n        timeout: 2s\n        max_attempts: 5\n        breaker_threshold: 1000\n", tg.URL),
		envOpts{Work: true})
	d := e.deliver("three-answers", []byte(`{}`), "application/json")
	as := e.attemptsOf(d.eventID, 3)
	if len(as) != 3 {
		t.Fatalf("attempts: %+v, want 3", as)
	}
	want := []struct {
		outcome, cause string
		attempt        int
		status         int
		body, errText  string
	}{
		{"delivered", store.CauseRetry, 3, 200, `{"ok":true}`, ""},
		{"retry", store.CauseRetry, 2, 503, "busy, come back", "target answered 503, Retry-After 1s"},
		{"retry", store.CauseFirst, 1, 500, "boom: <b>database</b> down", "target answered 500"},
	}
	for i, w := range want {
		a := as[i]
		if a.Outcome != w.outcome || a.Cause != w.cause || a.Attempt != w.attempt || a.Status != w.status || string(a.Body) != w.body || a.Error != w.errText || a.Target != "t1" || a.JobID == 0 {
			t.Errorf("attempt %d: %+v; want %+v", i, a, w)
		}
		if i > 0 && !a.StartedAt.Before(as[i-1].StartedAt) {
			t.Errorf("attempt %d started %s, not before the newer %s", i, a.StartedAt, as[i-1].StartedAt)
		}
	}
	if got := as[1].Header["Retry-After"]; len(got) != 1 || got[0] != "1" {
		t.Errorf("503's Retry-After: %q, want 1", got)
	}
	for _, k := range []string{"Set-Cookie", "X-Api-Key"} {
		if got := as[2].Header[k]; len(got) != 1 || got[0] != redact.Mask {
			t.Errorf("500's %s: %q, want it redacted", k, got)
		}
	}
	if strings.Contains(fmt.Sprint(as), "s3cret") {
		t.Errorf("a credential-like header's value was kept: %+v", as)
	}
}

// TestAttemptsPrunedToTheNewest: with AttemptsKept 2, a forward that
// fails four times keeps its two newest attempts.
func TestAttemptsPrunedToTheNewest(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusInternalServerError) }))
	t.Cleanup(srv.Close)
	e := newEnv(t, fmt.Sprintf("      - name: t1\n        url: %s\n        timeout: 2s\n        max_attempts: 4\n        breaker_threshold: 1000\n", srv.URL),
		envOpts{Work: true, AttemptsKept: 2})
	d := e.deliver("pruned", []byte(`{}`), "application/json")
	e.poll("the forward to fail after 4 attempts", func() bool {
		fwds, err := queue.NewJobs(e.pool).EventForwards(t.Context(), "acme", uuid.MustParse(d.eventID))
		return err == nil && len(fwds) == 1 && fwds[0].State == queue.StateFailed
	}, func() string { return fmt.Sprintf("jobs: %+v", e.jobs()) })
	as := e.attemptsOf(d.eventID, 1)
	if len(as) != 2 || as[0].Attempt != 4 || as[1].Attempt != 3 || as[0].Outcome != "retry" {
		t.Errorf("attempts: %+v; want attempts 4 and 3 only", as)
	}
}

// TestFastPathAttemptRecorded: the fast path's delivered first attempt is
// recorded with its answer, as the first attempt, with no job.
func TestFastPathAttemptRecorded(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Request-Id", "r-1")
		w.WriteHeader(http.StatusAccepted)
		_, _ = w.Write([]byte("queued"))
	}))
	t.Cleanup(srv.Close)
	e := newFastEnv(t, fmt.Sprintf("      - name: t1\n        url: %s\n        timeout: 2s\n", srv.URL), envOpts{}, fastOptions{})
	d := e.deliver("fast", []byte(`{}`), "application/json")
	as := e.attemptsOf(d.eventID, 1)
	a := as[0]
	if len(as) != 1 || a.Outcome != "delivered" || a.Cause != store.CauseFirst || a.Attempt != 1 || a.JobID != 0 || a.Status != http.StatusAccepted ||
		string(a.Body) != "queued" || a.Header["X-Request-Id"][0] != "r-1" || a.StartedAt.IsZero() {
		t.Errorf("attempts: %+v; want the fast path's delivered first attempt with its answer", as)
	}
}

// TestRedeliveryAttemptSaysByWhom: a redelivery's attempt is marked as
// such, with the caller's token name, or admin when none is named.
func TestRedeliveryAttemptSaysByWhom(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(srv.Close)
	e := newEnv(t, fmt.Sprintf("      - name: t1\n        url: %s\n        timeout: 2s\n", srv.URL), envOpts{Work: true})
	d := e.deliver("redelivered", []byte(`{}`), "application/json")
	e.attemptsOf(d.eventID, 1)
	acme, _ := e.cfg.Sender("acme")
	ev := uuid.MustParse(d.eventID)
	ctx := access.With(t.Context(), access.Caller{Name: "ops-alice", Scope: access.Admin})
	if _, err := e.river.Redeliver(ctx, acme, ev, d.id); err != nil {
		t.Fatal(err)
	}
	as := e.attemptsOf(d.eventID, 2)
	if as[0].Cause != store.CauseRedelivery || as[0].Actor != "ops-alice" || as[0].Attempt != 1 || as[1].Cause != store.CauseFirst {
		t.Errorf("attempts: %+v; want the redelivery by ops-alice first", as)
	}
	if _, err := e.river.Redeliver(t.Context(), acme, ev, d.id); err != nil {
		t.Fatal(err)
	}
	as = e.attemptsOf(d.eventID, 3)
	if as[0].Cause != store.CauseRedelivery || as[0].Actor != "admin" {
		t.Errorf("attempts: %+v; want a redelivery by admin, the caller naming no token", as)
	}
}

// TestNATSDeliveredByRetryShowsTimeAndAck: a NATS forward whose first
// attempt finds no stream and whose retry is delivered reads delivered
// with its time and JetStream's acknowledgement, and both attempts are
// kept.
func TestNATSDeliveredByRetryShowsTimeAndAck(t *testing.T) {
	t.Parallel()
	srv := brokertest.StartNATS(t)
	router := transport.NewRouter(transport.NewHTTPClient(4), nil, time.Now)
	t.Cleanup(func() { _ = router.Close() })
	e := newEnv(t, fmt.Sprintf("      - name: bus\n        url: %s\n        timeout: 2s\n        max_attempts: 20\n        breaker_threshold: 1000\n        nats: { subject: \"hooks.{sender}\" }\n", srv.URL()),
		envOpts{Work: true, Transport: router, Backoff: testBackoff})
	d := e.deliver("nats-retry", []byte(`{}`), "application/json")
	first := e.attemptsOf(d.eventID, 1)
	if first[0].Outcome != "retry" || !strings.Contains(first[0].Error, "no JetStream stream") {
		t.Fatalf("first attempt: %+v; want a retry for want of a stream", first[0])
	}
	js := srv.JetStream(t)
	if _, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "HOOKS", Subjects: []string{"hooks.>"}}); err != nil {
		t.Fatal(err)
	}
	var fwds []queue.Forward
	e.poll("the retry to deliver the forward", func() bool {
		var err error
		fwds, err = queue.NewJobs(e.pool).EventForwards(t.Context(), "acme", uuid.MustParse(d.eventID))
		return err == nil && len(fwds) == 1 && fwds[0].State == queue.StateDelivered
	}, func() string { return fmt.Sprintf("forwards: %+v", fwds) })
	if f := fwds[0]; f.DeliveredAt.IsZero() || f.Ack != "stream HOOKS sequence 1" || f.Attempts < 2 {
		t.Errorf("forward: %+v; want its delivery time and the stream's acknowledgement after a retry", f)
	}
	as := e.attemptsOf(d.eventID, 2)
	if as[0].Outcome != "delivered" || as[0].Cause != store.CauseRetry || as[0].Ack != "stream HOOKS sequence 1" || as[0].Status != 0 {
		t.Errorf("newest attempt: %+v; want the retry delivered with the stream's acknowledgement", as[0])
	}
}

// TestBulkRedeliveryAttemptSaysByWhom: the attempts of a bulk
// redelivery's forwards name who asked for it.
func TestBulkRedeliveryAttemptSaysByWhom(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(srv.Close)
	e := newFastEnv(t, fmt.Sprintf("      - name: t1\n        url: %s\n        timeout: 2s\n", srv.URL), envOpts{Work: true}, fastOptions{})
	d := e.deliver("bulk-by", []byte(`{}`), "application/json")
	e.attemptsOf(d.eventID, 1)
	acme, _ := e.cfg.Sender("acme")
	ctx := access.With(t.Context(), access.Caller{Name: "ops-bob", Scope: access.Admin})
	if res, err := e.river.BulkRedeliver(ctx, queue.BulkRequest{Sender: acme, Target: "t1", State: queue.StateDelivered}); err != nil || res.Matched != 1 {
		t.Fatalf("BulkRedeliver = %+v, %v; want 1 matched", res, err)
	}
	as := e.attemptsOf(d.eventID, 2)
	if as[0].Cause != store.CauseRedelivery || as[0].Actor != "ops-bob" || as[0].JobID == 0 || as[1].Cause != store.CauseFirst || as[1].JobID != 0 {
		t.Errorf("attempts: %+v; want the bulk redelivery by ops-bob after the fast path's first attempt", as)
	}
}

// TestNATSDeliveredByFastPathShowsTimeAndAck: a NATS forward the fast path
// delivered reads delivered with its time and JetStream's
// acknowledgement, like one a worker delivered.
func TestNATSDeliveredByFastPathShowsTimeAndAck(t *testing.T) {
	t.Parallel()
	srv := brokertest.StartNATS(t)
	if _, err := srv.JetStream(t).CreateStream(t.Context(), jetstream.StreamConfig{Name: "HOOKS", Subjects: []string{"hooks.>"}}); err != nil {
		t.Fatal(err)
	}
	router := transport.NewRouter(transport.NewHTTPClient(4), nil, time.Now)
	t.Cleanup(func() { _ = router.Close() })
	e := newFastEnv(t, fmt.Sprintf("      - name: bus\n        url: %s\n        timeout: 2s\n        nats: { subject: \"hooks.{sender}\" }\n", srv.URL()),
		envOpts{Transport: router}, fastOptions{})
	d := e.deliver("nats-fast", []byte(`{}`), "application/json")
	as := e.attemptsOf(d.eventID, 1)
	if as[0].Outcome != "delivered" || as[0].JobID != 0 || as[0].Ack != "stream HOOKS sequence 1" {
		t.Fatalf("attempt: %+v; want the fast path's, delivered with the stream's acknowledgement", as[0])
	}
	fwds, err := queue.NewJobs(e.pool).EventForwards(t.Context(), "acme", uuid.MustParse(d.eventID))
	if err != nil {
		t.Fatal(err)
	}
	if len(fwds) != 1 || fwds[0].State != queue.StateDelivered || fwds[0].DeliveredAt.IsZero() || fwds[0].Ack != "stream HOOKS sequence 1" {
		t.Errorf("forwards: %+v; want one delivered, with its time and the stream's acknowledgement", fwds)
	}
}
