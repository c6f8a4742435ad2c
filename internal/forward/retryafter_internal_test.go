package forward

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/events"
	"github.com/hookgate/hookgate/internal/forward/transport"
	"github.com/hookgate/hookgate/internal/queue"
	"github.com/hookgate/hookgate/internal/testing/pgtest"
	"github.com/hookgate/hookgate/internal/testing/storetest"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// retryAfterEntries counts the Retry-After values the worker holds for
// NextRetry.
func retryAfterEntries(w *Worker) int {
	n := 0
	w.retryAfter.Range(func(any, any) bool { n++; return true })
	return n
}

// TestRetryAfterIsNotKeptForFinalAttempt: a Retry-After answer is held for
// River's NextRetry, which River calls only when the job will be retried. On
// the job's last attempt River discards the job without asking, so the
// worker must not keep the value: each such job would otherwise leave an
// entry in the worker's map for the life of the process.
func TestRetryAfterIsNotKeptForFinalAttempt(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "7")
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	t.Cleanup(srv.Close)
	cfg, err := config.Parse([]byte(`senders:
  - name: acme
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    forward:
      - name: t1
        url: `+srv.URL+`
        timeout: 1s
        max_attempts: 3
`), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	pool, _ := pgtest.NewDB(t)
	eventID := uuid.Must(uuid.NewV7())
	if err := storetest.InsertEvent(ctx, pool, events.Event{ID: eventID, Sender: "acme", DeliveryID: "d1", ReceivedAt: time.Now(), Body: []byte("{}")}); err != nil {
		t.Fatal(err)
	}
	m, log := NewMetrics(prometheus.NewRegistry()), slog.New(slog.NewTextHandler(io.Discard, nil))
	w := newTestWorker(t, cfg, pool, srv.Client(), Backoff{Base: time.Second, Max: time.Minute}, DefaultBreakerConfig(), m, log)
	args := queue.Args{Sender: "acme", EventID: eventID, DeliveryID: "d1", Target: "t1"}

	// Not the last attempt: the value is held, and NextRetry uses and drops it.
	job := queue.Job{ID: 1, Attempt: 1, MaxAttempts: 3, Args: args}
	if err := w.Work(ctx, job); err == nil {
		t.Fatal("Work on a 429 returned nil, want an error (retry)")
	}
	before := time.Now()
	next := w.NextRetry(job)
	if d := next.Sub(before); d < 7*time.Second-10*time.Millisecond || d > 8*time.Second {
		t.Errorf("NextRetry after Retry-After: 7 is %v from now, want about 7s", d)
	}
	if n := retryAfterEntries(w); n != 0 {
		t.Errorf("after NextRetry the worker still holds %d Retry-After values, want 0", n)
	}

	// The last attempt: River discards the job and never calls NextRetry.
	last := queue.Job{ID: 2, Attempt: 3, MaxAttempts: 3, Args: args}
	if err := w.Work(ctx, last); err == nil {
		t.Fatal("Work on a 429 returned nil, want an error")
	}
	if n := retryAfterEntries(w); n != 0 {
		t.Errorf("after the last attempt of a job the worker holds %d Retry-After values that nothing will ever read (leak), want 0", n)
	}
}

