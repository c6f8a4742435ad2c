package queue

// The plans of the statements that run per batch or per job on the queue
// tables (forward_outbox, forward_delivered, River's river_job), when the
// statistics lie: after a crash PostgreSQL's activity counters are reset,
// autovacuum does not ANALYZE for a long time, and the planner may believe
// that a table of 25,000 rows holds 1 (or, after a bulk delete, that one
// of 1,000 holds 25,000). These tests are in package queue so that they can
// EXPLAIN the statements' own SQL with their own planner settings; the SQL
// they run themselves (filling the tables, ANALYZE, pg_stat_reset, EXPLAIN)
// is what they examine: the statistics and the plans.

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/idempotency"
	"github.com/hookgate/hookgate/internal/sigtoken"
	"github.com/hookgate/hookgate/internal/store"
	"github.com/hookgate/hookgate/internal/testing/pgtest"
	"github.com/hookgate/hookgate/internal/testing/queuetest"
	"github.com/hookgate/hookgate/internal/testing/storetest"
)

// planRows is how many rows the tests put in each queue table.
const planRows = 25000

// planBatch is the relay's batch (forward.DefaultRelayBatch) and the most a
// recording holds (the fast path's batches, up to 500).
const planBatch = 500

// planQueue is the forward jobs' River queue (ForwardQueue).
const planQueue = "forward"

// lyingStats makes the statistics of the queue tables lie, in a database
// of its own, and returns its pool. grown: ANALYZE sees about one row per
// table, then planRows rows arrive; shrunk: ANALYZE sees planRows rows, then
// nearly all are deleted (kept: keptOutbox outbox rows, a tenth of the
// jobs and delivered forwards). Either way the activity counters are then
// reset (pg_stat_reset, as a crash resets them), so that autovacuum does
// not ANALYZE again while the test runs.
func lyingStats(t *testing.T, grown bool) *pgxpool.Pool {
	t.Helper()
	pool, _ := pgtest.NewDB(t)
	ctx := t.Context()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	const analyze = `ANALYZE forward_outbox, forward_delivered, river_job, webhook_events, forward_keys, processed_messages, signature_tokens`
	if grown {
		exec(`INSERT INTO processed_messages (sender, delivery_id, request_sha256, event_id, response_status, response_content_type, response_body, created_at, expires_at)
VALUES ('seed', 'seed', '\x00', gen_random_uuid(), 202, 'application/json', '', now(), now() + interval '1 day')`)
		exec(`INSERT INTO forward_keys (sender, target, order_key, last_seq, head_seq, updated_at) VALUES ('seed', 't', 'k', 1, 1, now())`)
		exec(`INSERT INTO signature_tokens (sender, token_sha256, delivery_id, request_sha256, signed_at) VALUES ('seed', '\x00', 'seed', '\x00', now())`)
		exec(`INSERT INTO forward_outbox (sender, event_id, target, delivery_id, created_at) VALUES ('seed', gen_random_uuid(), 't', 'seed', now())`)
		exec(`INSERT INTO river_job (kind, args, queue, state) VALUES ('`+ForwardKind+`', '{"sender": "seed", "target": "t", "event_id": "x", "delivery_id": "seed"}', $1, 'available')`, planQueue)
		exec(`INSERT INTO forward_delivered (sender, event_id, target, delivery_id, created_at, attempted_at, delivered_at, status, max_attempts)
VALUES ('seed', 'x', 't', 'seed', now(), now(), now(), 200, 5)`)
		exec(`INSERT INTO webhook_events (sender, id, delivery_id, received_at, headers, body) VALUES ('seed', gen_random_uuid(), 'seed', now(), '{}', '')`)
		exec(analyze)
	}
	// acme's outbox rows, oldest event first (event IDs are UUIDv7: their
	// order is their time's), none leased; its jobs: one per event, most
	// delivered, every 100th snoozed behind a breaker (scheduled in an hour),
	// every 100th from the 50th on waiting (available), from the 25th on a
	// redelivery queued after another forward (available, with "after"),
	// from the 75th on failed (discarded); its delivered forwards, the older
	// half of them delivered 30 days ago.
	exec(`INSERT INTO forward_outbox (sender, event_id, target, delivery_id, created_at)
SELECT 'acme', `+v7SQL+`, 't', 'd' || g, now() FROM generate_series(1, $1) g`, planRows)
	exec(`INSERT INTO river_job (kind, args, queue, state, scheduled_at, finalized_at, attempt, max_attempts, attempted_by)
SELECT '`+ForwardKind+`', jsonb_build_object('sender', 'acme', 'target', 't', 'event_id', `+v7SQL+`::text, 'delivery_id', 'd' || g)
    || CASE WHEN g % 100 = 25 THEN jsonb_build_object('after', 1) ELSE '{}' END, $2, s,
  CASE WHEN s = 'scheduled' THEN now() + interval '1 hour' ELSE now() END, CASE WHEN s IN ('completed', 'discarded') THEN now() END, 1, 5,
  CASE WHEN s = 'running' THEN ARRAY['hookgate:gone'] END
FROM generate_series(1, $1) g,
  LATERAL (SELECT (CASE WHEN g % 100 = 0 THEN 'scheduled' WHEN g % 100 IN (25, 50) THEN 'available' WHEN g % 100 = 75 THEN 'discarded'
    WHEN g % 100 = 60 THEN 'running' ELSE 'completed' END)::river_job_state AS s) x`, planRows, planQueue)
	exec(`INSERT INTO forward_delivered (sender, event_id, target, delivery_id, created_at, attempted_at, delivered_at, status, max_attempts)
SELECT 'acme', `+v7SQL+`::text, 't', 'd' || g, now(), now(), now() - CASE WHEN g <= $1 / 2 THEN interval '30 days' ELSE interval '1 minute' END, 200, 5
FROM generate_series(1, $1) g`, planRows)
	if _, err := storetest.InsertGenerated(ctx, conn, storetest.Generated{Sender: "acme", Prefix: "d", N: planRows, Newest: time.Now(), Events: true}); err != nil {
		t.Fatal(err)
	}
	if !grown {
		exec(analyze)
		exec(`DELETE FROM forward_outbox WHERE sender = 'acme' AND delivery_id NOT IN (SELECT 'd' || g FROM generate_series($1::int, $2::int) g)`, planRows-keptOutbox+1, planRows)
		exec(`DELETE FROM river_job WHERE (args->>'delivery_id') NOT LIKE '%0' AND (args->>'delivery_id') NOT LIKE '%5'`)
		exec(`DELETE FROM forward_delivered WHERE delivery_id NOT LIKE '%0'`)
	}
	// This session's counts reach the shared statistics before the reset,
	// not after it (they would make autovacuum ANALYZE within a minute).
	exec(`SELECT pg_stat_force_next_flush()`)
	exec(`SELECT 1`)
	exec(`SELECT pg_stat_reset()`)
	return pool
}

// keptOutbox is how many outbox rows the shrunk tables keep: more than a
// batch, the newest ones (the deleted ones were taken first, as the relay
// takes them).
const keptOutbox = 1200

