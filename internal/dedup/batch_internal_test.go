package dedup

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/hookgate/hookgate/internal/idempotency"
	"github.com/hookgate/hookgate/internal/testing/pgtest"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// delivery returns a new delivery of (sender, id) with body's fingerprint.
func delivery(t *testing.T, sender, id, body string) idempotency.Delivery {
	t.Helper()
	eventID, err := uuid.NewV7()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	return idempotency.Delivery{
		Key:           idempotency.Key{Sender: sender, DeliveryID: id},
		RequestSHA256: sha256.Sum256([]byte(body)),
		EventID:       eventID,
		Response:      idempotency.Response{Status: http.StatusAccepted, ContentType: "application/json", Body: fmt.Appendf(nil, `{"event_id":%q}`, eventID)},
		ReceivedAt:    now,
		ExpiresAt:     now.Add(time.Hour),
	}
}

// mark is a guarded state change that records the delivery's event in marks.
func mark(d idempotency.Delivery) Change {
	return func(b *Batch) {
		b.Queue(`INSERT INTO marks (event_id) SELECT $3::uuid WHERE `+Claimed(1, 2, 3), d.Sender, d.DeliveryID, [16]byte(d.EventID))
	}
}

// calls wraps deliveries as the calls of one batch.
func calls(ctx context.Context, changes []Change, ds ...idempotency.Delivery) []*call {
	out := make([]*call, len(ds))
	for i, d := range ds {
		out[i] = &call{ctx: ctx, d: d, change: changes[i], done: make(chan struct{})}
	}
	return out
}

