package traffic

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/store"
	"github.com/hookgate/hookgate/internal/testing/pgtest"
)

// TestFlushAddsCountsPerMinute counts deliveries and forwards from many
// goroutines (run it under -race), flushes them twice into the same minute
// and once into the next, and reads them back per minute and per hour: the
// flushes add up (ON CONFLICT … n = n + EXCLUDED.n), nothing is lost or
// counted twice, and rows older than the retention are deleted by a flush.
func TestFlushAddsCountsPerMinute(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDB(t)
	ctx := context.Background()
	q := store.New(pool)
	r := newRecorder(t, q)
	now := time.Date(2026, 12, 1, 6, 30, 10, 0, time.UTC)
	r.now = func() time.Time { return now }

	// A row past the retention, which the first flush deletes.
	if err := q.AddTraffic(ctx, []store.TrafficDelta{{Sender: "orders", Kind: store.TrafficAccepted, Minute: now.Add(-store.TrafficRetention - time.Minute), N: 9}}, now.Add(-store.TrafficRetention)); err != nil {
		t.Fatal(err)
	}

	count := func() {
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 25 {
					r.Ingest("orders", "accepted")
					r.Ingest("orders", "replayed")
					r.Ingest("orders", "rejected_signature")
					r.Ingest("orders", "shed")
					r.Forward("orders", "svc", true, 20*time.Millisecond)
					r.Forward("orders", "svc", false, 40*time.Millisecond)
				}
			}()
		}
		wg.Wait()
	}
	count()
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	count()
	if err := r.Flush(ctx); err != nil { // same minute: added to the rows
		t.Fatal(err)
	}
	now = now.Add(time.Minute)
	r.Ingest("orders", "accepted")
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.Flush(ctx); err != nil { // nothing new: no change
		t.Fatal(err)
	}

	got, err := q.Traffic(ctx, "orders", now.Add(-time.Hour), now.Add(time.Minute), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	type k struct {
		target, kind string
		minute       int
	}
	have := map[k]store.TrafficBucket{}
	for _, b := range got {
		have[k{b.Target, b.Kind, b.Start.UTC().Minute()}] = b
	}
	want := map[k]int64{
		{"", "accepted", 30}: 400, {"", "replayed", 30}: 400, {"", "refused", 30}: 800,
		{"svc", "delivered", 30}: 400, {"svc", "failed", 30}: 400, {"", "accepted", 31}: 1,
	}
	if len(have) != len(want) {
		t.Errorf("got %d series-minutes %+v, want %d", len(have), got, len(want))
	}
	for key, n := range want {
		if have[key].N != n {
			t.Errorf("%+v: n = %d, want %d", key, have[key].N, n)
		}
	}
	if b := have[k{"svc", "delivered", 30}]; b.SumMS != 400*20 {
		t.Errorf("delivered latency sum = %d ms, want %d", b.SumMS, 400*20)
	}

	// Per hour (traffic_hours, added to by the same flushes): both minutes
	// in one bucket.
	hours, err := q.Traffic(ctx, "orders", now.Add(-24*time.Hour), now.Add(time.Hour), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range hours {
		if b.Target == "" && b.Kind == "accepted" && b.N != 401 {
			t.Errorf("accepted in the hour = %d, want 401", b.N)
		}
	}
	var old int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM traffic_minutes WHERE minute < $1`, now.Add(-store.TrafficRetention)).Scan(&old); err != nil {
		t.Fatal(err)
	}
	if old != 0 {
		t.Errorf("%d rows older than the retention remain", old)
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM traffic_hours WHERE hour < $1`, now.Add(-store.TrafficRetention).Truncate(time.Hour)).Scan(&old); err != nil {
		t.Fatal(err)
	}
	if old != 0 {
		t.Errorf("%d hours older than the retention remain", old)
	}
}

