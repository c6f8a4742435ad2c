package store

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// forward_outbox, outside the ingest pipeline (forward.QueueOutbox writes
// its rows in a delivery's transaction): the relay's take, an event's rows
// and the counts by target.

// OutboxRow is a forward not yet relayed into River.
type OutboxRow struct {
	Sender, Target string
	EventID        uuid.UUID
	DeliveryID     string
}

// DefaultRecordedGrace is how long a forward's outbox row whose record was
// written in a transaction of its own (recorded_at set: the split form of
// the relay and the fast path's recording, on Citus) is left alone before
// the relay takes it again: its delete, sent right after the record's
// COMMIT, takes milliseconds; one that never came (a crash between the
// two, or a coordinator that died before its own commit and lost the
// record) leaves the row to the relay after this long.
const DefaultRecordedGrace = 30 * time.Second

// Unrecorded returns the condition, on the outbox row named alias (""
// for none), that the reads of forwards put on it: it has no record yet,
// or its record was written more than DefaultRecordedGrace ago and the row
// is still there (a crash: the relay takes it again). A row marked
// recorded within the grace (the split form, on Citus: its delete follows
// in milliseconds) is its record's, which the reads find in River's table
// or forward_delivered: it is not read twice.
func Unrecorded(alias string) string {
	col := "recorded_at"
	if alias != "" {
		col = alias + ".recorded_at"
	}
	return fmt.Sprintf("(%s IS NULL OR %s < statement_timestamp() - interval '%d milliseconds')", col, col, DefaultRecordedGrace.Milliseconds())
}

// takeable is the condition on an outbox row that the relay may take:
// no fast path has leased it (or its lease has ended), and it is not
// recorded, or was recorded more than the grace (the parameter grace, in
// microseconds) ago and is still there.
func takeable(grace string) string {
	return `(leased_until IS NULL OR leased_until < statement_timestamp())
    AND (recorded_at IS NULL OR recorded_at < statement_timestamp() - ` + grace + `::bigint * interval '1 microsecond')`
}

// takeRows selects the ctids of up to $2 outbox rows of sender $1 that the
// relay may take (takeable), in an InitPlan, run once, so its LIMIT holds;
// it reads the primary key in its order (sender, event_id, target) and
// stops after $2 rows, oldest event first (event IDs are UUIDv7), locking
// them (FOR UPDATE SKIP LOCKED: rows another transaction holds are skipped).
var takeRows = `ctid = ANY(ARRAY(
  SELECT ctid FROM forward_outbox
  WHERE sender = $1 AND ` + takeable("$3") + `
  ORDER BY event_id, target LIMIT $2 FOR UPDATE SKIP LOCKED))`

// TakeOutboxSQL deletes up to $2 outbox rows of the sender $1 that no
// other transaction holds, no fast path has leased (or whose lease has
// ended) and none has recorded within the grace $3 (takeRows), and
// returns them: they exist again if the transaction rolls back. The DELETE
// finds the rows takeRows selected by ctid (a TID scan): see plans.go and
// TIDScans, which it runs under. A row the fast path's release
// (ReleaseOutboxSQL) updated between the statement's snapshot and its lock
// is not deleted (the TID scan does not see its new version) and stays for
// the next take: only the rows returned get a job. Both parts name the
// sender, so that Citus runs it on the sender's shard (it cannot lock rows
// FOR UPDATE across shards, and a ctid names a row of one shard only).
var TakeOutboxSQL = `DELETE FROM forward_outbox WHERE sender = $1 AND ` + takeRows + `
RETURNING sender, event_id, target, delivery_id`

// MarkOutboxSQL is TakeOutboxSQL's split form (on Citus): it marks the
// rows recorded at $4 (recorded_at) instead of deleting them, in the
// transaction that inserts their jobs; DeleteRecordedSQL deletes them once
// that transaction has committed.
var MarkOutboxSQL = `UPDATE forward_outbox SET recorded_at = $4 WHERE sender = $1 AND ` + takeRows + `
RETURNING sender, event_id, target, delivery_id`

