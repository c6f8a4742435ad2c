package forward_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/rivertype"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/forward"
	"github.com/hookgate/hookgate/internal/store"
	"github.com/hookgate/hookgate/internal/testing/pgtest"
	"github.com/hookgate/hookgate/internal/testing/queuetest"
	"github.com/hookgate/hookgate/internal/testing/storetest"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// twoTargets is the forward list of the relay tests: two targets nothing
// listens on (the tests insert jobs, they do not work them).
const twoTargets = `      - name: ta
        url: http://127.0.0.1:9/a
      - name: tb
        url: http://127.0.0.1:9/b
`

// deliverMany delivers ids concurrently (8 at a time) and returns the event
// of each delivery ID.
func (e *env) deliverMany(ids []string) map[string]string {
	e.t.Helper()
	var (
		mu     sync.Mutex
		events = map[string]string{}
		next   atomic.Int64
		wg     sync.WaitGroup
		errs   = make(chan error, len(ids))
	)
	for range 8 {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(ids) {
					return
				}
				d, err := e.tryDeliver(ids[i], fmt.Appendf(nil, `{"id":%q}`, ids[i]), "application/json")
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				events[d.id] = d.eventID
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		e.t.Fatal(err)
	}
	return events
}

// forwardKeys returns "event_id/target" of every forward job, sorted, and
// fails the test when a job's delivery ID is not the one of its event.
func (e *env) forwardKeys(deliveryOf map[string]string) []string {
	e.t.Helper()
	var out []string
	for _, j := range e.jobs() {
		if d, ok := deliveryOf[j.EventID]; !ok || d != j.DeliveryID {
			e.t.Errorf("job %d: event %s, delivery %s: not an accepted delivery", j.ID, j.EventID, j.DeliveryID)
		}
		out = append(out, j.EventID+"/"+j.Target)
	}
	slices.Sort(out)
	return out
}

// wantForwards returns "event_id/target" for both targets of every event,
// sorted, and the delivery ID of each event.
func wantForwards(events map[string]string) (keys []string, deliveryOf map[string]string) {
	deliveryOf = map[string]string{}
	for id, ev := range events {
		deliveryOf[ev] = id
		keys = append(keys, ev+"/ta", ev+"/tb")
	}
	slices.Sort(keys)
	return keys, deliveryOf
}

// deliveryIDs returns n delivery IDs prefix-0000, prefix-0001, …
func deliveryIDs(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%04d", prefix, i)
	}
	return out
}

// TestTwoRelaysMoveEachForwardOnce: two relays run at once over the same
// outbox — 500 rows from 250 real deliveries waiting, and 100 more from
// deliveries arriving while they run — in small batches. Together they move
// every row exactly once (the rows they report moving add up to the rows
// written: none was relayed twice, which River's uniqueness would otherwise
// hide), there is exactly one job per event and target, and the outbox ends
// empty.
// Both forms: the take that deletes the rows in the jobs' transaction
// (PostgreSQL), and the split form that marks them there and deletes them
// after (Citus).
func TestTwoRelaysMoveEachForwardOnce(t *testing.T) {
	t.Parallel()
	for _, split := range []bool{false, true} {
		t.Run(map[bool]string{false: "deleting take", true: "split take"}[split], func(t *testing.T) {
			t.Parallel()
			testTwoRelaysMoveEachForwardOnce(t, split)
		})
	}
}

