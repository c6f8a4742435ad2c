package store

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// forward_outbox outside the ingest pipeline: the relay's take, an event's
// rows and the counts by target. Package forward writes the rows in a
// delivery's transaction.

// OutboxRow is a forward not yet relayed into River.
type OutboxRow struct {
	Sender, Target string
	EventID        uuid.UUID
	DeliveryID     string
	// OrderKey and Seq are an ordered forward's key and position; "" and
	// 0 for another.
	OrderKey string
	Seq      int64
}

// DefaultRecordedGrace is how long the relay leaves alone an outbox row
// whose record was written in a transaction of its own. That split form
// runs on Citus. The row's delete follows the record's COMMIT within
// milliseconds. When it never comes, after a crash, the relay takes the row
// again after this long.
const DefaultRecordedGrace = 30 * time.Second

// Unrecorded returns the condition the reads of forwards put on the outbox
// row named alias ("" for none). The row has no record yet, or its record
// is older than [DefaultRecordedGrace] and the row is still there after a
// crash. A row recorded within the grace is read through its record, so it
// is not read twice.
func Unrecorded(alias string) string {
	col := "recorded_at"
	if alias != "" {
		col = alias + ".recorded_at"
	}
	return fmt.Sprintf("(%s IS NULL OR %s < statement_timestamp() - interval '%d milliseconds')", col, col, DefaultRecordedGrace.Milliseconds())
}

// takeable is the condition on an outbox row the relay may take. No fast
// path holds a lease on it, and it is not recorded, or was recorded more
// than the grace ago. The grace is in microseconds.
func takeable(grace string) string {
	return `(leased_until IS NULL OR leased_until < statement_timestamp())
    AND (recorded_at IS NULL OR recorded_at < statement_timestamp() - ` + grace + `::bigint * interval '1 microsecond')`
}

// takeRows selects the ctids of up to $2 takeable outbox rows of sender $1
// in an InitPlan, so its LIMIT holds. It reads the primary key in its
// order, oldest event first, and skips the rows another transaction
// locked.
var takeRows = `ctid = ANY(ARRAY(
  SELECT ctid FROM forward_outbox
  WHERE sender = $1 AND ` + takeable("$3") + `
  ORDER BY event_id, target LIMIT $2 FOR UPDATE SKIP LOCKED))`

// TakeOutboxSQL deletes and returns up to $2 takeable outbox rows of the
// sender $1, with the grace $3. They exist again if the transaction rolls
// back. The DELETE finds the rows by ctid, under [TIDScans]. A row the fast
// path released meanwhile is not deleted and stays for the next take. Both
// parts name the sender, so Citus runs it on the sender's shard.
var TakeOutboxSQL = `DELETE FROM forward_outbox WHERE sender = $1 AND ` + takeRows + `
RETURNING sender, event_id, target, delivery_id, coalesce(order_key, ''), coalesce(seq, 0)`

// MarkOutboxSQL is the split form of [TakeOutboxSQL], on Citus. It marks
// the rows recorded at $4 in the transaction that inserts their jobs.
// [DeleteRecordedSQL] deletes them after that transaction commits.
var MarkOutboxSQL = `UPDATE forward_outbox SET recorded_at = $4 WHERE sender = $1 AND ` + takeRows + `
RETURNING sender, event_id, target, delivery_id, coalesce(order_key, ''), coalesce(seq, 0)`

// OutboxIndexScans makes the rest of the transaction read forward_outbox
// through plain index scans, without JIT. The outbox is a queue, so its
// statistics say it is nearly empty. PostgreSQL would then plan a scan that
// walks every row deleted since the last vacuum. A plain index scan probes
// the key and marks the dead entries it meets, so later scans skip them.
// Send it in the same round trip as its statement.
const OutboxIndexScans = `SELECT set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true), set_config('jit', 'off', true)`

// OutboxRowsByKey selects the ctids of the outbox rows of sender $1 whose
// keys are the pairs of $2, event IDs, and $3, targets. It probes the
// primary key once per pair, under [TIDScans]. A pair without a row selects
// nothing.
const OutboxRowsByKey = `ARRAY(SELECT p.ctid FROM unnest($2::uuid[], $3::text[]) AS k(event_id, target)
    CROSS JOIN LATERAL (SELECT x.ctid FROM forward_outbox x
      WHERE x.sender = $1 AND x.event_id = k.event_id AND x.target >= k.target AND x.target <= k.target
      ORDER BY x.target) p)`

// TakeOutbox deletes and returns up to limit takeable outbox rows of
// sender ([TakeOutboxSQL]). Run it in the transaction that inserts their
// jobs, so they come back if it rolls back. It returns nil when there is
// none to take. The rest of the transaction runs under [TIDScans]. The
// caller sets a statement timeout, if any, in the transaction.
func (q *Queries) TakeOutbox(ctx context.Context, sender string, limit int, grace time.Duration) ([]OutboxRow, error) {
	return q.takeOutbox(ctx, TakeOutboxSQL, sender, limit, grace.Microseconds())
}