// OutboxIndexScans makes the rest of the transaction read forward_outbox
// through plain index scans. The outbox is a queue: rows come and go by
// thousands a second, so its statistics (refreshed at most once a minute)
// say it is nearly empty, and PostgreSQL plans a sequential scan or a
// bitmap scan of all of a sender's index entries, which walks every row
// deleted since the last vacuum (a bitmap scan never marks a dead entry,
// so they pile up: thousands per statement under load). A plain index scan
// probes the key, and marks the dead entries it meets so that later scans
// skip them and inserts reclaim their space. JIT is off (see plans.go).
// Sent in the same round trip as the statement it is for.
const OutboxIndexScans = `SELECT set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true), set_config('jit', 'off', true)`

// OutboxRowsByKey selects the ctids of the outbox rows of sender $1 whose
// keys are the pairs of $2 (event IDs) and $3 (targets): one probe of the
// primary key per pair (a LATERAL subquery, in which the order by target
// compared by a range keeps the probe on the key's index under TIDScans;
// see plans.go). A pair without a row selects nothing.
const OutboxRowsByKey = `ARRAY(SELECT p.ctid FROM unnest($2::uuid[], $3::text[]) AS k(event_id, target)
    CROSS JOIN LATERAL (SELECT x.ctid FROM forward_outbox x
      WHERE x.sender = $1 AND x.event_id = k.event_id AND x.target >= k.target AND x.target <= k.target
      ORDER BY x.target) p)`

// TakeOutbox deletes and returns up to limit outbox rows of sender that no
// other transaction holds (FOR UPDATE SKIP LOCKED), no fast path has
// leased (forward.Dispatcher; a row whose lease has ended is taken) and
// none recorded within grace (DefaultRecordedGrace): run it in the
// transaction that inserts their jobs, so that they come back if it rolls
// back. It returns none (nil) when every row is held or there is none. The
// rest of the transaction runs under TIDScans (River's insert of the jobs
// reads no table). A statement timeout for the take is the caller's to
// set, in the transaction's BEGIN (forward.Relay does).
func (q *Queries) TakeOutbox(ctx context.Context, sender string, limit int, grace time.Duration) ([]OutboxRow, error) {
	return q.takeOutbox(ctx, TakeOutboxSQL, sender, limit, grace.Microseconds())
}

// MarkOutbox is TakeOutbox's split form: it marks the rows recorded at at
// instead of deleting them (MarkOutboxSQL). Run it in the transaction that
// inserts their jobs, and DeleteRecorded with the same at after its
// COMMIT: a crash between the two leaves the rows to the relay once grace
// has passed, and a job that did not commit is inserted then.
func (q *Queries) MarkOutbox(ctx context.Context, sender string, limit int, grace time.Duration, at time.Time) ([]OutboxRow, error) {
	return q.takeOutbox(ctx, MarkOutboxSQL, sender, limit, grace.Microseconds(), at)
}

func (q *Queries) takeOutbox(ctx context.Context, sql, sender string, args ...any) ([]OutboxRow, error) {
	var b pgx.Batch
	b.Queue(TIDScans)
	b.Queue(sql, append([]any{sender}, args...)...)
	br := q.db.SendBatch(ctx, &b)
	defer br.Close()
	if err := q.execSettings(br, &b); err != nil {
		return nil, fmt.Errorf("take outbox rows: %w", err)
	}
	rows, err := br.Query()
	if err != nil {
		return nil, fmt.Errorf("take outbox rows: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (OutboxRow, error) {
		var r OutboxRow
		return r, row.Scan(&r.Sender, &r.EventID, &r.Target, &r.DeliveryID)
	})
	if err != nil {
		return nil, fmt.Errorf("take outbox rows: %w", err)
	}
	return out, nil
}

// DeleteRecordedSQL deletes the outbox rows of sender $1 whose keys are the
// pairs of $2 and $3 and that were marked recorded at $4 (MarkOutboxSQL,
// or the split form of the fast path's recording): a probe of the key per
// pair, the rows deleted by ctid (OutboxRowsByKey, under TIDScans). A row
// another recording marked (at another time) is that recording's to
// delete, and is left.
const DeleteRecordedSQL = `DELETE FROM forward_outbox
WHERE sender = $1 AND ctid = ANY(` + OutboxRowsByKey + `) AND recorded_at = $4`

