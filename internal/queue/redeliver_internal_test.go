package queue

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/rivertype"

	"github.com/hookgate/hookgate/internal/testing/pgtest"
	"github.com/hookgate/hookgate/internal/testing/queuetest"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// lockTestWait bounds the waits of these tests: a guard against hangs, not
// a timed assertion.
const lockTestWait = 30 * time.Second

// TestRedeliveriesSerialiseAcrossProcesses: 50 concurrent redeliveries of
// one event whose forwards to three targets are running, through two
// "processes" on one database (two pools, two River clients), queue
// exactly one new forward per target, after the one under way; every
// other redelivery finds it and answers already pending with its job. The
// redeliveries serialise on the event's advisory lock in the database, not
// on anything of one process.
func TestRedeliveriesSerialiseAcrossProcesses(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool, url := pgtest.NewDB(t)
	other, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.Close)
	cfg := testkit.ParseConfig(t, statesYAML)
	log := testkit.Logger(t)
	var clients []*River
	for _, p := range []*pgxpool.Pool{pool, other} {
		cc := DefaultClientConfig(cfg)
		cc.Pool, cc.Senders, cc.Log = p, cfg, log
		c, err := New(cc)
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
	}
	orders := sender(t, cfg, "orders")
	ev := newEventID(t)
	current := map[string]int64{}
	for _, tg := range orders.Forward {
		ids, err := queuetest.New(pool).InsertForwardJobs(ctx, ForwardQueue, queuetest.JobFixture{State: rivertype.JobStateRunning, Attempt: 1},
			queuetest.NewForwardJob{Sender: "orders", Target: tg.Name, EventID: ev, DeliveryID: "d-1", MaxAttempts: tg.MaxAttempts})
		if err != nil {
			t.Fatal(err)
		}
		current[tg.Name] = ids[0]
	}

	const n = 50
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		answers = make([][]Enqueued, n)
		errs    = make([]error, n)
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			answers[i], errs[i] = clients[i%2].Redeliver(ctx, orders, ev, "d-1")
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("redelivery %d: %v", i, err)
		}
	}

	jobs, err := queuetest.New(pool).ForwardJobs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	perTarget := map[string]int{}
	for _, j := range jobs {
		perTarget[j.Target]++
	}
	for _, tg := range orders.Forward {
		var queued []Enqueued
		pending := map[int64]int{}
		for _, a := range answers {
			for _, e := range a {
				switch {
				case e.Target != tg.Name:
				case e.AfterCurrent && !e.AlreadyPending && e.CurrentJobID == current[tg.Name]:
					queued = append(queued, e)
				case e.AlreadyPending && !e.AfterCurrent:
					pending[e.JobID]++
				default:
					t.Errorf("redelivery to %s = %+v; want after the current job %d, or already pending", tg.Name, e, current[tg.Name])
				}
			}
		}
		if perTarget[tg.Name] != 2 || len(queued) != 1 {
			t.Errorf("%s: %d jobs, %d answers queued a new forward (%+v); want 2 jobs (the one under way and one redelivery), 1 answer",
				tg.Name, perTarget[tg.Name], len(queued), queued)
			continue
		}
		if pending[queued[0].JobID] != n-1 || len(pending) != 1 {
			t.Errorf("%s: already-pending answers by job %v; want %d naming job %d", tg.Name, pending, n-1, queued[0].JobID)
		}
	}
}

// TestBulkRedeliveryBatchWaitsForSingleRedelivery: a bulk redelivery of
// running forwards and a single redelivery of one of its events do not
// both queue a forward after the one under way. The single redelivery has
// queued its forward and holds its locks (its transaction is open, made
// here by hand) when the bulk job reads its batch; the job waits for the
// sender's lock (seen in pg_locks), the single redelivery commits, and the
// job, reading its batch again under the lock, queues none for that event.
// Without the bulk batch's lock the job does not wait: it queues a second
// forward after the one under way (the test then sees three forwards).
func TestBulkRedeliveryBatchWaitsForSingleRedelivery(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool, _ := pgtest.NewDB(t)
	cfg := testkit.ParseConfig(t, statesYAML)
	log := testkit.Logger(t)
	w := unreachable{}
	cc := DefaultClientConfig(cfg)
	cc.Pool, cc.Senders, cc.Worker, cc.Log = pool, cfg, w, log
	client := startClient(t, cc)
	orders := sender(t, cfg, "orders")
	ev := newEventID(t)
	running, err := queuetest.New(pool).InsertForwardJobs(ctx, ForwardQueue, queuetest.JobFixture{State: rivertype.JobStateRunning, Attempt: 1, At: time.Now().Add(-time.Minute)},
		queuetest.NewForwardJob{Sender: "orders", Target: "t1", EventID: ev, DeliveryID: "d-1", MaxAttempts: 3})
	if err != nil {
		t.Fatal(err)
	}

	// The single redelivery, under its locks, not committed yet.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	tq := NewJobs(tx)
	if err := tq.LockRedelivery(ctx, "orders", ev); err != nil {
		t.Fatal(err)
	}
	single, err := redeliverTx(ctx, tq, tx, client.client, orders, ev, "d-1")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range single {
		if e.Target == "t1" && (!e.AfterCurrent || e.CurrentJobID != running[0]) {
			t.Errorf("the single redelivery to t1 = %+v; want a forward queued after job %d", e, running[0])
		}
	}
	res, err := client.BulkRedeliver(ctx, BulkRequest{Sender: orders, Target: "t1", State: StateRunning})
	if err != nil || res.Matched != 1 {
		t.Fatalf("BulkRedeliver(running) = %+v, %v; want 1 matched", res, err)
	}
	// The bulk job's batch waits for the sender's lock: a two-key advisory
	// lock in this database not granted (pg_locks is what this looks at:
	// raw SQL). A job that takes no lock finishes instead.
	testkit.Poll(t, lockTestWait, "the bulk job to wait for the sender's redelivery lock (or to finish)", func() bool {
		var waiting int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2 AND NOT granted
  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&waiting)
		if err == nil && waiting == 1 {
			return true
		}
		n, err := queuetest.New(pool).CountJobs(ctx, BulkArgs{}.Kind(), rivertype.JobStateCompleted)
		return err == nil && n == 1
	})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	testkit.Poll(t, lockTestWait, "the bulk job to finish", func() bool {
		n, err := queuetest.New(pool).CountJobs(ctx, BulkArgs{}.Kind(), rivertype.JobStateCompleted)
		return err == nil && n == 1
	})
	jobs, err := queuetest.New(pool).ForwardJobs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var toT1 []string
	for _, j := range jobs {
		if j.Target == "t1" {
			toT1 = append(toT1, fmt.Sprintf("job %d (%s)", j.ID, j.State))
		}
	}
	if len(toT1) != 2 {
		t.Errorf("forwards of the event to t1 after a bulk and a single redelivery: %v; want 2 (the one under way and one redelivery)", toT1)
	}
}
