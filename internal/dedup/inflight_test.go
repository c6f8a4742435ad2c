package dedup_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/dedup"
	"github.com/hookgate/hookgate/internal/idempotency"
	"github.com/hookgate/hookgate/internal/testing/pgtest"
	"github.com/hookgate/hookgate/internal/testing/storetest"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// holdKey begins a transaction on a connection of its own and claims d's key
// in it the way Run does, without committing: a concurrent delivery of the
// same key is in flight until the returned transaction ends. The connection is
// closed when the test ends.
func holdKey(t *testing.T, ctx context.Context, dsn string, d idempotency.Delivery) pgx.Tx {
	t.Helper()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := storetest.InsertKey(ctx, tx, d); err != nil {
		t.Fatalf("hold key: %v", err)
	}
	return tx
}

// outcome is what a Run returned.
type outcome struct {
	res dedup.Result
	err error
}

// runAsync starts store.Run in a goroutine and returns the channel its
// outcome arrives on.
func runAsync(ctx context.Context, store *dedup.Store, d idempotency.Delivery, change dedup.Change) <-chan outcome {
	ch := make(chan outcome, 1)
	go func() {
		res, err := store.Run(ctx, d, change)
		ch <- outcome{res, err}
	}()
	return ch
}

// waitUntilBlocked polls until some backend of this test's database waits on
// a lock while inserting into processed_messages, that is, until a claim
// waits for the holder of its key. It fails the test when the Run returns
// first or when no backend blocks within a generous deadline.
func waitUntilBlocked(t *testing.T, ctx context.Context, pool *pgxpool.Pool, done <-chan outcome) {
	t.Helper()
	blocked := `SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid()
  AND wait_event_type = 'Lock' AND wait_event = 'transactionid'
  AND (query LIKE 'INSERT INTO processed_messages%' OR query LIKE 'WITH k AS (_INSERT INTO processed_messages%')`
	if pgtest.Citus() {
		// The claim waits on the shard's worker, for the coordinator's
		// statement.
		blocked = `SELECT count(*) FROM citus_lock_waits WHERE blocked_statement LIKE 'INSERT INTO processed_messages%'`
	}
	testkit.Poll(t, 30*time.Second, "a claim to block on the held key", func() bool {
		select {
		case o := <-done:
			t.Fatalf("Run returned %+v, %v before it blocked on the held key", o.res, o.err)
		default:
		}
		return count(t, ctx, pool, blocked) > 0
	})
}

// TestRunInFlight: while another transaction holds the key, Run gives up after
// the in-flight wait with ErrInFlight and records nothing; once the holder
// rolls back, the delivery is accepted as new.
func TestRunInFlight(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, dsn := pgtest.NewDB(t)
	execSQL(t, ctx, pool, createRuns)
	store := newStore(t, pool, dedup.Config{InFlightWait: 300 * time.Millisecond})
	key := idempotency.Key{Sender: "github", DeliveryID: "in-flight"}
	holder := holdKey(t, ctx, dsn, newDelivery(t, key, "payload"))

	d := newDelivery(t, key, "payload")
	res, err := store.Run(ctx, d, both(insertEvent(d, "payload"), countRuns(d)))
	if !errors.Is(err, dedup.ErrInFlight) {
		t.Fatalf("Run while the key is held: err = %v, want ErrInFlight", err)
	}
	if res.Replayed || dedup.IsDuplicate(err) || errors.Is(err, dedup.ErrPayloadMismatch) {
		t.Errorf("in flight: result %+v, err %v; want only ErrInFlight", res, err)
	}
	if n := count(t, ctx, pool, `SELECT count(*) FROM runs`); n != 0 {
		t.Errorf("the state change ran %d times while the key was held, want 0", n)
	}

	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n := keyRows(t, ctx, pool, key); n != 0 {
		t.Errorf("after the holder rolled back: processed_messages rows = %d, want 0", n)
	}
	if n := eventRows(t, ctx, pool, key); n != 0 {
		t.Errorf("after the holder rolled back: webhook_events rows = %d, want 0", n)
	}

	retry := newDelivery(t, key, "payload")
	res, err = store.Run(ctx, retry, both(insertEvent(retry, "payload"), countRuns(retry)))
	if err != nil {
		t.Fatalf("retry: Run: %v", err)
	}
	if res.Replayed || res.EventID != retry.EventID || !equalResponse(res.Response, retry.Response) {
		t.Errorf("retry = %+v, want the retry's own new result", res)
	}
	assertStored(t, ctx, pool, retry)
	if n := eventRows(t, ctx, pool, key); n != 1 {
		t.Errorf("webhook_events rows = %d, want 1", n)
	}
	if n := count(t, ctx, pool, `SELECT count(*) FROM runs`); n != 1 {
		t.Errorf("the state change ran %d times, want 1", n)
	}
}

