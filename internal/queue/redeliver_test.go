package queue

// These tests are in package forward so that they can insert jobs with
// jobParams. The package's TestMain (goleak) is in main_test.go.

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/store"
	"github.com/hookgate/hookgate/internal/testing/pgtest"
	"github.com/hookgate/hookgate/internal/testing/queuetest"
	"github.com/hookgate/hookgate/internal/testing/storetest"
)

// statesYAML has a sender with three targets (one with a secret path) and
// one without targets.
const statesYAML = `
senders:
  - name: orders
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    forward:
      - name: t1
        url: http://a.example/hook
        max_attempts: 3
      - name: t2
        url: http://b.example/hook
      - name: t3
        url: http://c.example/hook/s3cr3t-path
        secret_path: true
        max_attempts: 7
  - name: quiet
    preset: generic
    delivery_id: { header: X-Delivery-Id }
`

// setup returns a fresh database, the configuration of statesYAML and an
// insert-only River client on the database.
func setup(t *testing.T) (*pgxpool.Pool, *config.Config, *River) {
	t.Helper()
	pool, _ := pgtest.NewDB(t)
	cfg, err := config.Parse([]byte(statesYAML), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	cc := DefaultClientConfig(cfg)
	cc.Pool, cc.Senders, cc.Log = pool, cfg, slog.New(slog.NewTextHandler(io.Discard, nil))
	client, err := New(cc)
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

// TestRedeliver: Redeliver inserts one job per target of the sender, with
// the target's max_attempts; a second Redeliver while those jobs wait
// inserts none and returns them as already pending; once one of them has
// finished, its target gets a new job. A sender without targets gets none.
func TestRedeliver(t *testing.T) {
	t.Parallel()
	pool, cfg, client := setup(t)
	ctx := t.Context()
	id := newEventID(t)
	orders := sender(t, cfg, "orders")

	jobs, err := client.Redeliver(ctx, orders, id, "d-1")
	if err != nil {
		t.Fatal(err)
	}
	wantTargets := []string{"t1", "t2", "t3"}
	var targets []string
	for _, j := range jobs {
		targets = append(targets, j.Target)
	}
	slices.Sort(targets)
	if !slices.Equal(targets, wantTargets) {
		t.Fatalf("Redeliver enqueued %+v, want one job per target %v", jobs, wantTargets)
	}
	first := map[string]int64{}
	q := queuetest.New(pool)
	rows, err := q.ForwardJobs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	byID := map[int64]queuetest.ForwardJob{}
	for _, r := range rows {
		byID[r.ID] = r
	}
	for _, j := range jobs {
		first[j.Target] = j.JobID
		if j.AlreadyPending {
			t.Errorf("job %d to %s: already pending, want new", j.JobID, j.Target)
		}
		r, ok := byID[j.JobID]
		if !ok {
			t.Fatalf("job %d is not a forward job", j.JobID)
		}
		target, _ := orders.Target(j.Target)
		if r.Sender != "orders" || r.EventID != id.String() || r.Target != j.Target || r.DeliveryID != "d-1" || r.URL != "" || r.Queue != ForwardQueue || r.MaxAttempts != target.MaxAttempts {
			t.Errorf("job %d: %+v", j.JobID, r)
		}
	}

	// Again while all three wait: no new job, the waiting ones are named.
	again, err := client.Redeliver(ctx, orders, id, "d-1")
	if err != nil {
		t.Fatal(err)
	}
	if len(again) != 3 {
		t.Fatalf("second Redeliver = %+v, want the 3 waiting jobs", again)
	}
	for _, j := range again {
		if !j.AlreadyPending || j.JobID != first[j.Target] {
			t.Errorf("second Redeliver, target %s: job %d, already pending %v; want the waiting job %d, already pending", j.Target, j.JobID, j.AlreadyPending, first[j.Target])
		}
	}

	// t1's forward was delivered: it gets a new job, the others still wait.
	if err := q.SetForwardJob(ctx, first["t1"], queuetest.JobFixture{State: rivertype.JobStateCompleted, Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	third, err := client.Redeliver(ctx, orders, id, "d-1")
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range third {
		switch {
		case j.Target == "t1" && (j.AlreadyPending || j.JobID == first["t1"] || j.JobID == 0):
			t.Errorf("third Redeliver, t1 (its forward delivered): %+v; want a new job", j)
		case j.Target != "t1" && (!j.AlreadyPending || j.JobID != first[j.Target]):
			t.Errorf("third Redeliver, %s (still waiting): %+v; want job %d, already pending", j.Target, j, first[j.Target])
		}
	}

	jobs, err = client.Redeliver(ctx, sender(t, cfg, "quiet"), newEventID(t), "d-2")
	if err != nil || jobs != nil {
		t.Errorf("Redeliver for a sender without targets = %v, %v; want nil, nil", jobs, err)
	}
	if n, err := q.CountJobs(ctx, ""); err != nil || n != 4 {
		t.Errorf("%d jobs (%v), want 4: the first 3 and t1's redelivery", n, err)
	}
}

// TestList puts forwards of an event in the outbox and sets its jobs to the
// states the worker leaves them in (as River stores them), and checks what
// List makes of each: outbox rows first (pending, no job), then the jobs,
// oldest first; never another event's or another sender's.
func TestList(t *testing.T) {
	t.Parallel()
	pool, cfg, client := setup(t)
	ctx := t.Context()
	id, other := newEventID(t), newEventID(t)
	orders := sender(t, cfg, "orders")
	if _, err := client.Redeliver(ctx, orders, other, "d-0"); err != nil {
		t.Fatal(err)
	}
	jobOf := func(jobs []Enqueued, target string) int64 {
		t.Helper()
		for _, j := range jobs {
			if j.Target == target && !j.AlreadyPending {
				return j.JobID
			}
		}
		t.Fatalf("no new job for %s in %+v", target, jobs)
		return 0
	}
	delivered := time.Date(2026, 11, 29, 19, 31, 9, 87000000, time.UTC)
	q := store.New(pool)
	update := func(job int64, f queuetest.JobFixture) {
		t.Helper()
		if err := queuetest.New(pool).SetForwardJob(ctx, job, f); err != nil {
			t.Fatalf("update job %d: %v", job, err)
		}
	}
	redeliver := func() []Enqueued {
		t.Helper()
		jobs, err := client.Redeliver(ctx, orders, id, "d-1")
		if err != nil {
			t.Fatal(err)
		}
		return jobs
	}
	first := redeliver()
	// Errors of an older version (the status only in the text) and an
	// output as the worker records it.
	update(jobOf(first, "t1"), queuetest.JobFixture{State: rivertype.JobStateCompleted, Attempt: 2, Errors: []string{"target answered 503"},
		Output: &Output{Attempt: 2, Status: 204, DeliveredAt: delivered}})
	update(jobOf(first, "t2"), queuetest.JobFixture{State: rivertype.JobStateCancelled, Attempt: 1, Errors: []string{"JobCancelError: target answered 400"}})
	update(jobOf(first, "t3"), queuetest.JobFixture{State: rivertype.JobStateRetryable, Attempt: 2, ScheduledAt: time.Now().Add(time.Minute),
		Errors: []string{"target answered 502", `post to target "t3": connection refused`}})
	again := redeliver() // t3 is still retrying: a new job is queued after it
	update(jobOf(again, "t1"), queuetest.JobFixture{State: rivertype.JobStateRunning, Attempt: 1})
	update(jobOf(again, "t2"), queuetest.JobFixture{State: rivertype.JobStateDiscarded, Attempt: 20, Errors: []string{"target answered 500"}})
	third := redeliver() // t1 is running: a new job after it; t3's queued job still waits: none; t2: a new job
	jobOf(third, "t2")
	jobOf(third, "t1")

	// Outbox rows: two of the event's, and others of another event and of
	// another sender's event with the same ID.
	queued := time.Date(2026, 11, 29, 19, 30, 0, 0, time.UTC)
	for _, r := range []storetest.Outbox{
		{Sender: "orders", EventID: id, Target: "t3"}, {Sender: "orders", EventID: id, Target: "t1"},
		{Sender: "orders", EventID: other, Target: "t2"}, {Sender: "quiet", EventID: id, Target: "t2"},
	} {
		r.DeliveryID = "d-1"
		if err := storetest.InsertOutbox(ctx, q.DB(), r, queued); err != nil {
			t.Fatal(err)
		}
	}

	got, err := NewJobs(pool).EventForwards(ctx, "orders", id)
	if err != nil {
		t.Fatal(err)
	}
	want := []Forward{
		{Target: "t1", State: StatePending},
		{Target: "t3", State: StatePending},
		{Target: "t1", State: StateDelivered, Attempts: 2, MaxAttempts: 3, LastStatus: 204, DeliveredAt: delivered},
		{Target: "t2", State: StateFailed, Attempts: 1, MaxAttempts: 20, LastStatus: 400, LastError: "target answered 400"},
		{Target: "t3", State: StateRetrying, Attempts: 2, MaxAttempts: 7, LastError: `post to target "t3": connection refused`},
		{Target: "t1", State: StateRunning, Attempts: 1, MaxAttempts: 3},
		{Target: "t2", State: StateFailed, Attempts: 20, MaxAttempts: 20, LastStatus: 500, LastError: "target answered 500"},
		{Target: "t3", State: StatePending, Attempts: 0, MaxAttempts: 7},
		{Target: "t1", State: StatePending, Attempts: 0, MaxAttempts: 3},
		{Target: "t2", State: StatePending, Attempts: 0, MaxAttempts: 20},
	}
	if len(got) != len(want) {
		t.Fatalf("List = %d forwards, want %d: %+v", len(got), len(want), got)
	}
	const inOutbox = 2
	for i, g := range got {
		w := want[i]
		switch {
		case i < inOutbox && (g.JobID != 0 || !g.CreatedAt.Equal(queued)):
			t.Errorf("forward %d: job %d, created at %v; want an outbox row (job 0) created at %v", i, g.JobID, g.CreatedAt, queued)
		case i >= inOutbox && (g.JobID == 0 || g.CreatedAt.IsZero()):
			t.Errorf("forward %d: job %d, created at %v; want a job with its creation time", i, g.JobID, g.CreatedAt)
		case i > inOutbox && g.JobID <= got[i-1].JobID:
			t.Errorf("forward %d: job %d after job %d; want oldest first", i, g.JobID, got[i-1].JobID)
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

	none, err := NewJobs(pool).EventForwards(ctx, "orders", newEventID(t))
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
		ev := newEventID(t)
		for _, name := range orders.TargetNames() {
			params = append(params, jobParams("orders", orders, name, ev, "d"))
		}
	}
	if _, err := client.client.InsertMany(ctx, params); err != nil {
		t.Fatal(err)
	}
	id := newEventID(t)
	if _, err := client.Redeliver(ctx, orders, id, "d-1"); err != nil {
		t.Fatal(err)
	}
	// VACUUM also moves the GIN index's pending list (where fastupdate puts
	// new entries) into the index proper, as autovacuum does on a live
	// table; while all 3,000 rows' entries sit in the pending list, reading
	// the small table is cheaper than the index.
	if err := NewJobs(pool).AnalyzeJobs(ctx); err != nil {
		t.Fatal(err)
	}

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	// Citus plans a statement on a distributed table whose parameters
	// decide its shard at every execution, and makes no generic plan of
	// one that joins two of them (the outbox's rows with their keys):
	// custom plans only there.
	modes := []string{"force_custom_plan", "force_generic_plan"}
	if pgtest.Citus() {
		modes = modes[:1]
	}
	for _, mode := range modes {
		if _, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = "+mode); err != nil {
			t.Fatal(err)
		}
		got, err := NewJobs(tx).EventForwards(ctx, "orders", id)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 3 {
			t.Errorf("%s: List = %d forwards, want 3", mode, len(got))
		}
	}
	argScans, seqScans, err := queuetest.New(tx).JobScans(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if argScans != int64(len(modes)) || seqScans != 0 {
		t.Errorf("List (plans %v) scanned River's index on args %d times and its job table sequentially %d times; want %d and 0", modes, argScans, seqScans, len(modes))
	}
}
