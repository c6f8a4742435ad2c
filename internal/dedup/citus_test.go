package dedup_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/dedup"
	"github.com/hookgate/hookgate/internal/idempotency"
	"github.com/hookgate/hookgate/internal/testing/pgtest"
)

// TestCitusBatchOnOneShard (Citus only: make test-citus): batches of one
// sender's deliveries, with their events, first deliveries and replays
// mixed, each commit on the sender's worker alone, without two-phase
// commit: Citus's record of prepared transactions (pg_dist_transaction)
// stays empty. A statement Citus pulled to the coordinator (INSERT … SELECT
// … FROM unnest(…) into a distributed table) would commit in two phases.
func TestCitusBatchOnOneShard(t *testing.T) {
	t.Parallel()
	if !pgtest.Citus() {
		t.Skip("needs Citus: make test-citus CITUS_URL=…")
	}
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	var batches, batched atomic.Int64
	store := newStore(t, pool, dedup.Config{InFlightWait: 5 * time.Second, Batching: &dedup.Batching{MaxBatch: 16, MaxInFlight: 1, Observe: func(n int) {
		if n > 1 {
			batches.Add(1)
			batched.Add(int64(n))
		}
	}}})
	// Distributing the tables committed in two phases: forget those.
	execSQL(t, ctx, pool, `SELECT recover_prepared_transactions()`)
	if got := count(t, ctx, pool, `SELECT count(*) FROM pg_dist_transaction`); got != 0 {
		t.Fatalf("pg_dist_transaction holds %d rows before the test", got)
	}
	const n = 300
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		// 200 keys of three senders; the last 100 deliveries repeat keys:
		// replays in batches.
		k := idempotency.Key{Sender: fmt.Sprintf("s%d", i%200%3), DeliveryID: fmt.Sprintf("k%d", i%200)}
		d := newDelivery(t, k, "p")
		wg.Go(func() {
			_, errs[i] = store.Run(ctx, d, insertEvent(d, "p"))
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("delivery %d: %v", i, err)
		}
	}
	if got := count(t, ctx, pool, `SELECT count(*) FROM processed_messages`); got != 200 {
		t.Errorf("%d keys stored, want 200", got)
	}
	if got := count(t, ctx, pool, `SELECT count(*) FROM webhook_events`); got != 200 {
		t.Errorf("%d events stored, want 200", got)
	}
	if batches.Load() == 0 {
		t.Fatal("no batch held more than one delivery: the test proved nothing")
	}
	if got := count(t, ctx, pool, `SELECT count(*) FROM pg_dist_transaction`); got != 0 {
		t.Errorf("pg_dist_transaction holds %d rows: %d batches (%d deliveries) committed in two phases", got, batches.Load(), batched.Load())
	}
	t.Logf("%d batches of more than one delivery (%d deliveries), none in two phases", batches.Load(), batched.Load())
}

// TestInspectCitus: on PostgreSQL, processed_messages is not distributed;
// on Citus (make test-citus) it is, and the session's
// citus.propagate_set_commands, which serve warns about unless it is
// 'local', is reported as set.
func TestInspectCitus(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	c, err := dedup.InspectCitus(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	if !pgtest.Citus() {
		if c != (dedup.Citus{}) {
			t.Errorf("InspectCitus on PostgreSQL = %+v, want the zero Citus", c)
		}
		return
	}
	if !c.Distributed || c.PropagateSetCommands != "local" {
		t.Errorf("InspectCitus on the test database = %+v, want distributed with citus.propagate_set_commands local", c)
	}
	if _, err := conn.Exec(ctx, "SET citus.propagate_set_commands = 'none'"); err != nil {
		t.Fatal(err)
	}
	if c, err = dedup.InspectCitus(ctx, conn); err != nil || c.PropagateSetCommands != "none" {
		t.Errorf("InspectCitus after SET citus.propagate_set_commands = 'none': %+v, %v", c, err)
	}
	if _, err := conn.Exec(ctx, "RESET citus.propagate_set_commands"); err != nil {
		t.Fatal(err)
	}
}
