package queue

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/hookgate/hookgate/internal/store"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/rivertype"
)

// The operator reads of forwards: an event's forwards, a target's counts
// and its forwards page by page (the JSON API and the console read both
// through them), and the backlog of unfinished forwards (a metric).

// eventJobsSQL finds an event's forwards through River's GIN index on args
// (river_job_args_index): args @> {"event_id": …} is the indexable form;
// and the event's delivered first attempts in forward_delivered, in River's
// state $3 (completed).
var eventJobsSQL = jobSQL(`SELECT id, state::text, attempt, max_attempts, coalesce(args->>'target', ''), coalesce(args->>'url', ''), created_at,
       errors[array_upper(errors, 1)], metadata->'output'
FROM river_job
WHERE kind = {forward_kind} AND args @> jsonb_build_object('event_id', $1::text)
UNION ALL
SELECT d.id, $3::text, 1, d.max_attempts, d.target, '', d.created_at, NULL, ` + deliveredOutput + `
FROM forward_delivered d WHERE d.sender = $2 AND d.event_id = $1::text
ORDER BY 1`)

// deliveredOutput is the recorded output (Output) of forward_delivered's
// row d, as River's worker records it under metadata.output.
const deliveredOutput = `jsonb_build_object('attempt', 1, 'status', d.status, 'delivered_at', d.delivered_at)`

// EventForwards returns the forwards of the event of sender: first those
// still in the outbox (pending, JobID 0), then its jobs, oldest first: one
// per target of its sender when it was accepted, and one per target for
// each redelivery. It returns an empty slice, not nil, when the event has
// none (its sender had no targets, or the jobs were deleted after River's
// retention).
func (q *Jobs) EventForwards(ctx context.Context, sender string, eventID uuid.UUID) ([]Forward, error) {
	out, err := q.outboxOfEvent(ctx, sender, eventID)
	if err != nil {
		return nil, err
	}
	rows, err := q.db.Query(ctx, eventJobsSQL, eventID.String(), sender, jobCompleted)
	if err != nil {
		return nil, fmt.Errorf("list forwards of event %s: %w", eventID, err)
	}
	jobs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Forward, error) {
		var (
			f         Forward
			state     string
			lastErr   []byte // jsonb, NULL without errors
			outputRaw []byte // jsonb, NULL without output
		)
		if err := row.Scan(&f.JobID, &state, &f.Attempts, &f.MaxAttempts, &f.Target, &f.LegacyURL, &f.CreatedAt, &lastErr, &outputRaw); err != nil {
			return Forward{}, err
		}
		if err := decodeOutcome(&f, rivertype.JobState(state), lastErr, outputRaw); err != nil {
			return Forward{}, fmt.Errorf("job %d: %w", f.JobID, err)
		}
		return f, nil
	})
	if err != nil {
		return nil, fmt.Errorf("list forwards of event %s: %w", eventID, err)
	}
	return append(out, jobs...), nil
}

// notSuperseded is the condition that job j (of sender $1, target $2) is
// the newest forward of its event to its target: one probe of an index per
// job, a scalar subquery (never turned into an anti-join, which on a table
// PostgreSQL has no statistics of yet compared every pair of the target's
// jobs) whose ORDER BY, with the event compared by a range, makes
// hookgate's index on the forward jobs (and forward_delivered's primary
// key) the one path without a sort under store.IndexOrderScans: not River's
// index on kind, which some statistics made the cheaper, and which walks
// every forward job per job (see plans.go).
var notSuperseded = notSupersededOf("j", "$2")

// notSupersededOf is notSuperseded for the job with the alias alias, of
// sender $1 and of the target given by the SQL expression target.
func notSupersededOf(alias, target string) string {
	return strings.NewReplacer("{target}", target, "j.", alias+".").Replace(jobSQL(`(SELECT n.id FROM river_job n WHERE n.kind = {forward_kind}
    AND n.args->>'sender' = $1 AND n.args->>'target' = {target}
    AND n.args->>'event_id' >= j.args->>'event_id' AND n.args->>'event_id' <= j.args->>'event_id' AND n.id > j.id
    ORDER BY n.args->>'event_id', n.id LIMIT 1) IS NULL
  AND (SELECT n.id FROM forward_delivered n WHERE n.sender = $1
    AND n.event_id >= j.args->>'event_id' AND n.event_id <= j.args->>'event_id' AND n.target = {target} AND n.id > j.id
    ORDER BY n.event_id, n.id LIMIT 1) IS NULL`))
}

