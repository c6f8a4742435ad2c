package dedup_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/dedup"
	"github.com/hookgate/hookgate/internal/idempotency"
	"github.com/hookgate/hookgate/internal/testing/pgtest"
)

// citusRoutes skips t unless the tests run on Citus, and returns its
// context, a fresh database and Routes on it.
func citusRoutes(t *testing.T) (context.Context, *pgxpool.Pool, *dedup.Routes) {
	t.Helper()
	if !pgtest.Citus() {
		t.Skip("needs Citus: make test-citus CITUS_URL=…")
	}
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	return ctx, pool, newRoutes(t, ctx, pool)
}

// newRoutes returns dedup.NewRoutes on pool, to the Citus cluster's
// workers (listed, as --citus-worker-hosts does), closed at the test's end.
func newRoutes(t *testing.T, ctx context.Context, pool *pgxpool.Pool) *dedup.Routes {
	t.Helper()
	r, err := dedup.NewRoutes(ctx, pool, dedup.RoutesConfig{Workers: pgtest.CitusWorkerHosts(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

// routedStore is a store on pool ingesting through the delegated function,
// its calls sent where routes says, in batches of up to 16, one in flight.
func routedStore(t *testing.T, pool *pgxpool.Pool, routes *dedup.Routes) *dedup.Store {
	t.Helper()
	cfg := delegatedConfig(dedup.Config{InFlightWait: 5 * time.Second, Batching: &dedup.Batching{MaxBatch: 16, MaxInFlight: 1}}, "ingest_deliveries")
	cfg.Routes = routes
	return newStore(t, pool, cfg)
}

// placement returns the address (host:port) of the node that holds sender's
// shard of processed_messages.
func placement(t *testing.T, ctx context.Context, pool *pgxpool.Pool, sender string) string {
	t.Helper()
	var addr string
	if err := pool.QueryRow(ctx, `SELECT n.nodename || ':' || n.nodeport FROM pg_dist_placement p
JOIN pg_dist_node n ON n.groupid = p.groupid
WHERE p.shardid = get_shard_id_for_distribution_column('processed_messages', $1::text)`, sender).Scan(&addr); err != nil {
		t.Fatal(err)
	}
	return addr
}

// sendersOnTwoWorkers returns two senders whose shards are on different
// workers, and those workers' addresses.
func sendersOnTwoWorkers(t *testing.T, ctx context.Context, pool *pgxpool.Pool) (senders, workers [2]string) {
	t.Helper()
	senders[0], workers[0] = "s0", placement(t, ctx, pool, "s0")
	for i := 1; i < 100; i++ {
		s := fmt.Sprintf("s%d", i)
		if w := placement(t, ctx, pool, s); w != workers[0] {
			senders[1], workers[1] = s, w
			return senders, workers
		}
	}
	t.Fatal("no two senders on different workers among 100")
	return
}

// burst sends n first deliveries of each sender at once through store, with
// an event and an outbox row each, and fails t unless every one is claimed
// with its own response; it returns the deliveries.
func burst(t *testing.T, ctx context.Context, store *dedup.Store, prefix string, n int, senders ...string) []idempotency.Delivery {
	t.Helper()
	var ds []idempotency.Delivery
	for _, s := range senders {
		for i := range n {
			ds = append(ds, newDelivery(t, idempotency.Key{Sender: s, DeliveryID: fmt.Sprintf("%s-%03d", prefix, i)}, "p"))
		}
	}
	errs := make([]error, len(ds))
	var wg sync.WaitGroup
	for i, d := range ds {
		wg.Go(func() {
			res, err := store.Run(ctx, d, withOutbox(d, `{}`, "a"))
			if err == nil && (res.Replayed || res.EventID != d.EventID) {
				err = fmt.Errorf("%s: result %+v, want its own, not replayed", d.DeliveryID, res)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return ds
}

// replayAll runs each of ds again through store and fails t unless each
// gets its stored response, replayed.
func replayAll(t *testing.T, ctx context.Context, store *dedup.Store, ds []idempotency.Delivery) {
	t.Helper()
	for _, d := range ds {
		again := d
		again.EventID = newDelivery(t, d.Key, "p").EventID
		res, err := store.Run(ctx, again, withOutbox(again, `{}`, "a"))
		if err != nil || !res.Replayed || res.EventID != d.EventID || !equalResponse(res.Response, d.Response) {
			t.Fatalf("%s again: %+v, %v; want the first delivery's response, replayed", d.DeliveryID, res, err)
		}
	}
}

// rowsOf fails t unless each sender has n keys, events and outbox rows,
// read through the coordinator.
func rowsOf(t *testing.T, ctx context.Context, pool *pgxpool.Pool, n int, senders ...string) {
	t.Helper()
	for _, s := range senders {
		for _, table := range []string{"processed_messages", "webhook_events", "forward_outbox"} {
			if got := count(t, ctx, pool, `SELECT count(*) FROM `+table+` WHERE sender = $1`, s); got != n {
				t.Errorf("%s: %d rows of %s, want %d", table, got, s, n)
			}
		}
	}
}

// TestRoutesCallTheSendersWorker (Citus): with Routes, a burst of two
// senders whose shards are on different workers is claimed and applied
// by calls on each sender's worker (its pool gives connections), every
// delivery once with its own response; the rows read back through the
// coordinator; their retries get the stored responses; and no transaction
// commits in two phases on any node (pgtest's watch reads every node).
func TestRoutesCallTheSendersWorker(t *testing.T) {
	t.Parallel()
	ctx, pool, routes := citusRoutes(t)
	if got, want := routes.Workers(), count(t, ctx, pool, `SELECT count(*) FROM pg_dist_node WHERE groupid <> 0`); got != want {
		t.Fatalf("Routes has %d workers, want %d", got, want)
	}
	senders, workers := sendersOnTwoWorkers(t, ctx, pool)
	store := routedStore(t, pool, routes)
	// A sender's first call goes through the coordinator while its
	// placement is read.
	for i, s := range senders {
		if got := routes.WaitRoute(ctx, s); got != workers[i] {
			t.Fatalf("Routes sends %s's calls to %q, want its worker %s", s, got, workers[i])
		}
	}
	before := routes.Acquires()
	ds := burst(t, ctx, store, "k", 40, senders[:]...)
	after := routes.Acquires()
	for _, w := range workers {
		if after[w] <= before[w] {
			t.Errorf("worker %s gave no connection for the burst (%d before, %d after)", w, before[w], after[w])
		}
	}
	rowsOf(t, ctx, pool, 40, senders[:]...)
	replayAll(t, ctx, store, ds)
}

// TestRoutesToAWorkerWithoutTheShard (Citus): calls sent to a worker that
// does not hold the sender's shard (a route read before a shard move) are
// still claimed and applied once, through Citus from that worker: the rows
// land in the sender's shard (read back through the coordinator), the
// retries replay, and nothing commits in two phases.
func TestRoutesToAWorkerWithoutTheShard(t *testing.T) {
	t.Parallel()
	ctx, pool, routes := citusRoutes(t)
	senders, workers := sendersOnTwoWorkers(t, ctx, pool)
	wrong := routes.Pool(workers[1])
	if wrong == nil {
		t.Fatalf("no pool for worker %s", workers[1])
	}
	routes.Force(senders[0], wrong) // senders[0]'s shard is on workers[0]
	store := routedStore(t, pool, routes)
	before := wrong.Stat().AcquireCount()
	ds := burst(t, ctx, store, "moved", 30, senders[0])
	if wrong.Stat().AcquireCount() == before {
		t.Fatal("the forced worker gave no connection: the calls did not go there")
	}
	rowsOf(t, ctx, pool, 30, senders[0])
	replayAll(t, ctx, store, ds)
}

// TestRoutesFallBackToTheCoordinator (Citus): when a sender's worker cannot
// be reached (its pool gives no connection), its calls go through the
// coordinator: every delivery claimed and applied once.
func TestRoutesFallBackToTheCoordinator(t *testing.T) {
	t.Parallel()
	ctx, pool, routes := citusRoutes(t)
	cc := pool.Config().Copy()
	cc.ConnConfig.Host, cc.ConnConfig.Port, cc.ConnConfig.Fallbacks = "127.0.0.1", 1, nil // nothing listens on port 1
	cc.ConnConfig.ConnectTimeout = time.Second
	gone, err := pgxpool.NewWithConfig(ctx, cc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gone.Close)
	routes.Force("s0", gone)
	store := routedStore(t, pool, routes)
	ds := burst(t, ctx, store, "fallback", 20, "s0")
	rowsOf(t, ctx, pool, 20, "s0")
	replayAll(t, ctx, store, ds)
}
