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

// queuedWaiting is the condition that job j is a redelivery that still
// waits. It waits for an unfinished forward of its event, or for one still
// in the outbox. Such a job is not under way, even while River runs it only
// to find that it must wait. The events still in the outbox come as a
// parameter, because Citus refuses a statement that correlates the
// distributed outbox with River's local table.
var queuedWaiting = jobSQL(`(j.args ? 'after' AND ((SELECT n.id FROM river_job n WHERE n.kind = {forward_kind}
    AND n.args->>'sender' = $1 AND n.args->>'target' = $2
    AND n.args->>'event_id' >= j.args->>'event_id' AND n.args->>'event_id' <= j.args->>'event_id'
    AND n.id <> j.id AND n.state = ANY($%[2]d::river_job_state[])
    AND (n.id < j.id OR NOT n.args ? 'after')
    ORDER BY n.args->>'event_id', n.id LIMIT 1) IS NOT NULL
  OR j.args->>'event_id' = ANY($%[1]d::text[])))`)

// queuedCandidatesSQL selects the events of the queued redeliveries of
// sender $1's target $2 in the job range ($4, $3]. These are the ones
// that a bulk redelivery of running or retrying forwards may match: those
// unfinished, or finished at or after $5. A job matches only in those
// cases, so no job matches later that is not selected here.
var queuedCandidatesSQL = jobSQL(`SELECT DISTINCT j.args->>'event_id' FROM river_job j
WHERE j.kind = {forward_kind} AND j.args->>'sender' = $1 AND j.args->>'target' = $2 AND j.args ? 'after'
  AND j.id <= $3 AND j.id > $4
  AND (j.state = ANY($6::river_job_state[]) OR j.finalized_at >= $5)
ORDER BY 1`)

// inOutboxSQL selects which of the events $3 of sender $1 still have an
// outbox row to target $2. It probes forward_outbox's key once per event
// under [store.OutboxIndexScans]. event_id = ANY would not do, because
// PostgreSQL 15 may apply it as a filter over the sender's rows.
var inOutboxSQL = `SELECT k.event_id::text FROM unnest($3::uuid[]) AS k(event_id)
  CROSS JOIN LATERAL (SELECT 1 FROM forward_outbox o WHERE o.sender = $1 AND o.event_id = k.event_id AND o.target = $2
    AND ` + store.Unrecorded("o") + ` LIMIT 1) p`

// waitingInOutbox returns the events that queuedWaiting takes: those of
// the candidate redeliveries whose forward to f's target is still in the
// outbox. It runs one statement per table, so neither joins River's local
// table with the distributed outbox. The second is skipped when there are
// no candidates, the common case. A forward that leaves the outbox just
// after counts as still in it.
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

// NewestJobID returns the newest ID that River's job sequence has given,
// or 0, and the database's time. The sequence numbers River's jobs of
// every kind and forward_delivered's rows.
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

// bulkWhere returns the conditions and arguments of the forwards that a
// bulk redelivery of f matches in the job range (afterID, maxID]. These
// are the newest forward of each event in f's state and window. byState
// writes the jobs' range for [where.jobsByState]: as row comparisons with
// the branch's state, so that only hookgate's index by state serves it. As
// plain bounds on the ID, River's primary key served them too: when the
// statistics said river_job was small, PostgreSQL read every job of every
// sender from the batch's first on, in the order of its IDs.
func (q *Jobs) bulkWhere(ctx context.Context, f Filter, maxID, afterID int64, byState bool) (where, error) {
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
	jobs := fmt.Sprintf("j.id <= $%d AND j.id > $%d", n-1, n)
	if byState {
		jobs = fmt.Sprintf("(j.state, j.id) <= ({state}, $%d) AND (j.state, j.id) > ({state}, $%d)", n-1, n)
	}
	w.and(jobs, fmt.Sprintf("d.id <= $%d AND d.id > $%d", n-1, n))
	return w, nil
}