// DeleteRecorded deletes sender's outbox rows of rows marked recorded at at
// (MarkOutbox), in one round trip and a transaction of its own (or q's),
// under q's statement timeout when it has one (WithStatementTimeout).
func (q *Queries) DeleteRecorded(ctx context.Context, sender string, rows []OutboxRow, at time.Time) error {
	if len(rows) == 0 {
		return nil
	}
	events := make([]uuid.UUID, len(rows))
	targets := make([]string, len(rows))
	for i, r := range rows {
		events[i], targets[i] = r.EventID, r.Target
	}
	var b pgx.Batch
	q.queueTimeout(&b)
	b.Queue(TIDScans)
	b.Queue(DeleteRecordedSQL, sender, events, targets, at)
	if err := q.db.SendBatch(ctx, &b).Close(); err != nil {
		return fmt.Errorf("delete recorded outbox rows of %s: %w", sender, err)
	}
	return nil
}

// queueTimeout queues the statement timeout of q (WithStatementTimeout) in
// b, when it has one.
func (q *Queries) queueTimeout(b *pgx.Batch) {
	if q.timeout > 0 {
		b.Queue(`SELECT set_config('statement_timeout', $1, true)`, fmt.Sprintf("%dms", max(q.timeout.Milliseconds(), 1)))
	}
}

// execSettings reads the results of the statements queued in b before its
// last one (settings) from br.
func (q *Queries) execSettings(br pgx.BatchResults, b *pgx.Batch) error {
	for range b.Len() - 1 {
		if _, err := br.Exec(); err != nil {
			return err
		}
	}
	return nil
}

// OutboxWaitingSQL tells whether sender $1 has outbox rows that the relay
// may take now (TakeOutboxSQL's condition, with the grace $2, without
// taking them).
var OutboxWaitingSQL = `SELECT EXISTS (SELECT 1 FROM forward_outbox
  WHERE sender = $1 AND ` + takeable("$2") + `)`

// OutboxWaiting reports whether sender has outbox rows that no fast path
// has leased (or whose lease has ended) and none recorded within grace, in one round trip and no
// transaction of its own: the relay looks before it opens a transaction
// to take them (a BEGIN, the take and a COMMIT: three round trips), and
// with the fast path most of its looks find none. A row another relay
// holds counts: the take then finds nothing, as it would have anyway. The
// primary key is the only path left (OutboxIndexScans); the look walks the
// sender's leased rows before the first it may take. q's statement timeout
// bounds it when it has one (WithStatementTimeout).
func (q *Queries) OutboxWaiting(ctx context.Context, sender string, grace time.Duration) (bool, error) {
	var b pgx.Batch
	q.queueTimeout(&b)
	b.Queue(OutboxIndexScans)
	b.Queue(OutboxWaitingSQL, sender, grace.Microseconds())
	br := q.db.SendBatch(ctx, &b)
	defer br.Close()
	if err := q.execSettings(br, &b); err != nil {
		return false, fmt.Errorf("look for outbox rows: %w", err)
	}
	var waiting bool
	if err := br.QueryRow().Scan(&waiting); err != nil {
		return false, fmt.Errorf("look for outbox rows: %w", err)
	}
	return waiting, nil
}

// OutboxSenders returns the senders with outbox rows, other than those in
// except.
func (q *Queries) OutboxSenders(ctx context.Context, except []string) ([]string, error) {
	rows, err := q.db.Query(ctx, `SELECT DISTINCT sender FROM forward_outbox WHERE sender <> ALL($1::text[])`, except)
	if err != nil {
		return nil, fmt.Errorf("list outbox senders: %w", err)
	}
	senders, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list outbox senders: %w", err)
	}
	return senders, nil
}

// ReleaseOutboxSQL clears the lease of outbox rows of sender $1 whose keys
// are the pairs of $2 and $3 (a fast path gave them up): the relay takes
// them at once. A probe of the key per pair, the rows updated by ctid
// (OutboxRowsByKey, under TIDScans); a row the relay took meanwhile is
// gone, and nothing is updated for it.
const ReleaseOutboxSQL = `UPDATE forward_outbox SET leased_until = NULL
WHERE sender = $1 AND ctid = ANY(` + OutboxRowsByKey + `)`