// deliveredNotSuperseded is notSuperseded for forward_delivered's row d: no
// newer job of its event to its target (an event has at most one row
// there per target: its outbox row's first attempt).
var deliveredNotSuperseded = jobSQL(`(SELECT n.id FROM river_job n WHERE n.kind = {forward_kind}
    AND n.args->>'sender' = $1 AND n.args->>'target' = $2
    AND n.args->>'event_id' >= d.event_id AND n.args->>'event_id' <= d.event_id AND n.id > d.id
    ORDER BY n.args->>'event_id', n.id LIMIT 1) IS NULL`)

// Counts are a target's forwards by state. Pending includes the forwards
// still in the outbox; Delivered counts every delivery River still keeps
// (CompletedJobRetentionPeriod: the longest sender retention), an event
// redelivered counting once per delivery; Failed counts the failures not
// followed by a newer forward of the same event (see failed.go).
type Counts struct {
	Pending, Running, Retrying, Delivered, Failed int64
}

// countsSQL counts the forward jobs of sender $1 in the River states $2
// (those of forwards not finished) by target, state and whether an attempt
// failed (failedAttempt: a waiting job is retrying or pending). It reads
// the sender's jobs not finished alone, through hookgate's index on them
// (migration 23, whose predicate unfinishedForwards repeats), in that
// index's order (sender, target, state, id), which under
// store.IndexOrderScans (no sort) is the one path without a disabled node
// whatever the statistics say (see store/plans.go). Not the finished jobs
// River keeps (issue 43: 3.4 s on 10 million finished jobs when it read
// every job of the sender, through hookgate's index on the forwards'
// sender), nor the unfinished jobs of every sender (River's index on job
// state), nor the sender's failed ones (about 10 µs each with their
// checks for a newer forward, before migration 23): those are counted
// apart (failedCountsSQL).
var countsSQL = jobSQL(`SELECT j.target, j.state::text, j.failed, count(*) FROM (
  SELECT j.args->>'target' AS target, j.state, ` + failedAttempt("j") + ` AS failed FROM river_job j
  WHERE ` + unfinishedForwards + ` AND j.args->>'sender' = $1 AND j.state = ANY($2::river_job_state[])
  ORDER BY j.args->>'target', j.state, j.id) j
GROUP BY 1, 2, 3`)

// unfinishedForwards is the condition that job j is a forward not finished
// (not completed, cancelled nor discarded: River's states of a delivered
// and of a failed forward): the predicate of hookgate's index on such jobs
// (migration 23), as literals (a parameter in a generic plan implies
// nothing, see forwardKind), which a statement must repeat for PostgreSQL
// to read that index. TestForwardKindLiteral checks the states.
const unfinishedForwards = `j.kind = {forward_kind} AND j.state NOT IN ('cancelled', 'completed', 'discarded')`

// completedCountsSQL counts the completed forward jobs of sender $1 by
// target, as countsSQL's rows of River's state $2 (completed): every job
// of the sender, read through hookgate's index on the forwards' sender,
// target and event in its order (the one path without a sort under
// store.IndexOrderScans), not River's index on job state, which would read
// every sender's. Sent only when the delivered forwards are asked for.
var completedCountsSQL = jobSQL(`SELECT j.target, $2::text, false, count(*) FROM (
  SELECT j.args->>'target' AS target FROM river_job j
  WHERE j.kind = {forward_kind} AND j.args->>'sender' = $1 AND j.state = $2::river_job_state
  ORDER BY j.args->>'target', j.args->>'event_id', j.id) j
GROUP BY 1`)

// deliveredCountsSQL counts the delivered first attempts of sender $1 in
// forward_delivered by target, as countsSQL's rows of River's state $2
// (completed): the target's whole history, sent only when the delivered
// forwards are asked for.
const deliveredCountsSQL = `SELECT target, $2::text, false, count(*) FROM forward_delivered WHERE sender = $1 GROUP BY 1`

