package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/testing/pgtest"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// TestForwardsResumeAfterDatabaseCrash is the outage, with two
// --role api and two --role worker processes of the real binary and default
// settings: the outbox's statistics were taken when it held one row, the
// api processes accept 5,000 deliveries while no worker runs (a backlog of
// 5,000 forwards in the outbox), the workers start relaying, and in the
// middle of that, with senders still delivering about 300 a second and
// retrying until they get a 2xx, PostgreSQL is killed (pg_ctl stop -m
// immediate: crash recovery, and the cumulative statistics are lost, so no
// autovacuum analyzes the outbox again) and started again 5 s later.
// Every accepted event reaches the target, the outbox ends empty, and each
// event has one forward job: no relay plan collapses (a take that the lying
// statistics turned into a nested loop walked the whole outbox for every
// row it took, for minutes), nothing stalls until a restart. How long the
// backlog took after the restart is logged, not bounded tightly: on a busy
// machine (load 16–22) it took over 20 s; the relay's plans are checked by
// the plan tests, and recovery times are make bench's figures.
func TestForwardsResumeAfterDatabaseCrash(t *testing.T) {
	testkit.Slow(t, "kills PostgreSQL under load with a backlog of forwards")
	t.Parallel()
	bin := buildBinary(t)
	cluster := pgtest.StartCluster(t)
	dsn := cluster.URL()
	tg := testkit.NewTarget(t, testkit.Always(http.StatusOK))
	const timeout = config.DefaultForwardTimeout // the target's: the default
	cfg := writeConfig(t, forwardConfig(tg.URL, time.Duration(timeout).String(), 10))
	c := newClient(t)

	var apis []string
	for range 2 {
		addr := freeAddr(t)
		p := startBinaryWith(t, bin, dsn, addr, cfg, "--role", "api")
		waitHealthy(t, c, "http://"+addr, p)
		apis = append(apis, "http://"+addr)
	}
	pool, err := pgxpool.New(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)

	// The outbox's statistics say it holds one row, as they said in the
	// outage the issue reports (raw SQL: the statistics are what the test
	// examines).
	deliverAll(t, c, apis[0], []string{"first"})
	if _, err := pool.Exec(t.Context(), `ANALYZE forward_outbox`); err != nil {
		t.Fatal(err)
	}

	// A backlog: 5,000 deliveries while no worker runs.
	const backlog = 5_000
	var g errgroup.Group
	g.SetLimit(16)
	for i := range backlog {
		g.Go(func() error {
			_, err := deliverUntil2xx(t.Context(), c, apis[i%2], fmt.Sprintf("backlog-%05d", i))
			return err
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	if n := outboxRows(t, pool); n != backlog+1 {
		t.Fatalf("%d outbox rows before the workers start, want %d", n, backlog+1)
	}

	// Senders keep delivering, about 300 a second, each retrying until it
	// gets a 2xx, until the database has been back for 3 s.
	var (
		live    errgroup.Group
		stopped atomic.Bool
		sent    atomic.Int64
		upMu    sync.Mutex
		upAt    time.Time
	)
	live.SetLimit(64)
	loadDone := make(chan struct{})
	go func() {
		defer close(loadDone)
		tick := time.NewTicker(time.Second / 300)
		defer tick.Stop()
		for i := 0; !stopped.Load(); i++ {
			<-tick.C
			sent.Add(1)
			live.Go(func() error {
				_, err := deliverUntil2xx(t.Context(), c, apis[i%2], fmt.Sprintf("live-%05d", i))
				return err
			})
		}
	}()

	for range 2 {
		addr := freeAddr(t)
		p := startBinaryWith(t, bin, dsn, addr, cfg, "--role", "worker")
		waitHealthy(t, c, "http://"+addr, p)
	}
	testkit.Poll(t, 30*time.Second, "the workers to start forwarding the backlog", func() bool { return len(tg.Delivered()) >= 100 })
	delivered := len(tg.Delivered())
	cluster.Stop(t)
	t.Logf("PostgreSQL killed with %d events delivered and %d live deliveries sent", delivered, sent.Load())
	<-time.After(5 * time.Second) // the outage's length, not a wait for a condition
	cluster.Start(t)
	upMu.Lock()
	upAt = time.Now()
	upMu.Unlock()
	<-time.After(3 * time.Second)
	stopped.Store(true)
	<-loadDone
	if err := live.Wait(); err != nil {
		t.Fatal(err)
	}

	events := acceptedEvents(t, pool)
	t.Logf("%d events accepted (%d sent while the database was killed and after)", len(events), sent.Load())
	bound := stallTimeout
	upMu.Lock()
	deadline := upAt.Add(bound)
	upMu.Unlock()
	missing := func() int {
		got := tg.Delivered()
		n := 0
		for _, ev := range events {
			if got[ev] == 0 {
				n++
			}
		}
		return n
	}
	testkit.Poll(t, time.Until(deadline), fmt.Sprintf("every accepted event to reach the target (within %v of the database's restart)", bound),
		func() bool { return missing() == 0 }, func() string {
			return fmt.Sprintf("%d of %d events not delivered %v after the restart; outbox rows %d, jobs %v",
				missing(), len(events), time.Since(upAt).Round(100*time.Millisecond), outboxRows(t, pool), jobStates(t, pool))
		})
	t.Logf("every event delivered %v after the database accepted connections again", time.Since(upAt).Round(100*time.Millisecond))
	checkEveryEventForwarded(t, pool, tg, events)
}

// deliverUntil2xx delivers id to acme at base until it gets a 2xx (every
// 50 ms while the answer is an error or none), and returns that answer.
func deliverUntil2xx(ctx context.Context, c *http.Client, base, id string) (reply, error) {
	for {
		r, err := deliver(ctx, c, base, id, bodyFor(id))
		if err == nil && r.status >= 200 && r.status < 300 {
			return r, nil
		}
		if err == nil && r.status < 500 && r.status != http.StatusConflict {
			return r, fmt.Errorf("deliver %s: %d %s", id, r.status, r.body)
		}
		select {
		case <-ctx.Done():
			return r, fmt.Errorf("deliver %s: %w (last answer: %v)", id, errors.Join(ctx.Err(), err), r)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
