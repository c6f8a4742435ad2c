package dedup

import (
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/idempotency"
	"github.com/hookgate/hookgate/internal/testing/pgtest"
)

// TestBatchCommitCutFailsWholeBatch: a batch whose connection is lost
// between its COMMIT and the answer (a real cut, by a proxy that lets the
// COMMIT through and withholds its answer) fails every delivery of the
// batch with a transient error, and runs none of them again: the batch did
// commit, so a retry with the same event IDs would pass the claim guard
// again and apply a change without its own unique key twice. The sender's
// retry replays.
func TestBatchCommitCutFailsWholeBatch(t *testing.T) {
	t.Parallel()
	direct, ctx, dsn := batchStore(t)
	proxy, viaProxy := pgtest.NewCutProxy(t, dsn)
	pool, err := pgxpool.New(ctx, viaProxy)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s := mustNew(t, pool, Config{InFlightWait: 20 * time.Second, Batching: &Batching{MaxBatch: 64, MaxInFlight: 4}})

	ds := []idempotency.Delivery{delivery(t, "b", "a", "p"), delivery(t, "b", "b", "p"), delivery(t, "b", "c", "p")}
	changes := []Change{mark(ds[0]), mark(ds[1]), mark(ds[2])}
	// Warm the connection up (its statements prepared) with a batch of
	// other keys, so that the cut hits the batch under test.
	warm := []idempotency.Delivery{delivery(t, "b", "w1", "p"), delivery(t, "b", "w2", "p")}
	s.runBatch(calls(ctx, []Change{mark(warm[0]), mark(warm[1])}, warm...))

	proxy.ArmCommitCut()
	cs := calls(ctx, changes, ds...)
	s.runBatch(cs)
	if proxy.Cuts() != 1 {
		t.Fatalf("the proxy cut %d connections after a COMMIT; want 1 (the test did not exercise the cut)", proxy.Cuts())
	}
	for _, c := range cs {
		if c.err == nil {
			t.Errorf("delivery %s: %+v, no error; want an error (the outcome of its COMMIT is unknown)", c.d.DeliveryID, c.res)
			continue
		}
		if !Transient(c.err) {
			t.Errorf("delivery %s: %v is not transient; want a retry-later error", c.d.DeliveryID, c.err)
		}
		if !errors.Is(c.err, ErrOutcomeUnknown) {
			t.Errorf("delivery %s: %v; want ErrOutcomeUnknown (it may have committed, and did)", c.d.DeliveryID, c.err)
		}
	}
	for _, d := range ds {
		if n := marks(t, ctx, direct, d); n != 1 {
			t.Errorf("delivery %s: its state change was applied %d times; want once (the batch committed)", d.DeliveryID, n)
		}
	}
	// The sender's retry (a new event ID) replays the committed delivery.
	retry := delivery(t, "b", "a", "p")
	res, err := s.Run(ctx, retry, mark(retry))
	if err != nil || !res.Replayed || res.EventID != ds[0].EventID {
		t.Errorf("retry after the cut: %+v, %v; want a replay of the committed delivery", res, err)
	}
}