// TestRetryAfterIsNotKeptForSnoozedProbe: a probe of an open breaker that
// gets a 503 with Retry-After is snoozed, and River asks no NextRetry after
// a snooze. The worker must not keep the value: it would leak, and a later
// failure of the same job without Retry-After would wait the stale one.
func TestRetryAfterIsNotKeptForSnoozedProbe(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	var retryAfter atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if retryAfter.Load() {
			w.Header().Set("Retry-After", "7")
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(srv.Close)
	cfg, err := config.Parse([]byte(`senders:
  - name: acme
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    forward:
      - name: t1
        url: `+srv.URL+`
        timeout: 1s
        max_attempts: 5
        breaker_threshold: 1
`), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	pool, _ := pgtest.NewDB(t)
	m, log := NewMetrics(prometheus.NewRegistry()), slog.New(slog.NewTextHandler(io.Discard, nil))
	w := newTestWorker(t, cfg, pool, srv.Client(), Backoff{Base: 100 * time.Millisecond, Max: time.Minute},
		BreakerConfig{Probe: time.Second, Window: time.Second}, m, log)
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	w.gate.g.now = func() time.Time { return time.Unix(0, clock.Load()) }
	newJob := func(id int64) queue.Job {
		eventID := uuid.Must(uuid.NewV7())
		if err := storetest.InsertEvent(ctx, pool, events.Event{ID: eventID, Sender: "acme", DeliveryID: fmt.Sprint("d", id), ReceivedAt: time.Now(), Body: []byte("{}")}); err != nil {
			t.Fatal(err)
		}
		return queue.Job{ID: id, Attempt: 1, MaxAttempts: 5, Args: queue.Args{Sender: "acme", EventID: eventID, DeliveryID: fmt.Sprint("d", id), Target: "t1"}}
	}

	// 503s without Retry-After for half the window open the breaker.
	first := newJob(1)
	for range 2 {
		if err := w.Work(ctx, first); err == nil {
			t.Fatal("Work on a 503 returned nil, want an error (retry)")
		}
		w.NextRetry(first)
		first.Attempt++
		clock.Add(int64(600 * time.Millisecond))
	}
	if st := w.gate.g.get("acme", testkit.ConfigTarget(t, cfg, "acme", "t1")).state; st != BreakerOpen {
		t.Fatalf("after 503s for half the window the breaker is %s, want open", st)
	}
	// The probe is due; it gets a 503 with Retry-After and is snoozed.
	retryAfter.Store(true)
	clock.Add(int64(time.Hour))
	probe := newJob(2)
	var snooze *river.JobSnoozeError
	if err := w.Work(ctx, probe); !errors.As(err, &snooze) {
		t.Fatalf("the failed probe returned %v, want a snooze", err)
	}
	if n := retryAfterEntries(w); n != 0 {
		t.Errorf("after a snoozed probe the worker holds %d Retry-After values that no NextRetry will read (leak), want 0", n)
	}
	// Later the same job fails without Retry-After: its retry follows the
	// backoff (at most 100ms), not the stale 7s.
	before := time.Now()
	if d := w.NextRetry(probe).Sub(before); d > time.Second {
		t.Errorf("NextRetry of a job whose earlier snoozed probe got Retry-After: 7 is %v from now, want the backoff (<= 100ms)", d)
	}
}

// newTestWorker returns a Worker with client, backoff and a gate of 10
// forwards whose breakers bc tunes, failing t when either is invalid.
func newTestWorker(t *testing.T, cfg *config.Config, pool *pgxpool.Pool, client *http.Client, backoff Backoff, bc BreakerConfig, m *Metrics, log *slog.Logger) *Worker {
	t.Helper()
	gate, err := NewGate(GateConfig{Capacity: 10, Breakers: bc, DB: pool, Jobs: queue.NewJobs(pool), Metrics: m, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewWorker(WorkerConfig{Backoff: backoff, RetryAfterMax: DefaultRetryAfterMax, AttemptsKept: 1,
		Senders: cfg, DB: pool, Jobs: queue.NewJobs(pool), Client: client, Gate: gate, Metrics: m, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// TestRetryWaitIsBounded: a retry after a Retry-After waits at least what
// the target asked and the backoff's delay, and at most RetryAfterMax for
// the Retry-After's part, whatever the backoff's Max (here a minute): a
// huge Retry-After waits RetryAfterMax, not an hour, and never less.
func TestRetryWaitIsBounded(t *testing.T) {
	t.Parallel()
	w := &Worker{backoff: Backoff{Base: 10 * time.Millisecond, Max: time.Minute}, retryAfterMax: 2 * time.Second}
	const maxRetryAfter = 365 * 24 * time.Hour // the most a Retry-After parses to
	for _, tc := range []struct {
		attempt        int
		retryAfter     time.Duration
		least, longest time.Duration
	}{
		{1, 0, 5 * time.Millisecond, 10 * time.Millisecond},    // the backoff alone
		{1, time.Second, time.Second, time.Second},             // Retry-After is the floor
		{1, 2 * time.Second, 2 * time.Second, 2 * time.Second}, // exactly the max
		{1, 3 * time.Second, 2 * time.Second, 2 * time.Second}, // capped
		{1, maxRetryAfter, 2 * time.Second, 2 * time.Second},   // a huge one: the max
		{20, time.Second, 30 * time.Second, time.Minute},       // a backoff beyond the Retry-After wins
		{20, maxRetryAfter, 30 * time.Second, time.Minute},     // and is not cut to RetryAfterMax
	} {
		for range 20 { // the backoff's jitter
			if got := w.retryWait(tc.attempt, tc.retryAfter); got < tc.least || got > tc.longest {
				t.Errorf("retryWait(attempt %d, Retry-After %v) = %v, want from %v to %v", tc.attempt, tc.retryAfter, got, tc.least, tc.longest)
				break
			}
		}
	}
}

// TestHugeRetryAfterPausesForTheMax: a target that answers 429 (or 503)
// with Retry-After: 99999999999999, or with a date in the year 9999,
// pauses for RetryAfterMax (2 s here) — not for the backoff's Max (a
// minute), not for less — and the forward's retry is scheduled
// RetryAfterMax after the answer. The clocks of the worker and of its
// gate (and of its transport) are fixed, so the pause and the schedule are
// compared exactly.
func TestHugeRetryAfterPausesForTheMax(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	for _, tc := range []struct {
		status     int
		retryAfter string
	}{
		{http.StatusTooManyRequests, "99999999999999"},
		{http.StatusServiceUnavailable, "99999999999999999999999"},
		{http.StatusTooManyRequests, "Fri, 31 Dec 9999 23:59:59 GMT"},
	} {
		name := fmt.Sprintf("%d %s", tc.status, tc.retryAfter)
		tg := testkit.NewTarget(t, func(int, *http.Request) testkit.Answer {
			return testkit.Answer{Status: tc.status, Header: http.Header{"Retry-After": {tc.retryAfter}}}
		})
		cfg := testkit.ParseConfig(t, `senders:
  - name: acme
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    forward:
      - { name: t1, url: "`+tg.URL+`", timeout: 5s, max_attempts: 5 }
`)
		pool, _ := pgtest.NewDB(t)
		eventID := uuid.Must(uuid.NewV7())
		if err := storetest.InsertEvent(ctx, pool, events.Event{ID: eventID, Sender: "acme", DeliveryID: "d1", ReceivedAt: time.Now(), Body: []byte("{}")}); err != nil {
			t.Fatal(err)
		}
		m := NewMetrics(prometheus.NewRegistry())
		gate, err := NewGate(GateConfig{Capacity: 10, Breakers: DefaultBreakerConfig(), DB: pool, Jobs: queue.NewJobs(pool), Metrics: m, Log: testkit.Logger(t)})
		if err != nil {
			t.Fatal(err)
		}
		clock := time.Now()
		w, err := NewWorker(WorkerConfig{Backoff: Backoff{Base: 10 * time.Millisecond, Max: time.Minute}, RetryAfterMax: 2 * time.Second, AttemptsKept: 1,
			Senders: cfg, DB: pool, Jobs: queue.NewJobs(pool), Transport: transport.NewHTTP(http.DefaultClient, func() time.Time { return clock }), Gate: gate, Metrics: m, Log: testkit.Logger(t)})
		if err != nil {
			t.Fatal(err)
		}
		w.now = func() time.Time { return clock }
		gate.g.now = func() time.Time { return clock }
		job := queue.Job{ID: 1, Attempt: 1, MaxAttempts: 5, Args: queue.Args{Sender: "acme", EventID: eventID, DeliveryID: "d1", Target: "t1"}}
		if err := w.Work(ctx, job); err == nil {
			t.Fatalf("%s: Work returned nil, want an error (retry)", name)
		}
		gd := gate.g.get("acme", testkit.ConfigTarget(t, cfg, "acme", "t1"))
		if got := gd.pausedUntil.Sub(clock); got != 2*time.Second {
			t.Errorf("%s: the target is paused for %v, want RetryAfterMax (2s)", name, got)
		}
		tgt := testkit.ConfigTarget(t, cfg, "acme", "t1")
		for _, at := range []struct {
			after  time.Duration
			paused bool
		}{{0, true}, {2*time.Second - time.Millisecond, true}, {2 * time.Second, false}} {
			now := clock.Add(at.after)
			gate.g.now = func() time.Time { return now }
			if held, why := gate.HeldBack("acme", tgt); held != at.paused || (held && why != "paused") {
				t.Errorf("%s: %v after the answer HeldBack = %v, %q; want paused %v", name, at.after, held, why, at.paused)
			}
		}
		if got := w.NextRetry(job).Sub(clock); got != 2*time.Second {
			t.Errorf("%s: the retry is scheduled %v after the answer, want RetryAfterMax (2s)", name, got)
		}
	}
}