// CountForwards returns the counts of sender's forwards by target name,
// Delivered left 0 unless delivered is true (counting them reads the
// target's whole history). A target without forwards is absent (its counts
// are all zero). Jobs of versions that named targets by URL are not
// counted. The JSON API and the console both count with it. One round
// trip: the planner settings, the counts of the jobs not finished
// (countsSQL), of the failed ones (the kept counts and the failed jobs not
// folded into them yet, see failed.go), with delivered those of the
// completed jobs and of the delivered first attempts, and the outbox's.
func (q *Jobs) CountForwards(ctx context.Context, sender string, delivered bool) (map[string]Counts, error) {
	out := map[string]Counts{}
	var (
		target *string
		state  string
		failed bool
		n      int64
	)
	add := func(rows pgx.Rows) error {
		_, err := pgx.ForEachRow(rows, []any{&target, &state, &failed, &n}, func() error {
			if target == nil {
				return nil
			}
			c := out[*target]
			switch stateOf(rivertype.JobState(state), failed) {
			case StatePending:
				c.Pending += n
			case StateRunning:
				c.Running += n
			case StateRetrying:
				c.Retrying += n
			case StateDelivered:
				c.Delivered += n
			case StateFailed:
				c.Failed += n
			}
			out[*target] = c
			return nil
		})
		return err
	}
	var b pgx.Batch
	b.Queue(store.IndexOrderScans)
	b.Queue(countsSQL, sender, unfinishedJobs).Query(add)
	b.Queue(failedCountsSQL, sender, failedJobs[0]).Query(add)
	if delivered {
		b.Queue(completedCountsSQL, sender, jobCompleted).Query(add)
		b.Queue(deliveredCountsSQL, sender, jobCompleted).Query(add)
	}
	b.Queue(outboxCountsSQL, sender).Query(func(rows pgx.Rows) error {
		var name string
		_, err := pgx.ForEachRow(rows, []any{&name, &n}, func() error {
			c := out[name]
			c.Pending += n
			out[name] = c
			return nil
		})
		return err
	})
	if err := q.db.SendBatch(ctx, &b).Close(); err != nil {
		return nil, fmt.Errorf("count forwards of %s: %w", sender, err)
	}
	return out, nil
}

// Filter selects forwards of one target: in State (any state when ""),
// whose time is at or after Since and before Until (no bound when zero).
// A forward's time is when it reached its state for delivered and failed
// forwards (River's finalized_at), and when it was enqueued otherwise.
type Filter struct {
	Sender, Target string
	State          State
	Since, Until   time.Time
	// InStateAt, with State running or retrying and not zero, matches the
	// forwards in State at that time, whatever they have become since
	// (a bulk redelivery's job matches what its request asked for): see
	// underWayAt.
	InStateAt time.Time
}

// underWayAt are the conditions that job j was running, or retrying, at the
// time $%[1]d, from what it is now ($%[2]d and $%[3]d are the River states
// of a running and of a retrying forward): its state, when its latest
// attempt started (attempted_at), when that attempt's error was recorded
// (its last error's "at"), and when it finished. Running then: running now,
// or its attempt then has ended since (failed and waits for a retry, or
// finished). Retrying then: waiting for a retry whose failure came before,
// or its retry (attempt 2 or later) has started since.
var underWayAt = map[State]string{
	StateRunning: `j.attempted_at < $%[1]d AND (j.state = ANY($%[2]d::river_job_state[])
    OR (j.state = ANY($%[3]d::river_job_state[]) AND (j.errors[array_upper(j.errors, 1)]->>'at')::timestamptz >= $%[1]d)
    OR j.finalized_at >= $%[1]d)`,
	StateRetrying: `((j.state = ANY($%[3]d::river_job_state[]) AND (j.errors[array_upper(j.errors, 1)]->>'at')::timestamptz < $%[1]d)
    OR (j.attempt >= 2 AND j.attempted_at >= $%[1]d
      AND (j.state = ANY($%[2]d::river_job_state[]) OR j.state = ANY($%[3]d::river_job_state[]) OR j.finalized_at >= $%[1]d)))`,
}

// where is a Filter's condition on both tables of forwards.
type where struct {
	// jobs is the condition over river_job j; delivered the one over
	// forward_delivered d, "" when f's state excludes its rows.
	jobs, delivered string
	args            []any
}

// and adds cond (with the same placeholders) to both conditions.
func (w *where) and(jobs, delivered string) {
	w.jobs += " AND " + jobs
	if w.delivered != "" {
		w.delivered += " AND " + delivered
	}
}

// targetJobs is the condition that job j is a forward of sender $1 to
// target $2, in the terms of hookgate's index on the forward jobs.
var targetJobs = jobSQL(`j.kind = {forward_kind} AND j.args->>'sender' = $1 AND j.args->>'target' = $2`)

