package dedup_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/hookgate/hookgate/internal/dedup"
	"github.com/hookgate/hookgate/internal/events"
	"github.com/hookgate/hookgate/internal/idempotency"
	"github.com/hookgate/hookgate/internal/store"
	"github.com/hookgate/hookgate/internal/testing/pgtest"
	"github.com/hookgate/hookgate/internal/testing/storetest"
)

// closedPortURL returns a PostgreSQL URL on a 127.0.0.1 port nothing listens
// on any more.
func closedPortURL(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("postgres://hookgate@127.0.0.1:%d/hookgate?sslmode=disable&connect_timeout=5", port)
}

// connectionError returns the error pgconn gives when the server is
// unreachable.
func connectionError(t testing.TB) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgconn.Connect(ctx, closedPortURL(t))
	if err == nil {
		conn.Close(ctx)
		t.Fatal("connecting to a closed port succeeded")
	}
	var ce *pgconn.ConnectError
	if !errors.As(err, &ce) {
		t.Fatalf("connection error %T %v is not a *pgconn.ConnectError", err, err)
	}
	return err
}

func TestIsDuplicate(t *testing.T) {
	t.Parallel()
	dup := &pgconn.PgError{Code: "23505", ConstraintName: dedup.KeyConstraint, Message: `duplicate key value violates unique constraint "processed_messages_key"`}
	if dedup.KeyConstraint != "processed_messages_key" {
		t.Fatalf("KeyConstraint is %q; the migration names the key processed_messages_key", dedup.KeyConstraint)
	}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"key violation", dup, true},
		{"wrapped key violation", fmt.Errorf("claim delivery: %w", dup), true},
		{"doubly wrapped key violation", fmt.Errorf("run: %w", fmt.Errorf("claim delivery: %w", dup)), true},
		{"joined key violation", errors.Join(errors.New("other"), dup), true},
		{"key violation on a Citus shard", &pgconn.PgError{Code: "23505", ConstraintName: dedup.KeyConstraint + "_102008"}, true},
		{"another constraint on a Citus shard", &pgconn.PgError{Code: "23505", ConstraintName: "webhook_events_pkey_102008"}, false},
		{"key constraint name with another suffix", &pgconn.PgError{Code: "23505", ConstraintName: dedup.KeyConstraint + "_x1"}, false},
		{"unique violation of another constraint", &pgconn.PgError{Code: "23505", ConstraintName: "webhook_events_pkey"}, false},
		{"wrapped unique violation of another constraint", fmt.Errorf("x: %w", &pgconn.PgError{Code: "23505", ConstraintName: "scratch_v_key"}), false},
		{"unique violation without constraint name", &pgconn.PgError{Code: "23505"}, false},
		{"key constraint name in another case", &pgconn.PgError{Code: "23505", ConstraintName: "Processed_Messages_Key"}, false},
		{"serialization failure on the key constraint", &pgconn.PgError{Code: "40001", ConstraintName: dedup.KeyConstraint}, false},
		{"lock timeout on the key constraint", &pgconn.PgError{Code: "55P03", ConstraintName: dedup.KeyConstraint}, false},
		{"foreign key violation on the key constraint", &pgconn.PgError{Code: "23503", ConstraintName: dedup.KeyConstraint}, false},
		{"exclusion violation on the key constraint", &pgconn.PgError{Code: "23P01", ConstraintName: dedup.KeyConstraint}, false},
		{"plain error naming the key constraint", errors.New(`ERROR: duplicate key value violates unique constraint "processed_messages_key" (SQLSTATE 23505)`), false},
		{"nil", nil, false},
		{"connection error", connectionError(t), false},
		{"wrapped connection error", fmt.Errorf("set in-flight wait: %w", connectionError(t)), false},
		{"context canceled", context.Canceled, false},
		{"in flight", dedup.ErrInFlight, false},
		{"payload mismatch", dedup.ErrPayloadMismatch, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := dedup.IsDuplicate(tt.err); got != tt.want {
				t.Errorf("IsDuplicate(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

// TestIsDuplicateServerErrors checks IsDuplicate on errors PostgreSQL really
// raises, not only on hand-built ones.
func TestIsDuplicateServerErrors(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	execSQL(t, ctx, pool,
		`CREATE TABLE scratch (v int CONSTRAINT scratch_v_key UNIQUE)`,
		`INSERT INTO scratch VALUES (1)`,
	)
	// The rows whose keys the statements below collide with.
	q, now, id := store.New(pool), time.Now(), uuid.MustParse("00000000-0000-0000-0000-000000000001")
	if err := storetest.InsertKey(ctx, q.DB(), idempotency.Delivery{Key: idempotency.Key{Sender: "s", DeliveryID: "d"}, EventID: id,
		Response: idempotency.Response{Status: 202, ContentType: "application/json", Body: []byte("{}")}, ReceivedAt: now, ExpiresAt: now}); err != nil {
		t.Fatal(err)
	}
	if err := storetest.InsertEvent(ctx, q.DB(), events.Event{ID: id, Sender: "s", DeliveryID: "d", ReceivedAt: now, Headers: http.Header{}}); err != nil {
		t.Fatal(err)
	}
	// The statements themselves are what the test examines: each provokes
	// one error of PostgreSQL's, raw SQL on purpose.
	tests := []struct {
		name string
		sql  string
		code string
		want bool
	}{
		{"processed_messages key", `INSERT INTO processed_messages (sender, delivery_id, request_sha256, event_id, response_status, response_content_type, response_body, created_at, expires_at)
		 VALUES ('s', 'd', '\x01', gen_random_uuid(), 202, 'text/plain', '', now(), now())`, "23505", true},
		{"webhook_events key", `INSERT INTO webhook_events (sender, id, delivery_id, received_at, headers, body)
		 VALUES ('s', '00000000-0000-0000-0000-000000000001', 'other', now(), '{}', '')`, "23505", false},
		{"scratch unique", `INSERT INTO scratch VALUES (1)`, "23505", false},
		{"not null on processed_messages", `INSERT INTO processed_messages (sender, delivery_id) VALUES ('s', 'e')`, "23502", false},
		{"division by zero", `SELECT 1/0`, "22012", false},
	}
	for _, tt := range tests {
		_, err := pool.Exec(ctx, tt.sql)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != tt.code {
			t.Fatalf("%s: got %v, want a server error with SQLSTATE %s", tt.name, err, tt.code)
		}
		if got := dedup.IsDuplicate(fmt.Errorf("wrapped: %w", err)); got != tt.want {
			t.Errorf("%s: IsDuplicate(%v) = %v, want %v", tt.name, err, got, tt.want)
		}
	}
}
