package queue

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/testing/pgtest"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// TestRecordingWithBothEndsTakesKeysInOrder: one recording of the fast
// path may end a delivered ordered forward (its key's head moves on) and
// one that failed for good (its key is held), in two statements. It locks
// the keys of both in the order of every other writer of forward_keys
// (target, then key) before either statement: here key b's forward was
// delivered and key a's failed. While another transaction holds key a, as
// an ingest of both keys' next events does, the recording waits for a
// holding nothing, so that transaction takes b at once. Statement by
// statement, the recording would hold b and wait for a, and PostgreSQL
// would abort one of the two as a deadlock.
func TestRecordingWithBothEndsTakesKeysInOrder(t *testing.T) {
	t.Parallel()
	forEachRecordingForm(t, testRecordingWithBothEndsTakesKeysInOrder)
}

func testRecordingWithBothEndsTakesKeysInOrder(t *testing.T, s *fixture, pool *pgxpool.Pool) {
	ctx := t.Context()
	at := time.Now().UTC().Truncate(time.Microsecond)
	ea, eb := uuid.New(), uuid.New()
	if _, err := pool.Exec(ctx, `INSERT INTO forward_keys (sender, target, order_key, last_seq, head_seq, updated_at)
VALUES ('acme', 't', 'a', 1, 1, now()), ('acme', 't', 'b', 1, 1, now())`); err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct {
		event uuid.UUID
		key   string
	}{{ea, "a"}, {eb, "b"}} {
		if _, err := pool.Exec(ctx, `INSERT INTO forward_outbox (sender, event_id, target, delivery_id, created_at, leased_until, order_key, seq)
VALUES ('acme', $1, 't', $2, $3, $3::timestamptz + interval '1 minute', $2, 1)`, r.event, r.key, at); err != nil {
			t.Fatal(err)
		}
	}
	var deadlocks int64
	if err := pool.QueryRow(ctx, pgtest.DeadlocksSQL()).Scan(&deadlocks); err != nil {
		t.Fatal(err)
	}

	holder, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback(context.Background()) }()
	hold := func(key string) error {
		_, err := holder.Exec(ctx, `UPDATE forward_keys SET updated_at = updated_at WHERE sender = 'acme' AND target = 't' AND order_key = $1`, key)
		return err
	}
	if _, err := holder.Exec(ctx, `SET LOCAL lock_timeout = '30s'`); err != nil {
		t.Fatal(err)
	}
	if err := hold("a"); err != nil {
		t.Fatal(err)
	}

	batch := []FirstAttempt{
		{Sender: "acme", EventID: eb, Target: "t", State: StateDelivered, MaxAttempts: 5, AttemptedAt: at, FinalizedAt: &at, ScheduledAt: at,
			Output: Output{Status: 204, DeliveredAt: at}, OrderKey: "b", Seq: 1},
		{Sender: "acme", EventID: ea, Target: "t", State: StateFailed, FailedAtOnce: true, MaxAttempts: 5, AttemptedAt: at, FinalizedAt: &at, ScheduledAt: at,
			Error: "target answered 400", Output: Output{Status: 400}, OrderKey: "a", Seq: 1, OnFailure: "hold"},
	}
	done := make(chan error, 1)
	go func() { done <- s.RecordFirstAttempts(context.Background(), "q", batch) }()
	testkit.Poll(t, time.Minute, "the recording waiting for key a", func() bool {
		var n int
		return pool.QueryRow(ctx, pgtest.LockWaitersSQL()).Scan(&n) == nil && n > 0
	})
	if err := hold("b"); err != nil {
		t.Errorf("key b, after key a, while the recording waits: %v", err)
	}
	if err := holder.Commit(ctx); err != nil {
		t.Errorf("commit: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("recording: %v", err)
	}

	keys := map[string]string{}
	rows, err := pool.Query(ctx, `SELECT order_key, head_seq || ' ' || coalesce(blocked_event::text, '-') FROM forward_keys WHERE sender = 'acme' AND target = 't'`) //nolint:rowserrcheck // pgx.ForEachRow checks rows.Err
	if err != nil {
		t.Fatal(err)
	}
	var k, v string
	if _, err := pgx.ForEachRow(rows, []any{&k, &v}, func() error { keys[k] = v; return nil }); err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"a": "1 " + ea.String(), "b": "2 -"}; keys["a"] != want["a"] || keys["b"] != want["b"] {
		t.Errorf("keys (head, blocked by) %v, want %v: b moved past its delivered forward, a held by its failed one", keys, want)
	}
	var after int64
	if err := pool.QueryRow(ctx, pgtest.DeadlocksSQL()).Scan(&after); err != nil {
		t.Fatal(err)
	}
	if after != deadlocks {
		t.Errorf("%d deadlocks, want none", after-deadlocks)
	}
}
