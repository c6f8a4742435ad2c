package events_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/hookgate/hookgate/internal/dedup"
	"github.com/hookgate/hookgate/internal/events"
	"github.com/hookgate/hookgate/internal/idempotency"
	"github.com/hookgate/hookgate/internal/store"
	"github.com/hookgate/hookgate/internal/testing/pgtest"
	"github.com/hookgate/hookgate/internal/testing/storetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(pgtest.M(m))
}

// insert stores e with QueueInsert in a delivery's transaction, as ingest
// does.
func insert(t *testing.T, pool *pgxpool.Pool, e events.Event) {
	t.Helper()
	d := idempotency.Delivery{
		Key:        idempotency.Key{Sender: e.Sender, DeliveryID: e.DeliveryID},
		EventID:    e.ID,
		Response:   idempotency.Response{Status: 202, ContentType: "application/json", Body: []byte("{}")},
		ReceivedAt: e.ReceivedAt,
		ExpiresAt:  e.ReceivedAt.Add(time.Hour),
	}
	ingest, err := dedup.New(dedup.Config{Pool: pool, InFlightWait: dedup.DefaultInFlightWait})
	if err != nil {
		t.Fatal(err)
	}
	res, err := ingest.Run(t.Context(), d, func(b *dedup.Batch) { events.QueueInsert(b, e) })
	if err != nil || res.Replayed {
		t.Fatalf("insert event: %+v, %v", res, err)
	}
}

func newID(t *testing.T) uuid.UUID {
	t.Helper()
	id, err := uuid.NewV7()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestGet(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDB(t)
	now := time.Now().UTC().Truncate(time.Microsecond)
	e := events.Event{
		ID: newID(t), Sender: "github", DeliveryID: "d1", ReceivedAt: now,
		Headers: http.Header{
			"Content-Type":  {"application/json"},
			"X-Multi":       {"a", "b"},
			"Authorization": {"Bearer not-stored"},
		},
		Body: []byte("\x00\x01binary\xff"),
	}
	insert(t, pool, e)
	empty := events.Event{ID: newID(t), Sender: "stripe", DeliveryID: "d2", ReceivedAt: now, Headers: http.Header{}}
	insert(t, pool, empty)

	got, err := store.New(pool).GetEvent(t.Context(), e.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != e.ID || got.Sender != "github" || got.DeliveryID != "d1" || !got.ReceivedAt.Equal(now) || string(got.Body) != string(e.Body) {
		t.Errorf("Get = %+v, want %+v", got, e)
	}
	if got.Headers.Get("Content-Type") != "application/json" || strings.Join(got.Headers.Values("X-Multi"), ",") != "a,b" {
		t.Errorf("headers = %v, want Content-Type and both X-Multi values", got.Headers)
	}
	if got.Headers.Get("Authorization") != "" {
		t.Errorf("headers = %v: Authorization was stored", got.Headers)
	}

	got, err = store.New(pool).GetEvent(t.Context(), empty.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Body == nil || len(got.Body) != 0 || got.Headers == nil || len(got.Headers) != 0 {
		t.Errorf("event without body and headers: body %q (nil %v), headers %v (nil %v); want both empty, not nil",
			got.Body, got.Body == nil, got.Headers, got.Headers == nil)
	}
}

func TestGetUnknown(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDB(t)
	_, err := store.New(pool).GetEvent(t.Context(), newID(t))
	if !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Get of an unknown ID: error %v, want ErrNotFound", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := store.New(pool).GetEvent(ctx, newID(t)); err == nil || errors.Is(err, store.ErrNotFound) {
		t.Errorf("Get with a cancelled context: error %v, want a failure that is not ErrNotFound", err)
	}
}

// TestGetUsesIDIndex checks that Get, looking an event up by ID alone,
// reads the index webhook_events_id_idx (migration 4) rather than the whole
// table: it runs Get in a transaction and reads that transaction's index
// statistics.
func TestGetUsesIDIndex(t *testing.T) {
	t.Parallel()
	pgtest.SkipOnCitus(t, "it reads the coordinator's scan statistics of webhook_events; on Citus the table is empty "+
		"on the coordinator and the scans happen on the workers' shards (a lookup by ID alone asks every shard, docs/distributed.md)")
	pool, _ := pgtest.NewDB(t)
	ctx := t.Context()
	if _, err := storetest.InsertGenerated(ctx, pool, storetest.Generated{Sender: "s", Senders: 10, Prefix: "d", N: 20000, Newest: time.Now(), Events: true}); err != nil {
		t.Fatal(err)
	}
	// ANALYZE: the plan (which index Get reads) is what the test examines.
	pgtest.Analyze(t, pool, "webhook_events")
	e := events.Event{ID: newID(t), Sender: "github", DeliveryID: "d1", ReceivedAt: time.Now(), Headers: http.Header{}}
	insert(t, pool, e)

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := store.New(tx).GetEvent(ctx, e.ID); err != nil {
		t.Fatal(err)
	}
	var idScans, seqScans int64
	err = tx.QueryRow(ctx, `SELECT pg_stat_get_xact_numscans('webhook_events_id_idx'::regclass),
  (SELECT seq_scan FROM pg_stat_xact_user_tables WHERE relname = 'webhook_events')`).Scan(&idScans, &seqScans)
	if err != nil {
		t.Fatal(err)
	}
	if idScans != 1 || seqScans != 0 {
		t.Errorf("Get scanned webhook_events_id_idx %d times and the table sequentially %d times; want 1 and 0", idScans, seqScans)
	}
}
