package dedup_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/hookgate/hookgate/internal/dedup"
	"github.com/hookgate/hookgate/internal/events"
	"github.com/hookgate/hookgate/internal/idempotency"
	"github.com/hookgate/hookgate/internal/testing/pgtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(pgtest.M(m))
}

// testCtx bounds a test's database work so that a hang fails the test instead
// of running into the go test timeout. It is a guard, not an assertion.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// newDelivery returns a delivery of key whose request body is requestBody and
// whose response names its own (fresh) event ID, so that two deliveries of the
// same key and body differ in EventID and response body.
func newDelivery(t testing.TB, key idempotency.Key, requestBody string) idempotency.Delivery {
	t.Helper()
	id, err := uuid.NewV7()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Microsecond) // PostgreSQL keeps microseconds
	return idempotency.Delivery{
		Key:           key,
		RequestSHA256: sha256.Sum256([]byte(requestBody)),
		EventID:       id,
		Response: idempotency.Response{
			Status:      http.StatusAccepted,
			ContentType: "application/json",
			Body:        fmt.Appendf(nil, "{\"event_id\":%q}\n", id),
		},
		ReceivedAt: now,
		ExpiresAt:  now.Add(7 * 24 * time.Hour),
	}
}

// insertEvent is the ordinary state change: insert d's event with body.
func insertEvent(d idempotency.Delivery, body string) dedup.Change {
	return func(b *dedup.Batch) {
		events.QueueInsert(b, events.Event{
			ID:         d.EventID,
			Sender:     d.Sender,
			DeliveryID: d.DeliveryID,
			ReceivedAt: d.ReceivedAt,
			Headers:    http.Header{"Content-Type": {"application/json"}},
			Body:       []byte(body),
		})
	}
}

// queueSQL is a state change of raw statements.
func queueSQL(statements ...string) dedup.Change {
	return func(b *dedup.Batch) {
		for _, s := range statements {
			b.Queue(s)
		}
	}
}

// both queues the statements of each change in turn.
func both(changes ...dedup.Change) dedup.Change {
	return func(b *dedup.Batch) {
		for _, c := range changes {
			c(b)
		}
	}
}

// execSQL runs statements on pool, failing the test on error.
func execSQL(t testing.TB, ctx context.Context, pool *pgxpool.Pool, statements ...string) {
	t.Helper()
	for _, s := range statements {
		if _, err := pool.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

// count returns the integer a counting query returns.
func count(t testing.TB, ctx context.Context, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func keyRows(t testing.TB, ctx context.Context, pool *pgxpool.Pool, k idempotency.Key) int {
	t.Helper()
	return count(t, ctx, pool, `SELECT count(*) FROM processed_messages WHERE sender = $1 AND delivery_id = $2`, k.Sender, k.DeliveryID)
}

func eventRows(t testing.TB, ctx context.Context, pool *pgxpool.Pool, k idempotency.Key) int {
	t.Helper()
	return count(t, ctx, pool, `SELECT count(*) FROM webhook_events WHERE sender = $1 AND delivery_id = $2`, k.Sender, k.DeliveryID)
}

// storedRow is a processed_messages row.
type storedRow struct {
	SHA         []byte
	EventID     uuid.UUID
	Status      int16
	ContentType string
	Body        []byte
	CreatedAt   time.Time
	ExpiresAt   time.Time
}

func readStored(t testing.TB, ctx context.Context, pool *pgxpool.Pool, k idempotency.Key) storedRow {
	t.Helper()
	var r storedRow
	err := pool.QueryRow(ctx, `SELECT request_sha256, event_id, response_status, response_content_type, response_body, created_at, expires_at
FROM processed_messages WHERE sender = $1 AND delivery_id = $2`, k.Sender, k.DeliveryID).
		Scan(&r.SHA, &r.EventID, &r.Status, &r.ContentType, &r.Body, &r.CreatedAt, &r.ExpiresAt)
	if err != nil {
		t.Fatalf("read processed_messages row of %v: %v", k, err)
	}
	return r
}

// assertStored checks that the key row of d holds exactly what d says.
func assertStored(t testing.TB, ctx context.Context, pool *pgxpool.Pool, d idempotency.Delivery) {
	t.Helper()
	r := readStored(t, ctx, pool, d.Key)
	if !bytes.Equal(r.SHA, d.RequestSHA256[:]) {
		t.Errorf("stored request_sha256 %x, want %x", r.SHA, d.RequestSHA256)
	}
	if r.EventID != d.EventID {
		t.Errorf("stored event_id %s, want %s", r.EventID, d.EventID)
	}
	if int(r.Status) != d.Response.Status || r.ContentType != d.Response.ContentType || !bytes.Equal(r.Body, d.Response.Body) {
		t.Errorf("stored response %d %q %q, want %d %q %q", r.Status, r.ContentType, r.Body,
			d.Response.Status, d.Response.ContentType, d.Response.Body)
	}
	if !r.CreatedAt.Equal(d.ReceivedAt) {
		t.Errorf("stored created_at %s, want %s", r.CreatedAt, d.ReceivedAt)
	}
	if !r.ExpiresAt.Equal(d.ExpiresAt) {
		t.Errorf("stored expires_at %s, want %s", r.ExpiresAt, d.ExpiresAt)
	}
}

// snapshot returns the key row of k as text together with its system columns:
// two equal snapshots mean the row was neither changed nor rewritten.
func snapshot(t testing.TB, ctx context.Context, pool *pgxpool.Pool, k idempotency.Key) string {
	t.Helper()
	var s string
	err := pool.QueryRow(ctx, `SELECT p.xmin::text || ' ' || p.ctid::text || ' ' || p::text
FROM processed_messages p WHERE sender = $1 AND delivery_id = $2`, k.Sender, k.DeliveryID).Scan(&s)
	if err != nil {
		t.Fatalf("snapshot %v: %v", k, err)
	}
	return s
}

func equalResponse(a, b idempotency.Response) bool {
	return a.Status == b.Status && a.ContentType == b.ContentType && bytes.Equal(a.Body, b.Body)
}

// newStore returns dedup.New(cfg) on pool, failing t when cfg is invalid.
func newStore(t testing.TB, pool *pgxpool.Pool, cfg dedup.Config) *dedup.Store {
	t.Helper()
	cfg.Pool = pool
	s, err := dedup.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
