package dedup_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/dedup"
	"github.com/hookgate/hookgate/internal/idempotency"
	"github.com/hookgate/hookgate/internal/testing/patterntest"
)

// racers is how many deliveries of one key each race round runs at once.
const racers = patterntest.Racers

// racePool returns a fresh database's pool able to hold racers connections at
// once, with that many connections already open, so that released goroutines
// do not spread out while dialling: patterntest.RacePool, whose one
// semaphore per test process also covers TestPattern's pools, so that
// parallel tests stay within the server's max_connections.
func racePool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	return patterntest.RacePool(t, testCtx(t))
}

// runner is Store.Run's signature, so that the race harness can run the real
// implementation and the naive one alike.
type runner func(ctx context.Context, d idempotency.Delivery, change dedup.Change) (dedup.Result, error)

// attempt is one racing delivery and its outcome.
type attempt struct {
	d   idempotency.Delivery
	res dedup.Result
	err error
}

// samePayload gives every racing delivery the same request body.
func samePayload(int) string { return "payload" }

// race runs racers deliveries of key through run at once: every goroutine is
// started and parked on a barrier, which is then opened for all of them
// together. Delivery i has request body payload(i) and its own EventID and
// response; its state change inserts its event.
func race(ctx context.Context, t *testing.T, run runner, key idempotency.Key, payload func(i int) string) []attempt {
	t.Helper()
	attempts := make([]attempt, racers)
	for i := range attempts {
		attempts[i].d = newDelivery(t, key, payload(i))
	}
	start := make(chan struct{})
	var ready, done sync.WaitGroup
	ready.Add(len(attempts))
	for i := range attempts {
		a := &attempts[i]
		change := insertEvent(a.d, payload(i))
		done.Go(func() {
			ready.Done()
			<-start
			a.res, a.err = run(ctx, a.d, change)
		})
	}
	ready.Wait()
	close(start)
	done.Wait()
	return attempts
}

// raceViolations checks the outcome of one race on key against the guarantee
// and returns every violation found (none when the round was correct):
// exactly one key row and one event, every call a success, exactly one new,
// and every call answering with the winner's response and event ID.
func raceViolations(ctx context.Context, t *testing.T, pool *pgxpool.Pool, key idempotency.Key, attempts []attempt) []string {
	t.Helper()
	var v []string
	if n := keyRows(t, ctx, pool, key); n != 1 {
		v = append(v, fmt.Sprintf("processed_messages rows = %d, want 1", n))
	}
	if n := eventRows(t, ctx, pool, key); n != 1 {
		v = append(v, fmt.Sprintf("webhook_events rows = %d, want 1", n))
	}
	var winners []*attempt
	for i := range attempts {
		a := &attempts[i]
		switch {
		case a.err != nil:
			v = append(v, fmt.Sprintf("call %d: %v", i, a.err))
		case !a.res.Replayed:
			winners = append(winners, a)
		}
	}
	if len(winners) != 1 {
		v = append(v, fmt.Sprintf("%d calls returned Replayed false, want exactly 1", len(winners)))
	}
	if len(winners) == 0 {
		return v
	}
	w := winners[0].d
	for i, a := range attempts {
		if a.err == nil && (a.res.EventID != w.EventID || !equalResponse(a.res.Response, w.Response)) {
			v = append(v, fmt.Sprintf("call %d (replayed %v) answered event %s %q, the winner's is %s %q",
				i, a.res.Replayed, a.res.EventID, a.res.Response.Body, w.EventID, w.Response.Body))
		}
	}
	if n := count(t, ctx, pool, `SELECT count(*) FROM processed_messages WHERE sender = $1 AND delivery_id = $2 AND event_id = $3`,
		key.Sender, key.DeliveryID, w.EventID); n != 1 {
		v = append(v, fmt.Sprintf("the key row does not name the winner's event %s", w.EventID))
	}
	if n := count(t, ctx, pool, `SELECT count(*) FROM webhook_events WHERE sender = $1 AND delivery_id = $2 AND id = $3`,
		key.Sender, key.DeliveryID, w.EventID); n != 1 {
		v = append(v, fmt.Sprintf("the winner's event %s is not stored", w.EventID))
	}
	return v
}