// TestRunWaitsForHolder: a Run that finds its key held waits on the unique
// index for the holder to end, then follows its outcome: a commit with the
// same payload is replayed, a commit with another payload is a mismatch, and
// a rollback leaves the key to the waiting Run, which does the work itself.
func TestRunWaitsForHolder(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		holderPayload string
		commit        bool
	}{
		{"holder commits", "payload", true},
		{"holder commits another payload", "another payload", true},
		{"holder rolls back", "payload", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			pool, dsn := pgtest.NewDB(t)
			execSQL(t, ctx, pool, createRuns)
			store := newStore(t, pool, dedup.Config{InFlightWait: 30 * time.Second}) // longer than the test needs
			key := idempotency.Key{Sender: "github", DeliveryID: "waits"}
			h := newDelivery(t, key, tt.holderPayload)
			h.Response = idempotency.Response{Status: 200, ContentType: "text/plain", Body: []byte("the holder's response")}
			holder := holdKey(t, ctx, dsn, h)

			d := newDelivery(t, key, "payload")
			done := runAsync(ctx, store, d, both(insertEvent(d, "payload"), countRuns(d)))
			waitUntilBlocked(t, ctx, pool, done)
			if tt.commit {
				if err := holder.Commit(ctx); err != nil {
					t.Fatal(err)
				}
			} else if err := holder.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			o := <-done

			switch {
			case !tt.commit:
				if o.err != nil || o.res.Replayed || o.res.EventID != d.EventID || !equalResponse(o.res.Response, d.Response) {
					t.Fatalf("Run after the holder rolled back = %+v, %v; want its own new result", o.res, o.err)
				}
				assertStored(t, ctx, pool, d)
				if n := eventRows(t, ctx, pool, key); n != 1 {
					t.Errorf("webhook_events rows = %d, want 1", n)
				}
				if n := count(t, ctx, pool, `SELECT count(*) FROM runs`); n != 1 {
					t.Errorf("the state change ran %d times, want 1", n)
				}
				return
			case tt.holderPayload == "payload":
				if o.err != nil || !o.res.Replayed || o.res.EventID != h.EventID || !equalResponse(o.res.Response, h.Response) {
					t.Fatalf("Run after the holder committed = %+v, %v; want a replay of the holder's %s %+v",
						o.res, o.err, h.EventID, h.Response)
				}
			default:
				if !errors.Is(o.err, dedup.ErrPayloadMismatch) || o.res.Replayed {
					t.Fatalf("Run after the holder committed another payload = %+v, %v; want ErrPayloadMismatch", o.res, o.err)
				}
			}
			assertStored(t, ctx, pool, h)
			if n := eventRows(t, ctx, pool, key); n != 0 {
				t.Errorf("webhook_events rows = %d, want 0 (the holder stored none, and the waiting Run must not)", n)
			}
			if n := count(t, ctx, pool, `SELECT count(*) FROM runs`); n != 0 {
				t.Errorf("the waiting Run's state change ran %d times, want 0", n)
			}
		})
	}
}