// CountBulkMatch returns how many forwards a bulk redelivery of f matches
// up to job maxID: the newest forward of each event to the target, in f's
// state and window.
func (q *Jobs) CountBulkMatch(ctx context.Context, f Filter, maxID int64) (int64, error) {
	w, err := q.bulkWhere(ctx, f, maxID, 0, false)
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

// bulkMatchBatchSQL is the statement of [Jobs.BulkMatchBatch] for f and
// w, which [Jobs.bulkWhere] returned with byState. It appends the states
// and limit to w's arguments. It merges River's jobs, each state's read
// in the order of hookgate's index by state ([where.jobsByState]), with
// forward_delivered's rows, read by its index on sender, target and ID,
// from the batch's first job on: a batch reads about its jobs and the
// superseded ones among them, never the jobs of other senders and targets
// that River's primary key gave it.
func bulkMatchBatchSQL(w *where, f Filter, limit int) string {
	sql := `SELECT * FROM (` + w.jobsByState(f, `j.id, j.args->>'event_id', coalesce(j.args->>'delivery_id', '')`, "ASC")
	if w.delivered != "" {
		sql += "\nUNION ALL\n" + orderedBranch(`SELECT d.id, d.event_id, d.delivery_id FROM forward_delivered d WHERE `+w.delivered+` ORDER BY d.id`, "delivered")
	}
	w.args = append(w.args, limit)
	return sql + fmt.Sprintf(`) u ORDER BY 1 LIMIT $%d`, len(w.args))
}

// BulkMatchBatch returns up to limit of the forwards that
// [Jobs.CountBulkMatch] counts, after job afterID, oldest first.
func (q *Jobs) BulkMatchBatch(ctx context.Context, f Filter, maxID, afterID int64, limit int) ([]Matched, error) {
	w, err := q.bulkWhere(ctx, f, maxID, afterID, true)
	if err != nil {
		return nil, fmt.Errorf("select forwards to redeliver: %w", err)
	}
	sql := bulkMatchBatchSQL(&w, f, limit)
	rows, err := store.QueryUnder(ctx, q.db, store.IndexOrderScans, sql, w.args...)
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

// fastLeasedSQL selects the outbox rows of sender $1's target $2 that
// were accepted before $3 and are still leased. These are the fast path's
// first attempts under way or about to start. There are about as many as
// the fast path holds in flight, plus those that a crashed process left
// leased.
var fastLeasedSQL = `SELECT event_id::text, delivery_id, created_at FROM forward_outbox
WHERE sender = $1 AND target = $2 AND leased_until > statement_timestamp() AND created_at < $3 AND ` + store.Unrecorded("")

// fastRunningSQL selects the fast path's first attempts of sender $1's
// target $2 that were under way at $3. These are the leased outbox rows
// that fastLeasedSQL read, passed as arrays in $4 to $6. They also include
// the forward_delivered rows attempted before $3 and delivered since. A
// failed first attempt is a River job, which underWayAt judges. An event
// that already has a queued redelivery is left out. So a request no longer
// counts it, and a job run twice queues one redelivery per forward. %s is
// the window's condition on f.created_at.
//
// The outbox is read first, in a statement of its own, because Citus
// refuses a statement that joins the distributed outbox with local tables.
// A forward recorded in between is in both reads. Its leased row is
// dropped when its event has a forward_delivered row to the target, so it
// is counted once, as one statement would. A forward recorded as a failed
// River job in between stays under way, and a redelivery waits for it.
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

// fastRunning reads the leased outbox rows of f's target. It returns
// fastRunningSQL for f's window and the time at, with its arguments.
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
// of f's target were under way at at, within f's window. A bulk
// redelivery of running forwards matches them besides River's jobs.
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
// attempts of f's target that were under way at f.InStateAt, oldest first.
// JobID is -1 for one still under way, or else its forward_delivered row's
// ID. Those that a previous batch queued a redelivery after are left out.
// So a caller inserts a batch's redeliveries and asks again until a batch
// is short.
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