// where returns the conditions of f over river_job j and forward_delivered
// d and their arguments, $1 and $2 being the sender and the target. It adds
// the not-superseded condition: for failed forwards, that the job is not
// marked superseded (as the counts have it, see failed.go); for every
// other state when latest is true, that no newer forward of its event to
// its target is there (notSuperseded); and then, for running or retrying forwards, that j is not
// a redelivery still waiting (queuedWaiting), inOutbox being the events of
// f's target whose forward is in the outbox (waitingInOutbox).
func (f Filter) where(latest bool, inOutbox []string) where {
	w := where{
		jobs:      targetJobs,
		delivered: `d.sender = $1 AND d.target = $2`,
		args:      []any{f.Sender, f.Target},
	}
	col, dcol := "j.created_at", "d.created_at"
	if (f.State == StateRunning || f.State == StateRetrying) && !f.InStateAt.IsZero() {
		w.args = append(w.args, f.InStateAt, runningJobs, retryingJobs)
		n := len(w.args)
		w.jobs += " AND " + fmt.Sprintf(underWayAt[f.State], n-2, n-1, n)
		w.delivered = "" // a delivered first attempt was never a job under way
	} else if f.State != "" {
		w.args = append(w.args, stateNames(f.State))
		w.jobs += " AND " + inState(f.State, len(w.args))
		if f.State == StateDelivered || f.State == StateFailed {
			col, dcol = "j.finalized_at", "d.delivered_at"
		}
		if f.State != StateDelivered {
			w.delivered = ""
		}
	}
	if !f.Since.IsZero() {
		w.args = append(w.args, f.Since)
		w.and(fmt.Sprintf("%s >= $%d", col, len(w.args)), fmt.Sprintf("%s >= $%d", dcol, len(w.args)))
	}
	if !f.Until.IsZero() {
		w.args = append(w.args, f.Until)
		w.and(fmt.Sprintf("%s < $%d", col, len(w.args)), fmt.Sprintf("%s < $%d", dcol, len(w.args)))
	}
	switch {
	case f.State == StateFailed: // only River's jobs: w.delivered is ""
		w.and(notMarkedSuperseded("j"), "")
	case latest:
		w.and(notSuperseded, deliveredNotSuperseded)
	}
	if latest && (f.State == StateRunning || f.State == StateRetrying) {
		if inOutbox == nil {
			inOutbox = []string{}
		}
		w.args = append(w.args, inOutbox, unfinishedJobs)
		n := len(w.args)
		w.jobs += " AND NOT " + fmt.Sprintf(queuedWaiting, n-1, n)
	}
	return w
}

// TargetForward is one forward of a target, as ListTargetForwards returns
// it.
type TargetForward struct {
	Forward
	EventID    uuid.UUID
	DeliveryID string
	// EventType is the event's type; "" when it has none or is no longer
	// stored.
	EventType string
	// AttemptedAt is when the latest attempt started, FinishedAt when the
	// forward was delivered or failed; zero when not (yet).
	AttemptedAt time.Time
	FinishedAt  time.Time
}

// ForwardPage is one page of ListTargetForwards.
type ForwardPage struct {
	// Forwards are newest first; empty, not nil, when there are none.
	Forwards []TargetForward
	// Next is the cursor of the next page; nil on the last page.
	Next *store.Cursor
}

