package dedup_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/dedup"
	"github.com/hookgate/hookgate/internal/idempotency"
	"github.com/hookgate/hookgate/internal/testing/pgtest"
)

// A positive in-flight wait under 1ms must not become lock_timeout '0', which
// PostgreSQL reads as "no timeout" (Run would wait for the holder forever).
func TestRunSubMillisecondInFlightWaitStillTimesOut(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, dsn := pgtest.NewDB(t)
	store := newStore(t, pool, dedup.Config{InFlightWait: 500 * time.Microsecond})
	key := idempotency.Key{Sender: "github", DeliveryID: "sub-ms"}
	holder := holdKey(t, ctx, dsn, newDelivery(t, key, "payload"))
	defer func() { _ = holder.Rollback(context.Background()) }()

	guard, cancel := context.WithTimeout(ctx, time.Minute) // a stall: Run would wait for the holder forever
	defer cancel()
	_, err := store.Run(guard, newDelivery(t, key, "payload"), nil)
	if !errors.Is(err, dedup.ErrInFlight) {
		t.Fatalf("Run with a 500µs in-flight wait while the key is held: err = %v, want ErrInFlight", err)
	}
}

// A nil Response.Body is stored as an empty body, not as NULL into the NOT
// NULL column response_body.
func TestRunNilResponseBodyStoredEmpty(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	store := newStore(t, pool, dedup.Config{InFlightWait: dedup.DefaultInFlightWait})
	d := newDelivery(t, idempotency.Key{Sender: "generic", DeliveryID: "nil-body"}, "payload")
	d.Response = idempotency.Response{Status: 204}
	if _, err := store.Run(ctx, d, nil); err != nil {
		t.Fatalf("Run with a nil response body (204 No Content): %v", err)
	}
}

// An in-flight wait above 2^31-1 ms (about 24.8 days) is out of range for
// lock_timeout: New refuses one longer than MaxInFlightWait, and the
// longest it accepts still works.
func TestRunHugeInFlightWaitIsRefused(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	if _, err := dedup.New(dedup.Config{Pool: pool, InFlightWait: 30 * 24 * time.Hour}); err == nil || !strings.Contains(err.Error(), "InFlightWait") {
		t.Fatalf("New with a 720h in-flight wait: err %v, want one naming InFlightWait", err)
	}
	store := newStore(t, pool, dedup.Config{InFlightWait: dedup.MaxInFlightWait})
	d := newDelivery(t, idempotency.Key{Sender: "github", DeliveryID: "huge-wait"}, "payload")
	if _, err := store.Run(ctx, d, nil); err != nil {
		t.Fatalf("Run with the longest in-flight wait (%s): %v", dedup.MaxInFlightWait, err)
	}
}