// MarkOutbox is the split form of [Queries.TakeOutbox]: it marks the rows
// recorded at at instead of deleting them. Run [Queries.DeleteRecorded]
// with the same at after the COMMIT. After a crash between the two, the
// relay takes the rows again once the grace has passed.
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
		return r, row.Scan(&r.Sender, &r.EventID, &r.Target, &r.DeliveryID, &r.OrderKey, &r.Seq)
	})
	if err != nil {
		return nil, fmt.Errorf("take outbox rows: %w", err)
	}
	return out, nil
}

// DeleteRecordedSQL deletes the outbox rows of sender $1 whose keys are the
// pairs of $2 and $3 and that were marked recorded at $4. It probes the key
// per pair and deletes by ctid ([OutboxRowsByKey]). A row marked at another
// time belongs to another recording and is left.
const DeleteRecordedSQL = `DELETE FROM forward_outbox
WHERE sender = $1 AND ctid = ANY(` + OutboxRowsByKey + `) AND recorded_at = $4`

// DeleteRecorded deletes sender's outbox rows marked recorded at at, in one
// round trip. It runs in a transaction of its own, or q's, under q's
// statement timeout when it has one.
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

// queueTimeout queues q's statement timeout, if any, in b.
func (q *Queries) queueTimeout(b *pgx.Batch) {
	if q.timeout > 0 {
		b.Queue(`SELECT set_config('statement_timeout', $1, true)`, fmt.Sprintf("%dms", max(q.timeout.Milliseconds(), 1)))
	}
}

// execSettings reads from br the results of the settings queued in b before
// its last statement.
func (q *Queries) execSettings(br pgx.BatchResults, b *pgx.Batch) error {
	for range b.Len() - 1 {
		if _, err := br.Exec(); err != nil {
			return err
		}
	}
	return nil
}

// OutboxWaitingSQL tells whether sender $1 has takeable outbox rows, with
// the grace $2, without taking them.
var OutboxWaitingSQL = `SELECT EXISTS (SELECT 1 FROM forward_outbox
  WHERE sender = $1 AND ` + takeable("$2") + `)`

// OutboxWaiting reports whether sender has takeable outbox rows. The relay
// looks before it opens a transaction to take them, which costs three round
// trips. With the fast path, most looks find none. A row another relay
// holds counts, and the take then finds nothing. It runs in one round trip
// under [OutboxIndexScans] and q's statement timeout, if any.
func (q *Queries) OutboxWaiting(ctx context.Context, sender string, grace time.Duration) (bool, error) {
	var waiting bool
	err := q.look(ctx, func(br pgx.BatchResults) error { return br.QueryRow().Scan(&waiting) }, OutboxWaitingSQL, sender, grace.Microseconds())
	return waiting, err
}

// look sends sql with args in one round trip, after q's statement timeout,
// if any, and [OutboxIndexScans], and reads its result with read.
func (q *Queries) look(ctx context.Context, read func(pgx.BatchResults) error, sql string, args ...any) error {
	var b pgx.Batch
	q.queueTimeout(&b)
	b.Queue(OutboxIndexScans)
	b.Queue(sql, args...)
	br := q.db.SendBatch(ctx, &b)
	defer br.Close()
	if err := q.execSettings(br, &b); err != nil {
		return fmt.Errorf("look for outbox rows: %w", err)
	}
	if err := read(br); err != nil {
		return fmt.Errorf("look for outbox rows: %w", err)
	}
	return nil
}

// OutboxSendersWaitingSQL returns those of the senders $1 that have
// takeable outbox rows, with the grace $2, in their order: one probe of the
// primary key per sender, under [OutboxIndexScans], in one statement. The
// LATERAL subquery's LIMIT keeps it a nested loop that stops at each
// sender's first takeable row: written as EXISTS, PostgreSQL planned a
// hash semi-join that reads every row of the outbox.
var OutboxSendersWaitingSQL = `SELECT s.sender FROM unnest($1::text[]) WITH ORDINALITY AS s(sender, n)
CROSS JOIN LATERAL (SELECT 1 FROM forward_outbox WHERE sender = s.sender AND ` + takeable("$2") + ` LIMIT 1) o
ORDER BY s.n`

// OutboxSendersWaiting returns those of senders that have takeable outbox
// rows, in their order: [OutboxWaiting] for many senders in one round trip.
// The relay looks with it on PostgreSQL, so that an idle round costs one
// statement however many senders there are. Citus would run it on every
// shard: there the relay looks sender by sender.
func (q *Queries) OutboxSendersWaiting(ctx context.Context, senders []string, grace time.Duration) ([]string, error) {
	var waiting []string
	err := q.look(ctx, func(br pgx.BatchResults) error {
		rows, err := br.Query()
		if err != nil {
			return err
		}
		waiting, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	}, OutboxSendersWaitingSQL, senders, grace.Microseconds())
	return waiting, err
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

// ReleaseOutboxSQL clears the lease of the outbox rows of sender $1 whose
// keys are the pairs of $2 and $3, after a fast path gave them up. An
// ordered forward that waits behind its key's head ('infinity') keeps
// waiting. The
// relay then takes them at once. A row the relay took meanwhile is gone,
// and nothing is updated for it.
const ReleaseOutboxSQL = `UPDATE forward_outbox SET leased_until = NULL
WHERE sender = $1 AND ctid = ANY(` + OutboxRowsByKey + `) AND (leased_until IS NULL OR leased_until < 'infinity')`
