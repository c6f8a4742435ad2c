package dedup_test

import (
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/hookgate/hookgate/internal/dedup"
	"github.com/hookgate/hookgate/internal/idempotency"
	"github.com/hookgate/hookgate/internal/testing/pgtest"
)

// BenchmarkRun measures the ingest pipeline as the gateway runs it per
// delivery (Store.Run with the event insert as the change, 512-byte
// bodies) on a real PostgreSQL, 32 deliveries at a time as make bench's
// load: first deliveries one per transaction (no group commit), the same
// with the gateway's group commit, and replays of 10,000 stored keys
// without the replay cache (each reads its stored row). It reports
// deliveries/s. make bench runs it beside pgbench's plain SQL (cmd/bench,
// fsync on); on its own:
//
//	HOOKGATE_TEST_DATABASE_URL=… go test -run '^$' -bench BenchmarkRun ./internal/dedup/
func BenchmarkRun(b *testing.B) {
	const keys = 10000
	body := `{"type":"order.created","note":"` + strings.Repeat("x", 512-34) + `"}`
	single := dedup.Config{InFlightWait: dedup.DefaultInFlightWait}
	batched := single
	batched.Batching = &dedup.Batching{MaxBatch: dedup.DefaultMaxBatch, MaxInFlight: dedup.DefaultMaxInFlight, OverlapAfter: dedup.DefaultOverlapAfter}
	for _, bc := range []struct {
		name   string
		cfg    dedup.Config
		replay bool
	}{{"first", single, false}, {"first-batched", batched, false}, {"replay", single, true}} {
		pool, _ := pgtest.NewDB(b, pgtest.Conns(32))
		ctx := b.Context()
		deliver := func(s *dedup.Store, id string) (dedup.Result, error) {
			d := newDelivery(b, idempotency.Key{Sender: "bench", DeliveryID: id}, body)
			return s.Run(ctx, d, insertEvent(d, body))
		}
		if bc.replay { // the keys, with group commit, 32 at a time
			seed := newStore(b, pool, batched)
			var wg sync.WaitGroup
			for w := range 32 {
				wg.Go(func() {
					for i := w; i < keys; i += 32 {
						if _, err := deliver(seed, strconv.Itoa(i)); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
		}
		store := newStore(b, pool, bc.cfg)
		var next atomic.Int64 // across the runs of the sub-benchmark: first deliveries stay first
		b.Run(bc.name, func(b *testing.B) {
			b.SetParallelism((32 + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := next.Add(1)
					if bc.replay {
						i %= keys
					}
					if res, err := deliver(store, strconv.FormatInt(i, 10)); err != nil || res.Replayed != bc.replay {
						b.Errorf("delivery %d: %+v, %v (replayed: want %v)", i, res, err, bc.replay)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "deliveries/s")
		})
	}
}
