package dedup_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/dedup"
	"github.com/hookgate/hookgate/internal/events"
	"github.com/hookgate/hookgate/internal/forward"
	"github.com/hookgate/hookgate/internal/idempotency"
	"github.com/hookgate/hookgate/internal/testing/pgtest"
)

// ingestFunction is migration 20's function as hookgate serve configures it
// (handler.IngestFunction), with the statements of the events and outbox
// rows it performs.
func ingestFunction(name string) *dedup.Delegated {
	return &dedup.Delegated{Function: name, Rows: []dedup.DelegatedRow{events.InsertRow(), forward.OutboxRow()}}
}

// delegatedConfig is cfg running its pipelines through the delegated
// function name: on PostgreSQL with the statement forms of a distributed
// database forced (the function is called on PostgreSQL as Citus calls it
// on the sender's worker), on Citus as found.
func delegatedConfig(cfg dedup.Config, name string) dedup.Config {
	cfg.Delegated = ingestFunction(name)
	if !pgtest.Citus() {
		cfg.Layout = dedup.LayoutDistributed
	}
	return cfg
}

// withOutbox is insertEvent with the outbox rows of d's forwards to
// targets, the first leased for a minute.
func withOutbox(d idempotency.Delivery, body string, targets ...string) dedup.Change {
	return both(insertEvent(d, body), func(b *dedup.Batch) {
		forward.QueueOutbox(b, d.EventID, d.DeliveryID, d.ReceivedAt, targets, forward.Lease{Durations: []time.Duration{time.Minute}})
	})
}

// countCalls wraps the function ingest_deliveries of pool's database in
// counted_ingest, which counts its calls in delegated_calls (PostgreSQL
// only), and returns a function reading the count.
func countCalls(t *testing.T, ctx context.Context, pool *pgxpool.Pool) func() int {
	t.Helper()
	var args, names string
	if err := pool.QueryRow(ctx, `SELECT pg_get_function_arguments(p.oid), array_to_string(p.proargnames, ', ')
FROM pg_proc p WHERE p.oid = 'ingest_deliveries'::regproc`).Scan(&args, &names); err != nil {
		t.Fatal(err)
	}
	in := strings.Join(strings.Split(names, ", ")[:21], ", ") // without the OUT columns
	execSQL(t, ctx, pool,
		`CREATE TABLE delegated_calls (n int NOT NULL)`, `INSERT INTO delegated_calls VALUES (0)`,
		`CREATE FUNCTION counted_ingest(`+strings.Split(args, ", OUT ")[0]+`)
RETURNS TABLE (claimed_delivery_id text, claimed_event_id uuid) LANGUAGE plpgsql AS $$
BEGIN
  UPDATE delegated_calls SET n = n + 1;
  RETURN QUERY SELECT * FROM ingest_deliveries(`+in+`);
END $$`)
	return func() int { return count(t, ctx, pool, `SELECT n FROM delegated_calls`) }
}

