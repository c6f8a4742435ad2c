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
	"github.com/riverqueue/river/rivertype"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/events"
	"github.com/hookgate/hookgate/internal/pgtest"
	"github.com/hookgate/hookgate/internal/store"
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
	if err := store.New(pool).InsertEvent(ctx, events.Event{ID: eventID, Sender: "acme", DeliveryID: "d1", ReceivedAt: time.Now(), Body: []byte("{}")}); err != nil {
		t.Fatal(err)
	}
	m, log := NewMetrics(prometheus.NewRegistry()), slog.New(slog.NewTextHandler(io.Discard, nil))
	w := newTestWorker(t, cfg, pool, srv.Client(), Backoff{Base: time.Second, Max: time.Minute}, DefaultBreakerConfig(), m, log)
	args := Args{Sender: "acme", EventID: eventID, DeliveryID: "d1", Target: "t1"}

	// Not the last attempt: the value is held, and NextRetry uses and drops it.
	job := &river.Job[Args]{JobRow: &rivertype.JobRow{ID: 1, Attempt: 1, MaxAttempts: 3}, Args: args}
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
	last := &river.Job[Args]{JobRow: &rivertype.JobRow{ID: 2, Attempt: 3, MaxAttempts: 3}, Args: args}
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
	newJob := func(id int64) *river.Job[Args] {
		eventID := uuid.Must(uuid.NewV7())
		if err := store.New(pool).InsertEvent(ctx, events.Event{ID: eventID, Sender: "acme", DeliveryID: fmt.Sprint("d", id), ReceivedAt: time.Now(), Body: []byte("{}")}); err != nil {
			t.Fatal(err)
		}
		return &river.Job[Args]{JobRow: &rivertype.JobRow{ID: id, Attempt: 1, MaxAttempts: 5},
			Args: Args{Sender: "acme", EventID: eventID, DeliveryID: fmt.Sprint("d", id), Target: "t1"}}
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
	if st := w.gate.g.get("acme", mustTarget(t, cfg, "t1")).state; st != BreakerOpen {
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

// mustTarget returns sender acme's target name in cfg.
func mustTarget(t *testing.T, cfg *config.Config, name string) *config.Target {
	t.Helper()
	s, ok := cfg.Sender("acme")
	if !ok {
		t.Fatal("no sender acme")
	}
	tg, ok := s.Target(name)
	if !ok {
		t.Fatalf("no target %s", name)
	}
	return tg
}

// newTestWorker returns a Worker with client, backoff and a gate of 10
// forwards whose breakers bc tunes, failing t when either is invalid.
func newTestWorker(t *testing.T, cfg *config.Config, pool *pgxpool.Pool, client *http.Client, backoff Backoff, bc BreakerConfig, m *Metrics, log *slog.Logger) *Worker {
	t.Helper()
	gate, err := NewGate(pool, 10, m, log, bc)
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewWorker(cfg, pool, client, gate, m, log, WorkerConfig{Backoff: backoff})
	if err != nil {
		t.Fatal(err)
	}
	return w
}