// v7SQL is the event ID of the fixtures' row g: like a UUIDv7, it grows
// with g (PostgreSQL 15 has no uuidv7()).
const v7SQL = `(lpad(to_hex(g), 12, '0') || '70008000' || substr(md5(g::text), 1, 12))::uuid`

// planConn, explainAs and planCacheModes are pgtest's (PlanConn,
// ExplainAnalyze, PlanCacheModes).
var (
	planConn       = pgtest.PlanConn
	explainAs      = pgtest.ExplainAnalyze
	planCacheModes = pgtest.PlanCacheModes
)

// checkPlans explains sql with args in both plan cache modes (see
// explainAs) and fails the test on every problem pgtest.PlanProblems finds
// for a statement that should touch about batch rows: JIT compilation; a
// scan that visits (rows returned + rows removed by its filters) × its
// loops more than 3 × batch + 100 rows; a scan run more than once (a
// nested loop's inner side, a subplan) that is not a probe (of an index,
// or by ctid) visiting at most 2 rows per loop.
func checkPlans(t *testing.T, conn *pgx.Conn, batch int, settings, sql string, args ...any) {
	t.Helper()
	limit := float64(3*batch + 100)
	checkPlansWithin(t, conn, pgtest.PlanLimits{MaxVisited: func(string) float64 { return limit }}, settings, sql, args...)
}

// checkPlansWithin is checkPlans with limits of its own per table.
func checkPlansWithin(t *testing.T, conn *pgx.Conn, limits pgtest.PlanLimits, settings, sql string, args ...any) {
	t.Helper()
	for _, mode := range planCacheModes {
		ex := explainAs(t, conn, settings, mode, sql, args...)
		if p := pgtest.PlanProblems(ex, limits); len(p) > 0 {
			t.Errorf("%s: %s\n%s", mode, strings.Join(p, "; "), ex.Text)
		}
		t.Logf("%s (%.2f ms): %s", mode, ex.Time, ex.Plan.Shape())
		if os.Getenv("HOOKGATE_PLAN_AUDIT") != "" {
			auditPlan(t, conn, ex, settings, mode, sql, args...)
		}
	}
}

// auditPlan, with HOOKGATE_PLAN_AUDIT set, explains sql again once per
// index that ex's plan reads, with that index dropped in the explain's
// rolled-back transaction, and logs each plan left that has no disabled
// node: one that other statistics could make the cheapest. It fails
// nothing (a plan left may be as good); it is a tool for finding the
// statements that only their statistics keep on the right index. The
// plans left are not run (some would outlast the statement timeout), and
// an index that the statement names as its ON CONFLICT arbiter is kept.
func auditPlan(t *testing.T, conn *pgx.Conn, ex pgtest.Explained, settings, mode, sql string, args ...any) {
	t.Helper()
	seen := map[string]bool{}
	ex.Plan.Walk(func(n pgtest.PlanNode) {
		if n.Index == "" || seen[n.Index] || strings.Contains(sql, "ON CONSTRAINT "+n.Index) {
			return
		}
		seen[n.Index] = true
		alt := pgtest.ExplainPlan(t, conn, dropIndex(t, conn, n.Index)+"; "+settings, mode, sql, args...)
		if !alt.Plan.Disabled() {
			t.Logf("AUDIT %s without %s: not disabled: %s\n  SQL: %.200s", mode, n.Index, alt.Plan.Shape(), sql)
		}
	})
}

// checkIndexNeeded explains sql with args under settings in both plan
// cache modes, with index and with index dropped in the explain's
// rolled-back transaction, and fails the test unless every plan left
// without it has more disabled paths than the plan with it: no statistics
// can then make a plan without it the cheapest. With none, the plan with
// it must have no disabled path at all.
func checkIndexNeeded(t *testing.T, conn *pgx.Conn, none bool, index, settings, sql string, args ...any) {
	t.Helper()
	for _, mode := range planCacheModes {
		with := pgtest.ExplainPlan(t, conn, settings, mode, sql, args...)
		if none && with.Plan.Disabled() {
			t.Errorf("%s: the plan has a disabled path: %s\n%.80s", mode, with.Plan.Shape(), sql)
		}
		without := pgtest.ExplainPlan(t, conn, dropIndex(t, conn, index)+"; "+settings, mode, sql, args...)
		if n, m := with.Plan.DisabledNodes(), without.Plan.DisabledNodes(); m <= n {
			t.Errorf("%s: without %s, a plan with %d disabled paths is left, as few as with it (%d): %s\n%.80s", mode, index, m, n, without.Plan.Shape(), sql)
		}
	}
}

// dropIndex returns the statement that drops index: its constraint's, for
// the index of a primary key or a unique constraint.
func dropIndex(t *testing.T, conn *pgx.Conn, index string) string {
	t.Helper()
	var drop string
	if err := conn.QueryRow(t.Context(), `SELECT coalesce((SELECT format('ALTER TABLE %s DROP CONSTRAINT %I CASCADE', conrelid::regclass, conname) FROM pg_constraint WHERE conindid = $1::regclass AND contype IN ('p','u') LIMIT 1), format('DROP INDEX %s', $1::regclass))`, index).Scan(&drop); err != nil {
		t.Fatalf("drop %s: %v", index, err)
	}
	return drop
}

// deleteAfter runs the DELETEs stmts on conn, a subtest's cleanup of
// the rows it added to the shared fixture.
func deleteAfter(t *testing.T, conn *pgx.Conn, stmts ...string) {
	t.Helper()
	for _, sql := range stmts {
		if _, err := conn.Exec(context.WithoutCancel(t.Context()), sql); err != nil {
			t.Error(err)
		}
	}
}

// withPlanModes runs f on conn once per plan cache mode, the session's
// default (auto: custom plans, then the generic plan from the sixth
// execution on) included: f runs the statement through its function, as
// hookgate does.
func withPlanModes(t *testing.T, conn *pgx.Conn, runs int, f func(mode string, run int)) {
	t.Helper()
	for _, mode := range []string{"auto", "force_generic_plan", "force_custom_plan"} {
		if _, err := conn.Exec(t.Context(), `SET plan_cache_mode = `+mode); err != nil {
			t.Fatal(err)
		}
		for run := range runs {
			f(mode, run)
		}
	}
	if _, err := conn.Exec(t.Context(), `RESET plan_cache_mode`); err != nil {
		t.Fatal(err)
	}
}

// inRolledBack runs f in a transaction on conn that is rolled back.
func inRolledBack(t *testing.T, conn *pgx.Conn, f func(tx pgx.Tx)) {
	t.Helper()
	tx, err := conn.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(t.Context())) }()
	f(tx)
}

// outboxKeys returns n outbox rows of sender, oldest event first (read
// with SQL of its own: the statements examined get them as arguments).
func outboxKeys(t *testing.T, conn *pgx.Conn, sender string, n int) []store.OutboxRow {
	t.Helper()
	rows, err := conn.Query(t.Context(), `SELECT sender, event_id, target, delivery_id FROM forward_outbox WHERE sender = $1 ORDER BY event_id LIMIT $2`, sender, n)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.OutboxRow, error) {
		var r store.OutboxRow
		return r, row.Scan(&r.Sender, &r.EventID, &r.Target, &r.DeliveryID)
	})
	if err != nil || len(keys) != n {
		t.Fatalf("outbox keys: %d of %d, %v", len(keys), n, err)
	}
	return keys
}

