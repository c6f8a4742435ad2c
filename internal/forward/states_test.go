package forward

// These tests are in package forward so that they can check statusIn
// against the worker's own error texts. The package's TestMain (goleak) is
// in main_test.go.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/pgtest"
)

// statesYAML has a sender with three targets (one with a password in its
// URL) and one without targets.
const statesYAML = `
senders:
  - name: orders
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    forward:
      - url: http://a.example/hook
        max_attempts: 3
      - url: http://b.example/hook
      - url: http://user:pw@c.example/hook
        max_attempts: 7
  - name: quiet
    preset: generic
    delivery_id: { header: X-Delivery-Id }
`

// setup returns a fresh database, the configuration of statesYAML and an
// insert-only River client on the database.
func setup(t *testing.T) (*pgxpool.Pool, *config.Config, *river.Client[pgx.Tx]) {
	t.Helper()
	pool, _ := pgtest.NewDB(t)
	cfg, err := config.Parse([]byte(statesYAML), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	client, err := NewClient(pool, cfg, Options{}, NewMetrics(prometheus.NewRegistry()), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return pool, cfg, client
}

func sender(t *testing.T, cfg *config.Config, name string) *config.Sender {
	t.Helper()
	s, ok := cfg.Sender(name)
	if !ok {
		t.Fatalf("no sender %s", name)
	}
	return s
}

func newEventID(t *testing.T) uuid.UUID {
	t.Helper()
	id, err := uuid.NewV7()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestStateOf(t *testing.T) {
	t.Parallel()
	for js, want := range map[rivertype.JobState]State{
		rivertype.JobStateAvailable: StatePending,
		rivertype.JobStateScheduled: StatePending,
		rivertype.JobStatePending:   StatePending,
		rivertype.JobStateRunning:   StateRunning,
		rivertype.JobStateRetryable: StateRetrying,
		rivertype.JobStateCompleted: StateDelivered,
		rivertype.JobStateCancelled: StateFailed,
		rivertype.JobStateDiscarded: StateFailed,
		"some_future_state":         StatePending,
	} {
		if got := StateOf(js); got != want {
			t.Errorf("StateOf(%s) = %s, want %s", js, got, want)
		}
	}
	// Every state River knows is mapped on purpose (the table above).
	for _, js := range rivertype.JobStates() {
		if StateOf(js) == "" {
			t.Errorf("StateOf(%s) is empty", js)
		}
	}
}

// TestStatusIn checks that the status of every target answer the worker
// records, as River stores its text, is found again, and that errors
// without one give 0.
func TestStatusIn(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want int
	}{
		{&errStatus{status: 503}, 503},
		{&errStatus{status: 429, retryAfter: 30 * time.Second}, 429},
		{&errStatus{status: 408}, 408},
		{river.JobCancel(&errStatus{status: 400}), 400},
		{river.JobCancel(&errStatus{status: 410}), 410},
		{fmt.Errorf("post to target: %w", context.DeadlineExceeded), 0},
		{river.JobCancel(fmt.Errorf("event %s is no longer stored", uuid.Nil)), 0},
		{fmt.Errorf("read event: connection answered 5000 times"), 0},
	} {
		if got := statusIn(tc.err.Error()); got != tc.want {
			t.Errorf("statusIn(%q) = %d, want %d", tc.err.Error(), got, tc.want)
		}
	}
}

func TestRedeliver(t *testing.T) {
	t.Parallel()
	pool, cfg, client := setup(t)
	ctx := t.Context()
	id := newEventID(t)

	jobs, err := Redeliver(ctx, client, sender(t, cfg, "orders"), id, "d-1")
	if err != nil {
		t.Fatal(err)
	}
	wantURLs := []string{"http://a.example/hook", "http://b.example/hook", "http://user:pw@c.example/hook"}
	var urls []string
	for _, j := range jobs {
		urls = append(urls, j.URL)
	}
	slices.Sort(urls)
	if !slices.Equal(urls, wantURLs) {
		t.Fatalf("Redeliver enqueued %v, want one job per target %v", jobs, wantURLs)
	}
	for _, j := range jobs {
		var (
			a           Args
			kind, queue string
			maxAttempts int
		)
		err := pool.QueryRow(ctx, `SELECT args, kind, queue, max_attempts FROM river_job WHERE id = $1`, j.JobID).Scan(&a, &kind, &queue, &maxAttempts)
		if err != nil {
			t.Fatalf("job %d: %v", j.JobID, err)
		}
		target, _ := sender(t, cfg, "orders").Target(j.URL)
		if a != (Args{Sender: "orders", EventID: id, DeliveryID: "d-1", URL: j.URL}) || kind != "hookgate_forward" || queue != Queue || maxAttempts != target.MaxAttempts {
			t.Errorf("job %d: args %+v kind %s queue %s max_attempts %d", j.JobID, a, kind, queue, maxAttempts)
		}
	}

	jobs, err = Redeliver(ctx, client, sender(t, cfg, "quiet"), newEventID(t), "d-2")
	if err != nil || jobs != nil {
		t.Errorf("Redeliver for a sender without targets = %v, %v; want nil, nil", jobs, err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM river_job`).Scan(&n); err != nil || n != 3 {
		t.Errorf("river_job has %d rows (%v), want the 3 of the first redelivery", n, err)
	}
}

// TestList sets the jobs of an event to the states the worker leaves them in
// (as River stores them) and checks what List makes of each.
func TestList(t *testing.T) {
	t.Parallel()
	pool, cfg, client := setup(t)
	ctx := t.Context()
	id, other := newEventID(t), newEventID(t)
	orders := sender(t, cfg, "orders")
	if _, err := Redeliver(ctx, client, orders, other, "d-0"); err != nil {
		t.Fatal(err)
	}
	first, err := Redeliver(ctx, client, orders, id, "d-1")
	if err != nil {
		t.Fatal(err)
	}
	again, err := Redeliver(ctx, client, orders, id, "d-1")
	if err != nil {
		t.Fatal(err)
	}
	jobOf := func(jobs []Enqueued, url string) int64 {
		for _, j := range jobs {
			if j.URL == url {
				return j.JobID
			}
		}
		t.Fatalf("no job for %s in %v", url, jobs)
		return 0
	}
	delivered := time.Date(2026, 11, 29, 19, 31, 9, 87000000, time.UTC)
	update := func(job int64, sql string, args ...any) {
		t.Helper()
		if _, err := pool.Exec(ctx, `UPDATE river_job SET `+sql+` WHERE id = $1`, append([]any{job}, args...)...); err != nil {
			t.Fatalf("update job %d: %v", job, err)
		}
	}
	update(jobOf(first, "http://a.example/hook"), `state = 'completed', attempt = 2, finalized_at = now(),
  errors = ARRAY[jsonb_build_object('at', now(), 'attempt', 1, 'error', 'target answered 503', 'trace', '')],
  metadata = jsonb_build_object('output', jsonb_build_object('status', 204, 'delivered_at', $2::timestamptz))`, delivered)
	update(jobOf(first, "http://b.example/hook"), `state = 'cancelled', attempt = 1, finalized_at = now(),
  errors = ARRAY[jsonb_build_object('at', now(), 'attempt', 1, 'error', 'JobCancelError: target answered 400', 'trace', '')]`)
	update(jobOf(first, "http://user:pw@c.example/hook"), `state = 'retryable', attempt = 2, scheduled_at = now() + interval '1 minute',
  errors = ARRAY[jsonb_build_object('at', now(), 'attempt', 1, 'error', 'target answered 502', 'trace', ''),
                 jsonb_build_object('at', now(), 'attempt', 2, 'error', 'post to target: connection refused', 'trace', '')]`)
	update(jobOf(again, "http://a.example/hook"), `state = 'running', attempt = 1, attempted_at = now()`)
	update(jobOf(again, "http://b.example/hook"), `state = 'discarded', attempt = 20, finalized_at = now(),
  errors = ARRAY[jsonb_build_object('at', now(), 'attempt', 20, 'error', 'target answered 500', 'trace', '')]`)

	got, err := List(ctx, pool, id)
	if err != nil {
		t.Fatal(err)
	}
	want := []Status{
		{URL: "http://a.example/hook", State: StateDelivered, Attempts: 2, MaxAttempts: 3, LastStatus: 204, DeliveredAt: delivered},
		{URL: "http://b.example/hook", State: StateFailed, Attempts: 1, MaxAttempts: 20, LastStatus: 400, LastError: "JobCancelError: target answered 400"},
		{URL: "http://user:pw@c.example/hook", State: StateRetrying, Attempts: 2, MaxAttempts: 7, LastError: "post to target: connection refused"},
		{URL: "http://a.example/hook", State: StateRunning, Attempts: 1, MaxAttempts: 3},
		{URL: "http://b.example/hook", State: StateFailed, Attempts: 20, MaxAttempts: 20, LastStatus: 500, LastError: "target answered 500"},
		{URL: "http://user:pw@c.example/hook", State: StatePending, Attempts: 0, MaxAttempts: 7},
	}
	if len(got) != len(want) {
		t.Fatalf("List = %d forwards, want %d: %+v", len(got), len(want), got)
	}
	for i, g := range got {
		w := want[i]
		if i > 0 && g.JobID <= got[i-1].JobID {
			t.Errorf("forward %d: job %d after job %d; want oldest first", i, g.JobID, got[i-1].JobID)
		}
		if g.CreatedAt.IsZero() {
			t.Errorf("forward %d: no created_at", i)
		}
		g.JobID, g.CreatedAt = 0, time.Time{}
		if !g.DeliveredAt.Equal(w.DeliveredAt) {
			t.Errorf("forward %d: delivered at %v, want %v", i, g.DeliveredAt, w.DeliveredAt)
		}
		g.DeliveredAt, w.DeliveredAt = time.Time{}, time.Time{}
		if g != w {
			t.Errorf("forward %d = %+v, want %+v", i, g, w)
		}
	}

	none, err := List(ctx, pool, newEventID(t))
	if err != nil || none == nil || len(none) != 0 {
		t.Errorf("List of an event without forwards = %v (nil %v), %v; want empty, not nil", none, none == nil, err)
	}
}

// TestListUsesArgsIndex checks that List finds an event's jobs through
// River's GIN index on args, among many jobs of other events: it runs List
// in a transaction, with a custom and with a generic plan, and reads that
// transaction's scan statistics.
func TestListUsesArgsIndex(t *testing.T) {
	t.Parallel()
	pool, cfg, client := setup(t)
	ctx := t.Context()
	orders := sender(t, cfg, "orders")
	var params []river.InsertManyParams
	for range 1000 {
		params = append(params, Jobs(orders, newEventID(t), "d")...)
	}
	if _, err := client.InsertMany(ctx, params); err != nil {
		t.Fatal(err)
	}
	id := newEventID(t)
	if _, err := Redeliver(ctx, client, orders, id, "d-1"); err != nil {
		t.Fatal(err)
	}
	// VACUUM also moves the GIN index's pending list (where fastupdate puts
	// new entries) into the index proper, as autovacuum does on a live
	// table; while all 3,000 rows' entries sit in the pending list, reading
	// the small table is cheaper than the index.
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE river_job`); err != nil {
		t.Fatal(err)
	}

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		if _, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = "+mode); err != nil {
			t.Fatal(err)
		}
		got, err := List(ctx, tx, id)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 3 {
			t.Errorf("%s: List = %d forwards, want 3", mode, len(got))
		}
	}
	var argScans, seqScans int64
	err = tx.QueryRow(ctx, `SELECT pg_stat_get_xact_numscans('river_job_args_index'::regclass),
  (SELECT seq_scan FROM pg_stat_xact_user_tables WHERE relname = 'river_job')`).Scan(&argScans, &seqScans)
	if err != nil {
		t.Fatal(err)
	}
	if argScans != 2 || seqScans != 0 {
		t.Errorf("List (custom and generic plan) scanned river_job_args_index %d times and river_job sequentially %d times; want 2 and 0", argScans, seqScans)
	}
}
