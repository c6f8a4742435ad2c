package queue

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/hookgate/hookgate/internal/store"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// Bulk matching: the forwards a bulk redelivery of a target matches (its
// newest forward of each event in a state and window), counted once and
// read in batches, River's jobs and the fast path's forwards alike.

// queuedWaiting is the condition that job j (of sender $1, target $2) is a
// redelivery queued after a forward of its event that is not finished yet
// (EarlierForwardUnfinished's jobs), or whose forward is still in the
// outbox (the fast path's attempt under way, as a lease-holding outbox row):
// it is not under way, even while River runs it only to find that it must
// wait. $%[1]d are the events of the target whose forward is in the outbox
// (waitingInOutbox), $%[2]d the River states of an unfinished forward
// (unfinishedJobs): forward_outbox is not read here, as Citus refuses a
// statement that correlates a distributed table with River's (local) one.
// The probe is written as notSuperseded's (a scalar subquery ordered by
// hookgate's index).
var queuedWaiting = jobSQL(`(j.args ? 'after' AND ((SELECT n.id FROM river_job n WHERE n.kind = {forward_kind}
    AND n.args->>'sender' = $1 AND n.args->>'target' = $2
    AND n.args->>'event_id' >= j.args->>'event_id' AND n.args->>'event_id' <= j.args->>'event_id'
    AND n.id <> j.id AND n.state = ANY($%[2]d::river_job_state[])
    AND (n.id < j.id OR NOT n.args ? 'after')
    ORDER BY n.args->>'event_id', n.id LIMIT 1) IS NOT NULL
  OR j.args->>'event_id' = ANY($%[1]d::text[])))`)

// queuedCandidatesSQL selects the events of the redeliveries queued after a
// forward (jobs with "after") of sender $1's target $2, from job $4
// (exclusive) to job $3, that a bulk redelivery of running or retrying
// forwards may match: those unfinished (in the River states $6), or
// finished at or after $5 (the time the request asked about; NULL: none). A
// job matches (underWayAt, or its state now) only if it is unfinished, or
// finished after that time, so none matches later that is not selected
// here, whatever state it moves to in between. It reads River's table
// alone: the target's forward jobs, in the order of hookgate's index on
// them, the one path its ORDER BY leaves without a sort under
// store.IndexOrderScans (River's index on kind would read every forward job; see
// plans.go).
var queuedCandidatesSQL = jobSQL(`SELECT DISTINCT j.args->>'event_id' FROM river_job j
WHERE j.kind = {forward_kind} AND j.args->>'sender' = $1 AND j.args->>'target' = $2 AND j.args ? 'after'
  AND j.id <= $3 AND j.id > $4
  AND (j.state = ANY($6::river_job_state[]) OR j.finalized_at >= $5)
ORDER BY 1`)

// inOutboxSQL selects which of the events $3 of sender $1 still have an
// outbox row to target $2: a probe of forward_outbox's key per event (a
// LATERAL subquery, kept apart by its LIMIT, under store.OutboxIndexScans: not
// event_id = ANY, which PostgreSQL 15 may apply as a filter over the
// sender's rows; see plans.go), on the sender's shard on Citus.
var inOutboxSQL = `SELECT k.event_id::text FROM unnest($3::uuid[]) AS k(event_id)
  CROSS JOIN LATERAL (SELECT 1 FROM forward_outbox o WHERE o.sender = $1 AND o.event_id = k.event_id AND o.target = $2
    AND ` + store.Unrecorded("o") + ` LIMIT 1) p`