// TestFlushKeepsCountsWhileTheDatabaseIsAway flushes into a closed pool:
// the counts are kept and stored by the next flush that can.
func TestFlushKeepsCountsWhileTheDatabaseIsAway(t *testing.T) {
	t.Parallel()
	pool, dsn := pgtest.NewDB(t)
	ctx := context.Background()
	now := time.Now().UTC()
	down, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	down.Close()
	r := newRecorder(t, store.New(down))
	r.now = func() time.Time { return now }
	r.Ingest("orders", "accepted")
	if err := r.Flush(ctx); err == nil {
		t.Fatal("a flush into a closed pool succeeded")
	}
	r.q = store.New(pool)
	r.Ingest("orders", "accepted")
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	var n int64
	if err := pool.QueryRow(ctx, `SELECT coalesce(sum(n), 0) FROM traffic_minutes WHERE sender = 'orders' AND kind = 'accepted'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("stored %d accepted, want 2 (the first flush's count kept)", n)
	}
}

// TestLatencyHistogramAddsUp counts forward attempts of known latencies
// from several goroutines, flushes them in two parts into the same minute
// and into the next, and reads them back per minute and per hour: the
// histograms add up bucket by bucket (in the database, from two flushes,
// and across minutes), each attempt in the bucket of its latency, and the
// p50 and p95 estimated from them are within a bucket of the true ones.
func TestLatencyHistogramAddsUp(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDB(t)
	ctx := context.Background()
	q := store.New(pool)
	r := newRecorder(t, q)
	now := time.Date(2026, 12, 1, 7, 10, 30, 0, time.UTC)
	r.now = func() time.Time { return now }
	// 1,000 attempts taking 0.1 ms, 0.2 ms, … 100 ms: p50 50 ms, p95 95 ms.
	record := func(from, to int) {
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := from + g; i < to; i += 4 {
					r.Forward("orders", "svc", i%10 != 0, time.Duration(i+1)*100*time.Microsecond)
				}
			}()
		}
		wg.Wait()
	}
	record(0, 400)
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	record(400, 700)
	if err := r.Flush(ctx); err != nil { // same minute: added bucket by bucket
		t.Fatal(err)
	}
	now = now.Add(time.Minute)
	record(700, 1000)
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	var stored []int64
	if err := pool.QueryRow(ctx, `SELECT latency_hist FROM traffic_minutes WHERE kind = 'delivered' AND minute = '2026-12-01 07:10:00+00'`).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if len(stored) != store.LatencyBuckets {
		t.Fatalf("stored histogram of %d buckets, want %d", len(stored), store.LatencyBuckets)
	}
	hours, err := q.Traffic(ctx, "orders", now.Add(-time.Hour), now.Add(time.Hour), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]int64, store.LatencyBuckets)
	for _, b := range hours {
		if b.Target != "svc" {
			continue
		}
		for i, n := range b.Hist {
			got[i] += n
		}
	}
	want := make([]int64, store.LatencyBuckets)
	for i := range 1000 {
		want[store.LatencyBucket(time.Duration(i+1)*100*time.Microsecond)]++
	}
	if !slices.Equal(got, want) {
		t.Errorf("histogram of the hour (delivered and failed) = %v, want %v", got, want)
	}
	for _, c := range []struct{ q, true float64 }{{0.5, 50}, {0.95, 95}} {
		est, over, ok := store.LatencyQuantile(got, c.q)
		lo, hi := bucketAround(c.true)
		if !ok || over || est < lo || est > hi {
			t.Errorf("p%.0f estimated %.1f ms (over %v, ok %v), want within its bucket [%v, %v] around %v ms", c.q*100, est, over, ok, lo, hi, c.true)
		}
	}
	var ingestHist int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM traffic_minutes WHERE target = '' AND latency_hist IS NOT NULL`).Scan(&ingestHist); err != nil {
		t.Fatal(err)
	}
	if ingestHist != 0 {
		t.Errorf("%d ingest rows carry a histogram", ingestHist)
	}
}

// bucketAround returns the bounds of the latency bucket holding ms.
func bucketAround(ms float64) (lo, hi float64) {
	i := store.LatencyBucket(time.Duration(ms * float64(time.Millisecond)))
	if i > 0 {
		lo = store.LatencyBoundsMS[i-1]
	}
	return lo, store.LatencyBoundsMS[i]
}

// TestRunRefusesZeroInterval: zero means zero: Run takes no default from
// an interval of 0 (it would flush never, or in a busy loop); it panics.
func TestRunRefusesZeroInterval(t *testing.T) {
	t.Parallel()
	r := newRecorder(t, store.New(nil)) // never used: Run panics first
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // a Run that took a default would return at once
	defer func() {
		if recover() == nil {
			t.Error("Run with an interval of 0 did not panic")
		}
	}()
	r.Run(ctx, 0)
}

// newRecorder returns New's Recorder on q, failing t on an error.
func newRecorder(t *testing.T, q *store.Queries) *Recorder {
	t.Helper()
	r, err := New(Config{Queries: q, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestNewRefusesMissingDependencies: New names the dependency it lacks.
func TestNewRefusesMissingDependencies(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.DiscardHandler)
	for _, tc := range []struct {
		c    Config
		want string
	}{
		{Config{Log: log}, "Queries"},
		{Config{Queries: store.New(nil)}, "Log"},
	} {
		if _, err := New(tc.c); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want an error naming %s", tc.c, err, tc.want)
		}
	}
}

// TestProcessesFlushingAtOnce: several processes on one database count
// the same senders and targets and flush at the same moment, round after
// round. No flush fails (each takes its rows' locks in the same order, or
// PostgreSQL aborts one as a deadlock), and the stored counts are the sum
// of every process's.
func TestProcessesFlushingAtOnce(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDB(t)
	ctx := context.Background()
	q := store.New(pool)
	now := time.Date(2026, 12, 1, 6, 30, 10, 0, time.UTC)
	const processes, senders, rounds = 4, 12, 10
	recorders := make([]*Recorder, processes)
	for i := range recorders {
		recorders[i] = newRecorder(t, q)
		recorders[i].now = func() time.Time { return now }
	}
	for round := range rounds {
		for _, r := range recorders {
			for s := range senders {
				sender := "s" + strconv.Itoa(s)
				r.Ingest(sender, "accepted")
				r.Ingest(sender, "replayed")
				r.Forward(sender, "svc", true, time.Millisecond)
				r.Forward(sender, "svc", false, time.Millisecond)
			}
		}
		errs := make([]error, processes)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i, r := range recorders {
			wg.Go(func() {
				<-start
				errs[i] = r.Flush(ctx)
			})
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("round %d, process %d: flush: %v", round, i, err)
			}
		}
	}
	var rows, total int64
	if err := pool.QueryRow(ctx, `SELECT count(*), sum(n) FROM traffic_minutes`).Scan(&rows, &total); err != nil {
		t.Fatal(err)
	}
	if want := int64(processes * senders * rounds * 4); rows != senders*4 || total != want {
		t.Errorf("traffic_minutes: %d rows counting %d, want %d rows counting %d", rows, total, senders*4, want)
	}
	if err := pool.QueryRow(ctx, `SELECT count(*), sum(n) FROM traffic_hours`).Scan(&rows, &total); err != nil {
		t.Fatal(err)
	}
	if want := int64(processes * senders * rounds * 4); rows != senders*4 || total != want {
		t.Errorf("traffic_hours: %d rows counting %d, want %d rows counting %d", rows, total, senders*4, want)
	}
}
