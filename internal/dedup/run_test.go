package dedup_test

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/dedup"
	"github.com/hookgate/hookgate/internal/idempotency"
	"github.com/hookgate/hookgate/internal/testing/pgtest"
)

// countRuns is a state change whose every application leaves a row in the
// scratch table runs, so a test can count how often the change was applied.
// Like every state change, it does nothing unless the claim took the key.
func countRuns(d idempotency.Delivery) dedup.Change {
	return func(b *dedup.Batch) {
		b.Queue(`INSERT INTO runs (event_id) SELECT k.event_id FROM processed_messages k
WHERE k.sender = $1 AND k.delivery_id = $2 AND k.event_id = $3`, d.Sender, d.DeliveryID, d.EventID)
	}
}

const createRuns = `CREATE TABLE runs (n bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, event_id uuid NOT NULL)`

func TestRunFirstDelivery(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	store := newStore(t, pool, dedup.Config{InFlightWait: dedup.DefaultInFlightWait})
	d := newDelivery(t, idempotency.Key{Sender: "github", DeliveryID: "first-1"}, "payload")

	res, err := store.Run(ctx, d, insertEvent(d, "payload"))
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if res.Replayed {
		t.Error("first delivery: Replayed = true")
	}
	if !equalResponse(res.Response, d.Response) {
		t.Errorf("Response = %+v, want the delivery's %+v", res.Response, d.Response)
	}
	if res.EventID != d.EventID {
		t.Errorf("EventID = %s, want %s", res.EventID, d.EventID)
	}
	if n := count(t, ctx, pool, `SELECT count(*) FROM processed_messages`); n != 1 {
		t.Fatalf("processed_messages rows = %d, want 1", n)
	}
	assertStored(t, ctx, pool, d)
	if n := count(t, ctx, pool, `SELECT count(*) FROM webhook_events`); n != 1 {
		t.Fatalf("webhook_events rows = %d, want 1", n)
	}
	var body []byte
	err = pool.QueryRow(ctx, `SELECT body FROM webhook_events WHERE sender = $1 AND id = $2 AND delivery_id = $3`,
		d.Sender, d.EventID, d.DeliveryID).Scan(&body)
	if err != nil {
		t.Fatalf("read event %s: %v", d.EventID, err)
	}
	if string(body) != "payload" {
		t.Errorf("event body %q, want %q", body, "payload")
	}
}

func TestRunReplay(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	execSQL(t, ctx, pool, createRuns)
	store := newStore(t, pool, dedup.Config{InFlightWait: dedup.DefaultInFlightWait})
	key := idempotency.Key{Sender: "stripe", DeliveryID: "evt_replay"}

	first := newDelivery(t, key, "payload")
	// A stored response that is not JSON and holds every byte value: the
	// replay must return it byte for byte.
	first.Response = idempotency.Response{Status: 201, ContentType: "application/octet-stream", Body: []byte{0, 1, 2, 0xff, '\n', 0}}
	if res, err := store.Run(ctx, first, both(insertEvent(first, "payload"), countRuns(first))); err != nil || res.Replayed {
		t.Fatalf("first Run = %+v, %v; want a new delivery", res, err)
	}

	for i := range 2 { // the second and the third delivery both replay the first
		again := newDelivery(t, key, "payload") // new EventID and response, same key and SHA
		res, err := store.Run(ctx, again, both(insertEvent(again, "payload"), countRuns(again)))
		if err != nil {
			t.Fatalf("retry %d: Run: %v", i+1, err)
		}
		if !res.Replayed {
			t.Errorf("retry %d: Replayed = false", i+1)
		}
		if !equalResponse(res.Response, first.Response) {
			t.Errorf("retry %d: Response = %+v, want the first delivery's %+v", i+1, res.Response, first.Response)
		}
		if res.EventID != first.EventID {
			t.Errorf("retry %d: EventID = %s, want the first delivery's %s", i+1, res.EventID, first.EventID)
		}
	}
	if n := eventRows(t, ctx, pool, key); n != 1 {
		t.Errorf("webhook_events rows = %d, want 1", n)
	}
	if n := count(t, ctx, pool, `SELECT count(*) FROM runs`); n != 1 {
		t.Errorf("the state change ran %d times, want 1", n)
	}
	if n := keyRows(t, ctx, pool, key); n != 1 {
		t.Errorf("processed_messages rows = %d, want 1", n)
	}
	assertStored(t, ctx, pool, first)
}