// TestDelegatedWritesWhatTheStatementsWrite: the same deliveries (keys,
// events, outbox rows leased and not), sent concurrently in batches, leave
// the same rows through the delegated function as through the statement
// forms, column for column, and the same responses: the function's
// columns are the events' and the outbox's statements', value for value.
func TestDelegatedWritesWhatTheStatementsWrite(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	batching := &dedup.Batching{MaxBatch: 16, MaxInFlight: 1}
	statements, _ := pgtest.NewDB(t)
	delegated, _ := pgtest.NewDB(t)
	base := dedup.Config{InFlightWait: 5 * time.Second, Batching: batching}
	forms := map[string]*dedup.Store{
		"statements": newStore(t, statements, func() dedup.Config {
			c := base
			if !pgtest.Citus() {
				c.Layout = dedup.LayoutDistributed
			}
			return c
		}()),
		"delegated": newStore(t, delegated, delegatedConfig(base, "ingest_deliveries")),
	}
	dbs := map[string]*pgxpool.Pool{"delegated": delegated}
	if pgtest.Citus() { // the calls sent straight to the workers, too
		routed, _ := pgtest.NewDB(t)
		cfg := delegatedConfig(base, "ingest_deliveries")
		cfg.Routes = newRoutes(t, ctx, routed)
		forms["routed"], dbs["routed"] = newStore(t, routed, cfg), routed
	}
	const n = 120
	ds := make([]idempotency.Delivery, n)
	for i := range ds {
		ds[i] = newDelivery(t, idempotency.Key{Sender: fmt.Sprintf("s%d", i%2), DeliveryID: fmt.Sprintf("k%03d", i)}, "p")
	}
	for name, store := range forms {
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i, d := range ds {
			var targets []string
			if i%3 != 0 { // a third without forwards
				targets = []string{"a", "b"}[:1+i%2]
			}
			wg.Go(func() {
				var res dedup.Result
				res, errs[i] = store.Run(ctx, d, withOutbox(d, fmt.Sprintf(`{"n":%d}`, i), targets...))
				if errs[i] == nil && (res.Replayed || res.EventID != d.EventID || !equalResponse(res.Response, d.Response)) {
					errs[i] = fmt.Errorf("result %+v, want its own response, not replayed", res)
				}
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	const (
		keysSQL = `SELECT string_agg(format('%s %s %s %s %s %s %s %s %s', sender, delivery_id, encode(request_sha256, 'hex'), event_id,
  response_status, response_content_type, encode(response_body, 'escape'), created_at, expires_at), E'\n' ORDER BY sender, delivery_id) FROM processed_messages`
		eventsSQL = `SELECT string_agg(format('%s %s %s %s %s %s %s', sender, id, delivery_id, received_at, headers, encode(body, 'escape'), event_type),
  E'\n' ORDER BY sender, delivery_id) FROM webhook_events`
		// leased_until is the statement's time plus the lease: compared
		// as leased or not, and within a minute of created_at.
		outboxSQL = `SELECT string_agg(format('%s %s %s %s %s %s %s', sender, event_id, target, delivery_id, created_at, leased_until IS NOT NULL,
  leased_until IS NULL OR leased_until BETWEEN created_at + interval '1 minute' AND created_at + interval '2 minutes'), E'\n' ORDER BY sender, delivery_id, target) FROM forward_outbox`
	)
	for _, q := range []string{keysSQL, eventsSQL, outboxSQL} {
		var a string
		if err := statements.QueryRow(ctx, q).Scan(&a); err != nil {
			t.Fatal(err)
		}
		for name, db := range dbs {
			var b string
			if err := db.QueryRow(ctx, q).Scan(&b); err != nil {
				t.Fatal(err)
			}
			if a != b || a == "" {
				t.Errorf("%s\nstatement forms:\n%.2000s\n%s:\n%.2000s", q, a, name, b)
			}
		}
	}
	for name, db := range dbs {
		if got := count(t, ctx, db, `SELECT count(*) FROM forward_outbox WHERE leased_until IS NOT NULL`); got != 80 {
			t.Errorf("%s: %d leased outbox rows, want 80 (one per delivery with forwards)", name, got)
		}
	}
}

// TestDelegatedBatchIsOneCall (PostgreSQL: the function is wrapped to count
// its calls): a burst of first deliveries is claimed and applied by one
// call of the delegated function per pipeline, batches included; copies
// of keys in the burst (two payloads) get one key, one event, one
// response each; deliveries whose change has a statement the function
// does not perform run in the statement forms, and never call it.
func TestDelegatedBatchIsOneCall(t *testing.T) {
	t.Parallel()
	if pgtest.Citus() {
		t.Skip("the counting wrapper is a PostgreSQL function (on Citus it would not be delegated)")
	}
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	calls := countCalls(t, ctx, pool)
	var mu sync.Mutex
	sizes := 0
	store := newStore(t, pool, delegatedConfig(dedup.Config{InFlightWait: 5 * time.Second, Batching: &dedup.Batching{MaxBatch: 16, MaxInFlight: 1, Observe: func(n int) {
		mu.Lock()
		sizes++
		mu.Unlock()
	}}}, "counted_ingest"))
	const keys = 100
	type outcome struct {
		d   idempotency.Delivery
		res dedup.Result
		err error
	}
	out := make([]outcome, 2*keys)
	var wg sync.WaitGroup
	for i := range out {
		// Every key twice, the second copy with another payload half the time.
		body := "p"
		if i >= keys && i%2 == 0 {
			body = "q"
		}
		d := newDelivery(t, idempotency.Key{Sender: "s", DeliveryID: fmt.Sprintf("k%03d", i%keys)}, body)
		out[i].d = d
		wg.Go(func() { out[i].res, out[i].err = store.Run(ctx, d, insertEvent(d, body)) })
	}
	wg.Wait()
	for k := range keys {
		a, b := out[k], out[k+keys]
		var first, second outcome // the copy that claimed the key, the other
		switch {
		case a.err == nil && !a.res.Replayed:
			first, second = a, b
		case b.err == nil && !b.res.Replayed:
			first, second = b, a
		default:
			t.Fatalf("key %d: neither copy claimed it: %+v %v / %+v %v", k, a.res, a.err, b.res, b.err)
		}
		samePayload := first.d.RequestSHA256 == second.d.RequestSHA256
		switch {
		case samePayload && (second.err != nil || !second.res.Replayed || second.res.EventID != first.d.EventID || !equalResponse(second.res.Response, first.d.Response)):
			t.Errorf("key %d: the copy got %+v, %v; want a replay of event %s", k, second.res, second.err, first.d.EventID)
		case !samePayload && !errors.Is(second.err, dedup.ErrPayloadMismatch):
			t.Errorf("key %d: the copy with another payload got %+v, %v; want ErrPayloadMismatch", k, second.res, second.err)
		}
		assertStored(t, ctx, pool, first.d)
		if got := eventRows(t, ctx, pool, first.d.Key); got != 1 {
			t.Errorf("key %d: %d events, want 1", k, got)
		}
	}
	mu.Lock()
	n := sizes
	mu.Unlock()
	// Each pipeline is one call; a copy whose batch found its key held
	// runs the statement forms, which read the key, without a call.
	if got := calls(); got == 0 || got > n {
		t.Errorf("%d calls of the function for %d pipelines (%d deliveries): want one per pipeline but for those whose keys were held", got, n, 2*keys)
	}
	t.Logf("%d pipelines, %d calls", n, calls())

	// A change with a statement of its own: the statement forms.
	before := calls()
	d := newDelivery(t, idempotency.Key{Sender: "s", DeliveryID: "own"}, "p")
	if res, err := store.Run(ctx, d, both(insertEvent(d, "p"), queueSQL("SELECT 1"))); err != nil || res.Replayed {
		t.Fatalf("a change with a statement of its own: %+v, %v", res, err)
	}
	assertStored(t, ctx, pool, d)
	if got := calls(); got != before {
		t.Errorf("a change the function does not perform called it (%d calls, want %d)", got, before)
	}
}

// TestDelegatedInFlight: the delegated call waits for a key another
// transaction holds for the in-flight wait at most, then gives ErrInFlight
// and records nothing; once the holder commits, the same delivery is a
// replay of the holder's response; a key whose retention has passed is
// claimed again through the call.
func TestDelegatedInFlight(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	const wait = 300 * time.Millisecond
	store := newStore(t, pool, delegatedConfig(dedup.Config{InFlightWait: wait}, "ingest_deliveries"))
	holder := newStore(t, pool, dedup.Config{InFlightWait: wait})
	k := idempotency.Key{Sender: "s", DeliveryID: "held"}
	first := newDelivery(t, k, "p")

	// The holder: the key inserted in a transaction left open.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `INSERT INTO processed_messages (sender, delivery_id, request_sha256, event_id, response_status, response_content_type, response_body, created_at, expires_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`, k.Sender, k.DeliveryID, first.RequestSHA256[:], first.EventID, int16(first.Response.Status),
		first.Response.ContentType, first.Response.Body, first.ReceivedAt, first.ExpiresAt); err != nil {
		t.Fatal(err)
	}
	retry := newDelivery(t, k, "p")
	start := time.Now()
	_, err = store.Run(ctx, retry, insertEvent(retry, "p"))
	if !errors.Is(err, dedup.ErrInFlight) {
		t.Fatalf("a key held by an open transaction: %v; want ErrInFlight", err)
	}
	if took := time.Since(start); took < wait {
		t.Errorf("ErrInFlight after %s, before the in-flight wait %s", took, wait)
	}
	if got := eventRows(t, ctx, pool, k); got != 0 {
		t.Errorf("%d events after ErrInFlight, want 0", got)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	again := newDelivery(t, k, "p")
	res, err := store.Run(ctx, again, insertEvent(again, "p"))
	if err != nil || !res.Replayed || res.EventID != first.EventID || !equalResponse(res.Response, first.Response) {
		t.Fatalf("after the holder committed: %+v, %v; want a replay of event %s", res, err, first.EventID)
	}

	// A key past its retention, not yet deleted: claimed again.
	old := newDelivery(t, idempotency.Key{Sender: "s", DeliveryID: "old"}, "p")
	old.ReceivedAt, old.ExpiresAt = old.ReceivedAt.Add(-2*time.Hour), old.ReceivedAt.Add(-time.Hour)
	if _, err := holder.Run(ctx, old, nil); err != nil {
		t.Fatal(err)
	}
	fresh := newDelivery(t, old.Key, "other payload")
	if res, err := store.Run(ctx, fresh, insertEvent(fresh, "p")); err != nil || res.Replayed || res.EventID != fresh.EventID {
		t.Fatalf("a delivery of an expired key: %+v, %v; want it claimed anew", res, err)
	}
	assertStored(t, ctx, pool, fresh)
}

// TestDelegatedFunction: Citus delegates migration 20's function once
// distribute.sql distributed it (make test-citus); on PostgreSQL, or for a
// function that does not exist, DelegatedFunction is false.
func TestDelegatedFunction(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	ok, err := dedup.DelegatedFunction(ctx, pool, "ingest_deliveries")
	if err != nil || ok != pgtest.Citus() {
		t.Errorf("DelegatedFunction(ingest_deliveries) = %v, %v; want %v (Citus: %v)", ok, err, pgtest.Citus(), pgtest.Citus())
	}
	if ok, err := dedup.DelegatedFunction(ctx, pool, "no_such_function"); err != nil || ok {
		t.Errorf("DelegatedFunction(no_such_function) = %v, %v; want false", ok, err)
	}
	if _, err := dedup.New(dedup.Config{Pool: pool, InFlightWait: time.Second, Delegated: &dedup.Delegated{Function: "f(); DROP TABLE x"}}); err == nil {
		t.Error("a Delegated.Function that is not an identifier was accepted")
	}
}

// TestIngestFunctionOffItsWorker (Citus only): called where Citus does not
// delegate it (in a transaction block on the coordinator, which holds no
// shard), ingest_deliveries writes through the distributed tables: the
// key, the event and the outbox row land in the sender's shards, and a
// second call of the key inserts nothing.
func TestIngestFunctionOffItsWorker(t *testing.T) {
	t.Parallel()
	if !pgtest.Citus() {
		t.Skip("needs Citus: make test-citus CITUS_URL=…")
	}
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	d := newDelivery(t, idempotency.Key{Sender: "s", DeliveryID: "off"}, "p")
	call := func() (n int) {
		pgtest.TwoPhaseFixture(pool, func() { // a statement pulled to the coordinator may commit in two phases
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback(ctx) }()
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM ingest_deliveries($1, '1000ms',
  ARRAY[$2::text], ARRAY[$3::bytea], ARRAY[$4::uuid], ARRAY[202::int2], ARRAY['application/json'], ARRAY['{}'::bytea], ARRAY[$5::timestamptz], ARRAY[$6::timestamptz],
  ARRAY[$4::uuid], ARRAY[$2::text], ARRAY[$5::timestamptz], ARRAY['{}'::jsonb], ARRAY['{}'::bytea], ARRAY['t'],
  ARRAY[$4::uuid], ARRAY['a'], ARRAY[$2::text], ARRAY[$5::timestamptz], ARRAY[NULL::int8])`,
				d.Sender, d.DeliveryID, d.RequestSHA256[:], d.EventID, d.ReceivedAt, d.ExpiresAt).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		})
		return n
	}
	if got := call(); got != 1 {
		t.Fatalf("the first call claimed %d keys, want 1", got)
	}
	if got := call(); got != 0 {
		t.Errorf("the second call claimed %d keys, want 0", got)
	}
	for _, q := range []string{`SELECT count(*) FROM processed_messages WHERE sender = 's'`, `SELECT count(*) FROM webhook_events WHERE sender = 's'`,
		`SELECT count(*) FROM forward_outbox WHERE sender = 's'`} {
		if got := count(t, ctx, pool, q); got != 1 {
			t.Errorf("%s: %d, want 1", q, got)
		}
	}
}