func testTwoRelaysMoveEachForwardOnce(t *testing.T, split bool) {
	e := newEnv(t, twoTargets, envOpts{Split: split})
	ctx := t.Context()
	events := e.deliverMany(deliveryIDs("before", 250))
	if rows := e.outbox(); len(rows) != 500 {
		t.Fatalf("%d outbox rows after 250 deliveries to two targets, want 500", len(rows))
	}

	var (
		arrived = make(chan struct{}) // closed when the deliveries during the relay are done
		moved   [2]int
		errs    [2]error
		wg      sync.WaitGroup
		start   = make(chan struct{})
	)
	for i := range 2 {
		r := e.newRelay(10)
		wg.Go(func() {
			<-start
			for {
				n, err := r.Once(ctx)
				if err != nil {
					errs[i] = err
					return
				}
				moved[i] += n
				if n > 0 {
					continue
				}
				select {
				case <-arrived:
				default:
					continue // more deliveries are coming
				}
				// Nothing this relay could take: done when no row is left
				// (rows the other relay holds are still visible until it commits).
				var left int
				if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM forward_outbox`).Scan(&left); err != nil {
					errs[i] = err
					return
				}
				if left == 0 {
					return
				}
			}
		})
	}
	close(start)
	more := e.deliverMany(deliveryIDs("during", 50))
	close(arrived)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("relay %d: %v", i, err)
		}
	}
	for id, ev := range more {
		events[id] = ev
	}
	t.Logf("relay 0 moved %d rows, relay 1 moved %d", moved[0], moved[1])
	if moved[0]+moved[1] != 600 {
		t.Errorf("the relays moved %d + %d rows, want 600 in all (each row once)", moved[0], moved[1])
	}
	if rows := e.outbox(); len(rows) != 0 {
		t.Errorf("%d outbox rows left, want none: %v", len(rows), rows[:min(5, len(rows))])
	}
	want, deliveryOf := wantForwards(events)
	if got := e.forwardKeys(deliveryOf); !slices.Equal(got, want) {
		t.Errorf("%d forward jobs, want exactly one per event and target (%d)", len(got), len(want))
		for i, k := range got {
			if i > 0 && got[i-1] == k {
				t.Errorf("two jobs for %s", k)
			}
		}
	}
}

// TestRelayTakesRowsWhoseRecordWasLost: in the split form (Citus) a batch's
// jobs commit in a transaction that marks its outbox rows recorded, and
// the rows are deleted after. A coordinator that dies between the worker's
// commit and its own leaves rows marked and no job (the state this test
// writes: marked rows, no job); a process that dies before the delete
// leaves rows marked and their jobs. The relay leaves a marked row alone
// for its grace, then takes it again: a lost job is inserted, one that
// exists and is unfinished is not inserted twice (River's uniqueness), and
// the outbox ends empty. Nothing is lost, in either form of the relay.
func TestRelayTakesRowsWhoseRecordWasLost(t *testing.T) {
	t.Parallel()
	for _, split := range []bool{false, true} {
		t.Run(map[bool]string{false: "deleting take", true: "split take"}[split], func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, twoTargets, envOpts{Split: split})
			ctx := t.Context()
			events := e.deliverMany(deliveryIDs("lost", 10))
			// The forwards to tb were relayed (their jobs exist) but not
			// deleted: a crash before the delete.
			// (Every fixture statement names the sender: on Citus it then
			// commits on the sender's worker alone, never in two phases.)
			rows, err := e.pool.Query(ctx, `SELECT sender, event_id, target, delivery_id, created_at FROM forward_outbox WHERE sender = 'acme' AND target = 'tb'`)
			if err != nil {
				t.Fatal(err)
			}
			type held struct {
				row storetest.Outbox
				at  time.Time
			}
			hold, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (held, error) {
				var h held
				return h, r.Scan(&h.row.Sender, &h.row.EventID, &h.row.Target, &h.row.DeliveryID, &h.at)
			})
			if err != nil || len(hold) != 10 {
				t.Fatalf("%d outbox rows to tb (%v), want 10", len(hold), err)
			}
			if _, err := e.pool.Exec(ctx, `UPDATE forward_outbox SET leased_until = now() + interval '1 hour' WHERE sender = 'acme' AND target = 'ta'`); err != nil {
				t.Fatal(err)
			}
			if n, err := e.newRelay(0).Once(ctx); err != nil || n != 10 {
				t.Fatalf("relay of the forwards to tb: moved %d (%v), want 10", n, err)
			}
			// Every row is back in the outbox, marked recorded a second ago:
			// those to ta without a job (the coordinator lost it), those to
			// tb with theirs.
			for _, h := range hold {
				if err := storetest.InsertOutbox(ctx, e.pool, h.row, h.at); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := e.pool.Exec(ctx, `UPDATE forward_outbox SET leased_until = NULL, recorded_at = now() - interval '1 second' WHERE sender = 'acme'`); err != nil {
				t.Fatal(err)
			}
			if got := len(e.jobs()); got != 10 {
				t.Fatalf("%d jobs before the relay takes the marked rows, want the 10 to tb", got)
			}
			// Within its grace a marked row is left alone.
			if n, err := e.newRelayWith(0, func(rc *forward.RelayConfig) { rc.RecordedGrace = time.Hour }).Once(ctx); err != nil || n != 0 {
				t.Fatalf("relay within the grace: moved %d (%v), want none", n, err)
			}
			// After it, every row is taken again.
			if n, err := e.newRelayWith(0, func(rc *forward.RelayConfig) { rc.RecordedGrace = 500 * time.Millisecond }).Once(ctx); err != nil || n != 20 {
				t.Fatalf("relay after the grace: moved %d (%v), want the 20 marked rows", n, err)
			}
			if rows := e.outbox(); len(rows) != 0 {
				t.Errorf("%d outbox rows left, want none", len(rows))
			}
			want, deliveryOf := wantForwards(events)
			if got := e.forwardKeys(deliveryOf); !slices.Equal(got, want) {
				t.Errorf("forward jobs %v, want exactly one per event and target %v", got, want)
			}
		})
	}
}

// TestRelaySkipsRowsAnotherRelayHolds: a relay does not wait for outbox rows
// another transaction holds (FOR UPDATE SKIP LOCKED): it moves the others at
// once, and the held rows once they are released.
func TestRelaySkipsRowsAnotherRelayHolds(t *testing.T) {
	t.Parallel()
	e := newEnv(t, twoTargets, envOpts{})
	ctx := t.Context()
	events := e.deliverMany(deliveryIDs("skip", 20))

	// Another relay's transaction holds the forwards to ta.
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var held int
	if err := tx.QueryRow(ctx, `WITH h AS (SELECT 1 FROM forward_outbox WHERE sender = 'acme' AND target = 'ta' FOR UPDATE) SELECT count(*) FROM h`).Scan(&held); err != nil || held != 20 {
		t.Fatalf("hold the forwards to ta: %d rows, %v", held, err)
	}
	relay := e.newRelay(0)
	// A relay that waited for the held rows would wait until the timeout.
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	n, err := relay.Once(wctx)
	if err != nil || n != 20 {
		t.Fatalf("relay while 20 rows are held: moved %d (%v), want the 20 others at once", n, err)
	}
	for _, j := range e.jobs() {
		if j.Target != "tb" {
			t.Errorf("job %d forwards to %s, a held row", j.ID, j.Target)
		}
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := relay.Once(ctx); err != nil || n != 20 {
		t.Fatalf("relay after the release: moved %d (%v), want the 20 held rows", n, err)
	}
	want, deliveryOf := wantForwards(events)
	if got := e.forwardKeys(deliveryOf); !slices.Equal(got, want) {
		t.Errorf("forward jobs %v, want one per event and target %v", got, want)
	}
}

// TestRelayDyingMidTransactionLosesNothing: a relay's transaction ends
// after it deleted its outbox rows and before it committed their jobs —
// its context is cancelled, or its backend is terminated — while its job
// insert waits on a lock. The rows are all still there, no job was
// committed, and the next relay moves every one of them.
func TestRelayDyingMidTransactionLosesNothing(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"context cancelled", "backend terminated"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, twoTargets, envOpts{})
			ctx := t.Context()
			events := e.deliverMany(deliveryIDs("dies", 15))
			count := func(sql string) int {
				t.Helper()
				var n int
				if err := e.pool.QueryRow(ctx, sql).Scan(&n); err != nil {
					t.Fatalf("%s: %v", sql, err)
				}
				return n
			}
			// Rows no transaction holds: all of them once the relay's is over.
			const free = `SELECT count(*) FROM (SELECT 1 FROM forward_outbox WHERE sender = 'acme' FOR UPDATE SKIP LOCKED) f`

			// Block inserts of jobs: the relay's insert of the jobs waits on
			// this lock, after its DELETE.
			lock, err := e.pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = lock.Rollback(context.WithoutCancel(ctx)) }()
			if err := queuetest.New(lock).LockJobInserts(ctx); err != nil {
				t.Fatal(err)
			}

			rctx, cancel := context.WithCancel(ctx)
			defer cancel()
			type result struct {
				n   int
				err error
			}
			done := make(chan result, 1)
			go func() {
				n, err := e.newRelay(0).Once(rctx)
				done <- result{n, err}
			}()
			var pid int32
			testkit.Poll(t, waitTimeout, "the relay's job insert to wait on the lock", func() bool {
				err := e.pool.QueryRow(ctx, `SELECT pid FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid() AND wait_event_type = 'Lock' AND strpos(query, $1) > 0`, queuetest.JobTable).Scan(&pid)
				return err == nil
			}, nil)
			// The relay has deleted (and so holds) every row; others still see them.
			if n := count(free); n != 0 {
				t.Fatalf("%d outbox rows are free while the relay waits, want 0 (it took all 30)", n)
			}
			if n := count(`SELECT count(*) FROM forward_outbox`); n != 30 {
				t.Fatalf("%d outbox rows visible while the relay waits, want 30", n)
			}

			switch how {
			case "context cancelled":
				cancel()
			case "backend terminated":
				var ok bool
				if err := e.pool.QueryRow(ctx, `SELECT pg_terminate_backend($1::int)`, pid).Scan(&ok); err != nil || !ok {
					t.Fatalf("pg_terminate_backend(%d) = %v, %v", pid, ok, err)
				}
			}
			var res result
			select {
			case res = <-done:
			case <-ctx.Done():
				t.Fatal("the relay did not return")
			}
			if res.err == nil || res.n != 0 {
				t.Fatalf("relay whose transaction died = %d, %v; want 0 and an error", res.n, res.err)
			}
			if how == "context cancelled" && !errors.Is(res.err, context.Canceled) {
				t.Errorf("relay error %v, want it to wrap context.Canceled", res.err)
			}
			if err := lock.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			// The relay's backend may only notice the end of its transaction
			// once the lock is gone.
			testkit.Poll(t, waitTimeout, "the dead relay's transaction to end", func() bool { return count(free) == 30 }, nil)
			if js := e.jobs(); len(js) != 0 {
				t.Fatalf("%d forward jobs after the relay died, want 0: %+v", len(js), js)
			}

			n, err := e.newRelay(0).Once(ctx)
			if err != nil || n != 30 {
				t.Fatalf("next relay moved %d rows (%v), want all 30", n, err)
			}
			if rows := e.outbox(); len(rows) != 0 {
				t.Errorf("outbox rows left %v, want none", rows)
			}
			want, deliveryOf := wantForwards(events)
			if got := e.forwardKeys(deliveryOf); !slices.Equal(got, want) {
				t.Errorf("forward jobs %v, want one per event and target %v", got, want)
			}
		})
	}
}

// TestRelayInsertIsIdempotent: relaying the same (sender, event, target)
// again while its job is not finished — waiting, running or retrying —
// inserts no second job, though the row leaves the outbox; once the job has
// finished, relaying it again is a new forward (as a redelivery is).
func TestRelayInsertIsIdempotent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, twoTargets, envOpts{})
	ctx := t.Context()
	events := e.deliverMany([]string{"twice"})
	relay := e.newRelay(0)
	if n, err := relay.Once(ctx); err != nil || n != 2 {
		t.Fatalf("first relay moved %d (%v), want 2", n, err)
	}
	first := e.jobs()
	if len(first) != 2 {
		t.Fatalf("%d jobs, want 2", len(first))
	}
	// requeue writes the event's outbox rows again, as a second relay of
	// the same forwards would see them.
	q := store.New(e.pool)
	requeue := func() {
		t.Helper()
		for _, target := range []string{"ta", "tb"} {
			if err := storetest.InsertOutbox(ctx, q.DB(), storetest.Outbox{Sender: "acme", EventID: uuid.MustParse(events["twice"]), Target: target, DeliveryID: "twice"}, time.Now()); err != nil {
				t.Fatal(err)
			}
		}
	}
	setState := func(target, state string) {
		t.Helper()
		for _, j := range e.jobs() {
			if j.Target == target && j.State != "completed" {
				if err := queuetest.New(e.pool).SetForwardJob(ctx, j.ID, queuetest.JobFixture{State: rivertype.JobState(state), Attempt: 1}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	jobIDs := func(js []job) []int64 {
		var out []int64
		for _, j := range js {
			out = append(out, j.ID)
		}
		return out
	}
	for _, states := range [][2]string{{"available", "available"}, {"running", "retryable"}, {"scheduled", "pending"}} {
		setState("ta", states[0])
		setState("tb", states[1])
		requeue()
		if n, err := relay.Once(ctx); err != nil || n != 2 {
			t.Fatalf("jobs %v: relaying again moved %d (%v), want the 2 rows", states, n, err)
		}
		if rows := e.outbox(); len(rows) != 0 {
			t.Errorf("jobs %v: outbox rows %v after relaying again, want none", states, rows)
		}
		if got := e.jobs(); !slices.Equal(jobIDs(got), jobIDs(first)) {
			t.Fatalf("jobs %v: after relaying again the jobs are %+v, want still only %v", states, got, jobIDs(first))
		}
	}

	// Both delivered: relaying again is a new forward of each.
	setState("ta", "completed")
	setState("tb", "completed")
	requeue()
	if n, err := relay.Once(ctx); err != nil || n != 2 {
		t.Fatalf("relay after the jobs finished moved %d (%v), want 2", n, err)
	}
	if got := e.jobs(); len(got) != 4 || got[2].State != "available" || got[3].State != "available" {
		t.Errorf("jobs after relaying finished forwards again: %+v; want the 2 completed and 2 new available ones", got)
	}
}

// TestRelayIdleLooksAgainWhenWoken: after a look that moved nothing, a relay
// waits its idle interval (an hour here), unless it is woken, as the fast
// path wakes it when it leaves rows to it: woken, it moves the rows at once,
// and then waits again instead of looking every few milliseconds.
func TestRelayIdleLooksAgainWhenWoken(t *testing.T) {
	t.Parallel()
	e := newEnv(t, twoTargets, envOpts{})
	wake := make(chan struct{}, 1)
	rc := forward.DefaultRelayConfig()
	rc.Interval, rc.IdleInterval, rc.Wake = 5*time.Millisecond, time.Hour, wake
	rc.Pool, rc.Queue, rc.Senders, rc.Log = e.pool, e.river, e.cfg, e.log
	rc.Distributed = e.split
	relay, err := forward.NewRelay(rc)
	if err != nil {
		t.Fatal(err)
	}
	e.runRelay(relay)
	testkit.Poll(t, waitTimeout, "the relay's first look", func() bool { return relay.Looks() >= 1 }, nil)

	events := e.deliverMany(deliveryIDs("wake", 3))
	wake <- struct{}{}
	testkit.Poll(t, waitTimeout, "the woken relay to move the 6 forwards", func() bool { return len(e.jobs()) == 6 }, nil)
	want, deliveryOf := wantForwards(events)
	if got := e.forwardKeys(deliveryOf); !slices.Equal(got, want) {
		t.Errorf("forward jobs %v, want one per event and target %v", got, want)
	}
	// The look that moved them, then one that found nothing: then an hour.
	if n := relay.Looks(); n > 5 {
		t.Errorf("the relay looked %d times: it does not wait its idle interval", n)
	}
}

// TestRelayLooksAtEverySenderInOneRoundTrip: on PostgreSQL, a relay round
// looks for takeable outbox rows of every configured sender in one
// statement. An idle round over 300 senders is one round trip, not 300,
// however many senders there are; a round that finds rows takes them from
// the senders that have some, and only from those: the forwards of acme,
// the 150th of 300 senders, become one job each.
func TestRelayLooksAtEverySenderInOneRoundTrip(t *testing.T) {
	t.Parallel()
	pgtest.SkipOnCitus(t, "on Citus the relay looks sender by sender, each on its shard")
	e := newEnv(t, twoTargets, envOpts{})
	ctx := t.Context()
	// The relay's own configuration: acme among 299 senders with nothing
	// to forward.
	var b strings.Builder
	b.WriteString("senders:\n")
	for i := range 300 {
		name := fmt.Sprintf("s%03d", i)
		if i == 149 {
			name = "acme"
		}
		fmt.Fprintf(&b, "  - name: %s\n    preset: generic\n    delivery_id: { header: X-Delivery-Id }\n    forward:\n%s", name, twoTargets)
	}
	cfg, err := config.Parse([]byte(b.String()), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	var writes atomic.Int64
	r := e.newRelayWith(0, func(rc *forward.RelayConfig) {
		rc.Pool, rc.Senders = pgtest.CountedPool(t, ctx, e.dsnURL, &writes), cfg
	})
	// The first round also looks for senders the configuration does not
	// name (every 5 minutes).
	if n, err := r.Once(ctx); err != nil || n != 0 {
		t.Fatalf("the first round: moved %d, %v; want nothing to move", n, err)
	}
	for range 3 {
		w0 := writes.Load()
		if n, err := r.Once(ctx); err != nil || n != 0 {
			t.Fatalf("an idle round: moved %d, %v", n, err)
		}
		if w := writes.Load() - w0; w != 1 {
			t.Fatalf("an idle round over 300 senders took %d round trips, want 1", w)
		}
	}

	// A first take prepares its statements on the connection.
	warm := e.deliverMany(deliveryIDs("warm", 1))
	if n, err := r.Once(ctx); err != nil || n != 2 {
		t.Fatalf("a round with acme's 2 outbox rows waiting: moved %d, %v", n, err)
	}
	events := e.deliverMany(deliveryIDs("look", 5))
	w0 := writes.Load()
	n, err := r.Once(ctx)
	if err != nil || n != 10 {
		t.Fatalf("a round with acme's 10 outbox rows waiting: moved %d, %v", n, err)
	}
	// The look, then acme's take and its jobs' insert in one transaction.
	if w := writes.Load() - w0; w > 10 {
		t.Errorf("the round that moved acme's rows took %d round trips: the other 299 senders cost some", w)
	} else {
		t.Logf("the round that moved acme's rows took %d round trips", w)
	}
	for id, ev := range warm {
		events[id] = ev
	}
	want, deliveryOf := wantForwards(events)
	if got := e.forwardKeys(deliveryOf); !slices.Equal(got, want) {
		t.Errorf("forward jobs %v, want one per event and target %v", got, want)
	}
	if rows := e.outbox(); len(rows) != 0 {
		t.Errorf("%d outbox rows left, want none", len(rows))
	}
}