// TestRunKeyIsSenderAndDeliveryID checks that the key is the pair: the same
// delivery ID from two senders, and two IDs from one sender, are all new.
func TestRunKeyIsSenderAndDeliveryID(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	store := newStore(t, pool, dedup.Config{InFlightWait: dedup.DefaultInFlightWait})
	for _, k := range []idempotency.Key{{Sender: "github", DeliveryID: "d1"}, {Sender: "stripe", DeliveryID: "d1"}, {Sender: "github", DeliveryID: "d2"}} {
		d := newDelivery(t, k, "payload")
		res, err := store.Run(ctx, d, insertEvent(d, "payload"))
		if err != nil || res.Replayed {
			t.Errorf("Run(%v) = %+v, %v; want a new delivery", k, res, err)
		}
	}
	if n := count(t, ctx, pool, `SELECT count(*) FROM webhook_events`); n != 3 {
		t.Errorf("webhook_events rows = %d, want 3", n)
	}
}

func TestRunPayloadMismatch(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	execSQL(t, ctx, pool, createRuns)
	store := newStore(t, pool, dedup.Config{InFlightWait: dedup.DefaultInFlightWait})
	key := idempotency.Key{Sender: "github", DeliveryID: "mismatch"}

	first := newDelivery(t, key, "payload")
	if res, err := store.Run(ctx, first, both(insertEvent(first, "payload"), countRuns(first))); err != nil || res.Replayed {
		t.Fatalf("first Run = %+v, %v; want a new delivery", res, err)
	}
	before := snapshot(t, ctx, pool, key)

	other := newDelivery(t, key, "a different payload")
	res, err := store.Run(ctx, other, both(insertEvent(other, "a different payload"), countRuns(other)))
	if !errors.Is(err, dedup.ErrPayloadMismatch) {
		t.Fatalf("Run with another payload: err = %v, want ErrPayloadMismatch", err)
	}
	if res.Replayed {
		t.Error("mismatch: Replayed = true")
	}
	if after := snapshot(t, ctx, pool, key); after != before {
		t.Errorf("stored row changed:\nbefore %s\nafter  %s", before, after)
	}
	if n := eventRows(t, ctx, pool, key); n != 1 {
		t.Errorf("webhook_events rows = %d, want 1", n)
	}
	if n := count(t, ctx, pool, `SELECT count(*) FROM runs`); n != 1 {
		t.Errorf("the state change ran %d times, want 1", n)
	}

	// The original payload still replays.
	again := newDelivery(t, key, "payload")
	res, err = store.Run(ctx, again, countRuns(again))
	if err != nil || !res.Replayed || !equalResponse(res.Response, first.Response) {
		t.Errorf("retry with the original payload = %+v, %v; want a replay of %+v", res, err, first.Response)
	}
}

// assertFailed checks that err is a plain failure: not a duplicate, not one of
// the package's sentinel outcomes, and not a replay.
func assertFailed(t *testing.T, res dedup.Result, err error) {
	t.Helper()
	if err == nil {
		t.Fatalf("Run succeeded with %+v, want an error", res)
	}
	if errors.Is(err, dedup.ErrPayloadMismatch) || errors.Is(err, dedup.ErrInFlight) {
		t.Errorf("err = %v, want neither ErrPayloadMismatch nor ErrInFlight", err)
	}
	if dedup.IsDuplicate(err) {
		t.Errorf("IsDuplicate(%v) = true", err)
	}
	if res.Replayed {
		t.Error("Replayed = true on a failure")
	}
}