// ListTargetForwards returns up to limit (1 to store.MaxListLimit) forwards of
// f's target that match f, newest first, starting right after after (a
// forward's cursor of the same order) when it is not nil: failed forwards
// by when they failed (FinishedAt, then job ID, descending: a forward
// retried for hours fails after newer ones), the others by job ID,
// descending. Pages are stable while forwards are added (newer ones go to
// a new first page).
// Forwards still in the outbox are not listed (they have no job yet;
// CountForwards includes them).
func (q *Jobs) ListTargetForwards(ctx context.Context, f Filter, limit int, after *store.Cursor) (ForwardPage, error) {
	if limit < 1 || limit > store.MaxListLimit {
		return ForwardPage{}, fmt.Errorf("list forwards: limit %d is not from 1 to %d", limit, store.MaxListLimit)
	}
	w := f.where(false, nil)
	byFinish := f.State == StateFailed // only River's jobs: w.delivered is ""
	if after != nil {
		switch {
		case after.JobID == 0:
			return ForwardPage{}, fmt.Errorf("list forwards: %w: a cursor of deliveries", store.ErrBadCursor)
		case byFinish != !after.FinishedAt.IsZero():
			return ForwardPage{}, fmt.Errorf("list forwards: %w: a cursor of a list in another order", store.ErrBadCursor)
		case byFinish:
			w.args = append(w.args, after.FinishedAt, after.JobID)
			w.jobs += fmt.Sprintf(" AND (j.finalized_at, j.id) < ($%d, $%d)", len(w.args)-1, len(w.args))
		default:
			w.args = append(w.args, after.JobID)
			w.and(fmt.Sprintf("j.id < $%d", len(w.args)), fmt.Sprintf("d.id < $%d", len(w.args)))
		}
	}
	completed := 0 // the parameter of the delivered first attempts' River state
	if w.delivered != "" {
		w.args = append(w.args, jobCompleted)
		completed = len(w.args)
	}
	w.args = append(w.args, limit+1)
	order := fmt.Sprintf(" ORDER BY 1 DESC LIMIT $%d", len(w.args))
	if byFinish {
		order = fmt.Sprintf(" ORDER BY 9 DESC, 1 DESC LIMIT $%d", len(w.args)) // finalized_at, id
	}
	sql := `(SELECT j.id, j.state::text, j.attempt, j.max_attempts, coalesce(j.args->>'event_id', ''), coalesce(j.args->>'delivery_id', ''),
       j.created_at, j.attempted_at, j.finalized_at, j.errors[array_upper(j.errors, 1)], j.metadata->'output'
FROM river_job j WHERE ` + w.jobs + order + ")"
	if w.delivered != "" {
		sql += `
UNION ALL
(SELECT d.id, ` + fmt.Sprintf("$%d::text", completed) + `, 1, d.max_attempts, d.event_id, d.delivery_id, d.created_at, d.attempted_at, d.delivered_at, NULL, ` + deliveredOutput + `
FROM forward_delivered d WHERE ` + w.delivered + order + ")" + order
	}
	rows, err := q.db.Query(ctx, sql, w.args...)
	if err != nil {
		return ForwardPage{}, fmt.Errorf("list forwards of %s/%s: %w", f.Sender, f.Target, err)
	}
	fwds, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (TargetForward, error) {
		var (
			tf                     TargetForward
			state, eventID         string
			attemptedAt, finalized *time.Time
			lastErr, output        []byte
		)
		if err := row.Scan(&tf.JobID, &state, &tf.Attempts, &tf.MaxAttempts, &eventID, &tf.DeliveryID,
			&tf.CreatedAt, &attemptedAt, &finalized, &lastErr, &output); err != nil {
			return TargetForward{}, err
		}
		tf.Target = f.Target
		tf.EventID, _ = uuid.Parse(eventID) // the nil UUID for a malformed job
		if attemptedAt != nil {
			tf.AttemptedAt = *attemptedAt
		}
		if finalized != nil {
			tf.FinishedAt = *finalized
		}
		if err := decodeOutcome(&tf.Forward, rivertype.JobState(state), lastErr, output); err != nil {
			return TargetForward{}, fmt.Errorf("job %d: %w", tf.JobID, err)
		}
		return tf, nil
	})
	if err != nil {
		return ForwardPage{}, fmt.Errorf("list forwards of %s/%s: %w", f.Sender, f.Target, err)
	}
	page := ForwardPage{Forwards: fwds}
	if page.Forwards == nil {
		page.Forwards = []TargetForward{}
	}
	if len(page.Forwards) > limit {
		page.Forwards = page.Forwards[:limit]
		page.Next = &store.Cursor{JobID: page.Forwards[limit-1].JobID}
		if byFinish {
			page.Next.FinishedAt = page.Forwards[limit-1].FinishedAt
		}
	}
	if len(page.Forwards) > 0 {
		ids := make([]uuid.UUID, len(page.Forwards))
		for i := range page.Forwards {
			ids[i] = page.Forwards[i].EventID
		}
		types, err := store.New(q.db).EventTypes(ctx, f.Sender, ids)
		if err != nil {
			return ForwardPage{}, fmt.Errorf("list forwards of %s/%s: %w", f.Sender, f.Target, err)
		}
		for i := range page.Forwards {
			page.Forwards[i].EventType = types[page.Forwards[i].EventID]
		}
	}
	return page, nil
}

