package main

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/testing/pgtest"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// TestDatabaseOutageMidLoad takes the database away in the middle of a load
// of senders that retry until they get a 2xx: while it is down the gateway
// answers 503 problems with Retry-After and /readyz is 503; once it is back,
// /readyz is 200 again, every delivery gets its 2xx, and each was accepted
// once (one key each).
func TestDatabaseOutageMidLoad(t *testing.T) {
	testkit.Slow(t, "stops PostgreSQL under load (an outage)")
	t.Parallel()
	cluster := pgtest.StartCluster(t)
	srv := startRun(t, cluster.URL()) // serve applies the migrations
	c := newClient(t)
	// Every request's time to its answer, and the process's heap, sampled
	// through the run: an outage must be answered at once (shed or failed
	// fast), not by requests queued for the store timeout, and memory must
	// stay bounded while senders keep retrying.
	var longest atomic.Int64
	c.Transport = timedTransport{next: c.Transport, longest: &longest}
	heap := sampleHeap(t)

	const (
		deliveries = 300
		senders    = 8
		stopAfter  = 50  // 2xx answers before the database is stopped
		heldBack   = 100 // deliveries first sent only once the database is down
	)
	ids := makeIDs("outage", deliveries)

	var (
		ok2xx       atomic.Int64
		down        atomic.Bool  // the database is stopped
		outageErrs  atomic.Int64 // error answers while it was down
		outage503   atomic.Int64 // of which well-formed 503 problems with Retry-After
		firstErrMu  sync.Mutex
		firstErr    reply // the first error answer while it was down
		reachedOnce sync.Once
		reached     = make(chan struct{}) // stopAfter 2xx answers were received
		outage      = make(chan struct{}) // the database is down
	)
	l := &load{
		client: c, base: srv.base, ids: ids, senders: senders, backoff: 20 * time.Millisecond,
		// The last heldBack deliveries wait for the outage, so that some
		// deliveries certainly meet it whatever the speed of the machine.
		hold: func(ctx context.Context, i int) bool {
			if i < deliveries-heldBack {
				return true
			}
			select {
			case <-outage:
				return true
			case <-ctx.Done():
				return false
			}
		},
		observe: func(r reply, err error) {
			if err != nil {
				return
			}
			if r.status >= 200 && r.status < 300 && ok2xx.Add(1) >= stopAfter {
				reachedOnce.Do(func() { close(reached) })
			}
			if r.status >= 300 && down.Load() {
				if outageErrs.Add(1) == 1 {
					firstErrMu.Lock()
					firstErr = r
					firstErrMu.Unlock()
				}
				if checkProblem(r, http.StatusServiceUnavailable) == nil {
					outage503.Add(1)
				}
			}
		},
	}
	rl := l.start(t)

	select {
	case <-reached:
	case <-rl.done:
		t.Fatalf("the load ended after %d 2xx answers without reaching %d", ok2xx.Load(), stopAfter)
	}
	cluster.Stop(t)
	down.Store(true)
	close(outage)
	stoppedAt := ok2xx.Load()

	testkit.Poll(t, 30*time.Second, "an error answer during the outage", func() bool {
		return outageErrs.Load() > 0
	})
	firstErrMu.Lock()
	if err := checkProblem(firstErr, http.StatusServiceUnavailable); err != nil {
		t.Errorf("first answer during the outage: %v (%s), want a 503 problem with Retry-After", err, firstErr)
	}
	firstErrMu.Unlock()
	ready, err := get(context.Background(), c, srv.base+"/readyz")
	if err != nil {
		t.Fatal(err)
	}
	if err := checkProblem(ready, http.StatusServiceUnavailable); err != nil {
		t.Errorf("GET /readyz with the database down: %v (%s)", err, ready)
	}
	sample, err := deliver(context.Background(), c, srv.base, "outage-sample", bodyFor("outage-sample"))
	if err != nil {
		t.Fatal(err)
	}
	if err := checkProblem(sample, http.StatusServiceUnavailable); err != nil {
		t.Errorf("delivery with the database down: %v (%s)", err, sample)
	}
	for _, leak := range []string{fmt.Sprint(cluster.Port()), "dial", "SQLSTATE", "connect"} {
		if strings.Contains(string(sample.body), leak) || strings.Contains(string(ready.body), leak) {
			t.Errorf("an error response reveals internal error text (%q): %s / %s", leak, sample.body, ready.body)
		}
	}

	down.Store(false)
	cluster.Start(t)
	testkit.Poll(t, time.Minute, "GET /readyz to answer 200 after the database is back", func() bool {
		r, err := get(context.Background(), c, srv.base+"/readyz")
		return err == nil && r.status == http.StatusOK
	})

	select {
	case <-rl.done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the load did not end within two minutes")
	}
	reportLoad(t, rl.st)
	// A request queued for the store timeout (the handler's 15 s) waits at
	// least that long; one answered at once takes milliseconds, or seconds
	// on a busy machine, which is why the bound is not tighter.
	d := time.Duration(longest.Load())
	t.Logf("the longest request took %s", d.Round(time.Millisecond))
	if d >= 15*time.Second {
		t.Errorf("a request waited %s for its answer: during an outage the gateway must answer at once, not queue requests for the 15s store timeout", d)
	}
	if peak := heap(); peak > 100<<20 {
		t.Errorf("heap peaked at %d MB during the outage and the retries after it, want under 100 MB", peak>>20)
	}
	t.Logf("database stopped after %d 2xx answers; %d error answers during the outage, %d of them 503 problems with Retry-After",
		stoppedAt, outageErrs.Load(), outage503.Load())
	if outage503.Load() == 0 {
		t.Error("no 503 problem with Retry-After was answered during the outage")
	}
	if rl.st.connErrs > 0 {
		t.Errorf("%d requests got no HTTP answer: the gateway must stay up while the database is down", rl.st.connErrs)
	}
	for status := range rl.st.statuses {
		if status != http.StatusServiceUnavailable && status != http.StatusInternalServerError && status != http.StatusConflict {
			t.Errorf("answered %d %d times; only 503 (or 500, 409) may ask a sender to retry", status, rl.st.statuses[status])
		}
	}

	replayAll(t, c, srv.base, ids, rl.st)
	ctx := t.Context()
	pool, err := pgxpool.New(ctx, cluster.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	checkStored(t, pool, ids, rl.st)

	var sampled int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM processed_messages WHERE delivery_id = 'outage-sample'`).Scan(&sampled); err != nil {
		t.Fatal(err)
	}
	if sampled != 0 {
		t.Error("a delivery answered 503 during the outage was recorded")
	}

	srv.cancel()
	if err := srv.wait(t); err != nil {
		t.Errorf("run returned %v after the outage, want nil", err)
	}
}

// timedTransport records the longest round trip of its requests.
type timedTransport struct {
	next    http.RoundTripper
	longest *atomic.Int64
}

func (tt timedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	start := time.Now()
	resp, err := tt.next.RoundTrip(r)
	d := int64(time.Since(start))
	for l := tt.longest.Load(); d > l && !tt.longest.CompareAndSwap(l, d); l = tt.longest.Load() {
	}
	return resp, err
}

// sampleHeap samples the process's heap in use every 50ms until the test
// ends; the returned function reports the peak so far, in bytes.
func sampleHeap(t *testing.T) func() uint64 {
	var peak atomic.Uint64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if v := ms.HeapInuse; v > peak.Load() {
				peak.Store(v)
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
	return peak.Load
}
