package dedup_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/dedup"
	"github.com/hookgate/hookgate/internal/idempotency"
	"github.com/hookgate/hookgate/internal/testing/pgtest"
)

// TestReplayCache: with the replay cache on, a retry of a delivery this
// store committed is answered without a round trip — the same response byte
// for byte, or ErrPayloadMismatch for another payload — and once the key's
// retention has passed the retry goes to the database and is new again.
func TestReplayCache(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	_, dsn := pgtest.NewDB(t)
	var writes atomic.Int64
	pool := pgtest.CountedPool(t, ctx, dsn, &writes)
	store := newStore(t, pool, dedup.Config{InFlightWait: time.Second, ReplayCache: &dedup.ReplayCache{Size: 100, TTL: time.Minute}})

	first := newDelivery(t, idempotency.Key{Sender: "c", DeliveryID: "d1"}, "p")
	if res, err := store.Run(ctx, first, insertEvent(first, "p")); err != nil || res.Replayed {
		t.Fatalf("first delivery: %+v, %v", res, err)
	}
	w0 := writes.Load()
	again := newDelivery(t, first.Key, "p")
	res, err := store.Run(ctx, again, insertEvent(again, "p"))
	if err != nil || !res.Replayed || res.EventID != first.EventID || !equalResponse(res.Response, first.Response) {
		t.Errorf("retry: %+v, %v; want a replay of the first delivery's response", res, err)
	}
	other := newDelivery(t, first.Key, "other")
	if _, err := store.Run(ctx, other, insertEvent(other, "other")); !errors.Is(err, dedup.ErrPayloadMismatch) {
		t.Errorf("retry with another payload: %v, want ErrPayloadMismatch", err)
	}
	if n := writes.Load() - w0; n != 0 {
		t.Errorf("answering from the cache took %d round trips, want 0", n)
	}
	if n := eventRows(t, ctx, pool, first.Key); n != 1 {
		t.Errorf("%d events stored, want 1", n)
	}

	// A key whose retention ended is not answered from the cache.
	short := newDelivery(t, idempotency.Key{Sender: "c", DeliveryID: "d2"}, "p")
	short.ExpiresAt = short.ReceivedAt.Add(time.Millisecond)
	if _, err := store.Run(ctx, short, insertEvent(short, "p")); err != nil {
		t.Fatal(err)
	}
	later := newDelivery(t, short.Key, "p")
	later.ReceivedAt = short.ExpiresAt.Add(time.Millisecond)
	later.ExpiresAt = later.ReceivedAt.Add(time.Hour)
	w1 := writes.Load()
	res, err = store.Run(ctx, later, insertEvent(later, "p"))
	if err != nil || res.Replayed || res.EventID != later.EventID {
		t.Errorf("delivery after the key's retention: %+v, %v; want new", res, err)
	}
	if writes.Load() == w1 {
		t.Error("a delivery after the key's retention was answered from the cache")
	}
}
