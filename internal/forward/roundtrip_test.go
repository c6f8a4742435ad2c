package forward_test

import (
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/hookgate/hookgate/internal/dedup"
	"github.com/hookgate/hookgate/internal/events"
	"github.com/hookgate/hookgate/internal/forward"
	"github.com/hookgate/hookgate/internal/idempotency"
	"github.com/hookgate/hookgate/internal/testing/pgtest"
)

// TestOutboxAddsNoRoundTrip: a delivery of a sender with forward targets
// queues its outbox rows (forward.QueueOutbox) in the pipeline that claims
// its key and inserts its event: a first delivery with one target, and
// its replay, each take one round trip, as without a target, and no
// statement is prepared again once the connection has prepared them.
func TestOutboxAddsNoRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	_, dsn := pgtest.NewDB(t)
	// One connection, never pinged on acquire: every write on it is the
	// store's, which runs as in the gateway (dedup.New on a pool).
	var writes atomic.Int64
	pool := pgtest.CountedPool(t, ctx, dsn, &writes)
	store, err := dedup.New(dedup.Config{Pool: pool, InFlightWait: dedup.DefaultInFlightWait})
	if err != nil {
		t.Fatal(err)
	}
	deliver := func(id string, targets ...string) dedup.Result {
		now := time.Now().UTC().Truncate(time.Microsecond)
		eventID := uuid.Must(uuid.NewV7())
		d := idempotency.Delivery{
			Key: idempotency.Key{Sender: "acme", DeliveryID: id}, RequestSHA256: [32]byte{1}, EventID: eventID,
			Response:   idempotency.Response{Status: http.StatusAccepted, ContentType: "application/json", Body: []byte(`{"ok":true}`)},
			ReceivedAt: now, ExpiresAt: now.Add(time.Hour),
		}
		res, err := store.Run(ctx, d, func(b *dedup.Batch) {
			events.QueueInsert(b, events.Event{ID: eventID, Sender: "acme", DeliveryID: id, ReceivedAt: now,
				Headers: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"order":1}`)})
			forward.QueueOutbox(b, eventID, id, now, targets, forward.Lease{})
		})
		if err != nil {
			t.Fatalf("delivery %s: %v", id, err)
		}
		return res
	}
	prepared := func() string {
		var s string
		if err := pool.QueryRow(ctx, `SELECT string_agg(name || ' ' || prepare_time::text, ',' ORDER BY name) FROM pg_prepared_statements`,
			pgx.QueryExecModeSimpleProtocol).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	// Warm up: every statement gets prepared once.
	deliver("w0")
	deliver("w1", "sink")
	deliver("w1", "sink")
	before := prepared()
	for i := range 10 {
		for _, tc := range []struct {
			name     string
			id       string
			targets  []string
			replayed bool
		}{
			{"first delivery", "n" + strconv.Itoa(i), nil, false},
			{"first delivery with one target", "t" + strconv.Itoa(i), []string{"sink"}, false},
			{"its replay", "t" + strconv.Itoa(i), []string{"sink"}, true},
			{"first delivery with two targets", "u" + strconv.Itoa(i), []string{"sink", "audit"}, false},
		} {
			w0 := writes.Load()
			if res := deliver(tc.id, tc.targets...); res.Replayed != tc.replayed {
				t.Fatalf("%s: Replayed %v, want %v", tc.name, res.Replayed, tc.replayed)
			}
			if n := writes.Load() - w0; n != 1 {
				t.Errorf("%s: %d round trips, want 1", tc.name, n)
			}
		}
	}
	if after := prepared(); after != before {
		t.Errorf("statements were prepared again:\nbefore: %s\nafter:  %s", before, after)
	}
}
