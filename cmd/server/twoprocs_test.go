package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/testing/pgtest"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// twoProcSenders are the senders of TestCopiesThroughTwoProcesses: on
// Citus, with 4 shards per table, they fall on both workers.
var twoProcSenders = []string{"acme", "bravo", "carol", "delta"}

// twoProcConfig is a hookgate.yaml with the generic senders twoProcSenders
// (delivery ID in X-Delivery-Id), each forwarding to url.
func twoProcConfig(url string) string {
	var b strings.Builder
	b.WriteString("senders:\n")
	for _, s := range twoProcSenders {
		fmt.Fprintf(&b, `  - name: %s
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    forward:
      - name: t1
        url: %s
        timeout: 10s
        max_attempts: 5
`, s, url)
	}
	return b.String()
}

// deliverAs POSTs body to sender with delivery ID id.
func deliverAs(ctx context.Context, c *http.Client, base, sender, id string, body []byte) (reply, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/webhooks/"+sender, bytes.NewReader(body))
	if err != nil {
		return reply{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Delivery-Id", id)
	return do(c, req)
}

// twoPhaseSampler counts, on Citus, the rows of pg_dist_transaction (Citus's
// record of its two-phase commits) every few milliseconds until stopped,
// and keeps the most it saw: Citus's maintenance daemon deletes the rows of
// finished two-phase commits once a minute, so one look at the end could
// miss them.
type twoPhaseSampler struct {
	most atomic.Int64
	stop context.CancelFunc
	done chan struct{}
	err  error
}

func sampleTwoPhaseCommits(t *testing.T, pool *pgxpool.Pool) *twoPhaseSampler {
	t.Helper()
	// Distributing the tables committed in two phases: forget those.
	if _, err := pool.Exec(t.Context(), `SELECT recover_prepared_transactions()`); err != nil {
		t.Fatalf("recover_prepared_transactions: %v", err)
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	s := &twoPhaseSampler{stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			var n int64
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_dist_transaction`).Scan(&n); err != nil {
				if ctx.Err() == nil {
					s.err = err
				}
				return
			}
			if n > s.most.Load() {
				s.most.Store(n)
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-s.done })
	return s
}

// result stops the sampler and returns the most rows it saw.
func (s *twoPhaseSampler) result(t *testing.T) int64 {
	t.Helper()
	s.stop()
	<-s.done
	if s.err != nil {
		t.Fatalf("count pg_dist_transaction: %v", s.err)
	}
	return s.most.Load()
}

// TestCopiesThroughTwoProcesses runs two real gateway processes (--role
// all: each relays, works forwards, and attempts the forwards it accepted
// itself, the fast path) on one database, and sends 50 concurrent copies of
// one delivery, 25 through each, released together: exactly one is
// accepted, the 49 others replay its answer byte for byte, and the database
// holds one key and one event. Then 240 distinct deliveries of four senders
// through both processes: every one accepted once, every forward arrives
// and is recorded once, the outbox drains. It runs on PostgreSQL (make test)
// and on Citus (make test-citus), where it also checks that no transaction
// committed in two phases (pg_dist_transaction stays empty throughout): the
// ingest batches, and the fast path's records, which delete a sender's
// outbox rows on its worker and insert River's jobs on the coordinator in
// one statement.
func TestCopiesThroughTwoProcesses(t *testing.T) {
	testkit.Slow(t, "two gateway processes under load")
	t.Parallel()
	bin := buildBinary(t)
	pool, dsn := pgtest.NewDB(t)
	tg := testkit.NewTarget(t, testkit.Always(http.StatusOK))
	cfg := writeConfig(t, twoProcConfig(tg.URL))
	c := newClient(t)
	var sampler *twoPhaseSampler
	if pgtest.Citus() {
		sampler = sampleTwoPhaseCommits(t, pool)
	}

	flags := fastForwardFlags
	if pgtest.Citus() { // the ingest calls straight to the cluster's workers
		flags = append(slices.Clone(flags), "--citus-worker-hosts", strings.Join(pgtest.CitusWorkerHosts(t), ","))
	}
	var bases []string
	for range 2 {
		addr := freeAddr(t)
		p := startBinaryWith(t, bin, dsn, addr, cfg, flags...)
		waitHealthy(t, c, "http://"+addr, p)
		bases = append(bases, "http://"+addr)
	}

	// 50 copies of one delivery, 25 through each process, released at once.
	const copies = 50
	body := bodyFor("copy-1")
	replies := make([]reply, copies)
	errs := make([]error, copies)
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	ready.Add(copies)
	done.Add(copies)
	for i := range copies {
		go func() {
			defer done.Done()
			ready.Done()
			<-start
			replies[i], errs[i] = deliver(t.Context(), c, bases[i%2], "copy-1", body)
		}()
	}
	ready.Wait()
	close(start)
	done.Wait()
	fresh := 0
	var first []byte
	for i := range copies {
		if errs[i] != nil {
			t.Fatalf("copy %d (process %d): %v", i, i%2, errs[i])
		}
		r := replies[i]
		if _, err := parseAccepted(r, "copy-1"); err != nil {
			t.Fatalf("copy %d (process %d): %v", i, i%2, err)
		}
		if r.header.Get("Idempotent-Replayed") != "true" {
			fresh++
		}
		if first == nil {
			first = r.body
		} else if !bytes.Equal(r.body, first) {
			t.Errorf("copy %d (process %d): body %q differs from %q", i, i%2, r.body, first)
		}
	}
	if fresh != 1 {
		t.Errorf("%d of %d copies answered without Idempotent-Replayed: true, want exactly 1", fresh, copies)
	}
	var keys, events int
	if err := pool.QueryRow(t.Context(), `SELECT
  (SELECT count(*) FROM processed_messages WHERE sender = 'acme' AND delivery_id = 'copy-1'),
  (SELECT count(*) FROM webhook_events WHERE sender = 'acme' AND delivery_id = 'copy-1')`).Scan(&keys, &events); err != nil {
		t.Fatal(err)
	}
	if keys != 1 || events != 1 {
		t.Errorf("after %d copies through two processes: %d keys and %d events, want 1 and 1", copies, keys, events)
	}

	// Distinct deliveries of four senders through both processes, 16 at
	// a time: batches of each sender, forwards by the fast path.
	const perSender = 60
	type item struct{ sender, id string }
	var items []item
	for _, s := range twoProcSenders {
		for _, id := range makeIDs("load-"+s, perSender) {
			items = append(items, item{s, id})
		}
	}
	work := make(chan int)
	var wg sync.WaitGroup
	var failures atomic.Int64
	for w := range 16 {
		wg.Go(func() {
			for i := range work {
				it := items[i]
				r, err := deliverAs(t.Context(), c, bases[w%2], it.sender, it.id, bodyFor(it.id))
				if err == nil && r.status != http.StatusAccepted {
					err = fmt.Errorf("%s", r)
				}
				if err != nil {
					if failures.Add(1) <= 5 {
						t.Errorf("deliver %s/%s: %v", it.sender, it.id, err)
					}
					continue
				}
				if r.header.Get("Idempotent-Replayed") == "true" {
					t.Errorf("deliver %s/%s: a first delivery answered as a replay", it.sender, it.id)
				}
			}
		})
	}
	for i := range items {
		work <- i
	}
	close(work)
	wg.Wait()
	if failures.Load() > 0 {
		t.Fatalf("%d of %d deliveries failed", failures.Load(), len(items))
	}

	// Every accepted event's forward arrives, is recorded once, and
	// leaves the outbox.
	all := acceptedEventsOf(t, pool)
	if len(all) != len(items)+1 {
		t.Fatalf("%d keys stored, want %d", len(all), len(items)+1)
	}
	checkEveryEventForwarded(t, pool, tg, all)
	fast := 0
	for _, j := range forwardJobs(t, pool) {
		if len(j.AttemptedBy) == 0 { // recorded by the fast path, not worked by River
			fast++
		}
	}
	if fast == 0 {
		t.Errorf("no forward was recorded by the fast path: the test did not exercise it")
	}
	t.Logf("%d forwards, %d recorded by the fast path", len(all), fast)

	if sampler != nil {
		if most := sampler.result(t); most != 0 {
			t.Errorf("pg_dist_transaction held up to %d rows: transactions committed in two phases", most)
		}
	}
}

// acceptedEventsOf returns the event of every accepted delivery of every
// sender.
func acceptedEventsOf(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	var out []string
	for _, s := range twoProcSenders {
		rows, err := pool.Query(context.Background(), `SELECT event_id::text FROM processed_messages WHERE sender = $1`, s)
		if err != nil {
			t.Fatalf("read processed_messages: %v", err)
		}
		evs, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatalf("read processed_messages: %v", err)
		}
		out = append(out, evs...)
	}
	return out
}