// TestQueuePlansWhenStatisticsLie: with statistics that say a queue table
// holds one row while it holds 25,000, and with statistics that say 25,000
// after nearly all were deleted, every statement run per relay batch, per
// recording, per forward job and per retention batch visits about as many
// rows as it handles, in the plan for its arguments and in the generic plan
// alike, with no scan run once per row of another, and without JIT; and
// run through its function (six times and more on one connection, so that
// PostgreSQL's plan cache switches to the generic plan, and with each plan
// cache mode forced) it does what it should: the relay's take returns at
// most its batch.
func TestQueuePlansWhenStatisticsLie(t *testing.T) {
	t.Parallel()
	eachLie(t, testQueuePlans)
}

// eachLie runs test in parallel subtests, on statistics that lie one way
// and the other (lyingStats' grown), except on Citus.
func eachLie(t *testing.T, test func(t *testing.T, grown bool)) {
	t.Helper()
	pgtest.PlanVariants(t, "grown after ANALYZE", "shrunk after ANALYZE", test)
}

func testQueuePlans(t *testing.T, grown bool) {
	pool := lyingStats(t, grown)
	ctx := t.Context()
	conn := planConn(t, pool)
	explainConn := planConn(t, pool)
	waiting := planRows
	if !grown {
		waiting = keptOutbox
	}

	t.Run("relay take", func(t *testing.T) {
		withPlanModes(t, conn, 7, func(mode string, run int) {
			inRolledBack(t, conn, func(tx pgx.Tx) {
				start := time.Now()
				taken, err := both(tx).TakeOutbox(ctx, "acme", planBatch, store.DefaultRecordedGrace)
				if err != nil {
					t.Fatalf("%s, run %d: %v", mode, run, err)
				}
				if len(taken) != planBatch {
					t.Fatalf("%s, run %d: took %d rows, want the batch of %d (%d waiting)", mode, run, len(taken), planBatch, waiting)
				}
				if d := time.Since(start); d > time.Second {
					t.Errorf("%s, run %d: the take took %s", mode, run, d)
				}
			})
		})
		grace := store.DefaultRecordedGrace.Microseconds()
		checkPlans(t, explainConn, planBatch, store.TIDScans, store.TakeOutboxSQL, "acme", planBatch, grace)
		checkPlans(t, explainConn, planBatch, store.TIDScans, store.MarkOutboxSQL, "acme", planBatch, grace, time.Now())
	})

	t.Run("relay look", func(t *testing.T) {
		withPlanModes(t, conn, 7, func(mode string, run int) {
			if ok, err := both(conn).OutboxWaiting(ctx, "acme", store.DefaultRecordedGrace); err != nil || !ok {
				t.Fatalf("%s, run %d: OutboxWaiting = %v, %v; want true", mode, run, ok, err)
			}
		})
		checkPlans(t, explainConn, 1, store.OutboxIndexScans, store.OutboxWaitingSQL, "acme", store.DefaultRecordedGrace.Microseconds())
	})

	t.Run("relay look at every sender", func(t *testing.T) {
		// Many senders: with 500 and an EXISTS, PostgreSQL planned a hash
		// semi-join that read the whole outbox.
		senders := make([]string, 500)
		for i := range senders {
			senders[i] = fmt.Sprintf("s%03d", i)
		}
		senders[250] = "acme"
		withPlanModes(t, conn, 7, func(mode string, run int) {
			if got, err := store.New(conn).OutboxSendersWaiting(ctx, senders, store.DefaultRecordedGrace); err != nil || !slices.Equal(got, []string{"acme"}) {
				t.Fatalf("%s, run %d: OutboxSendersWaiting = %v, %v; want [acme]", mode, run, got, err)
			}
		})
		checkPlans(t, explainConn, len(senders), store.OutboxIndexScans, store.OutboxSendersWaitingSQL, senders, store.DefaultRecordedGrace.Microseconds())
	})

	t.Run("recording", func(t *testing.T) {
		keys := outboxKeys(t, conn, "acme", planBatch)
		at := time.Now().UTC().Truncate(time.Microsecond)
		var batch []FirstAttempt
		for i, k := range keys {
			a := FirstAttempt{Sender: k.Sender, EventID: k.EventID, Target: k.Target, MaxAttempts: 5, AttemptedAt: at, ScheduledAt: at}
			switch i % 10 {
			case 0: // not attempted: released to the relay
				a.Release = true
			case 1: // failed: retried by River
				a.State, a.ScheduledAt, a.Error, a.Output = StateRetrying, at.Add(time.Hour), "target answered 503", Output{Status: 503}
			default:
				a.State, a.FinalizedAt, a.Output = StateDelivered, &at, Output{Status: 204, DeliveredAt: at}
			}
			batch = append(batch, a)
		}
		withPlanModes(t, conn, 7, func(mode string, run int) {
			inRolledBack(t, conn, func(tx pgx.Tx) {
				q := both(tx)
				if err := q.RecordFirstAttempts(ctx, planQueue, batch); err != nil {
					t.Fatalf("%s, run %d: %v", mode, run, err)
				}
				if n, err := queuetest.New(tx).CountOutboxOf(ctx, "acme", "d"); err != nil || n != int64(waiting-planBatch*9/10) {
					t.Fatalf("%s, run %d: %d outbox rows left, %v; want %d", mode, run, n, err, waiting-planBatch*9/10)
				}
			})
		})
		for _, mark := range []*time.Time{nil, &at} { // the deleting form, the split form (Citus)
			groups, err := recordStatements(planQueue, batch, mark)
			if err != nil {
				t.Fatal(err)
			}
			wantRemove := map[bool]int{true: 0, false: 1}[mark == nil]
			if len(groups) != 1 || len(groups[0].record) != 3 || len(groups[0].remove) != wantRemove {
				t.Fatalf("mark %v: %d groups of statements for a recording of one sender with outcomes of each kind, want 1 of 3 (and %d to remove)", mark, len(groups), wantRemove)
			}
			for _, tx := range groups[0].txs() {
				for _, s := range tx {
					checkPlans(t, explainConn, planBatch, store.TIDScans, s.sql, s.args...)
				}
			}
		}
	})

	t.Run("earlier forward", func(t *testing.T) {
		// The event of the 200th job (snoozed: unfinished) and one that has
		// neither a job nor an outbox row: a probe each, whatever the job
		// table holds.
		for event, want := range map[uuid.UUID]bool{uuidV7(t, conn, 200): true, uuid.New(): false} {
			withPlanModes(t, conn, 7, func(mode string, run int) {
				wait, err := both(conn).EarlierForwardUnfinished(ctx, "acme", "t", event, 1<<40)
				if err != nil || wait != want {
					t.Fatalf("%s, run %d: EarlierForwardUnfinished(%s) = %v, %v; want %v", mode, run, event, wait, err, want)
				}
			})
			checkPlans(t, explainConn, 1, store.IndexOrderScans, earlierForwardSQL, earlierForwardArgs("acme", "t", event, 1<<40)...)
		}
	})

	t.Run("forward summaries", func(t *testing.T) {
		// A page of the console's deliveries: 50 events, 3 targets.
		events := make([]string, 50)
		for i := range events {
			events[i] = uuidV7(t, conn, 100*i+1).String()
		}
		checkPlans(t, explainConn, 50*3, store.IndexOrderScans, summaryJobsSQL, summaryJobsArgs("acme", []string{"t", "u", "v"}, events)...)
		ids := make([]pgtype.UUID, len(events))
		for i, e := range events {
			ids[i] = pgtype.UUID{Bytes: uuid.MustParse(e), Valid: true}
		}
		checkPlans(t, explainConn, 50*3, store.IndexOrderScans, summaryOutboxSQL, "acme", ids, []string{"t", "u", "v"})
	})

	t.Run("wake", func(t *testing.T) {
		// The jobs waiting on the queue: every 100th snoozed, twice as
		// many due (in the shrunk table too: their delivery IDs end in 0 or
		// 5). The snoozed ones are woken, in batches.
		snoozed := int64(planRows / 100)
		checkPlans(t, explainConn, 3*planRows/100, store.IndexOrderScans, wakeSQL, wakeArgs(planQueue, "acme", "t", wakeBatch, false)...)
		checkPlans(t, explainConn, 3*planRows/100, store.IndexOrderScans, wakeSQL, wakeArgs(planQueue, "acme", "t", 100, true)...)
		withPlanModes(t, conn, 7, func(mode string, run int) {
			inRolledBack(t, conn, func(tx pgx.Tx) {
				if n, err := both(tx).WakeWaitingForwards(ctx, planQueue, "acme", "t"); err != nil || n != snoozed {
					t.Fatalf("%s, run %d: woke %d, %v; want %d", mode, run, n, err, snoozed)
				}
			})
		})
	})

	t.Run("scheduling of due forwards", func(t *testing.T) {
		// The snoozed jobs are due within two hours: a batch of them, then
		// the rest; none within the next seconds.
		snoozed := int64(planRows / 100)
		checkPlans(t, explainConn, planRows/100, store.IndexOrderScans, scheduleSQL, scheduleArgs(planQueue, 2*time.Hour, scheduleBatch)...)
		checkPlans(t, explainConn, 100, store.IndexOrderScans, scheduleSQL, scheduleArgs(planQueue, 2*time.Hour, 100)...)
		checkPlans(t, explainConn, 1, store.IndexOrderScans, scheduleSQL, scheduleArgs(planQueue, scheduleAhead, scheduleBatch)...)
		withPlanModes(t, conn, 7, func(mode string, run int) {
			inRolledBack(t, conn, func(tx pgx.Tx) {
				q := both(tx)
				if n, err := q.ScheduleDueForwards(ctx, planQueue, scheduleAhead, scheduleBatch); err != nil || n != 0 {
					t.Fatalf("%s, run %d: made %d available ahead of %s, %v; want none", mode, run, n, scheduleAhead, err)
				}
				if n, err := q.ScheduleDueForwards(ctx, planQueue, 2*time.Hour, 100); err != nil || n != 100 {
					t.Fatalf("%s, run %d: made %d available, %v; want a batch of 100", mode, run, n, err)
				}
				if n, err := q.ScheduleDueForwards(ctx, planQueue, 2*time.Hour, scheduleBatch); err != nil || n != snoozed-100 {
					t.Fatalf("%s, run %d: made %d available, %v; want the other %d", mode, run, n, err, snoozed-100)
				}
			})
		})
	})

	t.Run("retention of delivered forwards", func(t *testing.T) {
		cutoff := time.Now().Add(-24 * time.Hour)
		withPlanModes(t, conn, 7, func(mode string, run int) {
			inRolledBack(t, conn, func(tx pgx.Tx) {
				n, err := both(tx).DeleteDeliveredBefore(ctx, cutoff, 1000)
				if err != nil || n != 1000 {
					t.Fatalf("%s, run %d: deleted %d, %v; want 1000", mode, run, n, err)
				}
			})
		})
		checkPlans(t, explainConn, 1000, deliveredScans, deleteDeliveredSQL, cutoff, 1000)
	})

	t.Run("attempt of a redelivery", func(t *testing.T) {
		// An attempt of a redelivered forward that the fast path had
		// delivered clears the first attempt its forward_delivered row
		// keeps, when the newer ones fill the number kept: the row is
		// found by a probe of the primary key among the sender's 25,000
		// (or 2,500), and without that index every plan left has more
		// disabled paths. By equality, the index of targets served it as
		// well, reading the sender's every row for the target.
		// The forward's row keeps a first attempt; the attempt of its
		// redelivery, the one kept, pushes it out.
		var e uuid.UUID
		if err := conn.QueryRow(ctx, `UPDATE forward_delivered SET took_us = 1000, headers = '{}', body = ''
WHERE sender = 'acme' AND delivery_id = 'd70' RETURNING event_id::uuid`).Scan(&e); err != nil {
			t.Fatal(err)
		}
		defer deleteAfter(t, conn, `UPDATE forward_delivered SET took_us = NULL, headers = NULL, body = NULL WHERE sender = 'acme' AND delivery_id = 'd70'`)
		rec, traced := recordedPool(t, pool)
		tx, err := traced.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		a := store.Attempt{Sender: "acme", EventID: e, Target: "t", StartedAt: time.Now(), Took: time.Millisecond, Outcome: "retry",
			Cause: store.CauseRedelivery, Attempt: 1, Actor: "ops", JobID: 7, Status: 500, Body: []byte("boom")}
		if err := store.New(tx).RecordAttempt(ctx, a, 1); err != nil {
			t.Fatal(err)
		}
		recorded := rec.Statements()
		var kept int
		if err := tx.QueryRow(ctx, `SELECT count(took_us) + count(headers) + count(body) FROM forward_delivered WHERE sender = 'acme' AND event_id = $1`, e.String()).Scan(&kept); err != nil {
			t.Fatal(err)
		}
		if kept != 0 {
			t.Errorf("the forward's delivered row keeps %d columns of its first attempt, want it cleared", kept)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		cleared := false
		for _, s := range recorded {
			checkPlans(t, explainConn, 1, s.Settings, s.SQL, s.Args...)
			if s.SQL != store.ClearFoldedSQL {
				continue
			}
			cleared = true
			checkIndexNeeded(t, explainConn, false, "forward_delivered_pkey", s.Settings, s.SQL, s.Args...)
		}
		if !cleared {
			t.Error("the attempt of a redelivery did not clear the first attempt")
		}
	})

	t.Run("current forwards of an event", func(t *testing.T) {
		// A redelivery of one event first finds its newest forward to each
		// target: its jobs and its delivered first attempt, among the
		// sender's 25,000 of each, by probes. Without the index of
		// forwards by event, or forward_delivered's primary key, every
		// plan left has a disabled path. (By equality, the "grown" lie
		// made it read every forward job through River's index on kind,
		// and every delivered forward through the index of targets.)
		event := uuidV7(t, conn, 200)
		rec, traced := recordedPool(t, pool)
		cur, err := both(traced).CurrentForwards(ctx, "acme", event, []string{"t", "u"})
		if err != nil || cur["t"].JobID == 0 {
			t.Fatalf("current forwards of event 200: %+v, %v; want its job to t", cur, err)
		}
		for _, s := range rec.Statements() {
			checkPlans(t, explainConn, 2, s.Settings, s.SQL, s.Args...)
			if s.SQL != currentJobsSQL {
				continue
			}
			for _, index := range []string{"river_job_hookgate_forward_idx", "forward_delivered_pkey"} {
				checkIndexNeeded(t, explainConn, true, index, s.Settings, s.SQL, s.Args...)
			}
		}
	})

	t.Run("outbox rows of queued redeliveries", func(t *testing.T) {
		var ids []pgtype.UUID
		for _, k := range outboxKeys(t, conn, "acme", 100) {
			ids = append(ids, pgtype.UUID{Bytes: k.EventID, Valid: true})
		}
		checkPlans(t, explainConn, len(ids), store.OutboxIndexScans, inOutboxSQL, "acme", "t", ids)
	})

	t.Run("bulk redelivery", func(t *testing.T) {
		// A batch merges the target's jobs of each River state in the
		// order of their IDs (migration 30's index by state), from the
		// batch's first on: it reads about its batch (it read every job
		// of every sender from the batch's first on, when the statistics
		// said river_job was small). A state's branch reads past the jobs
		// that do not match until its next one: the target's jobs at
		// most once, never once per job. Each job's probes
		// (notSuperseded, queuedWaiting) are index probes.
		q := both(conn)
		newest, at, err := q.NewestJobID(ctx)
		if err != nil {
			t.Fatal(err)
		}
		const batch = 1000
		for _, f := range []Filter{
			{Sender: "acme", Target: "t", State: StateDelivered},
			{Sender: "acme", Target: "t", State: StateFailed},
			{Sender: "acme", Target: "t", State: StatePending},
			{Sender: "acme", Target: "t", State: StateRunning, InStateAt: at},
		} {
			t.Run(string(f.State), func(t *testing.T) {
				withPlanModes(t, conn, 7, func(mode string, run int) {
					n, err := q.CountBulkMatch(ctx, f, newest)
					if err != nil {
						t.Fatalf("%s, run %d: %v", mode, run, err)
					}
					got, err := q.BulkMatchBatch(ctx, f, newest, 0, batch)
					if err != nil || int64(len(got)) != min(n, batch) {
						t.Fatalf("%s, run %d: a batch of %d (%v) of the %d matched, want %d", mode, run, len(got), err, n, min(n, batch))
					}
				})
				w, err := q.bulkWhere(ctx, f, newest, 0, true)
				if err != nil {
					t.Fatal(err)
				}
				sql := bulkMatchBatchSQL(&w, f, batch)
				rows := batch
				if f.State == StateDelivered || !f.InStateAt.IsZero() {
					// Every job of the fixture is superseded by its
					// delivered forward, and none finished since the
					// request: the branch of completed jobs reads them
					// all, once, looking for its first.
					rows = planRows
				}
				checkPlans(t, explainConn, rows, store.IndexOrderScans, sql, w.args...)
				// The count before the batches (and the read of the leased
				// outbox rows, for running forwards) reads the jobs at most
				// once, never once per job. (On the "grown" lie the count
				// reads every forward job through River's index on kind:
				// the partial indexes need the kind compared by equality,
				// which that index serves too.)
				rec, traced := recordedPool(t, pool)
				if _, err := both(traced).CountBulkMatch(ctx, f, newest); err != nil {
					t.Fatal(err)
				}
				for _, s := range rec.Statements() {
					checkPlans(t, explainConn, planRows, s.Settings, s.SQL, s.Args...)
				}
			})
		}
		checkPlans(t, explainConn, planRows, store.IndexOrderScans, queuedCandidatesSQL, "acme", "t", newest, int64(0), &at, unfinishedJobs)
	})

	t.Run("failed forwards", func(t *testing.T) {
		// The events of a batch of jobs, a hundredth of them failed (the
		// 75th of each hundred): the markings probe each event's forwards
		// (the failed ones alone, or those not completed), the fold reads
		// the failures not counted, the counts a sender's.
		targets := make([]string, planBatch)
		events := make([]string, planBatch)
		newer := make([]int64, planBatch)
		for i := range events {
			targets[i], events[i], newer[i] = "t", uuidV7(t, conn, i+1).String(), 1<<40
		}
		failed := planRows / 100 // their delivery IDs end in 5: kept in the shrunk table too
		checkPlans(t, explainConn, planBatch, store.IndexOrderScans, lockFailedSQL, "acme", targets, events)
		checkPlans(t, explainConn, planBatch, store.IndexOrderScans, markFailedSQL, "acme", targets, events)
		checkPlans(t, explainConn, planBatch, store.IndexOrderScans, lockOlderSQL, "acme", targets, events, newer, jobCompleted)
		checkPlans(t, explainConn, planBatch, store.IndexOrderScans, markOlderSQL, "acme", targets, events, newer, jobCompleted)
		checkPlans(t, explainConn, failed, store.IndexOrderScans, foldSQL, foldBatch)
		checkPlans(t, explainConn, failed, store.IndexOrderScans, failedCountsSQL, "acme", jobDiscarded)
		// Without the index of failures not counted, every plan left of
		// the counts has a disabled path: by the sender's equality, River's
		// primary key gave the order, and read every job.
		checkIndexNeeded(t, explainConn, true, "river_job_hookgate_forward_uncounted_idx", store.IndexOrderScans, failedCountsSQL, "acme", jobDiscarded)
		withPlanModes(t, conn, 7, func(mode string, run int) {
			inRolledBack(t, conn, func(tx pgx.Tx) {
				q := NewJobs(tx)
				if n, ran, err := q.FoldFailedForwards(ctx, foldBatch, time.Now().Add(-24*time.Hour)); err != nil || !ran || n != int64(failed) {
					t.Fatalf("%s, run %d: folded %d (ran %v), %v; want %d", mode, run, n, ran, err, failed)
				}
				c, err := q.CountForwards(ctx, "acme", false)
				if err != nil || c["t"].Failed != int64(failed) {
					t.Fatalf("%s, run %d: %d failed forwards counted, %v; want %d", mode, run, c["t"].Failed, err, failed)
				}
			})
		})
	})

	t.Run("takeover of a dead process's jobs", func(t *testing.T) {
		// Every 100th job runs for a process that is gone: a batch of
		// them is taken over, and the plan reads the running jobs alone,
		// never the table.
		running := planRows / 100
		withPlanModes(t, conn, 7, func(mode string, run int) {
			inRolledBack(t, conn, func(tx pgx.Tx) {
				taken, err := both(tx).TakeOverJobs(ctx, "hookgate:", 5*time.Second, planBatch)
				if err != nil || len(taken) != min(running, planBatch) {
					t.Fatalf("%s, run %d: took over %d jobs, %v; want %d", mode, run, len(taken), err, min(running, planBatch))
				}
			})
		})
		checkPlans(t, explainConn, planBatch, processIndexScans, takeOverSQL, takeOverArgs("hookgate:", 5*time.Second, planBatch)...)
		// The same process's running jobs, and the release of some.
		withPlanModes(t, conn, 7, func(mode string, run int) {
			jobs, err := both(conn).RunningJobsOf(ctx, "hookgate:gone", 5*time.Second)
			if err != nil || len(jobs) != running {
				t.Fatalf("%s, run %d: %d running jobs, %v; want %d", mode, run, len(jobs), err, running)
			}
		})
		checkPlans(t, explainConn, running, processIndexScans, runningOfSQL, runningOfArgs("hookgate:gone", 5*time.Second)...)
		jobs, err := both(conn).RunningJobsOf(ctx, "hookgate:gone", 0)
		if err != nil {
			t.Fatal(err)
		}
		var ids []int64
		for _, j := range jobs[:min(len(jobs), 100)] {
			ids = append(ids, j.ID)
		}
		checkPlans(t, explainConn, len(ids), processIndexScans, releaseOrphansSQL, releaseOrphansArgs("hookgate:gone", ids)...)
	})

	t.Run("event content", func(t *testing.T) {
		var id uuid.UUID
		if err := conn.QueryRow(ctx, `SELECT id FROM webhook_events WHERE sender = 'acme' LIMIT 1`).Scan(&id); err != nil {
			t.Fatal(err)
		}
		withPlanModes(t, conn, 7, func(mode string, run int) {
			if _, err := both(conn).EventContent(ctx, "acme", id); err != nil {
				t.Fatalf("%s, run %d: %v", mode, run, err)
			}
		})
		checkPlans(t, explainConn, 1, store.IndexOrderScans, store.EventContentSQL, "acme", id)
		// A page of forwards reads its events' types: a probe each.
		rows, err := conn.Query(ctx, `SELECT id FROM webhook_events WHERE sender = 'acme' LIMIT 100`)
		if err != nil {
			t.Fatal(err)
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range ids[:3] {
			checkPlans(t, explainConn, 1, store.IndexOrderScans, store.EventTypeSQL, "acme", id)
		}
		withPlanModes(t, conn, 7, func(mode string, run int) {
			types, err := both(conn).EventTypes(ctx, "acme", ids)
			if err != nil || len(types) != len(ids) {
				t.Fatalf("%s, run %d: %d types of %d events, %v", mode, run, len(types), len(ids), err)
			}
		})
	})

	t.Run("forwards of an event", func(t *testing.T) {
		// An event's page (console, API) reads its forwards: its outbox
		// rows with their keys, its jobs and its delivered forwards,
		// among 25,000 of each. The jobs are a probe of River's GIN
		// index (they were every forward job of every sender, through
		// River's index on kind); the outbox rows and keys probes (the
		// keys were a sequential scan); the delivered forwards a probe of
		// forward_delivered's primary key (they were read through its
		// index of targets, the sender's every row: both indexes start
		// with the sender, and the lie made them cost alike). Without the
		// GIN index, or the primary key, every plan left of the jobs, or
		// of the delivered forwards, has a disabled path.
		if _, err := conn.Exec(ctx, `INSERT INTO forward_keys (sender, target, order_key, last_seq, head_seq, updated_at)
SELECT 'acme', 't', 'k' || g, 2, 1, now() FROM generate_series(1, $1) g`, planRows); err != nil {
			t.Fatal(err)
		}
		defer deleteAfter(t, conn, `DELETE FROM forward_keys WHERE sender = 'acme'`)
		event := uuidV7(t, conn, 200)
		rec, traced := recordedPool(t, pool)
		fwds, err := both(traced).EventForwards(ctx, "acme", event)
		if err != nil || len(fwds) == 0 {
			t.Fatalf("forwards of event 200: %+v, %v", fwds, err)
		}
		probes := map[string]string{eventJobsSQL: "river_job_args_index", eventDeliveredSQL: "forward_delivered_pkey"}
		for _, s := range rec.Statements() {
			checkPlans(t, explainConn, 2, s.Settings, s.SQL, s.Args...)
			index, ok := probes[s.SQL]
			if !ok {
				continue
			}
			delete(probes, s.SQL)
			checkIndexNeeded(t, explainConn, true, index, s.Settings, s.SQL, s.Args...)
		}
		for sql := range probes {
			t.Errorf("not run: %.80s", sql)
		}
	})

	t.Run("deliveries pages", func(t *testing.T) {
		// The console's and the API's pages of a sender's deliveries
		// (newest first, the next page, those since a time) and one
		// delivery, with its event: each reads about its page among the
		// sender's 25,000 deliveries and events.
		if _, err := storetest.InsertGenerated(ctx, conn, storetest.Generated{Sender: "acme", Prefix: "d", N: planRows, Newest: time.Now(), Keys: true}); err != nil {
			t.Fatal(err)
		}
		defer deleteAfter(t, conn, `DELETE FROM processed_messages WHERE sender = 'acme'`)
		const limit = 50
		rec, traced := recordedPool(t, pool)
		q := store.New(traced)
		page, err := q.ListDeliveries(ctx, "acme", limit, nil)
		if err != nil || len(page.Deliveries) != limit || page.Next == nil {
			t.Fatalf("first page: %d deliveries, %v", len(page.Deliveries), err)
		}
		if _, err := q.ListDeliveries(ctx, "acme", limit, page.Next); err != nil {
			t.Fatalf("next page: %v", err)
		}
		if _, err := q.ListDeliveriesSince(ctx, "acme", limit, nil, time.Now().Add(-time.Hour)); err != nil {
			t.Fatalf("since: %v", err)
		}
		// A page of one event type, which the sender's events do not
		// have: read by time with the type as a filter, it would be all
		// of them.
		if _, err := q.ListDeliveriesByType(ctx, "acme", "invoice.paid", limit, nil); err != nil {
			t.Fatalf("one type: %v", err)
		}
		if _, err := q.GetDelivery(ctx, idempotency.Key{Sender: "acme", DeliveryID: page.Deliveries[7].DeliveryID}); err != nil {
			t.Fatalf("one delivery: %v", err)
		}
		// The console's search of a delivery ID in every sender, for one
		// it holds (below: and for one it does not, which reads to the
		// end of whatever range it reads).
		if found, err := q.FindDelivery(ctx, []string{"acme", "seed"}, page.Deliveries[7].DeliveryID); err != nil || !slices.Equal(found, []string{"acme"}) {
			t.Fatalf("search: %v, %v", found, err)
		}
		// Each scan touches a few pages per row it reads: a lookup of one
		// delivery by its key once read every entry of the sender's index
		// by time, its delivery ID checked on each.
		within := pgtest.PlanLimits{MaxVisited: func(string) float64 { return 3*limit + 100 }, PagesPerRow: 3}
		var findSettings string
		for _, s := range rec.Statements() {
			checkPlansWithin(t, explainConn, within, s.Settings, s.SQL, s.Args...)
			if s.SQL == store.FindSQL {
				findSettings = s.Settings
			}
		}
		checkPlansWithin(t, explainConn, within, findSettings, store.FindSQL, "acme", "absent")
	})

	t.Run("a target's forwards pages", func(t *testing.T) {
		// The console's and the API's pages of a target's forwards,
		// newest first, in every state and in none, the next page and a
		// window: each reads about its page among the target's 25,000
		// jobs and 25,000 delivered forwards, the newest of each River
		// state merged (they read the target's whole history of jobs and
		// sorted it). Pending and retrying share River's waiting states:
		// one reads past the other's waiting jobs, the target's backlog.
		const limit = 50
		var waiting int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE args->>'sender' = 'acme' AND state = ANY($1::river_job_state[])`,
			stateNames(StatePending)).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		for _, s := range []State{"", StatePending, StateRunning, StateRetrying, StateDelivered, StateFailed} {
			t.Run(cmp.Or(string(s), "any"), func(t *testing.T) {
				rec, traced := recordedPool(t, pool)
				jobs := NewJobs(traced)
				f := Filter{Sender: "acme", Target: "t", State: s}
				page, err := jobs.ListTargetForwards(ctx, f, limit, nil)
				if err != nil || (len(page.Forwards) == 0) != (s == StateRetrying) { // no job of the fixture has failed an attempt
					t.Fatalf("first page: %d forwards, %v", len(page.Forwards), err)
				}
				if page.Next != nil {
					next, err := jobs.ListTargetForwards(ctx, f, limit, page.Next)
					if err != nil || len(next.Forwards) == 0 || next.Forwards[0].JobID >= page.Forwards[limit-1].JobID && s != StateFailed {
						t.Fatalf("next page: %d forwards, %v", len(next.Forwards), err)
					}
				}
				f.Since = time.Now().Add(-time.Hour)
				if _, err := jobs.ListTargetForwards(ctx, f, limit, nil); err != nil {
					t.Fatalf("since: %v", err)
				}
				rows := limit
				if s == StatePending || s == StateRetrying {
					rows = waiting
				}
				for _, st := range rec.Statements() {
					checkPlans(t, explainConn, rows, st.Settings, st.SQL, st.Args...)
				}
			})
		}
	})

	t.Run("ordering keys of a redelivery batch", func(t *testing.T) {
		// A bulk redelivery of an ordered target locks its batch's keys
		// (after reading its events by EventContentSQL, checked above): a
		// probe of the primary key each, among many keys.
		const batch = 100
		if _, err := conn.Exec(ctx, `INSERT INTO forward_keys (sender, target, order_key, last_seq, head_seq, updated_at)
SELECT s, 't', 'k' || g, 2, 1, now() FROM generate_series(1, 25000) g, unnest(ARRAY['acme', 'other']) s`); err != nil {
			t.Fatal(err)
		}
		defer deleteAfter(t, conn, `DELETE FROM forward_keys`)
		keys := make([]string, batch)
		for i := range keys {
			keys[i] = fmt.Sprintf("k%d", 1+i*200)
		}
		inRolledBack(t, conn, func(tx pgx.Tx) {
			if err := store.New(tx).LockOrderKeys(ctx, "acme", []string{"t"}, keys); err != nil {
				t.Fatal(err)
			}
		})
		checkPlans(t, explainConn, 1, store.IndexOrderScans, store.LockKeySQL, "acme", "t", keys[7])
	})

	t.Run("retention", func(t *testing.T) {
		// Every minute the retention deletes a batch of each sender's
		// expired keys and old events: it reads the batch, not the
		// sender's history. The statements run in a transaction that is
		// rolled back, on a pool whose statements are recorded.
		// The sender's keys, one a second over the last seven hours, kept
		// for six: the oldest seventh has expired, as under one retention
		// expiry follows arrival. Their delivery IDs are in no such order.
		if _, err := conn.Exec(ctx, `INSERT INTO processed_messages (sender, delivery_id, request_sha256, event_id, response_status, response_content_type, response_body, created_at, expires_at)
SELECT 'acme', 'k' || md5(g::text), '\x00', gen_random_uuid(), 202, 'application/json', '', t, t + interval '6 hours'
FROM generate_series(1, $1) g, LATERAL (SELECT now() - interval '7 hours' + g * interval '1 second' AS t) x`, planRows); err != nil {
			t.Fatal(err)
		}
		// And as many signature tokens, a tenth of them signed two hours ago.
		if _, err := conn.Exec(ctx, `INSERT INTO signature_tokens (sender, token_sha256, delivery_id, request_sha256, signed_at)
SELECT 'acme', sha256(g::text::bytea), 'k' || g, '\x00', now() - CASE WHEN g % 10 = 0 THEN interval '2 hours' ELSE interval '1 minute' END
FROM generate_series(1, $1) g`, planRows); err != nil {
			t.Fatal(err)
		}
		defer deleteAfter(t, conn, `DELETE FROM processed_messages WHERE sender = 'acme'`, `DELETE FROM signature_tokens WHERE sender = 'acme'`)
		rec, traced := recordedPool(t, pool)
		const batch = 1000
		tx, err := traced.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		q := store.New(tx)
		now := time.Now()
		if n, err := q.DeleteExpiredKeys(ctx, "acme", now, batch); err != nil || n != batch {
			t.Fatalf("expired keys: %d deleted, %v; want %d", n, err, batch)
		}
		if n, err := q.DeleteEventsBefore(ctx, "acme", now.Add(time.Minute), batch); err != nil || n != batch {
			t.Fatalf("old events: %d deleted, %v; want %d", n, err, batch)
		}
		if n, err := sigtoken.New(tx).DeleteSignedBefore(ctx, "acme", now.Add(-time.Hour), batch); err != nil || n != batch {
			t.Fatalf("old signature tokens: %d deleted, %v; want %d", n, err, batch)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		// A batch of old events or old signature tokens reads about its
		// own rows: the sender's oldest, through its index by time; the
		// events' forwards' attempts are found by probes of the primary
		// keys. Without the index each reads, every plan left has more
		// disabled paths. By IDs in an array, the "grown" lie made a batch
		// read the sender's every row (every old one, for the tokens); as
		// a semi-join with the subquery, a loop that outlasted the 20 s
		// statement timeout. A batch of expired keys may read the sender's
		// keys once, as no index orders them by expiry within a sender
		// (store.DeleteExpiredSQL), but deletes by ctid: by delivery ID in
		// an array, the DELETE read them all a second time.
		byTime := map[string]string{
			store.DeleteEventsBeforeSQL:  "webhook_events_sender_received_at_idx",
			store.DeleteEventAttemptsSQL: "forward_attempts_pkey",
			store.ClearEventFoldedSQL:    "forward_delivered_pkey",
			sigtoken.DeleteBeforeSQL:     "signature_tokens_sender_signed_at_idx",
		}
		checked := 0
		for _, s := range rec.Statements() {
			if sql := strings.ToLower(s.SQL); strings.HasPrefix(sql, "savepoint") || strings.HasPrefix(sql, "release") {
				continue
			}
			checked++
			index, ok := byTime[s.SQL]
			if !ok {
				checkPlans(t, explainConn, planRows, s.Settings, s.SQL, s.Args...)
				continue
			}
			delete(byTime, s.SQL)
			checkPlans(t, explainConn, batch, s.Settings, s.SQL, s.Args...)
			checkIndexNeeded(t, explainConn, false, index, s.Settings, s.SQL, s.Args...)
		}
		for sql := range byTime {
			t.Errorf("not run: %.60s", sql)
		}
		if checked < 5 {
			t.Errorf("%d statements checked, want the expired keys' delete, the old events' three and the old signature tokens'", checked)
		}
		// Which senders have expired keys: it reads the expired keys (a
		// tenth of the sender's), not every key.
		withPlanModes(t, conn, 7, func(mode string, run int) {
			if got, err := store.New(conn).ExpiredSenders(ctx, now); err != nil || !slices.Contains(got, "acme") {
				t.Fatalf("%s, run %d: ExpiredSenders = %v, %v; want acme among them", mode, run, got, err)
			}
		})
		rec.Reset()
		if _, err := store.New(traced).ExpiredSenders(ctx, now); err != nil {
			t.Fatal(err)
		}
		var settings string
		for _, s := range rec.Statements() {
			if s.SQL == store.ExpiredSendersSQL {
				settings = s.Settings
			}
		}
		checkPlans(t, explainConn, planRows/10, settings, store.ExpiredSendersSQL, now)
		// Whatever the statistics say, reading every key in the sender's
		// order is never the cheapest plan: without the index of expiry
		// times, every plan left has a node the settings disable. (Under
		// plain IndexScans, a full scan of the sender's index, with the
		// expiry as a filter, was allowed; statistics from an earlier
		// subtest once made it the cheapest.)
		for _, mode := range planCacheModes {
			ex := explainAs(t, explainConn, `DROP INDEX processed_messages_expires_at_idx; `+settings, mode, store.ExpiredSendersSQL, now)
			if !ex.Plan.Disabled() {
				t.Errorf("%s: without processed_messages_expires_at_idx, ExpiredSenders has a plan with no disabled node, which statistics can make the cheapest: %s", mode, ex.Plan.Shape())
			}
		}
	})

	t.Run("ordered ends", func(t *testing.T) {
		// A forward to an ordered target that River worked ends by moving
		// its key's head and releasing (or handing off) the next row; the
		// fast path asks which of its rows are heads. Each reads its keys
		// and rows by key, among a sender's many keys and waiting rows.
		if _, err := conn.Exec(ctx, `INSERT INTO forward_keys (sender, target, order_key, last_seq, head_seq, updated_at)
SELECT 'ord', 't', 'k' || g, 2, 1, now() FROM generate_series(1, $1) g`, planRows); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, `INSERT INTO forward_outbox (sender, event_id, target, delivery_id, created_at, leased_until, order_key, seq)
SELECT 'ord', gen_random_uuid(), 't', 'o' || g || '-' || s, now(), CASE WHEN s = 1 THEN now() + interval '1 minute' ELSE 'infinity' END, 'k' || g, s
FROM generate_series(1, $1) g, generate_series(1, 2) s`, planRows); err != nil {
			t.Fatal(err)
		}
		defer deleteAfter(t, conn, `DELETE FROM forward_outbox WHERE sender = 'ord'`, `DELETE FROM forward_keys WHERE sender = 'ord'`)
		checkPlans(t, explainConn, 1, store.IndexScans, store.AdvanceOrderedSQL, "ord", "t", "k77", int64(1))
		checkPlans(t, explainConn, 1, store.IndexScans, store.ReleaseOrderedSQL, "ord", "t", "k77", int64(1))
		one := store.OrderedArgs("ord", []store.OrderedEnd{{Target: "t", Key: "k77", Seq: 1}})
		checkPlans(t, explainConn, 1, store.TIDScans, store.HandOffOrderedSQL, append(one, []int64{1000})...)
		rows, err := conn.Query(ctx, `SELECT event_id, target FROM forward_outbox WHERE sender = 'ord' AND seq = 1 LIMIT 100`)
		if err != nil {
			t.Fatal(err)
		}
		var (
			events  []uuid.UUID
			targets []string
		)
		for rows.Next() {
			var (
				e  uuid.UUID
				tg string
			)
			if err := rows.Scan(&e, &tg); err != nil {
				t.Fatal(err)
			}
			events, targets = append(events, e), append(targets, tg)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		checkPlans(t, explainConn, len(events), store.OutboxIndexScans, store.OrderedHeadsSQL, "ord", events, targets)

		// A recording of the fast path's ends of heads: half delivered,
		// half failed for good (their keys held), so that the keys of
		// both are locked first. Each statement reads its batch's keys
		// and rows by key.
		at := time.Now().UTC().Truncate(time.Microsecond)
		rows, err = conn.Query(ctx, `SELECT event_id, order_key FROM forward_outbox WHERE sender = 'ord' AND seq = 1 ORDER BY order_key LIMIT 100`) //nolint:rowserrcheck // pgx.ForEachRow checks rows.Err
		if err != nil {
			t.Fatal(err)
		}
		var batch []FirstAttempt
		var e uuid.UUID
		var key string
		if _, err := pgx.ForEachRow(rows, []any{&e, &key}, func() error {
			a := FirstAttempt{Sender: "ord", EventID: e, Target: "t", MaxAttempts: 5, AttemptedAt: at, ScheduledAt: at, FinalizedAt: &at, OrderKey: key, Seq: 1,
				State: StateDelivered, Output: Output{Status: 204, DeliveredAt: at}}
			if len(batch)%2 == 1 {
				a.State, a.FailedAtOnce, a.Error, a.Output, a.OnFailure = StateFailed, true, "target answered 400", Output{Status: 400}, "hold"
			}
			batch = append(batch, a)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		for _, mark := range []*time.Time{nil, &at} { // the deleting form, the split form (Citus)
			groups, err := recordStatements(planQueue, batch, mark)
			if err != nil {
				t.Fatal(err)
			}
			if len(groups) != 1 || len(groups[0].record) != 4 || groups[0].record[0].sql != store.LockKeysInOrderSQL {
				t.Fatalf("mark %v: %d groups of statements for a recording of one sender's delivered and held ordered forwards, want 1 of 4, the keys' lock first", mark, len(groups))
			}
			for _, tx := range groups[0].txs() {
				for _, s := range tx {
					// The split form's statements that advance keys
					// join them by columns (Citus refuses a ctid
					// there; see advanceTaken): under the "grown"
					// lie they read the sender's keys. Not checked.
					if mark != nil && grown && strings.Contains(s.sql, "adv AS") {
						continue
					}
					checkPlans(t, explainConn, len(batch), cmp.Or(s.scans, store.TIDScans), s.sql, s.args...)
				}
			}
		}
	})
}

// recordedPool returns a pool on pool's database whose statements rec
// records, closed when the test ends.
func recordedPool(t *testing.T, pool *pgxpool.Pool) (*pgtest.Recorder, *pgxpool.Pool) {
	t.Helper()
	rec := &pgtest.Recorder{}
	pc := pool.Config().Copy()
	pc.ConnConfig.Tracer = rec
	traced, err := pgxpool.NewWithConfig(t.Context(), pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(traced.Close)
	return rec, traced
}

// uuidV7 returns the event ID of the fixtures' row g (v7SQL).
func uuidV7(t *testing.T, conn *pgx.Conn, g int) uuid.UUID {
	t.Helper()
	var id uuid.UUID
	if err := conn.QueryRow(t.Context(), `SELECT `+v7SQL+` FROM (SELECT $1::bigint AS g) x`, g).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// both are the forwards' statements and the store's queries on db.
type bothQueries struct {
	*Jobs
	*store.Queries
}

func both(db store.DB) bothQueries { return bothQueries{NewJobs(db), store.New(db)} }