// TestRunConcurrentSameKey races deliveries of one key against each other,
// several rounds: the key is claimed once, the event stored once, and every
// caller answers with the one winner's response.
func TestRunConcurrentSameKey(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := racePool(t)
	store := newStore(t, pool, dedup.Config{InFlightWait: 30 * time.Second}) // generous: nothing may time out under -race
	for round := 1; round <= 5; round++ {
		key := idempotency.Key{Sender: "github", DeliveryID: fmt.Sprintf("race-%d", round)}
		attempts := race(ctx, t, store.Run, key, samePayload)
		if v := raceViolations(ctx, t, pool, key, attempts); len(v) > 0 {
			t.Fatalf("round %d:\n%s", round, strings.Join(v, "\n"))
		}
	}
}

// naiveRun is the broken pattern the package exists to avoid: a pre-check,
// then the state change, then the key insert with ON CONFLICT DO NOTHING, each
// in its own transaction. It is the negative control of the race harness
// (raw SQL on purpose: the broken statements are what the test examines).
func naiveRun(pool *pgxpool.Pool) runner {
	return func(ctx context.Context, d idempotency.Delivery, change dedup.Change) (dedup.Result, error) {
		var exists bool
		err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM processed_messages WHERE sender = $1 AND delivery_id = $2)`,
			d.Sender, d.DeliveryID).Scan(&exists)
		if err != nil {
			return dedup.Result{}, err
		}
		if exists {
			res := dedup.Result{Replayed: true}
			var status int16
			err := pool.QueryRow(ctx, `SELECT event_id, response_status, response_content_type, response_body
FROM processed_messages WHERE sender = $1 AND delivery_id = $2`, d.Sender, d.DeliveryID).
				Scan(&res.EventID, &status, &res.Response.ContentType, &res.Response.Body)
			res.Response.Status = int(status)
			return res, err
		}
		// The state change, unguarded (the guarded one of the change
		// needs the key, which the naive pattern inserts afterwards).
		if _, err := pool.Exec(ctx, `INSERT INTO webhook_events (sender, id, delivery_id, received_at, headers, body)
VALUES ($1, $2, $3, $4, '{}', '')`, d.Sender, d.EventID, d.DeliveryID, d.ReceivedAt); err != nil {
			return dedup.Result{}, err
		}
		_, err = pool.Exec(ctx, `INSERT INTO processed_messages
  (sender, delivery_id, request_sha256, event_id, response_status, response_content_type, response_body, created_at, expires_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT (sender, delivery_id) DO NOTHING`,
			d.Sender, d.DeliveryID, d.RequestSHA256[:], d.EventID, d.Response.Status, d.Response.ContentType,
			d.Response.Body, d.ReceivedAt, d.ExpiresAt)
		return dedup.Result{Response: d.Response, EventID: d.EventID}, err
	}
}

// TestRaceHarnessDetectsNaiveImplementation runs the naive pre-check pattern
// through the same harness and checks as TestRunConcurrentSameKey, and
// requires that some round stores the event more than once: proof that the
// harness really races and that its checks catch duplicates.
func TestRaceHarnessDetectsNaiveImplementation(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := racePool(t)
	run := naiveRun(pool)
	const maxRounds = 50
	for round := 1; round <= maxRounds; round++ {
		key := idempotency.Key{Sender: "github", DeliveryID: fmt.Sprintf("naive-%d", round)}
		attempts := race(ctx, t, run, key, samePayload)
		v := raceViolations(ctx, t, pool, key, attempts)
		if n := eventRows(t, ctx, pool, key); n > 1 {
			if len(v) == 0 {
				t.Fatalf("round %d stored %d events, but raceViolations reported nothing", round, n)
			}
			t.Logf("round %d: the naive implementation stored %d events; the harness reported:\n%s", round, n, strings.Join(v, "\n"))
			return
		}
	}
	t.Fatalf("in %d rounds of %d concurrent deliveries, the naive implementation never stored an event twice: the harness does not race", maxRounds, racers)
}

// TestRunConcurrentMixedPayloads races deliveries of one key where half carry
// another payload: exactly one delivery wins; the others replay it when their
// payload is the winner's, and get ErrPayloadMismatch when it is not.
func TestRunConcurrentMixedPayloads(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := racePool(t)
	store := newStore(t, pool, dedup.Config{InFlightWait: 30 * time.Second})
	key := idempotency.Key{Sender: "github", DeliveryID: "mixed"}
	payload := func(i int) string { return [...]string{"even", "odd"}[i%2] }
	attempts := race(ctx, t, store.Run, key, payload)

	winner := -1
	for i, a := range attempts {
		if a.err == nil && !a.res.Replayed {
			if winner >= 0 {
				t.Fatalf("calls %d and %d both returned Replayed false", winner, i)
			}
			winner = i
		}
	}
	if winner < 0 {
		t.Fatal("no call returned Replayed false")
	}
	w := attempts[winner].d
	for i, a := range attempts {
		if i == winner {
			continue
		}
		if payload(i) == payload(winner) {
			if a.err != nil || !a.res.Replayed || a.res.EventID != w.EventID || !equalResponse(a.res.Response, w.Response) {
				t.Errorf("call %d (same payload as the winner) = %+v, %v; want a replay of event %s", i, a.res, a.err, w.EventID)
			}
		} else if !errors.Is(a.err, dedup.ErrPayloadMismatch) || a.res.Replayed {
			t.Errorf("call %d (other payload) = %+v, %v; want ErrPayloadMismatch", i, a.res, a.err)
		}
	}
	if n := keyRows(t, ctx, pool, key); n != 1 {
		t.Errorf("processed_messages rows = %d, want 1", n)
	}
	if n := eventRows(t, ctx, pool, key); n != 1 {
		t.Errorf("webhook_events rows = %d, want 1", n)
	}
	assertStored(t, ctx, pool, w)
}

// TestRunBatchedConcurrentSameKey is TestRunConcurrentSameKey with group
// commit on: concurrent deliveries of one key, collapsed in the process and
// batched with each other's neighbours, still store the key and the event
// once, and every caller answers with the winner's response.
func TestRunBatchedConcurrentSameKey(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := racePool(t)
	var batches, delivered atomic.Int64
	store := newStore(t, pool, dedup.Config{InFlightWait: 30 * time.Second, Batching: &dedup.Batching{MaxBatch: 8, MaxInFlight: 2, Observe: func(n int) { batches.Add(1); delivered.Add(int64(n)) }}})
	for round := 1; round <= 5; round++ {
		key := idempotency.Key{Sender: "github", DeliveryID: fmt.Sprintf("batched-race-%d", round)}
		attempts := race(ctx, t, store.Run, key, samePayload)
		if v := raceViolations(ctx, t, pool, key, attempts); len(v) > 0 {
			t.Fatalf("round %d:\n%s", round, strings.Join(v, "\n"))
		}
	}
	t.Logf("%d deliveries went to the database in %d batches (the rest were collapsed in the process)", delivered.Load(), batches.Load())
}

// TestRunBatchedManyKeys: many concurrent first deliveries of distinct keys
// with group commit on are each stored once with their event, share
// transactions (some batch holds more than one), and replay afterwards.
func TestRunBatchedManyKeys(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := racePool(t)
	var maxSize atomic.Int64
	store := newStore(t, pool, dedup.Config{InFlightWait: 30 * time.Second, Batching: &dedup.Batching{MaxBatch: 16, MaxInFlight: 1, Observe: func(n int) {
		for {
			m := maxSize.Load()
			if int64(n) <= m || maxSize.CompareAndSwap(m, int64(n)) {
				return
			}
		}
	}}})
	const n = 200
	ds := make([]idempotency.Delivery, n)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		ds[i] = newDelivery(t, idempotency.Key{Sender: "many", DeliveryID: fmt.Sprintf("k%d", i)}, "p")
		wg.Go(func() {
			res, err := store.Run(ctx, ds[i], insertEvent(ds[i], "p"))
			if err == nil && res.Replayed {
				err = fmt.Errorf("first delivery of %s replayed", ds[i].DeliveryID)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("delivery %d: %v", i, err)
		}
	}
	if got := count(t, ctx, pool, `SELECT count(*) FROM processed_messages WHERE sender = 'many'`); got != n {
		t.Errorf("%d keys stored, want %d", got, n)
	}
	if got := count(t, ctx, pool, `SELECT count(*) FROM webhook_events WHERE sender = 'many'`); got != n {
		t.Errorf("%d events stored, want %d", got, n)
	}
	for _, d := range ds[:10] {
		again := newDelivery(t, d.Key, "p")
		res, err := store.Run(ctx, again, insertEvent(again, "p"))
		if err != nil || !res.Replayed || res.EventID != d.EventID {
			t.Errorf("retry of %s: %+v, %v; want a replay of event %s", d.DeliveryID, res, err, d.EventID)
		}
	}
	if maxSize.Load() < 2 {
		t.Errorf("largest batch held %d deliveries: 200 concurrent deliveries with one batch in flight never shared a transaction", maxSize.Load())
	}
}