// waitingInOutbox returns the events whose forward to f's target is still
// in the outbox, among those of the redeliveries queued after a forward
// that a bulk redelivery of f (running or retrying) may match up to job
// maxID and after job afterID (queuedCandidatesSQL): the events
// queuedWaiting takes. Two statements, one per side, so that neither joins
// River's (local) table with forward_outbox (distributed by sender on
// Citus); the second is skipped when there are no candidates (no
// redelivery queued after a forward: the common case). A forward that
// leaves the outbox after the second statement is taken as still in it: as
// if the caller's statement had run just before it left.
func (q *Jobs) waitingInOutbox(ctx context.Context, f Filter, maxID, afterID int64) ([]string, error) {
	var since *time.Time
	if !f.InStateAt.IsZero() {
		since = &f.InStateAt
	}
	rows, err := store.QueryUnder(ctx, q.db, store.IndexOrderScans, queuedCandidatesSQL, f.Sender, f.Target, maxID, afterID, since, unfinishedJobs)
	if err != nil {
		return nil, fmt.Errorf("redeliveries queued after a forward: %w", err)
	}
	candidates, err := pgx.CollectRows(rows, pgx.RowTo[*string])
	if err != nil {
		return nil, fmt.Errorf("redeliveries queued after a forward: %w", err)
	}
	ids := make([]pgtype.UUID, 0, len(candidates))
	for _, c := range candidates {
		if c == nil {
			continue
		}
		id, err := uuid.Parse(*c)
		if err != nil {
			continue // a malformed job's event has no outbox row
		}
		ids = append(ids, pgtype.UUID{Bytes: id, Valid: true})
	}
	if len(ids) == 0 {
		return []string{}, nil
	}
	rows, err = store.QueryUnder(ctx, q.db, store.OutboxIndexScans, inOutboxSQL, f.Sender, f.Target, ids)
	if err != nil {
		return nil, fmt.Errorf("outbox rows of redeliveries queued after a forward: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("outbox rows of redeliveries queued after a forward: %w", err)
	}
	return out, nil
}

// NewestJobID returns the newest ID River's job sequence has given, to a
// River job of any kind or a forward_delivered row (0 when none), and the
// database's time.
func (q *Jobs) NewestJobID(ctx context.Context) (int64, time.Time, error) {
	var (
		id  int64
		now time.Time
	)
	if err := q.db.QueryRow(ctx, `SELECT CASE WHEN is_called THEN last_value ELSE 0 END, statement_timestamp() FROM river_job_id_seq`).Scan(&id, &now); err != nil {
		return 0, time.Time{}, fmt.Errorf("newest job: %w", err)
	}
	return id, now, nil
}

// bulkWhere returns the conditions of the forwards a bulk redelivery of f
// matches (the newest forward of each event, in f's state and window), up
// to job maxID and after job afterID, and their arguments. For running or
// retrying forwards it first reads which redeliveries queued after a
// forward still wait for it in the outbox (waitingInOutbox).
func (q *Jobs) bulkWhere(ctx context.Context, f Filter, maxID, afterID int64) (where, error) {
	var inOutbox []string
	if f.State == StateRunning || f.State == StateRetrying {
		var err error
		if inOutbox, err = q.waitingInOutbox(ctx, f, maxID, afterID); err != nil {
			return where{}, err
		}
	}
	w := f.where(true, inOutbox)
	w.args = append(w.args, maxID, afterID)
	n := len(w.args)
	w.and(fmt.Sprintf("j.id <= $%d AND j.id > $%d", n-1, n), fmt.Sprintf("d.id <= $%d AND d.id > $%d", n-1, n))
	return w, nil
}

// CountBulkMatch returns how many forwards a bulk redelivery of f matches
// up to job maxID: the newest forward of each event to the target, in f's
// state and window. Under store.IndexOrderScans, so that each probe of
// notSuperseded is one of an index (the count itself reads every job of
// the target, or every forward job, whichever PostgreSQL takes for the
// cheaper: once per request).
func (q *Jobs) CountBulkMatch(ctx context.Context, f Filter, maxID int64) (int64, error) {
	w, err := q.bulkWhere(ctx, f, maxID, 0)
	if err != nil {
		return 0, fmt.Errorf("count forwards to redeliver: %w", err)
	}
	var n int64
	sql := `SELECT (SELECT count(*) FROM river_job j WHERE ` + w.jobs + `)`
	if w.delivered != "" {
		sql += ` + (SELECT count(*) FROM forward_delivered d WHERE ` + w.delivered + `)`
	}
	rows, err := store.QueryUnder(ctx, q.db, store.IndexOrderScans, sql, w.args...)
	if err == nil {
		n, err = pgx.CollectExactlyOneRow(rows, pgx.RowTo[int64])
	}
	if err != nil {
		return 0, fmt.Errorf("count forwards to redeliver: %w", err)
	}
	return n, nil
}

// Matched is a forward a bulk redelivery matched.
type Matched struct {
	JobID      int64
	EventID    uuid.UUID
	DeliveryID string
}

// bulkMatchBatchSQL is BulkMatchBatch's statement for w, whose last
// argument is the limit: River's jobs in the order of their primary key
// (from the batch's first job on, not the target's whole history per
// batch) and forward_delivered's by its index on (sender, target, id),
// merged, under store.IndexOrderScans: each probe of notSuperseded is one of an
// index (see plans.go).
func bulkMatchBatchSQL(w where, limit int) string {
	order := fmt.Sprintf(" ORDER BY 1 LIMIT $%d", len(w.args))
	sql := `(SELECT j.id, j.args->>'event_id', coalesce(j.args->>'delivery_id', '') FROM river_job j WHERE ` + w.jobs + order + `)`
	if w.delivered != "" {
		sql += ` UNION ALL (SELECT d.id, d.event_id, d.delivery_id FROM forward_delivered d WHERE ` + w.delivered + order + `)` + order
	}
	return sql
}

// BulkMatchBatch returns up to limit of the forwards CountBulkMatch counts,
// after job afterID, oldest first.
func (q *Jobs) BulkMatchBatch(ctx context.Context, f Filter, maxID, afterID int64, limit int) ([]Matched, error) {
	w, err := q.bulkWhere(ctx, f, maxID, afterID)
	if err != nil {
		return nil, fmt.Errorf("select forwards to redeliver: %w", err)
	}
	w.args = append(w.args, limit)
	rows, err := store.QueryUnder(ctx, q.db, store.IndexOrderScans, bulkMatchBatchSQL(w, limit), w.args...)
	if err != nil {
		return nil, fmt.Errorf("select forwards to redeliver: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Matched, error) {
		var m Matched
		return m, row.Scan(&m.JobID, &m.EventID, &m.DeliveryID)
	})
	if err != nil {
		return nil, fmt.Errorf("select forwards to redeliver: %w", err)
	}
	return out, nil
}

// fastLeasedSQL selects the outbox rows of sender $1's target $2 accepted
// before $3 whose lease has not ended: the fast path's first attempts under
// way (or about to be made). There are at most about as many as the fast
// path holds in flight (each process's dispatch workers and queue:
// forward.DefaultDispatchWorkers and DefaultDispatchQueue), plus those a
// crashed process left leased until their lease ends. On Citus it runs on
// the sender's shard.
var fastLeasedSQL = `SELECT event_id::text, delivery_id, created_at FROM forward_outbox
WHERE sender = $1 AND target = $2 AND leased_until > statement_timestamp() AND created_at < $3 AND ` + store.Unrecorded("")

// fastRunningSQL selects the fast path's first attempts of sender $1's
// target $2 that were under way at $3 (a bulk redelivery of running
// forwards, Filter.InStateAt): the outbox rows still leased (the attempt
// runs), read before by fastLeasedSQL and passed as the arrays $4 (event
// IDs), $5 (delivery IDs) and $6 (when accepted), and the forward_delivered
// rows attempted before $3 and delivered at or after it (it ran then, and
// has been delivered since). A failed first attempt is a River job, which
// underWayAt judges. An event that already has a redelivery queued after
// its forward (a job with "after"), unfinished (in the River states $7) or
// made at or after $3, is left out: a request counts it no more, and a job
// run twice (River's rescue, a new slice) queues one redelivery per
// forward. %s is the window's condition on f.created_at.
//
// The outbox is read in a statement of its own, first, because on Citus
// forward_outbox is distributed and forward_delivered and River's table are
// local, and Citus refuses a statement that joins or correlates the two
// kinds. A forward whose attempt is recorded in between (the recorder
// deletes its outbox row and inserts its forward_delivered row in one
// statement) is in both reads: its leased row is dropped when its event has
// a forward_delivered row to the target, which is then taken as it is (it
// is counted once, or not at all if its attempt started at or after $3, as
// one statement then would). One recorded as a River job in between (a
// failed attempt) stays as still under way: a redelivery queued after it
// waits for that job.
var fastRunningSQL = jobSQL(`SELECT id, event_id, delivery_id FROM (
  SELECT -1::bigint AS id, o.event_id, o.delivery_id, o.created_at
  FROM unnest($4::text[], $5::text[], $6::timestamptz[]) AS o(event_id, delivery_id, created_at)
  WHERE NOT EXISTS (SELECT 1 FROM forward_delivered d WHERE d.sender = $1 AND d.event_id = o.event_id AND d.target = $2)
  UNION ALL
  SELECT d.id, d.event_id, d.delivery_id, d.created_at
  FROM forward_delivered d
  WHERE d.sender = $1 AND d.target = $2 AND d.attempted_at < $3 AND d.delivered_at >= $3
) f
WHERE NOT EXISTS (SELECT 1 FROM river_job n WHERE n.kind = {forward_kind}
    AND n.args->>'sender' = $1 AND n.args->>'target' = $2 AND n.args->>'event_id' = f.event_id AND n.args ? 'after'
    AND (n.created_at >= $3 OR n.state = ANY($7::river_job_state[])))%s`)

// fastRunning reads the leased outbox rows of f's target (fastLeasedSQL)
// and returns fastRunningSQL for f (running, under way at at) with its
// window, and its arguments.
func (q *Jobs) fastRunning(ctx context.Context, f Filter, at time.Time) (string, []any, error) {
	rows, err := q.db.Query(ctx, fastLeasedSQL, f.Sender, f.Target, at) //nolint:rowserrcheck // pgx.ForEachRow checks rows.Err
	if err != nil {
		return "", nil, fmt.Errorf("leased outbox rows: %w", err)
	}
	events, deliveries, accepted := []string{}, []string{}, []time.Time{}
	var (
		event, delivery string
		created         time.Time
	)
	_, err = pgx.ForEachRow(rows, []any{&event, &delivery, &created}, func() error {
		events, deliveries, accepted = append(events, event), append(deliveries, delivery), append(accepted, created)
		return nil
	})
	if err != nil {
		return "", nil, fmt.Errorf("leased outbox rows: %w", err)
	}
	args := []any{f.Sender, f.Target, at, events, deliveries, accepted, unfinishedJobs}
	cond := ""
	if !f.Since.IsZero() {
		args = append(args, f.Since)
		cond += fmt.Sprintf(" AND f.created_at >= $%d", len(args))
	}
	if !f.Until.IsZero() {
		args = append(args, f.Until)
		cond += fmt.Sprintf(" AND f.created_at < $%d", len(args))
	}
	return fmt.Sprintf(fastRunningSQL, cond), args, nil
}

// CountFastPathRunning returns how many of the fast path's first attempts
// of f's target are under way at at (their outbox rows leased; see
// fastRunningSQL), within f's window: what a bulk redelivery of running
// forwards matches besides River's jobs (CountBulkMatch). Two statements:
// the outbox's, then the local tables'.
func (q *Jobs) CountFastPathRunning(ctx context.Context, f Filter, at time.Time) (int64, error) {
	sql, args, err := q.fastRunning(ctx, f, at)
	if err != nil {
		return 0, fmt.Errorf("count fast-path forwards under way: %w", err)
	}
	var n int64
	if err := q.db.QueryRow(ctx, `SELECT count(*) FROM (`+sql+`) m`, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("count fast-path forwards under way: %w", err)
	}
	return n, nil
}

// FastPathRunningBatch returns up to limit of the fast path's first
// attempts of f's target that were under way at f.InStateAt (see
// fastRunningSQL), oldest first: JobID is -1 for one still under way (not
// yet a job), else its forward_delivered row's ID. Those a previous batch
// queued a redelivery after are left out, so a caller inserts a batch's
// redeliveries and asks again until a batch is short. Two statements: the
// outbox's, then the local tables'.
func (q *Jobs) FastPathRunningBatch(ctx context.Context, f Filter, limit int) ([]Matched, error) {
	sql, args, err := q.fastRunning(ctx, f, f.InStateAt)
	if err != nil {
		return nil, fmt.Errorf("select fast-path forwards under way: %w", err)
	}
	args = append(args, limit)
	rows, err := q.db.Query(ctx, sql+fmt.Sprintf(" ORDER BY f.created_at, f.event_id LIMIT $%d", len(args)), args...)
	if err != nil {
		return nil, fmt.Errorf("select fast-path forwards under way: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Matched, error) {
		var m Matched
		return m, row.Scan(&m.JobID, &m.EventID, &m.DeliveryID)
	})
	if err != nil {
		return nil, fmt.Errorf("select fast-path forwards under way: %w", err)
	}
	return out, nil
}