// BacklogStates are the names Backlog counts under: "outbox" and River's
// job states of unfinished forwards.
func BacklogStates() []string {
	return append([]string{"outbox"}, stateNames(StatePending, StateRunning, StateRetrying)...)
}

// backlogSQL counts the forward jobs in the River states $1 by state: it
// reads River's index on (state, queue, priority, scheduled_at, id) for
// those states alone, in that index's order, which with
// store.IndexOrderScans (no sort) is the one path without a disabled node
// whatever the statistics say (see store/plans.go); a sequential scan, or
// River's index on kind, would read every finished job River keeps (issue
// 43: state::text = ANY(…), which no index serves, took 1.5 s a scrape on
// 10 million finished jobs, 2 ms this way).
var backlogSQL = jobSQL(`SELECT state::text, count(*) FROM (
  SELECT state FROM river_job WHERE state = ANY($1::river_job_state[]) AND kind = {forward_kind}
  ORDER BY state, queue, priority, scheduled_at, id) j
GROUP BY state`)

// outboxCountSQL counts sender $1's outbox rows: a statement per sender,
// which Citus runs on the sender's shard alone, reading the outbox's key
// (which leads with sender).
var outboxCountSQL = `SELECT count(*) FROM forward_outbox WHERE sender = $1 AND ` + store.Unrecorded("")

// Backlog returns how many forwards are not yet finished, by state: outbox
// (accepted, not yet relayed into River: the rows of senders, the
// configured ones) and River's job state of the unfinished ones (see
// BacklogStates); a state without any is absent. One round trip: the
// planner settings (store.IndexOrderScans), the jobs' counts and one count
// of the outbox per sender, each through an index (the metric is read at
// every scrape of every process: its cost must not grow with the finished
// jobs River keeps).
func (q *Jobs) Backlog(ctx context.Context, senders []string) (map[string]int64, error) {
	var b pgx.Batch
	b.Queue(store.IndexOrderScans)
	b.Queue(backlogSQL, stateNames(StatePending, StateRunning, StateRetrying))
	for _, s := range senders {
		b.Queue(outboxCountSQL, s)
	}
	br := q.db.SendBatch(ctx, &b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, fmt.Errorf("count forward backlog: %w", err)
	}
	rows, err := br.Query() //nolint:rowserrcheck // pgx.ForEachRow checks rows.Err
	if err != nil {
		return nil, fmt.Errorf("count forward backlog: %w", err)
	}
	out := map[string]int64{}
	var (
		state string
		n     int64
	)
	if _, err := pgx.ForEachRow(rows, []any{&state, &n}, func() error { out[state] = n; return nil }); err != nil {
		return nil, fmt.Errorf("count forward backlog: %w", err)
	}
	var outbox int64
	for range senders {
		if err := br.QueryRow().Scan(&n); err != nil {
			return nil, fmt.Errorf("count forward backlog: %w", err)
		}
		outbox += n
	}
	if outbox > 0 {
		out["outbox"] = outbox
	}
	return out, nil
}

// outboxOfEvent returns the forwards of sender's event still in the outbox
// (JobID 0: pending, or running while a fast path holds its lease), by
// target name; empty, not nil, when none.
func (q *Jobs) outboxOfEvent(ctx context.Context, sender string, eventID uuid.UUID) ([]Forward, error) {
	rows, err := q.db.Query(ctx, `SELECT target, created_at, coalesce(leased_until > statement_timestamp(), false)
FROM forward_outbox WHERE sender = $1 AND event_id = $2 AND `+store.Unrecorded("")+` ORDER BY target`, sender, eventID)
	if err != nil {
		return nil, fmt.Errorf("list outbox rows of event %s: %w", eventID, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Forward, error) {
		f := Forward{State: StatePending}
		var leased bool
		err := row.Scan(&f.Target, &f.CreatedAt, &leased)
		if leased {
			f.State = StateRunning
		}
		return f, err
	})
	if err != nil {
		return nil, fmt.Errorf("list outbox rows of event %s: %w", eventID, err)
	}
	if out == nil {
		out = []Forward{}
	}
	return out, nil
}

// outboxCountsSQL counts sender $1's outbox rows by target (the
// forwards not yet relayed: pending), reading the outbox's key, which
// leads with sender.
var outboxCountsSQL = `SELECT target, count(*) FROM forward_outbox WHERE sender = $1 AND ` + store.Unrecorded("") + ` GROUP BY target`