// assertRetrySucceeds checks that a failed delivery of key left nothing, and
// that its retry with a working state change is accepted as new.
func assertRetrySucceeds(t *testing.T, pool *pgxpool.Pool, store *dedup.Store, key idempotency.Key) {
	t.Helper()
	ctx := testCtx(t)
	if n := keyRows(t, ctx, pool, key); n != 0 {
		t.Errorf("after the failure: processed_messages rows = %d, want 0 (the key must not be consumed)", n)
	}
	if n := eventRows(t, ctx, pool, key); n != 0 {
		t.Errorf("after the failure: webhook_events rows = %d, want 0", n)
	}
	retry := newDelivery(t, key, "payload")
	res, err := store.Run(ctx, retry, insertEvent(retry, "payload"))
	if err != nil {
		t.Fatalf("retry: Run: %v", err)
	}
	if res.Replayed || res.EventID != retry.EventID || !equalResponse(res.Response, retry.Response) {
		t.Errorf("retry = %+v, want the retry's own new result", res)
	}
	if n := eventRows(t, ctx, pool, key); n != 1 {
		t.Errorf("after the retry: webhook_events rows = %d, want 1", n)
	}
	assertStored(t, ctx, pool, retry)
}

// TestRunStateChangeFails injects a failure after the claim and the event
// insert, before COMMIT: nothing of the delivery may remain.
func TestRunStateChangeFails(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		change string
		code   string
	}{
		{"division by zero", `SELECT 1/0`, "22012"},
		{"raise exception", `DO $$BEGIN RAISE EXCEPTION 'injected'; END$$`, "P0001"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			pool, _ := pgtest.NewDB(t)
			store := newStore(t, pool, dedup.Config{InFlightWait: dedup.DefaultInFlightWait})
			key := idempotency.Key{Sender: "github", DeliveryID: "fails"}
			d := newDelivery(t, key, "payload")

			res, err := store.Run(ctx, d, both(insertEvent(d, "payload"), queueSQL(tt.change)))
			assertFailed(t, res, err)
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) || pgErr.Code != tt.code {
				t.Errorf("err = %v, want it to wrap the server's SQLSTATE %s", err, tt.code)
			}
			assertRetrySucceeds(t, pool, store, key)
		})
	}
}

// TestRunCommitFails makes the COMMIT itself fail (a deferred constraint
// checked at commit): the error must be reported, and nothing may remain.
func TestRunCommitFails(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	execSQL(t, ctx, pool,
		`CREATE TABLE scratch (v int CONSTRAINT scratch_v_key UNIQUE DEFERRABLE INITIALLY DEFERRED)`,
		`INSERT INTO scratch VALUES (1)`)
	store := newStore(t, pool, dedup.Config{InFlightWait: dedup.DefaultInFlightWait})
	key := idempotency.Key{Sender: "github", DeliveryID: "commit-fails"}
	d := newDelivery(t, key, "payload")

	res, err := store.Run(ctx, d, both(insertEvent(d, "payload"), queueSQL(`INSERT INTO scratch VALUES (1)`)))
	assertFailed(t, res, err)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != pgerrcode.UniqueViolation || dedup.Constraint(pgErr) != "scratch_v_key" {
		t.Errorf("err = %v, want it to wrap the unique violation of scratch_v_key raised at COMMIT", err)
	}
	assertRetrySucceeds(t, pool, store, key)
}

// TestRunOtherUniqueViolation: the state change violates a unique constraint
// that is not the key. That is an error, never a duplicate, and the key is
// not consumed.
func TestRunOtherUniqueViolation(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	execSQL(t, ctx, pool,
		`CREATE TABLE scratch (v text CONSTRAINT scratch_v_key UNIQUE)`,
		`INSERT INTO scratch VALUES ('taken')`)
	store := newStore(t, pool, dedup.Config{InFlightWait: dedup.DefaultInFlightWait})
	key := idempotency.Key{Sender: "billing", DeliveryID: "other-unique"}
	d := newDelivery(t, key, "payload")

	res, err := store.Run(ctx, d, both(insertEvent(d, "payload"), queueSQL(`INSERT INTO scratch VALUES ('taken')`)))
	assertFailed(t, res, err)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != pgerrcode.UniqueViolation || dedup.Constraint(pgErr) != "scratch_v_key" {
		t.Errorf("err = %v, want it to wrap the unique violation of scratch_v_key", err)
	}
	assertRetrySucceeds(t, pool, store, key)
}

