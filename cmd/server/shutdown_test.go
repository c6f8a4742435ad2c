package main

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/hookgate/hookgate/internal/idempotency"
	"github.com/hookgate/hookgate/internal/testing/pgtest"
	"github.com/hookgate/hookgate/internal/testing/storetest"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// TestShutdownFinishesInFlightRequest cancels run while a delivery is blocked
// in the server (its key is held by another open transaction): the server
// stops accepting connections but lets the delivery finish, answers it 202,
// and only then run returns nil.
func TestShutdownFinishesInFlightRequest(t *testing.T) {
	t.Parallel()
	pool, dsn := pgtest.NewDB(t)
	srv := startRun(t, dsn, "--in-flight-wait", "10s") // the longest serve accepts
	c := newClient(t)
	ctx := t.Context()
	const id = "held-1"

	// Hold the key: an uncommitted claim of the same (sender, delivery_id).
	holder, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback(context.Background()) }()
	now := time.Now()
	if err := storetest.InsertKey(ctx, holder, idempotency.Delivery{Key: idempotency.Key{Sender: "acme", DeliveryID: id}, EventID: uuid.New(),
		Response: idempotency.Response{Status: 202, ContentType: "application/json", Body: []byte("{}")}, ReceivedAt: now, ExpiresAt: now.Add(24 * time.Hour)}); err != nil {
		t.Fatal(err)
	}

	type result struct {
		r   reply
		err error
	}
	answered := make(chan result, 1)
	go func() {
		r, err := deliver(context.Background(), c, srv.base, id, bodyFor(id))
		answered <- result{r, err}
	}()

	testkit.Poll(t, 30*time.Second, "the delivery to wait on the held key", func() bool {
		var n int
		// Only the server's claim can wait on a lock in this database: the
		// holder is idle in its transaction.
		err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()`).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n > 0
	})

	srv.cancel()
	// Shutdown has begun once the listener is closed.
	testkit.Poll(t, 30*time.Second, "the server to stop accepting connections", func() bool {
		conn, err := net.DialTimeout("tcp", srv.addr, time.Second)
		if err != nil {
			return true
		}
		conn.Close()
		return false
	})
	select {
	case <-srv.done:
		t.Fatalf("run returned (%v) while a delivery was still in flight", srv.err)
	case res := <-answered:
		t.Fatalf("the delivery was answered (%s, %v) while its key was still held", res.r, res.err)
	default:
	}

	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	var res result
	select {
	case res = <-answered:
	case <-time.After(time.Minute):
		t.Fatal("the in-flight delivery was not answered within a minute of the key's release")
	}
	if res.err != nil {
		t.Fatalf("in-flight delivery during shutdown: %v, want its 202", res.err)
	}
	a, err := parseAccepted(res.r, id)
	if err != nil {
		t.Fatalf("in-flight delivery during shutdown: %v", err)
	}
	if res.r.header.Get("Idempotent-Replayed") != "" {
		t.Errorf("the delivery was replayed, want accepted as new (the holder rolled back)")
	}
	if err := srv.wait(t); err != nil {
		t.Fatalf("run returned %v, want nil after a graceful shutdown", err)
	}

	var stored string
	if err := pool.QueryRow(ctx, `SELECT e.id::text FROM processed_messages p
		JOIN webhook_events e ON e.sender = p.sender AND e.id = p.event_id
		WHERE p.sender = 'acme' AND p.delivery_id = $1`, id).Scan(&stored); err != nil {
		t.Fatalf("read the stored delivery: %v", err)
	}
	if stored != a.EventID {
		t.Errorf("stored event %s, answered %s", stored, a.EventID)
	}
}