func marks(t *testing.T, ctx context.Context, s *Store, d idempotency.Delivery) int {
	t.Helper()
	var n int
	if err := s.db.QueryRow(ctx, `SELECT count(*) FROM marks WHERE event_id = $1`, d.EventID).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func batchStore(t *testing.T) (*Store, context.Context, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	pool, dsn := pgtest.NewDB(t)
	if _, err := pool.Exec(ctx, `CREATE TABLE marks (event_id uuid NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{
		`CREATE TABLE other (k text PRIMARY KEY)`,
		`CREATE TABLE row_marks (sender text NOT NULL, event_id uuid NOT NULL, delivery_id text NOT NULL, n int8 NOT NULL)`,
		`CREATE TABLE folded_marks (sender text NOT NULL, event_id uuid NOT NULL, delivery_id text NOT NULL, n int8 NOT NULL CHECK (n >= 0))`,
		`CREATE TABLE typed (sender text, t text, b bytea, u uuid, s int2, i int8, f bool, ts timestamptz, j jsonb, k text)`,
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	return mustNew(t, pool, Config{InFlightWait: 20 * time.Second, Batching: &Batching{MaxBatch: 64, MaxInFlight: 4}}), ctx, dsn
}

// TestBatchAnswersHeldKeysFromOneRead: a batch of first deliveries is one
// round trip. A batch whose deliveries meet keys that other deliveries
// committed earlier (retries that missed this process's replay cache) is
// two: its pipeline, then one read of what holds those keys, after its
// COMMIT. Each such delivery gets the holder's stored response, byte for
// byte, or ErrPayloadMismatch, and none runs again by itself.
func TestBatchAnswersHeldKeysFromOneRead(t *testing.T) {
	t.Parallel()
	_, ctx, dsn := batchStore(t)
	var writes atomic.Int64
	s := mustNew(t, pgtest.CountedPool(t, ctx, dsn, &writes), Config{InFlightWait: 20 * time.Second, Batching: &Batching{MaxBatch: 64, MaxInFlight: 4}})
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	// batch runs a batch of four: a new delivery, one of each held key
	// with each's payload (new ones without held keys), and another new
	// one, and returns its calls and round trips. Every batch has four
	// deliveries: on Citus the claim's text depends on their number, and
	// a new one is prepared in a round trip of its own.
	batch := func(round string, held []idempotency.Delivery, payloads ...string) ([]*call, int64) {
		t.Helper()
		ds := []idempotency.Delivery{delivery(t, "b", round+"-a", "p")}
		for i, h := range held {
			ds = append(ds, delivery(t, "b", h.DeliveryID, payloads[i]))
		}
		if held == nil {
			ds = append(ds, delivery(t, "b", round+"-m1", "p"), delivery(t, "b", round+"-m2", "p"))
		}
		ds = append(ds, delivery(t, "b", round+"-z", "p"))
		changes := make([]Change, len(ds))
		for i, d := range ds {
			changes[i] = mark(d)
		}
		cs := calls(ctx, changes, ds...)
		w0 := writes.Load()
		s.runBatch(cs)
		return cs, writes.Load() - w0
	}
	holders := func(round string) []idempotency.Delivery {
		hs := []idempotency.Delivery{delivery(t, "b", round+"-m1", "p"), delivery(t, "b", round+"-m2", "p")}
		claimKeys(t, ctx, conn, hs...)
		return hs
	}
	// Warm up: the connection prepares every statement once.
	batch("warm", holders("warm"), "p", "q")

	cs, n := batch("new", nil)
	if n != 1 {
		t.Errorf("a batch of first deliveries: %d round trips, want 1", n)
	}
	for _, c := range cs {
		if c.err != nil || c.res.Replayed {
			t.Errorf("first delivery %s: %+v, %v; want new", c.d.DeliveryID, c.res, c.err)
		}
	}

	hs := holders("held")
	cs, n = batch("held", hs, "p", "q")
	if n != 2 {
		t.Errorf("a batch with 2 keys held by committed deliveries: %d round trips, want 2 (the pipeline and one read)", n)
	}
	for _, c := range []*call{cs[0], cs[3]} {
		if c.err != nil || c.res.Replayed || c.res.EventID != c.d.EventID {
			t.Errorf("%s: %+v, %v; want new", c.d.DeliveryID, c.res, c.err)
		}
		if n := marks(t, ctx, s, c.d); n != 1 {
			t.Errorf("%s: its change ran %d times, want once", c.d.DeliveryID, n)
		}
	}
	r := cs[1].res
	if cs[1].err != nil || !r.Replayed || r.EventID != hs[0].EventID || r.Response.Status != hs[0].Response.Status ||
		r.Response.ContentType != hs[0].Response.ContentType || !bytes.Equal(r.Response.Body, hs[0].Response.Body) {
		t.Errorf("held key, same payload: %+v, %v; want the holder's stored response, byte for byte", r, cs[1].err)
	}
	if !errors.Is(cs[2].err, ErrPayloadMismatch) {
		t.Errorf("held key, another payload: %+v, %v; want ErrPayloadMismatch", cs[2].res, cs[2].err)
	}
	for _, c := range cs[1:3] {
		if n := marks(t, ctx, s, c.d); n != 0 {
			t.Errorf("held key %s: its change ran %d times, want never", c.d.DeliveryID, n)
		}
	}
}

// TestConflictReportedAsErrorReadsTheHolder: a database that reports a
// conflict on the key as an error despite ON CONFLICT (a trigger here
// raises the unique violation that Citus can relay) rolls the delivery
// back, and the delivery is answered from what holds the key: a replay of
// the holder's stored response, or ErrPayloadMismatch, never an error of
// its own, with its change not applied.
func TestConflictReportedAsErrorReadsTheHolder(t *testing.T) {
	t.Parallel()
	if pgtest.Citus() {
		t.Skip("the trigger is a PostgreSQL one on processed_messages")
	}
	s, ctx, dsn := batchStore(t)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	holder := delivery(t, "b", "raised", "p")
	if res, err := s.runSingle(ctx, holder, mark(holder), true); err != nil || res.Replayed {
		t.Fatalf("the holder's delivery: %+v, %v", res, err)
	}
	for _, sql := range []string{
		`CREATE FUNCTION raise_key_conflict() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE unique_violation USING MESSAGE = 'duplicate key value violates unique constraint "processed_messages_key"',
    CONSTRAINT = 'processed_messages_key';
END $$`,
		`CREATE TRIGGER raise_key_conflict BEFORE INSERT ON processed_messages FOR EACH ROW EXECUTE FUNCTION raise_key_conflict()`,
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	same, other := delivery(t, "b", "raised", "p"), delivery(t, "b", "raised", "q")
	res, err := s.runSingle(ctx, same, mark(same), true)
	if err != nil || !res.Replayed || res.EventID != holder.EventID || !bytes.Equal(res.Response.Body, holder.Response.Body) {
		t.Errorf("same payload: %+v, %v; want a replay of the holder's stored response", res, err)
	}
	if _, err := s.runSingle(ctx, other, mark(other), true); !errors.Is(err, ErrPayloadMismatch) {
		t.Errorf("another payload: %v; want ErrPayloadMismatch", err)
	}
	for _, d := range []idempotency.Delivery{same, other} {
		if n := marks(t, ctx, s, d); n != 0 {
			t.Errorf("%s's change ran %d times, want never", d.EventID, n)
		}
	}
}

// TestBatchSameKeyTwice: two deliveries of one key in one batch — the first
// claims, the second replays the first's response (same payload) or is a
// mismatch (another payload); one event is stored.
func TestBatchSameKeyTwice(t *testing.T) {
	t.Parallel()
	s, ctx, _ := batchStore(t)
	first := delivery(t, "b", "dup", "p")
	same := delivery(t, "b", "dup", "p")
	other := delivery(t, "b", "dup", "q")
	fresh := delivery(t, "b", "fresh", "p")
	cs := calls(ctx, []Change{mark(first), mark(same), mark(other), mark(fresh)}, first, same, other, fresh)
	s.runBatch(cs)
	if cs[0].err != nil || cs[0].res.Replayed || cs[0].res.EventID != first.EventID {
		t.Errorf("first: %+v, %v; want new", cs[0].res, cs[0].err)
	}
	if cs[1].err != nil || !cs[1].res.Replayed || cs[1].res.EventID != first.EventID || string(cs[1].res.Response.Body) != string(first.Response.Body) {
		t.Errorf("second, same payload: %+v, %v; want a replay of the first", cs[1].res, cs[1].err)
	}
	if !errors.Is(cs[2].err, ErrPayloadMismatch) {
		t.Errorf("third, another payload: %+v, %v; want ErrPayloadMismatch", cs[2].res, cs[2].err)
	}
	if cs[3].err != nil || cs[3].res.Replayed {
		t.Errorf("fresh key: %+v, %v; want new", cs[3].res, cs[3].err)
	}
	if marks(t, ctx, s, first) != 1 || marks(t, ctx, s, same) != 0 || marks(t, ctx, s, other) != 0 || marks(t, ctx, s, fresh) != 1 {
		t.Error("the state change ran for a delivery that did not claim its key, or not for one that did")
	}
}

// TestBatchBadDeliveryFailsAlone: a delivery whose state change violates
// another constraint in the middle of a batch gets an error (not a replay);
// its neighbours are committed and answered as new.
func TestBatchBadDeliveryFailsAlone(t *testing.T) {
	t.Parallel()
	s, ctx, _ := batchStore(t)
	a, bad, c := delivery(t, "b", "a", "p"), delivery(t, "b", "bad", "p"), delivery(t, "b", "c", "p")
	violate := func(b *Batch) {
		b.Queue(`INSERT INTO other VALUES ('x')`)
		b.Queue(`INSERT INTO other VALUES ('x')`) // 23505 on other_pkey
	}
	cs := calls(ctx, []Change{mark(a), violate, mark(c)}, a, bad, c)
	s.runBatch(cs)
	for _, i := range []int{0, 2} {
		if cs[i].err != nil || cs[i].res.Replayed {
			t.Errorf("neighbour %s: %+v, %v; want new", cs[i].d.DeliveryID, cs[i].res, cs[i].err)
		}
	}
	if cs[1].err == nil || IsDuplicate(cs[1].err) || cs[1].res.Replayed {
		t.Errorf("bad delivery: %+v, %v; want an error", cs[1].res, cs[1].err)
	}
	var n int
	if err := s.db.QueryRow(ctx, `SELECT count(*) FROM processed_messages WHERE delivery_id = 'bad'`).Scan(&n); err != nil || n != 0 {
		t.Errorf("bad delivery's key rows: %d, %v; want 0", n, err)
	}
	if marks(t, ctx, s, a) != 1 || marks(t, ctx, s, c) != 1 {
		t.Error("a neighbour's state change is missing")
	}
}

// TestBatchHeldKeyDoesNotStallBatch: a key held by another transaction
// (another process's delivery in flight) does not hold the batch's other
// deliveries for the in-flight wait: they are answered while the key is
// still held; the held one waits on the single path and replays once the
// holder commits.
func TestBatchHeldKeyDoesNotStallBatch(t *testing.T) {
	t.Parallel()
	s, ctx, dsn := batchStore(t)
	held := delivery(t, "b", "held", "p")
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	holder := delivery(t, "b", "held", "p")
	claimKeys(t, ctx, tx, holder)

	a, c := delivery(t, "b", "a", "p"), delivery(t, "b", "c", "p")
	cs := calls(ctx, []Change{mark(a), mark(held), mark(c)}, a, held, c)
	go s.runBatch(cs)
	for _, i := range []int{0, 2} {
		select {
		case <-cs[i].done:
			t.Fatal("a delivery was answered before the whole batch")
		default:
		}
	}
	// The neighbours are committed while the key is held: poll for them.
	testkit.Poll(t, time.Minute, "the batch's other deliveries to commit while a key of the batch is held elsewhere", func() bool {
		var n int
		if err := s.db.QueryRow(ctx, `SELECT count(*) FROM processed_messages WHERE sender = 'b' AND delivery_id IN ('a', 'c')`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 2
	})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	<-cs[1].done
	for _, i := range []int{0, 2} {
		if cs[i].err != nil || cs[i].res.Replayed {
			t.Errorf("neighbour %s: %+v, %v; want new", cs[i].d.DeliveryID, cs[i].res, cs[i].err)
		}
	}
	if cs[1].err != nil || !cs[1].res.Replayed || cs[1].res.EventID != holder.EventID {
		t.Errorf("held key: %+v, %v; want a replay of the holder's delivery", cs[1].res, cs[1].err)
	}
}

// TestReplayCacheTTL: an entry older than the cache's TTL is not used (a key
// deleted by hand is replayed for at most that long).
func TestReplayCacheTTL(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDB(t)
	ctx := t.Context()
	s := mustNew(t, pool, Config{InFlightWait: time.Second, ReplayCache: &ReplayCache{Size: 10, TTL: time.Minute}})
	d := delivery(t, "c", "ttl", "p")
	if _, err := s.Run(ctx, d, nil); err != nil {
		t.Fatal(err)
	}
	if _, hit, _ := s.fromCache(delivery(t, "c", "ttl", "p")); !hit {
		t.Fatal("a committed delivery is not in the cache")
	}
	// Raw SQL: a key deleted by hand (an operator's DELETE) is the case
	// this test examines (by sender, so that on Citus it commits on one
	// worker).
	if _, err := pool.Exec(ctx, `DELETE FROM processed_messages WHERE sender = 'c'`); err != nil {
		t.Fatal(err)
	}
	s.now = func() time.Time { return time.Now().Add(2 * time.Minute) }
	retry := delivery(t, "c", "ttl", "p")
	res, err := s.Run(ctx, retry, nil)
	if err != nil || res.Replayed {
		t.Errorf("retry after the TTL of a key deleted by hand: %+v, %v; want new (the database decides)", res, err)
	}
}