// TestRunEventKeyViolation: the state change collides with an existing event
// (webhook_events_pkey, a 23505 in hookgate's own schema). Still not a
// duplicate delivery.
func TestRunEventKeyViolation(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	store := newStore(t, pool, dedup.Config{InFlightWait: dedup.DefaultInFlightWait})
	earlier := newDelivery(t, idempotency.Key{Sender: "github", DeliveryID: "earlier"}, "payload")
	if _, err := store.Run(ctx, earlier, insertEvent(earlier, "payload")); err != nil {
		t.Fatal(err)
	}

	key := idempotency.Key{Sender: "github", DeliveryID: "collides"}
	d := newDelivery(t, key, "payload")
	d.EventID = earlier.EventID // the event insert hits webhook_events_pkey
	res, err := store.Run(ctx, d, insertEvent(d, "payload"))
	assertFailed(t, res, err)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != pgerrcode.UniqueViolation || dedup.Constraint(pgErr) != "webhook_events_pkey" {
		t.Errorf("err = %v, want it to wrap the unique violation of webhook_events_pkey", err)
	}
	assertRetrySucceeds(t, pool, store, key)
}

func TestRunNilChange(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	store := newStore(t, pool, dedup.Config{InFlightWait: dedup.DefaultInFlightWait})
	key := idempotency.Key{Sender: "slack", DeliveryID: "nil-change"}
	d := newDelivery(t, key, "payload")

	res, err := store.Run(ctx, d, nil)
	if err != nil {
		t.Fatalf("Run with a nil change: %v", err)
	}
	if res.Replayed || res.EventID != d.EventID || !equalResponse(res.Response, d.Response) {
		t.Errorf("Run with a nil change = %+v, want the delivery's own new result", res)
	}
	assertStored(t, ctx, pool, d)
	if n := count(t, ctx, pool, `SELECT count(*) FROM webhook_events`); n != 0 {
		t.Errorf("webhook_events rows = %d, want 0", n)
	}

	res, err = store.Run(ctx, newDelivery(t, key, "payload"), nil)
	if err != nil || !res.Replayed || res.EventID != d.EventID || !bytes.Equal(res.Response.Body, d.Response.Body) {
		t.Errorf("second Run with a nil change = %+v, %v; want a replay of the first", res, err)
	}
}

// TestRunEmptyResponseBody: an empty (non-nil) response body is stored and
// replayed as empty.
func TestRunEmptyResponseBody(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	store := newStore(t, pool, dedup.Config{InFlightWait: dedup.DefaultInFlightWait})
	key := idempotency.Key{Sender: "generic", DeliveryID: "empty-body"}
	d := newDelivery(t, key, "payload")
	d.Response = idempotency.Response{Status: 204, ContentType: "", Body: []byte{}}
	if _, err := store.Run(ctx, d, nil); err != nil {
		t.Fatalf("Run: %v", err)
	}
	res, err := store.Run(ctx, newDelivery(t, key, "payload"), nil)
	if err != nil || !res.Replayed || res.Response.Status != 204 || res.Response.ContentType != "" || len(res.Response.Body) != 0 {
		t.Errorf("replay = %+v, %v; want 204 with an empty body", res, err)
	}
}

// TestRunUnreachableDatabase: with the server unreachable, Run fails with an
// error that is neither a duplicate nor a replay.
func TestRunUnreachableDatabase(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	cfg, err := pgxpool.ParseConfig(closedPortURL(t))
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg) // lazy: does not connect yet
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	store := newStore(t, pool, dedup.Config{InFlightWait: dedup.DefaultInFlightWait})
	d := newDelivery(t, idempotency.Key{Sender: "github", DeliveryID: "unreachable"}, "payload")

	res, err := store.Run(ctx, d, insertEvent(d, "payload"))
	assertFailed(t, res, err)
	var ce *pgconn.ConnectError
	if !errors.As(err, &ce) {
		t.Errorf("err = %v (%T), want it to wrap the *pgconn.ConnectError", err, err)
	}
}

// TestRunCanceledContext: a delivery whose context is already cancelled fails
// and records nothing.
func TestRunCanceledContext(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	store := newStore(t, pool, dedup.Config{InFlightWait: dedup.DefaultInFlightWait})
	key := idempotency.Key{Sender: "github", DeliveryID: "canceled"}
	d := newDelivery(t, key, "payload")

	canceled, cancel := context.WithCancel(ctx)
	cancel()
	res, err := store.Run(canceled, d, insertEvent(d, "payload"))
	assertFailed(t, res, err)
	assertRetrySucceeds(t, pool, store, key)
}
