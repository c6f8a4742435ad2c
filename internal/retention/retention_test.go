package retention_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/queue"
	"github.com/hookgate/hookgate/internal/retention"
	"github.com/hookgate/hookgate/internal/sigtoken"
	"github.com/hookgate/hookgate/internal/store"
	"github.com/hookgate/hookgate/internal/testing/pgtest"
	"github.com/hookgate/hookgate/internal/testing/queuetest"
	"github.com/hookgate/hookgate/internal/testing/storetest"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(pgtest.M(m)) }

// seed inserts n keys of sender expiring at expires, and n events received
// at received.
func seed(t *testing.T, pool *pgxpool.Pool, sender, prefix string, n int, expires, received time.Time) {
	t.Helper()
	if _, err := storetest.InsertGenerated(t.Context(), pool, storetest.Generated{Sender: sender, Prefix: prefix, N: n, Newest: received,
		ExpiresAt: expires, Status: 202, Keys: true, Events: true}); err != nil {
		t.Fatal(err)
	}
}

func count(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(t.Context(), sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Run deletes every expired key and every event past its sender's event
// retention, over several batches, and nothing else.
func TestRunDeletesExpiredInBatches(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDB(t)
	cfg := testkit.ParseConfig(t, `
senders:
  - name: a
    preset: generic
    delivery_id: { header: X-Id }
    retention: 24h
  - name: b
    preset: generic
    delivery_id: { header: X-Id }
    retention: 24h
    event_retention: 1h
`)
	now := time.Now()
	expired := retention.BatchSize*2 + 17 // more than one batch
	seed(t, pool, "a", "old-", expired, now.Add(-time.Minute), now.Add(-25*time.Hour))
	seed(t, pool, "a", "new-", 10, now.Add(time.Hour), now.Add(-time.Hour))
	seed(t, pool, "b", "old-", 5, now.Add(time.Hour), now.Add(-2*time.Hour)) // key live, event past b's 1h
	seed(t, pool, "b", "new-", 3, now.Add(time.Hour), now.Add(-time.Minute))

	res, err := retention.Run(t.Context(), pool, newJobs(pool), cfg, now)
	if err != nil {
		t.Fatal(err)
	}
	if res.Keys != int64(expired) {
		t.Errorf("deleted %d keys, want %d", res.Keys, expired)
	}
	if want := int64(expired + 5); res.Events != want {
		t.Errorf("deleted %d events, want %d", res.Events, want)
	}
	if n := count(t, pool, `SELECT count(*) FROM processed_messages WHERE expires_at <= $1`, now); n != 0 {
		t.Errorf("%d expired keys left", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM processed_messages`); n != 10+5+3 {
		t.Errorf("%d keys left, want the 18 live ones", n)
	}
	for sender, want := range map[string]int{"a": 10, "b": 3} {
		if n := count(t, pool, `SELECT count(*) FROM webhook_events WHERE sender = $1`, sender); n != want {
			t.Errorf("sender %s: %d events left, want %d", sender, n, want)
		}
	}

	// A second run finds nothing.
	res, err = retention.Run(t.Context(), pool, newJobs(pool), cfg, now)
	if err != nil || res != (retention.Result{}) {
		t.Errorf("second run: %+v, %v; want nothing deleted", res, err)
	}
}

// The worker does the same as Run, as the queue's maintenance job calls it
// (Maintenance().Run), and logs what it deleted.
func TestWorkerDeletesExpired(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDB(t)
	cfg := testkit.ParseConfig(t, "senders:\n  - name: a\n    preset: generic\n    delivery_id: { header: X-Id }\n")
	seed(t, pool, "a", "x-", 3, time.Now().Add(-time.Second), time.Now().Add(-8*24*time.Hour))
	rc, logged := workerConfig(pool, cfg)
	runWorker(t, rc)
	if k, e := count(t, pool, `SELECT count(*) FROM processed_messages`), count(t, pool, `SELECT count(*) FROM webhook_events`); k != 0 || e != 0 {
		t.Errorf("after the job: %d keys, %d events; want none", k, e)
	}
	if !strings.Contains(logged.String(), "keys_deleted=3 events_deleted=3") {
		t.Errorf("logged %q, want what the run deleted", logged.String())
	}
}

// TestWorkerLooksForRemovedSendersRarely: a run finds the senders it deletes
// for in the configuration; it reads every sender's rows for those no
// longer configured (on Citus, a read of every shard) in a process's first
// run and then only every retention.StrayEvery. The first run deletes the
// expired keys and old events of a removed sender too; a later run within
// StrayEvery deletes the configured sender's and leaves the removed one's
// for the next look.
func TestWorkerLooksForRemovedSendersRarely(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDB(t)
	cfg := testkit.ParseConfig(t, "senders:\n  - name: a\n    preset: generic\n    delivery_id: { header: X-Id }\n")
	rc := retention.DefaultConfig()
	rc.DB, rc.Forwards, rc.Senders, rc.Log = pool, newJobs(pool), cfg, slog.New(slog.DiscardHandler)
	w, err := retention.NewWorker(rc)
	if err != nil {
		t.Fatal(err)
	}
	expired, old := time.Now().Add(-time.Second), time.Now().Add(-400*24*time.Hour)
	keys := func(sender string) int {
		return count(t, pool, `SELECT count(*) FROM processed_messages WHERE sender = $1`, sender)
	}
	for round, wantRemoved := range []int{0, 3} {
		seed(t, pool, "a", fmt.Sprintf("r%d-", round), 3, expired, old)
		seed(t, pool, "removed", fmt.Sprintf("r%d-", round), 3, expired, old)
		if err := w.Work(t.Context()); err != nil {
			t.Fatal(err)
		}
		if got := keys("a"); got != 0 {
			t.Errorf("run %d: %d expired keys of the configured sender left, want none", round+1, got)
		}
		if got := keys("removed"); got != wantRemoved {
			t.Errorf("run %d: %d expired keys of the removed sender left, want %d", round+1, got, wantRemoved)
		}
	}
}

// TestRunDeletesEventsOfRemovedSenders: the events of a sender no longer in
// the configuration are deleted too, once older than the default retention
// (their keys expire as before); its recent events, and the configured
// senders' events, stay.
func TestRunDeletesEventsOfRemovedSenders(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDB(t)
	cfg := testkit.ParseConfig(t, "senders:\n  - name: kept\n    preset: generic\n    delivery_id: { header: X-Id }\n    event_retention: 720h\n")
	now := time.Now()
	old := now.Add(-config.DefaultRetention - time.Hour)
	seed(t, pool, "gone", "old-", retention.BatchSize+3, now.Add(-time.Minute), old) // more than one batch
	seed(t, pool, "gone", "new-", 4, now.Add(time.Hour), now.Add(-time.Hour))
	seed(t, pool, "kept", "old-", 2, now.Add(time.Hour), old) // within kept's 30 days

	res, err := retention.Run(t.Context(), pool, newJobs(pool), cfg, now)
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(retention.BatchSize + 3); res.Events != want {
		t.Errorf("deleted %d events, want %d (the removed sender's old ones)", res.Events, want)
	}
	for sender, want := range map[string]int{"gone": 4, "kept": 2} {
		if n := count(t, pool, `SELECT count(*) FROM webhook_events WHERE sender = $1`, sender); n != want {
			t.Errorf("sender %s: %d events left, want %d", sender, n, want)
		}
	}
}

// TestRunDeletesOldDeliveredForwards: the fast path's delivered forwards
// are deleted once older than the longest sender retention (as River
// deletes its finished jobs), and the recent ones stay.
func TestRunDeletesOldDeliveredForwards(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDB(t)
	cfg := testkit.ParseConfig(t, "senders:\n  - name: a\n    preset: generic\n    delivery_id: { header: X-Id }\n    retention: 24h\n  - name: b\n    preset: generic\n    delivery_id: { header: X-Id }\n    retention: 48h\n")
	now := time.Now().UTC()
	q := store.New(pool)
	var batch []queue.FirstAttempt
	for i, at := range []time.Time{now.Add(-72 * time.Hour), now.Add(-49 * time.Hour), now.Add(-47 * time.Hour), now.Add(-time.Minute)} {
		r := storetest.Outbox{Sender: "a", Target: "t", EventID: uuid.New(), DeliveryID: fmt.Sprint("d-", i)}
		if err := storetest.InsertOutbox(t.Context(), q.DB(), r, at); err != nil {
			t.Fatal(err)
		}
		batch = append(batch, queue.FirstAttempt{Sender: "a", EventID: r.EventID, Target: "t", State: queue.StateDelivered,
			MaxAttempts: 5, AttemptedAt: at, FinalizedAt: &at, ScheduledAt: at, Output: queue.Output{Status: 200, DeliveredAt: at}})
	}
	if err := newJobs(q.DB()).RecordFirstAttempts(t.Context(), "q", batch); err != nil {
		t.Fatal(err)
	}
	res, err := retention.Run(t.Context(), pool, newJobs(pool), cfg, now)
	if err != nil {
		t.Fatal(err)
	}
	if res.Forwards != 2 {
		t.Errorf("deleted %d delivered forwards, want the 2 older than 48h", res.Forwards)
	}
	left, err := queuetest.New(pool).ForwardJobs(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	kept := map[string]bool{}
	for _, f := range left {
		kept[f.DeliveryID] = true
	}
	if len(left) != 2 || !kept["d-2"] || !kept["d-3"] {
		t.Errorf("left %+v, want d-2 and d-3", left)
	}
}

// TestRunDeletesExpiredSignatureTokens: the single-use signature tokens
// whose timestamps are past their sender's tolerance (plus the clock
// margin) are deleted, over several batches, and all the tokens of a
// sender no longer configured; those the signature check may still accept
// stay, whatever tolerance they were claimed under.
func TestRunDeletesExpiredSignatureTokens(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDB(t)
	cfg := testkit.ParseConfig(t, "senders:\n  - name: mg\n    preset: mailgun\n    secret: k-0123456789abcdef\n    tolerance: 10m\n")
	now := time.Now()
	tokens := sigtoken.New(pool)
	claim := func(sender string, i int, signed time.Time) {
		if ok, err := tokens.Claim(t.Context(), sigtoken.Use{Sender: sender, Token: fmt.Sprint("tok-", i), SignedAt: signed, DeliveryID: fmt.Sprint("d-", i)}); err != nil || !ok {
			t.Fatalf("claim: %t, %v", ok, err)
		}
	}
	old := retention.BatchSize + 9 // more than one batch
	for i := range old {
		claim("mg", i, now.Add(-10*time.Minute-sigtoken.ClockMargin-time.Second))
	}
	for i := range 4 {
		claim("mg", old+i, now.Add(-10*time.Minute+time.Second)) // within mg's 10 minutes
		claim("gone", i, now.Add(time.Minute))
	}
	res, err := retention.Run(t.Context(), pool, newJobs(pool), cfg, now)
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(old + 4); res.Tokens != want {
		t.Errorf("deleted %d signature tokens, want %d", res.Tokens, want)
	}
	if n := count(t, pool, `SELECT count(*) FROM signature_tokens WHERE sender = 'mg'`); n != 4 {
		t.Errorf("%d signature tokens left, want mg's 4 recent ones", n)
	}
	if res, err := retention.Run(t.Context(), pool, newJobs(pool), cfg, now); err != nil || res != (retention.Result{}) {
		t.Errorf("second run: %+v, %v; want nothing deleted", res, err)
	}
}

// The audit trail keeps its rows for the configured audit retention: the
// worker deletes older ones, and keeps the others.
func TestWorkerDeletesOldAuditRows(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDB(t)
	cfg := testkit.ParseConfig(t, "senders:\n  - name: a\n    preset: generic\n    delivery_id: { header: X-Id }\n")
	q := store.New(pool)
	now := time.Now()
	for i, age := range []time.Duration{91 * 24 * time.Hour, 90*24*time.Hour + time.Minute, 89 * 24 * time.Hour, time.Hour} {
		if err := q.RecordAudit(t.Context(), store.AuditEntry{At: now.Add(-age), Token: "admin", Action: store.ActionPause,
			Target: fmt.Sprint("t", i), Outcome: store.OutcomeOK}); err != nil {
			t.Fatal(err)
		}
	}
	rc, logged := workerConfig(pool, cfg)
	runWorker(t, rc)
	if n := count(t, pool, `SELECT count(*) FROM audit_log WHERE target IN ('t2', 't3')`); n != 2 {
		t.Errorf("%d of the rows younger than 90 days are left, want 2", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM audit_log`); n != 2 {
		t.Errorf("%d audit rows are left, want the 2 younger than 90 days", n)
	}
	if !strings.Contains(logged.String(), "audit_rows_deleted=2") {
		t.Errorf("logged %q, want the audit rows deleted", logged.String())
	}

	// A shorter retention deletes more.
	rc.AuditRetention = 30 * time.Minute
	runWorker(t, rc)
	if n := count(t, pool, `SELECT count(*) FROM audit_log`); n != 0 {
		t.Errorf("%d audit rows are left with a 30m retention, want none", n)
	}
	rc.AuditRetention = 0
	if _, err := retention.NewWorker(rc); err == nil {
		t.Error("NewWorker takes an audit retention of 0")
	}
}

// workerConfig returns the retention job's default configuration on pool
// and cfg, logging to the buffer it returns.
func workerConfig(pool *pgxpool.Pool, cfg *config.Config) (retention.Config, *bytes.Buffer) {
	rc := retention.DefaultConfig()
	var logged bytes.Buffer
	rc.DB, rc.Forwards, rc.Senders, rc.Log = pool, newJobs(pool), cfg, slog.New(slog.NewTextHandler(&logged, nil))
	return rc, &logged
}

// runWorker runs the retention job of rc once.
func runWorker(t *testing.T, rc retention.Config) {
	t.Helper()
	w, err := retention.NewWorker(rc)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Maintenance().Run(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestRunDeletesAttemptsWithTheirEvent: the attempts of an event's
// forwards are deleted with the event; those of a kept event stay. So is
// the attempt a delivered forward's row keeps (the fast path's first),
// when the row outlives the event: the row stays, its attempt goes.
func TestRunDeletesAttemptsWithTheirEvent(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDB(t)
	cfg := testkit.ParseConfig(t, "senders:\n  - name: a\n    preset: generic\n    delivery_id: { header: X-Id }\n    event_retention: 24h\n")
	now := time.Now()
	seed(t, pool, "a", "old-", 2, now.Add(time.Hour), now.Add(-48*time.Hour))
	seed(t, pool, "a", "new-", 1, now.Add(time.Hour), now.Add(-time.Hour))
	q := store.New(pool)
	var oldIDs, newIDs []uuid.UUID
	rows, err := pool.Query(t.Context(), `SELECT id, received_at < $1 FROM webhook_events WHERE sender = 'a'`, now.Add(-24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id uuid.UUID
		var old bool
		if err := rows.Scan(&id, &old); err != nil {
			t.Fatal(err)
		}
		if old {
			oldIDs = append(oldIDs, id)
		} else {
			newIDs = append(newIDs, id)
		}
	}
	rows.Close()
	for _, id := range append(append([]uuid.UUID(nil), oldIDs...), newIDs...) {
		for i := range 2 {
			a := store.Attempt{Sender: "a", EventID: id, Target: "t", StartedAt: now.Add(time.Duration(i) * time.Second), Outcome: "retry",
				Cause: store.CauseFirst, Attempt: i + 1, Status: 500, Body: []byte("boom")}
			if err := q.RecordAttempt(t.Context(), a, 20); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Each event's forward to u, delivered at its first attempt by the
	// fast path, with the target's answer.
	var batch []queue.FirstAttempt
	for _, id := range append(append([]uuid.UUID(nil), oldIDs...), newIDs...) {
		at := now.Add(-time.Hour).UTC().Truncate(time.Microsecond)
		if err := storetest.InsertOutbox(t.Context(), q.DB(), storetest.Outbox{Sender: "a", Target: "u", EventID: id, DeliveryID: id.String()}, at); err != nil {
			t.Fatal(err)
		}
		batch = append(batch, queue.FirstAttempt{Sender: "a", EventID: id, Target: "u", State: queue.StateDelivered, New: true,
			MaxAttempts: 5, AttemptedAt: at, FinalizedAt: &at, ScheduledAt: at, Output: queue.Output{Status: 200, DeliveredAt: at},
			Answer: store.Attempt{Sender: "a", EventID: id, Target: "u", StartedAt: at, Took: time.Millisecond, Outcome: "delivered",
				Cause: store.CauseFirst, Attempt: 1, Status: 200, Header: map[string][]string{"X-Echo": {"e"}}, Body: []byte("echo")}})
	}
	if err := newJobs(q.DB()).RecordFirstAttempts(t.Context(), "q", batch); err != nil {
		t.Fatal(err)
	}
	attemptsOf := func(id uuid.UUID) []store.Attempt {
		as, err := q.EventAttempts(t.Context(), "a", id)
		if err != nil {
			t.Fatal(err)
		}
		return as
	}
	if as := attemptsOf(oldIDs[0]); len(as) != 3 {
		t.Fatalf("attempts of an old event before retention: %+v, want 3", as)
	}
	res, err := retention.Run(t.Context(), pool, newJobs(pool), cfg, now)
	if err != nil {
		t.Fatal(err)
	}
	if res.Events != 2 {
		t.Errorf("deleted %d events, want 2", res.Events)
	}
	for _, id := range oldIDs {
		if as := attemptsOf(id); len(as) != 0 {
			t.Errorf("attempts of the deleted event %s: %+v, want none", id, as)
		}
	}
	if as := attemptsOf(newIDs[0]); len(as) != 3 {
		t.Errorf("attempts of the kept event: %+v, want 3", as)
	}
	idTexts := make([]string, 0, len(oldIDs))
	for _, id := range oldIDs {
		idTexts = append(idTexts, id.String())
	}
	// PostgreSQL's recording keeps a delivered forward's attempt in its
	// forward_delivered row; the split form (Citus) in forward_attempts.
	folded := !pgtest.Citus()
	if folded {
		if n := count(t, pool, `SELECT count(*) FROM forward_delivered WHERE event_id = ANY($1) AND took_us IS NULL AND headers IS NULL AND body IS NULL`, idTexts); n != len(oldIDs) {
			t.Errorf("%d delivered forwards of the deleted events kept without their attempt, want %d", n, len(oldIDs))
		}
	}
	if n := count(t, pool, `SELECT count(*) FROM forward_attempts WHERE event_id = ANY($1)`, oldIDs); n != 0 {
		t.Errorf("%d attempts of the deleted events left, want none", n)
	}
	if n, want := count(t, pool, `SELECT count(*) FROM forward_attempts WHERE event_id = ANY($1)`, newIDs), map[bool]int{true: 2, false: 3}[folded]; n != want {
		t.Errorf("%d attempts of the kept event left, want %d", n, want)
	}
}

// TestRunDeletesIdleOrderingKeys: an ordered target's keys with nothing
// waiting and unchanged for IdleOrderKeyKept are deleted, over several
// batches; a key with forwards waiting, a blocked key and a key used
// recently stay.
func TestRunDeletesIdleOrderingKeys(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDB(t)
	cfg := testkit.ParseConfig(t, "senders:\n  - name: a\n    preset: generic\n    delivery_id: { header: X-Id }\n")
	now := time.Now().UTC()
	old := now.Add(-retention.IdleOrderKeyKept - time.Minute)
	const idle = retention.BatchSize + 500
	// Citus commits this INSERT … SELECT, which reads no distributed
	// table, in two phases: the test's set-up, not hookgate's.
	var err error
	pgtest.TwoPhaseFixture(pool, func() {
		_, err = pool.Exec(t.Context(), `INSERT INTO forward_keys (sender, target, order_key, last_seq, head_seq, updated_at)
SELECT 'a', 't', 'idle-' || i, 5, 6, $1 FROM generate_series(1, $2) i`, old, idle)
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(t.Context(), `INSERT INTO forward_keys (sender, target, order_key, last_seq, head_seq, blocked_event, blocked_at, updated_at) VALUES
('a', 't', 'waiting', 5, 3, NULL, NULL, $1), ('a', 't', 'blocked', 5, 5, gen_random_uuid(), $1, $1), ('a', 't', 'recent', 5, 6, NULL, NULL, $2)`,
		old, now.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	res, err := retention.Run(t.Context(), pool, newJobs(pool), cfg, now)
	if err != nil {
		t.Fatal(err)
	}
	if res.OrderKeys != idle {
		t.Errorf("deleted %d ordering keys, want the %d idle for over %s", res.OrderKeys, idle, retention.IdleOrderKeyKept)
	}
	var left []string
	rows, err := pool.Query(t.Context(), `SELECT order_key FROM forward_keys ORDER BY order_key`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		left = append(left, k)
	}
	if fmt.Sprint(left) != "[blocked recent waiting]" {
		t.Errorf("keys left %v, want [blocked recent waiting]", left)
	}
}

// newJobs returns the queue's statements on db as serve runs them: in the
// split form on Citus (queue.Jobs.Distributed).
func newJobs(db store.DB) *queue.Jobs {
	j := queue.NewJobs(db)
	if pgtest.Citus() {
		j = j.Distributed()
	}
	return j
}
