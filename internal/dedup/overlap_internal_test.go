package dedup

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookgate/hookgate/internal/idempotency"
	"github.com/hookgate/hookgate/internal/testing/pgtest"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// holdKey opens a transaction on its own connection that claims key's
// delivery, as another process's delivery in flight does, and returns it
// with the holder's delivery. The caller commits it; the test's end rolls
// it back otherwise.
func holdKey(t *testing.T, ctx context.Context, dsn, sender, id string) (pgx.Tx, idempotency.Delivery) {
	t.Helper()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	holder := delivery(t, sender, id, "p")
	claimKeys(t, ctx, tx, holder)
	return tx, holder
}

// runAsync runs d through s.Run in a goroutine. The returned channel
// closes when Run returns; the result and error are then set.
func runAsync(ctx context.Context, s *Store, d idempotency.Delivery) (<-chan struct{}, *Result, *error) {
	done := make(chan struct{})
	var (
		res Result
		err error
	)
	go func() {
		defer close(done)
		res, err = s.Run(ctx, d, mark(d))
	}()
	return done, &res, &err
}

// runHeld runs a delivery of the held key with runAsync and waits until
// its transaction waits for the holder's lock: its sender's batch in
// flight is held up. On Citus the wait is on the worker that holds the
// key's shard, which citus_stat_activity shows with the coordinator's.
func runHeld(t *testing.T, ctx context.Context, s *Store, sender, id string) (<-chan struct{}, *Result, *error) {
	t.Helper()
	done, res, err := runAsync(ctx, s, delivery(t, sender, id, "p"))
	activity := "pg_stat_activity"
	if pgtest.Citus() {
		activity = "citus_stat_activity"
	}
	testkit.Poll(t, time.Minute, "the held key's delivery to wait for the holder's lock", func() bool {
		var n int
		if err := s.db.QueryRow(ctx, `SELECT count(*) FROM `+activity+` WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	})
	return done, res, err
}

// TestSlowBatchLetsTheNextStart: with two batches in flight at most and an
// overlap after 10 ms, a sender's batch held up by a key another
// transaction holds does not hold up the sender. Twenty concurrent
// deliveries of other keys are stored and answered while the key is still
// held, and the held one replays the holder's once it commits.
func TestSlowBatchLetsTheNextStart(t *testing.T) {
	t.Parallel()
	s, ctx, dsn := batchStore(t)
	s.maxInFlight, s.overlapAfter = 2, 10*time.Millisecond
	tx, holder := holdKey(t, ctx, dsn, "slow", "held")
	heldDone, heldRes, heldErr := runHeld(t, ctx, s, "slow", "held")

	const n = 20
	others := make(chan struct{})
	errs := make([]error, n)
	go func() {
		defer close(others)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				d := delivery(t, "slow", fmt.Sprintf("other-%d", i), "p")
				res, err := s.Run(ctx, d, mark(d))
				if err == nil && res.Replayed {
					err = fmt.Errorf("first delivery %s replayed", d.DeliveryID)
				}
				errs[i] = err
			})
		}
		wg.Wait()
	}()
	select {
	case <-others:
	case <-heldDone:
		t.Fatalf("the held key's delivery ended (%+v, %v) before the sender's other deliveries: they waited behind its batch", *heldRes, *heldErr)
	}
	for i, err := range errs {
		if err != nil {
			t.Errorf("delivery other-%d: %v", i, err)
		}
	}
	select {
	case <-heldDone:
		t.Fatalf("the held key's delivery ended while the key was held: %+v, %v", *heldRes, *heldErr)
	default:
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	<-heldDone
	if *heldErr != nil || !heldRes.Replayed || heldRes.EventID != holder.EventID {
		t.Errorf("held key: %+v, %v; want a replay of the holder's delivery", *heldRes, *heldErr)
	}
}

// TestYoungBatchHoldsTheNext: while the sender's batch in flight has run
// for less than the overlap, a further delivery waits for it, though a
// second batch could run: it goes into the next batch. Here the batch in
// flight waits for a held key, and the overlap is an hour, so the further
// delivery is stored only after the holder commits.
func TestYoungBatchHoldsTheNext(t *testing.T) {
	t.Parallel()
	s, ctx, dsn := batchStore(t)
	s.maxInFlight, s.overlapAfter = 2, time.Hour
	tx, holder := holdKey(t, ctx, dsn, "young", "held")
	heldDone, heldRes, heldErr := runHeld(t, ctx, s, "young", "held")

	next := delivery(t, "young", "next", "p")
	nextDone, nextRes, nextErr := runAsync(ctx, s, next)
	// However long this waits, the delivery cannot be stored before the
	// held batch ends; 300 ms gives a wrong implementation time to show.
	select {
	case <-nextDone:
		t.Fatalf("a delivery that arrived while a young batch ran was answered beside it: %+v, %v", *nextRes, *nextErr)
	case <-time.After(300 * time.Millisecond):
	}
	if got := marks(t, ctx, s, next); got != 0 {
		t.Fatalf("the further delivery's change was applied %d times while the batch in flight was young", got)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	<-heldDone
	<-nextDone
	if *heldErr != nil || !heldRes.Replayed || heldRes.EventID != holder.EventID {
		t.Errorf("held key: %+v, %v; want a replay of the holder's delivery", *heldRes, *heldErr)
	}
	if *nextErr != nil || nextRes.Replayed {
		t.Errorf("further delivery: %+v, %v; want new", *nextRes, *nextErr)
	}
	if got := marks(t, ctx, s, next); got != 1 {
		t.Errorf("the further delivery's change was applied %d times, want 1", got)
	}
}
