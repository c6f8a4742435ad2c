package store

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	"regexp"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/riverqueue/river/rivertype"
)

// The River adapter: forward jobs in River's table river_job. This file
// alone names river_job's columns, the forward job kind and River's job
// states; the rest of hookgate asks it in terms of forwards (State,
// Forward, Counts). River's own API inserts and works the jobs (package
// forward); what River has no API for (counts by target and state, the
// forwards a bulk redelivery matches, the newest forward of an event) is
// read here with SQL.
//
// A target's jobs, and an event's newer forward, are found through
// hookgate's index on the forward jobs' sender, target, event and ID
// (migration 9), whose expressions (args->>'sender' = …, kind =
// 'hookgate_forward' as a constant) the queries repeat exactly. River's
// GIN index on args would take milliseconds per lookup (jsonb_ops indexes
// the keys every job has).
//
// "Failed" means a forward that failed and was not followed by a newer
// forward of the same event to the same target (a redelivery): once an
// event has been redelivered its old failure is no longer counted, listed
// or matched, so redelivering the failures twice sends each event once.
// The JSON API and the console count and list with the same definition.
//
// A forward the fast path delivered at its first attempt is not a River
// job: it is a row of forward_delivered (migration 14), a narrow table
// that costs PostgreSQL a fraction of a job. Every read here takes both
// tables as one set of forwards: such a row is a forward in River's state
// completed after one attempt, whose ID comes from River's job sequence,
// so that IDs order forwards across both tables.

// ForwardKind is the River job kind of forwards.
const ForwardKind = "hookgate_forward"

// State is a forward's state as operators see it.
type State string

// The states of a forward.
const (
	// StatePending: waiting for its first attempt, or for the next one.
	StatePending State = "pending"
	// StateRunning: an attempt is under way.
	StateRunning State = "running"
	// StateRetrying: an attempt failed and another is scheduled.
	StateRetrying State = "retrying"
	// StateDelivered: the target answered 2xx.
	StateDelivered State = "delivered"
	// StateFailed: no more attempts will be made.
	StateFailed State = "failed"
)

// jobStates maps each forward state to River's job states: the one
// mapping of the two (StateOf is its inverse). A state River may add later
// is pending.
var jobStates = map[State][]rivertype.JobState{
	StatePending:   {rivertype.JobStateAvailable, rivertype.JobStateScheduled, rivertype.JobStatePending},
	StateRunning:   {rivertype.JobStateRunning},
	StateRetrying:  {rivertype.JobStateRetryable},
	StateDelivered: {rivertype.JobStateCompleted},
	StateFailed:    {rivertype.JobStateCancelled, rivertype.JobStateDiscarded},
}

// StateOf maps a River job state to a forward's state: available,
// scheduled and pending are pending; running is running; retryable is
// retrying; completed is delivered; cancelled and discarded are failed. A
// state River may add later is pending.
func StateOf(s rivertype.JobState) State {
	for st, js := range jobStates {
		for _, j := range js {
			if j == s {
				return st
			}
		}
	}
	return StatePending
}

// ValidState reports whether s is one of the five forward states.
func ValidState(s State) bool { return jobStates[s] != nil }

// UnfinishedJobStates are the River job states of a job not yet finished
// (pending, running or retrying): the states in which a unique job (a
// forward of the same event to the same target, a second retention run) is
// not inserted again.
func UnfinishedJobStates() []rivertype.JobState {
	var out []rivertype.JobState
	for _, s := range []State{StatePending, StateRunning, StateRetrying} {
		out = append(out, jobStates[s]...)
	}
	return out
}

// stateNames returns River's names of the job states of the forward states.
func stateNames(states ...State) []string {
	var out []string
	for _, s := range states {
		for _, j := range jobStates[s] {
			out = append(out, string(j))
		}
	}
	return out
}

// Output is what a forward's attempt records on its job (River's recorded
// output, river.RecordOutput): the target's HTTP status (0 when it gave no
// answer: a timeout, a connection error) and the Retry-After it asked for,
// and, once delivered, when.
type Output struct {
	// Attempt is the attempt that recorded it (River's job.Attempt).
	Attempt     int       `json:"attempt,omitempty"`
	Status      int       `json:"status"`
	DeliveredAt time.Time `json:"delivered_at,omitzero"`
	// RetryAfter is the target's Retry-After in seconds (fractions kept),
	// 0 when it sent none.
	RetryAfter float64 `json:"retry_after,omitempty"`
}

// Forward is one forward of an event.
type Forward struct {
	// JobID is the forward's River job; 0 while the forward is still in the
	// outbox, not yet relayed (its state is then pending).
	JobID int64
	// Target is the target's name; "" for a job of a version that named
	// targets by URL (see LegacyURL).
	Target string
	// LegacyURL is the target URL such a job names, which may hold
	// credentials: never show it unredacted. "" for current jobs.
	LegacyURL string
	State     State
	// Attempts is how many attempts have started; MaxAttempts how many may.
	Attempts    int
	MaxAttempts int
	// LastStatus is the target's HTTP status in the most recent finished
	// attempt: 0 when none finished or it got no answer (a timeout or a
	// connection error).
	LastStatus int
	// LastRetryAfter is the Retry-After the target sent with LastStatus; 0
	// when none.
	LastRetryAfter time.Duration
	// LastError is why the most recent finished attempt failed: "" when it
	// succeeded or none finished. Errors recorded by versions that named
	// targets by URL may contain it: redact with LegacyURL.
	LastError string
	// DeliveredAt is when the target accepted the forward; zero until then.
	DeliveredAt time.Time
	// CreatedAt is when the job was inserted.
	CreatedAt time.Time
}

// eventJobsSQL finds an event's forwards through River's GIN index on args
// (river_job_args_index): args @> {"event_id": …} is the indexable form.
//
// and the event's delivered first attempts in forward_delivered.
const eventJobsSQL = `SELECT id, state::text, attempt, max_attempts, coalesce(args->>'target', ''), coalesce(args->>'url', ''), created_at,
       errors[array_upper(errors, 1)], metadata->'output'
FROM river_job
WHERE kind = '` + ForwardKind + `' AND args @> jsonb_build_object('event_id', $1::text)
UNION ALL
SELECT d.id, 'completed', 1, d.max_attempts, d.target, '', d.created_at, NULL, ` + deliveredOutput + `
FROM forward_delivered d WHERE d.sender = $2 AND d.event_id = $1::text
ORDER BY 1`

// deliveredOutput is the recorded output (Output) of forward_delivered's
// row d, as River's worker records it under metadata.output.
const deliveredOutput = `jsonb_build_object('attempt', 1, 'status', d.status, 'delivered_at', d.delivered_at)`

// EventForwards returns the forwards of the event of sender: first those
// still in the outbox (pending, JobID 0), then its jobs, oldest first: one
// per target of its sender when it was accepted, and one per target for
// each redelivery. It returns an empty slice, not nil, when the event has
// none (its sender had no targets, or the jobs were deleted after River's
// retention).
func (q *Queries) EventForwards(ctx context.Context, sender string, eventID uuid.UUID) ([]Forward, error) {
	out, err := q.outboxOfEvent(ctx, sender, eventID)
	if err != nil {
		return nil, err
	}
	rows, err := q.db.Query(ctx, eventJobsSQL, eventID.String(), sender)
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
// key) the one path without a sort under indexOrderScans: not River's
// index on kind, which some statistics made the cheaper, and which walks
// every forward job per job (see plans.go).
const notSuperseded = `(SELECT n.id FROM river_job n WHERE n.kind = '` + ForwardKind + `'
    AND n.args->>'sender' = $1 AND n.args->>'target' = $2
    AND n.args->>'event_id' >= j.args->>'event_id' AND n.args->>'event_id' <= j.args->>'event_id' AND n.id > j.id
    ORDER BY n.args->>'event_id', n.id LIMIT 1) IS NULL
  AND (SELECT n.id FROM forward_delivered n WHERE n.sender = $1
    AND n.event_id >= j.args->>'event_id' AND n.event_id <= j.args->>'event_id' AND n.target = $2 AND n.id > j.id
    ORDER BY n.event_id, n.id LIMIT 1) IS NULL`

// deliveredNotSuperseded is notSuperseded for forward_delivered's row d: no
// newer job of its event to its target (an event has at most one row
// there per target: its outbox row's first attempt).
const deliveredNotSuperseded = `(SELECT n.id FROM river_job n WHERE n.kind = '` + ForwardKind + `'
    AND n.args->>'sender' = $1 AND n.args->>'target' = $2
    AND n.args->>'event_id' >= d.event_id AND n.args->>'event_id' <= d.event_id AND n.id > d.id
    ORDER BY n.args->>'event_id', n.id LIMIT 1) IS NULL`

// Counts are a target's forwards by state. Pending includes the forwards
// still in the outbox; Delivered counts every delivery River still keeps
// (CompletedJobRetentionPeriod: the longest sender retention), an event
// redelivered counting once per delivery; Failed counts the failures not
// followed by a newer forward of the same event.
type Counts struct {
	Pending, Running, Retrying, Delivered, Failed int64
}

// countsSQL counts the forwards of sender $1 in the River states $2 by
// target and state, failed ones only when no newer forward of the same
// event to the same target follows them. It names the states, so that
// without the delivered ones River's indexes that lead with state narrow
// the scan and a long history is never read.
const countsSQL = `SELECT j.args->>'target', j.state::text, count(*) FROM river_job j
WHERE j.kind = '` + ForwardKind + `' AND j.args->>'sender' = $1 AND j.state::text = ANY($2::text[])
  AND (j.state NOT IN ('cancelled', 'discarded') OR NOT EXISTS (SELECT 1 FROM river_job n WHERE n.kind = '` + ForwardKind + `'
    AND n.args->>'sender' = $1 AND n.args->>'target' = j.args->>'target' AND n.args->>'event_id' = j.args->>'event_id' AND n.id > j.id)
    AND NOT EXISTS (SELECT 1 FROM forward_delivered n WHERE n.sender = $1 AND n.event_id = j.args->>'event_id' AND n.target = j.args->>'target' AND n.id > j.id))
GROUP BY 1, 2
UNION ALL
SELECT target, 'completed', count(*) FROM forward_delivered WHERE sender = $1 AND $3 GROUP BY 1`

// CountForwards returns the counts of sender's forwards by target name,
// Delivered left 0 unless delivered is true (counting them reads the
// target's whole history). A target without forwards is absent (its counts
// are all zero). Jobs of versions that named targets by URL are not
// counted. The JSON API and the console both count with it.
func (q *Queries) CountForwards(ctx context.Context, sender string, delivered bool) (map[string]Counts, error) {
	states := []State{StatePending, StateRunning, StateRetrying, StateFailed}
	if delivered {
		states = append(states, StateDelivered)
	}
	out := map[string]Counts{}
	rows, err := q.db.Query(ctx, countsSQL, sender, stateNames(states...), delivered) //nolint:rowserrcheck // pgx.ForEachRow checks rows.Err
	if err != nil {
		return nil, fmt.Errorf("count forwards of %s: %w", sender, err)
	}
	var (
		target *string
		state  string
		n      int64
	)
	_, err = pgx.ForEachRow(rows, []any{&target, &state, &n}, func() error {
		if target == nil {
			return nil
		}
		c := out[*target]
		switch StateOf(rivertype.JobState(state)) {
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
	if err != nil {
		return nil, fmt.Errorf("count forwards of %s: %w", sender, err)
	}
	outbox, err := q.outboxCounts(ctx, sender)
	if err != nil {
		return nil, err
	}
	for name, n := range outbox {
		c := out[name]
		c.Pending += n
		out[name] = c
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

// underWayAt are the conditions that job j was running, or retrying, at
// the time $%[1]d, from what it is now: its state, when its latest attempt
// started (attempted_at), when that attempt's error was recorded (its
// last error's "at"), and when it finished. Running then: running now, or
// its attempt then has ended since (failed and waits for a retry, or
// finished). Retrying then: waiting for a retry whose failure came before,
// or its retry (attempt 2 or later) has started since.
var underWayAt = map[State]string{
	StateRunning: `j.attempted_at < $%[1]d AND (j.state = 'running'
    OR (j.state = 'retryable' AND (j.errors[array_upper(j.errors, 1)]->>'at')::timestamptz >= $%[1]d)
    OR j.finalized_at >= $%[1]d)`,
	StateRetrying: `((j.state = 'retryable' AND (j.errors[array_upper(j.errors, 1)]->>'at')::timestamptz < $%[1]d)
    OR (j.attempt >= 2 AND j.attempted_at >= $%[1]d AND (j.state IN ('running', 'retryable') OR j.finalized_at >= $%[1]d)))`,
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

// where returns the conditions of f over river_job j and forward_delivered
// d and their arguments, $1 and $2 being the sender and the target. It adds
// the not-superseded condition for failed forwards, or for every state when
// latest is true; and then, for running or retrying forwards, that j is not
// a redelivery still waiting (queuedWaiting), inOutbox being the events of
// f's target whose forward is in the outbox (waitingInOutbox).
func (f Filter) where(latest bool, inOutbox []string) where {
	w := where{
		jobs:      `j.kind = '` + ForwardKind + `' AND j.args->>'sender' = $1 AND j.args->>'target' = $2`,
		delivered: `d.sender = $1 AND d.target = $2`,
		args:      []any{f.Sender, f.Target},
	}
	col, dcol := "j.created_at", "d.created_at"
	if (f.State == StateRunning || f.State == StateRetrying) && !f.InStateAt.IsZero() {
		w.args = append(w.args, f.InStateAt)
		w.jobs += " AND " + fmt.Sprintf(underWayAt[f.State], len(w.args))
		w.delivered = "" // a delivered first attempt was never a job under way
	} else if f.State != "" {
		w.args = append(w.args, stateNames(f.State))
		w.jobs += fmt.Sprintf(" AND j.state = ANY($%d::river_job_state[])", len(w.args))
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
	if latest || f.State == StateFailed {
		w.and(notSuperseded, deliveredNotSuperseded)
	}
	if latest && (f.State == StateRunning || f.State == StateRetrying) {
		if inOutbox == nil {
			inOutbox = []string{}
		}
		w.args = append(w.args, inOutbox)
		w.jobs += " AND NOT " + fmt.Sprintf(queuedWaiting, len(w.args))
	}
	return w
}

// queuedWaiting is the condition that job j (of sender $1, target $2) is a
// redelivery queued after a forward of its event that is not finished yet
// (EarlierForwardUnfinished's jobs), or whose forward is still in the
// outbox (the fast path's attempt under way, as a lease-holding outbox row):
// it is not under way, even while River runs it only to find that it must
// wait. $%[1]d are the events of the target whose forward is in the outbox
// (waitingInOutbox): forward_outbox is not read here, as Citus refuses a
// statement that correlates a distributed table with River's (local) one.
// The probe is written as notSuperseded's (a scalar subquery ordered by
// hookgate's index).
const queuedWaiting = `(j.args ? 'after' AND ((SELECT n.id FROM river_job n WHERE n.kind = '` + ForwardKind + `'
    AND n.args->>'sender' = $1 AND n.args->>'target' = $2
    AND n.args->>'event_id' >= j.args->>'event_id' AND n.args->>'event_id' <= j.args->>'event_id'
    AND n.id <> j.id AND n.state IN ('available', 'scheduled', 'pending', 'running', 'retryable')
    AND (n.id < j.id OR NOT n.args ? 'after')
    ORDER BY n.args->>'event_id', n.id LIMIT 1) IS NOT NULL
  OR j.args->>'event_id' = ANY($%[1]d::text[])))`

// queuedCandidatesSQL selects the events of the redeliveries queued after a
// forward (jobs with "after") of sender $1's target $2, from job $4
// (exclusive) to job $3, that a bulk redelivery of running or retrying
// forwards may match: those unfinished, or finished at or after $5 (the
// time the request asked about; NULL: none). A job matches (underWayAt, or
// its state now) only if it is unfinished, or finished after that time, so
// none matches later that is not selected here, whatever state it moves to
// in between. It reads River's table alone: the target's forward jobs, in
// the order of hookgate's index on them, the one path its ORDER BY leaves
// without a sort under indexOrderScans (River's index on kind would read
// every forward job; see plans.go).
const queuedCandidatesSQL = `SELECT DISTINCT j.args->>'event_id' FROM river_job j
WHERE j.kind = '` + ForwardKind + `' AND j.args->>'sender' = $1 AND j.args->>'target' = $2 AND j.args ? 'after'
  AND j.id <= $3 AND j.id > $4
  AND (j.state IN ('available', 'scheduled', 'pending', 'running', 'retryable') OR j.finalized_at >= $5)
ORDER BY 1`

// inOutboxSQL selects which of the events $3 of sender $1 still have an
// outbox row to target $2: a probe of forward_outbox's key per event (a
// LATERAL subquery, kept apart by its LIMIT, under outboxIndexScans: not
// event_id = ANY, which PostgreSQL 15 may apply as a filter over the
// sender's rows; see plans.go), on the sender's shard on Citus.
const inOutboxSQL = `SELECT k.event_id::text FROM unnest($3::uuid[]) AS k(event_id)
  CROSS JOIN LATERAL (SELECT 1 FROM forward_outbox o WHERE o.sender = $1 AND o.event_id = k.event_id AND o.target = $2 LIMIT 1) p`

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
func (q *Queries) waitingInOutbox(ctx context.Context, f Filter, maxID, afterID int64) ([]string, error) {
	var since *time.Time
	if !f.InStateAt.IsZero() {
		since = &f.InStateAt
	}
	rows, err := q.queryUnder(ctx, indexOrderScans, queuedCandidatesSQL, f.Sender, f.Target, maxID, afterID, since)
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
	rows, err = q.queryUnder(ctx, outboxIndexScans, inOutboxSQL, f.Sender, f.Target, ids)
	if err != nil {
		return nil, fmt.Errorf("outbox rows of redeliveries queued after a forward: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("outbox rows of redeliveries queued after a forward: %w", err)
	}
	return out, nil
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
	Next *Cursor
}

// ListTargetForwards returns up to limit (1 to MaxListLimit) forwards of
// f's target that match f, newest first (by job ID, descending), starting
// right after after (a forward's cursor) when it is not nil. Pages are
// stable while forwards are added (newer ones go to a new first page).
// Forwards still in the outbox are not listed (they have no job yet;
// CountForwards includes them).
func (q *Queries) ListTargetForwards(ctx context.Context, f Filter, limit int, after *Cursor) (ForwardPage, error) {
	if limit < 1 || limit > MaxListLimit {
		return ForwardPage{}, fmt.Errorf("list forwards: limit %d is not from 1 to %d", limit, MaxListLimit)
	}
	w := f.where(false, nil)
	if after != nil {
		if after.JobID == 0 {
			return ForwardPage{}, fmt.Errorf("list forwards: %w: a cursor of deliveries", errBadCursor)
		}
		w.args = append(w.args, after.JobID)
		w.and(fmt.Sprintf("j.id < $%d", len(w.args)), fmt.Sprintf("d.id < $%d", len(w.args)))
	}
	w.args = append(w.args, limit+1)
	order := fmt.Sprintf(" ORDER BY 1 DESC LIMIT $%d", len(w.args))
	sql := `(SELECT j.id, j.state::text, j.attempt, j.max_attempts, coalesce(j.args->>'event_id', ''), coalesce(j.args->>'delivery_id', ''),
       j.created_at, j.attempted_at, j.finalized_at, j.errors[array_upper(j.errors, 1)], j.metadata->'output'
FROM river_job j WHERE ` + w.jobs + order + ")"
	if w.delivered != "" {
		sql += `
UNION ALL
(SELECT d.id, 'completed', 1, d.max_attempts, d.event_id, d.delivery_id, d.created_at, d.attempted_at, d.delivered_at, NULL, ` + deliveredOutput + `
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
		page.Next = &Cursor{JobID: page.Forwards[limit-1].JobID}
	}
	if len(page.Forwards) > 0 {
		ids := make([]uuid.UUID, len(page.Forwards))
		for i := range page.Forwards {
			ids[i] = page.Forwards[i].EventID
		}
		types, err := q.EventTypes(ctx, f.Sender, ids)
		if err != nil {
			return ForwardPage{}, fmt.Errorf("list forwards of %s/%s: %w", f.Sender, f.Target, err)
		}
		for i := range page.Forwards {
			page.Forwards[i].EventType = types[page.Forwards[i].EventID]
		}
	}
	return page, nil
}

// wakeSQL makes the forwards of a target that wait for a later time (snoozed
// behind its breaker) available now. Forwards waiting for a retry after a
// failed attempt (retryable) keep their backoff. The jobs are selected in
// an InitPlan that reads River's index of waiting jobs (state, queue,
// priority, scheduled_at, id: the queue's waiting jobs, not the target's
// whole history, nor every forward job), the one path its ORDER BY leaves
// without a sort under indexOrderScans (see plans.go), and updated by ctid
// (a TID scan); a job River fetched meanwhile (its row updated) is left as
// River made it.
const wakeSQL = `UPDATE river_job SET state = 'available', scheduled_at = now()
WHERE ctid = ANY(ARRAY(SELECT ctid FROM river_job
  WHERE kind = '` + ForwardKind + `' AND queue = $1 AND state IN ('scheduled', 'available')
    AND scheduled_at > now() AND args @> jsonb_build_object('sender', $2::text, 'target', $3::text)
  ORDER BY state, queue, priority, scheduled_at, id))`

// WakeWaitingForwards makes the forwards of sender's target on queue that
// wait for a later time (snoozed behind its breaker) available now;
// forwards waiting for a retry after a failed attempt keep their backoff.
func (q *Queries) WakeWaitingForwards(ctx context.Context, queue, sender, target string) error {
	var b pgx.Batch
	b.Queue(indexOrderScans)
	b.Queue(wakeSQL, queue, sender, target)
	if err := q.db.SendBatch(ctx, &b).Close(); err != nil {
		return fmt.Errorf("wake the forwards of %s/%s: %w", sender, target, err)
	}
	return nil
}

// NewestJobID returns the newest ID River's job sequence has given, to a
// River job of any kind or a forward_delivered row (0 when none), and the
// database's time.
func (q *Queries) NewestJobID(ctx context.Context) (int64, time.Time, error) {
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
func (q *Queries) bulkWhere(ctx context.Context, f Filter, maxID, afterID int64) (where, error) {
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
// state and window. Under indexOrderScans, so that each probe of
// notSuperseded is one of an index (the count itself reads every job of
// the target, or every forward job, whichever PostgreSQL takes for the
// cheaper: once per request).
func (q *Queries) CountBulkMatch(ctx context.Context, f Filter, maxID int64) (int64, error) {
	w, err := q.bulkWhere(ctx, f, maxID, 0)
	if err != nil {
		return 0, fmt.Errorf("count forwards to redeliver: %w", err)
	}
	var n int64
	sql := `SELECT (SELECT count(*) FROM river_job j WHERE ` + w.jobs + `)`
	if w.delivered != "" {
		sql += ` + (SELECT count(*) FROM forward_delivered d WHERE ` + w.delivered + `)`
	}
	rows, err := q.queryUnder(ctx, indexOrderScans, sql, w.args...)
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
// merged, under indexOrderScans: each probe of notSuperseded is one of an
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
func (q *Queries) BulkMatchBatch(ctx context.Context, f Filter, maxID, afterID int64, limit int) ([]Matched, error) {
	w, err := q.bulkWhere(ctx, f, maxID, afterID)
	if err != nil {
		return nil, fmt.Errorf("select forwards to redeliver: %w", err)
	}
	w.args = append(w.args, limit)
	rows, err := q.queryUnder(ctx, indexOrderScans, bulkMatchBatchSQL(w, limit), w.args...)
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

// BacklogStates are the names Backlog counts under: "outbox" and River's
// job states of unfinished forwards.
func BacklogStates() []string {
	return append([]string{"outbox"}, stateNames(StatePending, StateRunning, StateRetrying)...)
}

// Backlog returns how many forwards are not yet finished, by state: outbox
// (accepted, not yet relayed into River) and River's job state of the
// unfinished ones (see BacklogStates); a state without any is absent.
func (q *Queries) Backlog(ctx context.Context) (map[string]int64, error) {
	//nolint:rowserrcheck // pgx.ForEachRow checks rows.Err
	rows, err := q.db.Query(ctx, `SELECT state::text, count(*) FROM river_job
WHERE kind = '`+ForwardKind+`' AND state::text = ANY($1::text[])
GROUP BY state
UNION ALL SELECT 'outbox', count(*) FROM forward_outbox`, stateNames(StatePending, StateRunning, StateRetrying))
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
	return out, nil
}

// decodeOutcome sets f's state, and its last status, Retry-After, error
// and delivery time from a job's latest attempt error and recorded output
// (either may be nil).
func decodeOutcome(f *Forward, state rivertype.JobState, lastErr, output []byte) error {
	f.State = StateOf(state)
	var out *Output
	if len(output) > 0 && string(output) != "null" {
		var o Output
		if json.Unmarshal(output, &o) == nil {
			out = &o
		}
	}
	if f.State == StateDelivered {
		if out != nil {
			f.LastStatus, f.DeliveredAt = out.Status, out.DeliveredAt
		}
		return nil
	}
	var ae rivertype.AttemptError
	if len(lastErr) > 0 {
		if err := json.Unmarshal(lastErr, &ae); err != nil {
			return fmt.Errorf("decode last error: %w", err)
		}
		f.LastError = ae.Error
	}
	switch {
	case out != nil && (len(lastErr) == 0 || out.Attempt == ae.Attempt):
		f.LastStatus = out.Status
		f.LastRetryAfter = time.Duration(out.RetryAfter * float64(time.Second))
	case f.LastError != "":
		// An attempt that recorded no output: of an older version, or one
		// that ended before it had an answer. An older version's status is
		// in the error's text.
		f.LastStatus = statusIn(f.LastError)
	}
	return nil
}

// answered finds the status in the text of the error older versions
// recorded for a target's answer (prefixed by River's JobCancelError when
// the forward failed at once).
var answered = regexp.MustCompile(`target answered ([1-5][0-9][0-9])\b`)

// statusIn returns the target's status named in an old attempt's error
// text, or 0 when it names none.
func statusIn(errText string) int {
	m := answered.FindStringSubmatch(errText)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1]) // three digits always parse
	return n
}

// fastLeasedSQL selects the outbox rows of sender $1's target $2 accepted
// before $3 whose lease has not ended: the fast path's first attempts under
// way (or about to be made). There are at most about as many as the fast
// path holds in flight (each process's dispatch workers and queue:
// forward.DefaultDispatchWorkers and DefaultDispatchQueue), plus those a
// crashed process left leased until their lease ends. On Citus it runs on
// the sender's shard.
const fastLeasedSQL = `SELECT event_id::text, delivery_id, created_at FROM forward_outbox
WHERE sender = $1 AND target = $2 AND leased_until > statement_timestamp() AND created_at < $3`

// fastRunningSQL selects the fast path's first attempts of sender $1's
// target $2 that were under way at $3 (a bulk redelivery of running
// forwards, Filter.InStateAt): the outbox rows still leased (the attempt
// runs), read before by fastLeasedSQL and passed as the arrays $4 (event
// IDs), $5 (delivery IDs) and $6 (when accepted), and the forward_delivered
// rows attempted before $3 and delivered at or after it (it ran then, and
// has been delivered since). A failed first attempt is a River job, which
// underWayAt judges. An event that already has a redelivery queued after
// its forward (a job with "after"), unfinished or made at or after $3, is
// left out: a request counts it no more, and a job run twice (River's
// rescue, a new slice) queues one redelivery per forward. %s is the
// window's condition on f.created_at.
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
const fastRunningSQL = `SELECT id, event_id, delivery_id FROM (
  SELECT -1::bigint AS id, o.event_id, o.delivery_id, o.created_at
  FROM unnest($4::text[], $5::text[], $6::timestamptz[]) AS o(event_id, delivery_id, created_at)
  WHERE NOT EXISTS (SELECT 1 FROM forward_delivered d WHERE d.sender = $1 AND d.event_id = o.event_id AND d.target = $2)
  UNION ALL
  SELECT d.id, d.event_id, d.delivery_id, d.created_at
  FROM forward_delivered d
  WHERE d.sender = $1 AND d.target = $2 AND d.attempted_at < $3 AND d.delivered_at >= $3
) f
WHERE NOT EXISTS (SELECT 1 FROM river_job n WHERE n.kind = '` + ForwardKind + `'
    AND n.args->>'sender' = $1 AND n.args->>'target' = $2 AND n.args->>'event_id' = f.event_id AND n.args ? 'after'
    AND (n.created_at >= $3 OR n.state IN ('available', 'scheduled', 'pending', 'running', 'retryable')))%s`

// fastRunning reads the leased outbox rows of f's target (fastLeasedSQL)
// and returns fastRunningSQL for f (running, under way at at) with its
// window, and its arguments.
func (q *Queries) fastRunning(ctx context.Context, f Filter, at time.Time) (string, []any, error) {
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
	args := []any{f.Sender, f.Target, at, events, deliveries, accepted}
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
func (q *Queries) CountFastPathRunning(ctx context.Context, f Filter, at time.Time) (int64, error) {
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
func (q *Queries) FastPathRunningBatch(ctx context.Context, f Filter, limit int) ([]Matched, error) {
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

// FirstAttempt is the outcome of a forward's first attempt made by the fast
// path (forward.Dispatcher), to record as its job (RecordFirstAttempts).
type FirstAttempt struct {
	Sender  string
	EventID uuid.UUID
	Target  string
	// Release: the forward was not attempted; its outbox row's lease is
	// cleared for the relay, and no job is inserted. The fields below are
	// then unused.
	Release bool
	// State is the job's state after the attempt: completed, available or
	// retryable (ScheduledAt is its retry: available when it is due within
	// River's scheduler interval, as River leaves its own retries, so that
	// a fetch takes it once due; retryable for the scheduler to make
	// available later), cancelled or discarded (FinalizedAt set).
	State       rivertype.JobState
	MaxAttempts int
	AttemptedAt time.Time
	FinalizedAt *time.Time
	ScheduledAt time.Time
	// Error is the attempt's error text ("" when delivered); Output, when
	// its Status is not 0, the attempt's recorded output.
	Error  string
	Output Output
}

// recordFirstSQL records the fast path's finished forwards of sender $1
// that were not delivered: it deletes their outbox rows and, for each row
// it deleted, inserts the forward's job in its state after the first
// attempt, as River's worker would have left it (attempt 1, the attempt's
// error, the output River's RecordOutput keeps under metadata.output). A
// row the relay took in the meantime (its lease ended) is not deleted, and
// gets no second job. The args are those forward.Args encodes; the job has
// no unique key (none is needed: its outbox row goes in the same
// statement). The outbox rows are found by a probe of their key each, and
// deleted by ctid (outboxRowsByKey, under tidScans: see plans.go), never
// by a scan of the sender's rows. d reads the arrays, not o: on Citus o is
// an intermediate result, and Citus refuses a ctid in a modification that
// reads one. A row updated between the statement's snapshot and the delete
// is not deleted (its new version has another ctid); only the fast path's
// release updates outbox rows, and never those of an attempted forward.
const recordFirstSQL = `WITH o AS (
  SELECT * FROM unnest($2::uuid[], $3::text[], $4::text[], $5::int[], $6::timestamptz[], $7::timestamptz[], $8::timestamptz[], $9::jsonb[], $10::jsonb[])
    AS o(event_id, target, state, max_attempts, attempted_at, finalized_at, scheduled_at, error, metadata)
), d AS (
  DELETE FROM forward_outbox f
  WHERE f.sender = $1 AND f.ctid = ANY(` + outboxRowsByKey + `)
  RETURNING f.event_id, f.target, f.delivery_id, f.created_at
)
INSERT INTO river_job (args, attempt, attempted_at, created_at, errors, finalized_at, kind, max_attempts, metadata, priority, queue, state, scheduled_at, tags)
SELECT jsonb_build_object('sender', $1::text, 'event_id', d.event_id, 'target', d.target, 'delivery_id', d.delivery_id),
       1, o.attempted_at, d.created_at, CASE WHEN o.error IS NULL THEN NULL ELSE ARRAY[o.error] END, o.finalized_at,
       '` + ForwardKind + `', o.max_attempts, o.metadata, 1, $11::text, o.state::river_job_state, o.scheduled_at, '{}'
FROM d JOIN o ON o.event_id = d.event_id AND o.target = d.target`

// recordDeliveredSQL records the fast path's delivered forwards of sender
// $1 as recordFirstSQL records the others, in forward_delivered instead of
// River's table: a row only for each outbox row it deleted.
const recordDeliveredSQL = `WITH o AS (
  SELECT * FROM unnest($2::uuid[], $3::text[], $4::timestamptz[], $5::timestamptz[], $6::int2[], $7::int2[])
    AS o(event_id, target, attempted_at, delivered_at, status, max_attempts)
), d AS (
  DELETE FROM forward_outbox f
  WHERE f.sender = $1 AND f.ctid = ANY(` + outboxRowsByKey + `)
  RETURNING f.event_id, f.target, f.delivery_id, f.created_at
)
INSERT INTO forward_delivered (sender, event_id, target, delivery_id, created_at, attempted_at, delivered_at, status, max_attempts)
SELECT $1::text, d.event_id::text, d.target, d.delivery_id, d.created_at, o.attempted_at, o.delivered_at, o.status, o.max_attempts
FROM d JOIN o ON o.event_id = d.event_id AND o.target = d.target`

// RecordFirstAttempts records the fast path's outcomes in one round trip:
// per sender, one statement for the delivered forwards
// (forward_delivered), one for the others that were attempted (their jobs
// on queue), each deleting the forwards' outbox rows, and one for the
// released ones; all of them find the outbox rows by a probe of the key
// each (outboxRowsByKey, under tidScans). Each sender's statements are a
// transaction of their own (BEGIN … COMMIT in the batch, when it holds
// several senders): on Citus a sender's outbox rows live on one worker, and
// a transaction writing the rows of senders on two workers would commit in
// two phases. A failure leaves the senders before it recorded: recording
// them again finds no outbox row and does nothing. Run on a transaction
// (q on a pgx.Tx), everything is the caller's transaction.
func (q *Queries) RecordFirstAttempts(ctx context.Context, queue string, batch []FirstAttempt) error {
	groups, err := recordStatements(queue, batch)
	if err != nil {
		return fmt.Errorf("record fast-path forwards: %w", err)
	}
	_, inTx := q.db.(pgx.Tx)
	own := len(groups) > 1 && !inTx
	var b pgx.Batch
	for i, g := range groups {
		if own {
			b.Queue("BEGIN")
		}
		if own || i == 0 {
			b.Queue(tidScans)
		}
		for _, s := range g {
			b.Queue(s.sql, s.args...)
		}
		if own {
			b.Queue("COMMIT")
		}
	}
	if err := q.db.SendBatch(ctx, &b).Close(); err != nil {
		return fmt.Errorf("record fast-path forwards: %w", err)
	}
	return nil
}

// recordStatements returns the statements RecordFirstAttempts sends (after
// tidScans) for batch, with their arguments, one group per sender.
func recordStatements(queue string, batch []FirstAttempt) ([][]statement, error) {
	// Event IDs go as pgtype.UUID, which pgx encodes in binary as they
	// are: a uuid.UUID is a driver.Valuer, which pgx encodes through its
	// text (formatted, then parsed again), a few percent of the
	// gateway's CPU under make bench's forwarding load.
	type cols struct {
		events, relEvents              []pgtype.UUID
		targets, relTargets, states    []string
		maxAttempts                    []int32
		attempted, finalized, schedule []*time.Time
		errs, metas                    []*string
		// The delivered ones.
		dEvents                []pgtype.UUID
		dTargets               []string
		dAttempted, dDelivered []time.Time
		dStatus, dMaxAttempts  []int16
	}
	bySender := map[string]*cols{}
	var order []string
	for i := range batch {
		a := &batch[i]
		c := bySender[a.Sender]
		if c == nil {
			c = &cols{}
			bySender[a.Sender] = c
			order = append(order, a.Sender)
		}
		if a.Release {
			c.relEvents = append(c.relEvents, pgtype.UUID{Bytes: a.EventID, Valid: true})
			c.relTargets = append(c.relTargets, a.Target)
			continue
		}
		if a.State == rivertype.JobStateCompleted {
			at := a.Output.DeliveredAt
			if at.IsZero() && a.FinalizedAt != nil {
				at = *a.FinalizedAt
			}
			c.dEvents = append(c.dEvents, pgtype.UUID{Bytes: a.EventID, Valid: true})
			c.dTargets = append(c.dTargets, a.Target)
			c.dAttempted = append(c.dAttempted, a.AttemptedAt)
			c.dDelivered = append(c.dDelivered, at)
			c.dStatus = append(c.dStatus, int16(a.Output.Status))
			c.dMaxAttempts = append(c.dMaxAttempts, int16(min(a.MaxAttempts, math.MaxInt16)))
			continue
		}
		var errJSON *string
		if a.Error != "" {
			b, err := json.Marshal(rivertype.AttemptError{At: a.AttemptedAt, Attempt: 1, Error: a.Error})
			if err != nil {
				return nil, err
			}
			s := string(b)
			errJSON = &s
		}
		meta := "{}"
		if a.Output.Status != 0 {
			out := a.Output
			out.Attempt = 1
			b, err := json.Marshal(map[string]Output{"output": out})
			if err != nil {
				return nil, err
			}
			meta = string(b)
		}
		c.events = append(c.events, pgtype.UUID{Bytes: a.EventID, Valid: true})
		c.targets = append(c.targets, a.Target)
		c.states = append(c.states, string(a.State))
		c.maxAttempts = append(c.maxAttempts, int32(a.MaxAttempts))
		c.attempted = append(c.attempted, &a.AttemptedAt)
		c.finalized = append(c.finalized, a.FinalizedAt)
		c.schedule = append(c.schedule, &a.ScheduledAt)
		c.errs = append(c.errs, errJSON)
		c.metas = append(c.metas, &meta)
	}
	groups := make([][]statement, 0, len(order))
	for _, s := range order {
		c := bySender[s]
		var stmts []statement
		if len(c.dEvents) > 0 {
			stmts = append(stmts, statement{recordDeliveredSQL, []any{s, c.dEvents, c.dTargets, c.dAttempted, c.dDelivered, c.dStatus, c.dMaxAttempts}})
		}
		if len(c.events) > 0 {
			stmts = append(stmts, statement{recordFirstSQL, []any{s, c.events, c.targets, c.states, c.maxAttempts, c.attempted, c.finalized, c.schedule, c.errs, c.metas, queue}})
		}
		if len(c.relEvents) > 0 {
			stmts = append(stmts, statement{releaseOutboxSQL, []any{s, c.relEvents, c.relTargets}})
		}
		groups = append(groups, stmts)
	}
	return groups, nil
}

// queryUnder runs sql with args after settings (planner settings, see
// plans.go), in one round trip: a batch, whose implicit transaction (or
// q's) the settings last.
func (q *Queries) queryUnder(ctx context.Context, settings, sql string, args ...any) (pgx.Rows, error) {
	var b pgx.Batch
	b.Queue(settings)
	b.Queue(sql, args...)
	br := q.db.SendBatch(ctx, &b)
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return nil, err
	}
	rows, err := br.Query() //nolint:rowserrcheck // the caller reads them, and checks their Err (batchRows)
	if err != nil {
		_ = br.Close()
		return nil, err
	}
	return &batchRows{Rows: rows, br: br}, nil
}

// batchRows are the rows of a batch's last statement: the batch is closed
// when they are read to the end or closed, and an error of its closing is
// theirs.
type batchRows struct {
	pgx.Rows
	br  pgx.BatchResults
	err error
}

func (r *batchRows) closeBatch() {
	r.Rows.Close()
	if r.br != nil {
		r.err, r.br = r.br.Close(), nil
	}
}

func (r *batchRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.closeBatch()
	return false
}

func (r *batchRows) Close() { r.closeBatch() }

func (r *batchRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.err
}

// statement is an SQL statement and its arguments.
type statement struct {
	sql  string
	args []any
}

// deleteDeliveredSQL deletes up to $2 delivered forwards delivered before
// $1: selected in an InitPlan, run once (its LIMIT holds), through the
// BRIN index on delivered_at, and deleted by ctid (a TID scan), under
// deliveredScans. forward_delivered is a local table on Citus.
const deleteDeliveredSQL = `DELETE FROM forward_delivered WHERE ctid = ANY(ARRAY(
  SELECT ctid FROM forward_delivered WHERE delivered_at < $1 LIMIT $2))`

// deliveredScans leaves deleteDeliveredSQL one path without a disabled
// node: no sequential scan (so the InitPlan reads the BRIN index, and the
// DELETE the ctids), no JIT (see plans.go).
const deliveredScans = `SELECT set_config('enable_seqscan', 'off', true), set_config('jit', 'off', true)`

// DeleteDeliveredBefore deletes up to limit of the fast path's delivered
// forwards (forward_delivered) delivered before cutoff, in one short
// statement, and returns how many it deleted: fewer than limit means none
// are left. River deletes its finished jobs after the same retention.
func (q *Queries) DeleteDeliveredBefore(ctx context.Context, cutoff time.Time, limit int) (int64, error) {
	var b pgx.Batch
	b.Queue(deliveredScans)
	b.Queue(deleteDeliveredSQL, cutoff, limit)
	br := q.db.SendBatch(ctx, &b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return 0, fmt.Errorf("delete old delivered forwards: %w", err)
	}
	tag, err := br.Exec()
	if err != nil {
		return 0, fmt.Errorf("delete old delivered forwards: %w", err)
	}
	return tag.RowsAffected(), nil
}

// Fixtures: forward jobs as River stores them, read and put in a given
// state by tests (and tools) through this adapter, so that a change of
// River's table touches this file only.

// The jobs of processes that are gone (forward_processes, processes.go).

// TakenOver is a running job of a process that is gone, which
// TakeOverJobs made available again (or discarded: its attempts were used
// up).
type TakenOver struct {
	JobID   int64
	Kind    string
	Process string // the River client ID of the process that was running it
	State   rivertype.JobState
}

// takeOverSQL makes available again, at once, up to $3 jobs River shows as
// running whose last attempt was made by a process whose client ID starts
// with $1 and that has no row in forward_processes seen within the last $2
// milliseconds: it died while running them. As River's rescuer does, the
// job keeps its attempt count (the attempt under way counts) and gets an
// error saying why; one whose attempts are used up is discarded. A job
// whose last attempt was made by another kind of client (a process of an
// earlier version, which writes no heartbeat) is left to River's rescuer.
//
// Its plan cannot depend on statistics: the running jobs are read in a
// CTE whose only condition is the state (River's fetching index leads with
// it: the running jobs, a few per worker, never the table), each of their
// processes is a probe of forward_processes' key, and the update finds the
// jobs by their key (id = ANY of an InitPlan's array: an index condition on
// the leading column, under the transaction's index scans, processIndexScans).
// The outer state = 'running' makes a job that its process finished
// meanwhile (or that another process took over first) stay as it is.
// takeOverSet says what becomes of a job taken over.
var takeOverSQL = `WITH running AS MATERIALIZED (
  SELECT id, attempted_by[cardinality(attempted_by)] AS process FROM river_job WHERE state = 'running'
)
UPDATE river_job SET ` + takeOverSet("'the process running it (' || attempted_by[cardinality(attempted_by)] || ') is gone'") + `
WHERE state = 'running' AND id = ANY(ARRAY(
  SELECT r.id FROM running r
  WHERE starts_with(r.process, $1)
    AND NOT EXISTS (SELECT 1 FROM forward_processes p WHERE p.id = r.process AND p.seen_at >= statement_timestamp() - $2 * interval '1 millisecond')
  ORDER BY r.id LIMIT $3))
RETURNING id, kind, attempted_by[cardinality(attempted_by)], state::text`

// takeOverSet is the SET list of a job taken over because why (an SQL
// text expression): made available again at once, as River's rescuer does
// (its attempt count kept, the attempt under way counted, an error saying
// why), or discarded when its attempts are used up.
func takeOverSet(why string) string {
	return `state = CASE WHEN attempt >= max_attempts THEN 'discarded' ELSE 'available' END::river_job_state,
  scheduled_at = CASE WHEN attempt >= max_attempts THEN scheduled_at ELSE statement_timestamp() END,
  finalized_at = CASE WHEN attempt >= max_attempts THEN statement_timestamp() END,
  errors = array_append(errors, jsonb_build_object('at', statement_timestamp(), 'attempt', greatest(attempt, 0),
    'error', 'taken over: ' || ` + why + `, 'trace', ''))`
}

// runningOfSQL returns the jobs River shows as running whose last attempt
// was made by the process $1, and whether that attempt started more than
// $2 milliseconds ago. Read as takeOverSQL reads the running jobs.
const runningOfSQL = `WITH running AS MATERIALIZED (
  SELECT id, attempted_by[cardinality(attempted_by)] AS process, attempted_at FROM river_job WHERE state = 'running'
)
SELECT id, coalesce(attempted_at < statement_timestamp() - $2 * interval '1 millisecond', true) FROM running WHERE process = $1 ORDER BY id`

// releaseOrphansSQL makes available again the jobs $2 of the process $1
// that River shows as running while the process runs none of them (see
// ReleaseOrphans). By their key, as takeOverSQL updates its jobs.
var releaseOrphansSQL = `UPDATE river_job SET ` + takeOverSet("'its process (' || $1 || ') was not running it (its fetch was cut off)'") + `
WHERE state = 'running' AND id = ANY($2::bigint[]) AND attempted_by[cardinality(attempted_by)] = $1
RETURNING id, kind, attempted_by[cardinality(attempted_by)], state::text`

// RunningJob is a job River shows as running on behalf of a process.
type RunningJob struct {
	ID int64
	// Old: its attempt started more than the age asked for ago.
	Old bool
}

// RunningJobsOf returns the jobs River shows as running whose last attempt
// was made by process, oldest ID first, each saying whether that attempt
// started more than age ago.
func (q *Queries) RunningJobsOf(ctx context.Context, process string, age time.Duration) ([]RunningJob, error) {
	var b pgx.Batch
	b.Queue(processIndexScans)
	b.Queue(runningOfSQL, process, age.Milliseconds())
	br := q.db.SendBatch(ctx, &b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, fmt.Errorf("list the running jobs of %s: %w", process, err)
	}
	rows, err := br.Query()
	if err != nil {
		return nil, fmt.Errorf("list the running jobs of %s: %w", process, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (RunningJob, error) {
		var j RunningJob
		return j, row.Scan(&j.ID, &j.Old)
	})
	if err != nil {
		return nil, fmt.Errorf("list the running jobs of %s: %w", process, err)
	}
	return out, nil
}

// ReleaseOrphans makes available again (as TakeOverJobs does) the jobs ids
// that River shows as running on behalf of process although the process
// runs none of them: River's fetch marks the jobs it takes running in the
// database, and a fetch whose answer was lost (the database crashed, the
// connection broke) leaves jobs that no worker runs, which River's rescuer
// would retry only after its horizon. Jobs no longer running, or now
// another process's, are left as they are. It returns those it released.
func (q *Queries) ReleaseOrphans(ctx context.Context, process string, ids []int64) ([]TakenOver, error) {
	var b pgx.Batch
	b.Queue(processIndexScans)
	b.Queue(releaseOrphansSQL, process, ids)
	br := q.db.SendBatch(ctx, &b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, fmt.Errorf("release the lost jobs of %s: %w", process, err)
	}
	rows, err := br.Query()
	if err != nil {
		return nil, fmt.Errorf("release the lost jobs of %s: %w", process, err)
	}
	return collectTakenOver(rows, process)
}

// collectTakenOver collects the rows of takeOverSQL or releaseOrphansSQL.
func collectTakenOver(rows pgx.Rows, what string) ([]TakenOver, error) {
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (TakenOver, error) {
		var t TakenOver
		var state string
		err := row.Scan(&t.JobID, &t.Kind, &t.Process, &state)
		t.State = rivertype.JobState(state)
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("take over jobs (%s): %w", what, err)
	}
	return out, nil
}

// processIndexScans keeps takeOverSQL on its plan whatever the statistics
// say (they are reset by a crash, when the takeover matters most): no
// sequential or bitmap scan of River's table, and no JIT compilation (the
// cost of a disabled path crosses jit_above_cost). Local to the batch's
// transaction.
const processIndexScans = `SELECT set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true), set_config('jit', 'off', true)`

// TakeOverJobs makes available again up to limit jobs that are running in
// River's table on behalf of a process whose client ID starts with prefix
// and that has not been seen for stale (see takeOverSQL), and returns
// them; none (nil) when there are none. The caller must itself have been
// seen continuously for longer than stale: right after a database crash,
// forward_processes (unlogged) is empty until each live process has
// written its row again.
func (q *Queries) TakeOverJobs(ctx context.Context, prefix string, stale time.Duration, limit int) ([]TakenOver, error) {
	var b pgx.Batch
	b.Queue(processIndexScans)
	b.Queue(takeOverSQL, prefix, stale.Milliseconds(), limit)
	br := q.db.SendBatch(ctx, &b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, fmt.Errorf("take over the jobs of processes that are gone: %w", err)
	}
	rows, err := br.Query()
	if err != nil {
		return nil, fmt.Errorf("take over the jobs of processes that are gone: %w", err)
	}
	return collectTakenOver(rows, "processes that are gone")
}

// ForwardJob is a forward job's row as River stores it.
type ForwardJob struct {
	ID          int64
	Queue       string
	State       rivertype.JobState
	Attempt     int
	MaxAttempts int
	// The job's arguments; URL only in jobs of versions that named targets
	// by URL.
	Sender, EventID, Target, DeliveryID, URL string
	// AttemptedBy are the clients that worked it, in order.
	AttemptedBy []string
	ScheduledAt time.Time
	// Errors are the errors of its failed attempts, in order.
	Errors []string
	// ErrorRecords are its failed attempts' records as River stores them
	// (JSON: at, attempt, error, trace), in order.
	ErrorRecords []string
	// Output is its recorded output (JSON), "" when none.
	Output string
}

// ForwardJobs returns every forward job, oldest (lowest ID) first, and
// every forward_delivered row as the job it stands for (completed after one
// attempt, on no queue).
func (q *Queries) ForwardJobs(ctx context.Context) ([]ForwardJob, error) {
	rows, err := q.db.Query(ctx, `SELECT id, queue, state::text, attempt, max_attempts,
  coalesce(args->>'sender', ''), coalesce(args->>'event_id', ''), coalesce(args->>'target', ''), coalesce(args->>'delivery_id', ''), coalesce(args->>'url', ''),
  coalesce(attempted_by, '{}'), scheduled_at,
  coalesce((SELECT array_agg(e->>'error' ORDER BY ord) FROM unnest(errors) WITH ORDINALITY AS x(e, ord)), '{}'),
  coalesce(errors::text[], '{}'), coalesce(metadata->>'output', '')
FROM river_job WHERE kind = '`+ForwardKind+`'
UNION ALL
SELECT d.id, '', 'completed', 1, d.max_attempts, d.sender, d.event_id, d.target, d.delivery_id, '', '{}', d.attempted_at, '{}', '{}', (`+deliveredOutput+`)::text
FROM forward_delivered d ORDER BY 1`)
	if err != nil {
		return nil, fmt.Errorf("read forward jobs: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ForwardJob, error) {
		var (
			j     ForwardJob
			state string
		)
		err := row.Scan(&j.ID, &j.Queue, &state, &j.Attempt, &j.MaxAttempts, &j.Sender, &j.EventID, &j.Target, &j.DeliveryID, &j.URL,
			&j.AttemptedBy, &j.ScheduledAt, &j.Errors, &j.ErrorRecords, &j.Output)
		j.State = rivertype.JobState(state)
		return j, err
	})
	if err != nil {
		return nil, fmt.Errorf("read forward jobs: %w", err)
	}
	return out, nil
}

// JobTable is River's table of jobs, for tests that look for its name in
// PostgreSQL's views (pg_stat_activity's queries).
const JobTable = "river_job"

// AnalyzeJobs vacuums and analyzes River's job table, as autovacuum does on
// a live one (VACUUM also moves the pending list of River's GIN index on
// args into the index proper). q must not be on a transaction.
func (q *Queries) AnalyzeJobs(ctx context.Context) error {
	if _, err := q.db.Exec(ctx, `VACUUM ANALYZE river_job`); err != nil {
		return fmt.Errorf("analyze the jobs: %w", err)
	}
	return nil
}

// JobScans returns how many times the transaction q is on has scanned
// River's GIN index on the jobs' args (river_job_args_index), and River's
// job table sequentially.
func (q *Queries) JobScans(ctx context.Context) (argIndex, seq int64, err error) {
	err = q.db.QueryRow(ctx, `SELECT pg_stat_get_xact_numscans('river_job_args_index'::regclass),
  (SELECT seq_scan FROM pg_stat_xact_user_tables WHERE relname = 'river_job')`).Scan(&argIndex, &seq)
	if err != nil {
		return 0, 0, fmt.Errorf("read the scans of the jobs: %w", err)
	}
	return argIndex, seq, nil
}

// LockJobInserts blocks every insert of a job (River's table in SHARE ROW
// EXCLUSIVE mode) until the transaction q is on ends.
func (q *Queries) LockJobInserts(ctx context.Context) error {
	if _, err := q.db.Exec(ctx, `LOCK TABLE river_job IN SHARE ROW EXCLUSIVE MODE`); err != nil {
		return fmt.Errorf("lock the jobs: %w", err)
	}
	return nil
}

// CountJobs returns how many River jobs of kind there are (of any kind when
// kind is ""), in one of states (any state when none).
func (q *Queries) CountJobs(ctx context.Context, kind string, states ...rivertype.JobState) (int, error) {
	names := make([]string, 0, len(states))
	for _, s := range states {
		names = append(names, string(s))
	}
	var n int
	err := q.db.QueryRow(ctx, `SELECT count(*) FROM river_job
WHERE ($1 = '' OR kind = $1) AND (cardinality($2::text[]) = 0 OR state::text = ANY($2))`, kind, names).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count jobs: %w", err)
	}
	return n, nil
}

// JobFixture is a state to put a forward job in, as River records it after
// attempts.
type JobFixture struct {
	State rivertype.JobState
	// Attempt is how many attempts started; 0 means all of them
	// (max_attempts).
	Attempt int
	// Errors are the errors of the attempts up to Attempt, the last one
	// Attempt's: they are numbered to end at it.
	Errors []string
	// Output is the recorded output; nil leaves it as it is.
	Output *Output
	// At is when the last attempt started and, in a finished state
	// (completed, cancelled, discarded), when it finished; now when zero.
	At time.Time
	// ScheduledAt is when the next attempt is due; zero leaves it.
	ScheduledAt time.Time
	// AttemptedBy are the River clients that worked it, in order; nil
	// leaves them as they are.
	AttemptedBy []string
}

// SetForwardJob puts the forward job id in f's state.
func (q *Queries) SetForwardJob(ctx context.Context, id int64, f JobFixture) error {
	args, err := f.args()
	if err != nil {
		return err
	}
	tag, err := q.db.Exec(ctx, `UPDATE river_job SET `+fixtureSet+` WHERE kind = '`+ForwardKind+`' AND id = $6`, withID(args, id)...)
	if err != nil {
		return fmt.Errorf("set forward job %d: %w", id, err)
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("set forward job %d: %w", id, ErrNotFound)
	}
	return nil
}

// fixtureSet sets a job's state from a JobFixture's arguments ($1 to $5,
// see JobFixture.args).
const fixtureSet = `state = $1::river_job_state,
  attempt = CASE WHEN $2::int = 0 THEN max_attempts ELSE $2::int END,
  attempted_at = coalesce($3::timestamptz, now()),
  finalized_at = CASE WHEN $1 IN ('completed', 'cancelled', 'discarded') THEN coalesce($3::timestamptz, now()) END,
  errors = (SELECT array_agg(jsonb_build_object('at', coalesce($3::timestamptz, now()),
      'attempt', (CASE WHEN $2::int = 0 THEN max_attempts ELSE $2::int END) - cardinality($4::text[]) + ord::int, 'error', e, 'trace', '') ORDER BY ord)
    FROM unnest($4::text[]) WITH ORDINALITY AS x(e, ord)),
  metadata = CASE WHEN $5::jsonb IS NULL THEN metadata ELSE metadata || jsonb_build_object('output', $5::jsonb) END,
  scheduled_at = coalesce($7::timestamptz, scheduled_at),
  attempted_by = coalesce($8::text[], attempted_by)`

// args returns f's arguments of fixtureSet: $1 to $5, the scheduled time
// ($7; withID puts the job's ID between them) and the clients ($8).
func (f JobFixture) args() ([]any, error) {
	var at, scheduled *time.Time
	if !f.At.IsZero() {
		at = &f.At
	}
	if !f.ScheduledAt.IsZero() {
		scheduled = &f.ScheduledAt
	}
	var output []byte
	if f.Output != nil {
		var err error
		if output, err = json.Marshal(f.Output); err != nil {
			return nil, fmt.Errorf("encode output: %w", err)
		}
	}
	errs := f.Errors
	if errs == nil {
		errs = []string{}
	}
	return []any{string(f.State), f.Attempt, at, errs, output, scheduled, f.AttemptedBy}, nil
}

// withID returns the arguments of fixtureSet with the job's ID as $6.
func withID(args []any, id int64) []any {
	return []any{args[0], args[1], args[2], args[3], args[4], id, args[5], args[6]}
}

// NewForwardJob is a forward job InsertForwardJobs writes as it is,
// without River's insert (no uniqueness): one of another version (URL set,
// no target) or one already in a given state.
type NewForwardJob struct {
	Sender, Target, DeliveryID, URL string
	// EventID is the event's ID; a new random one when zero.
	EventID     uuid.UUID
	MaxAttempts int
}

// InsertForwardJobs writes jobs on queue, each in f's state (a zero State
// is available: due now), in one transaction, and returns their IDs in
// order.
func (q *Queries) InsertForwardJobs(ctx context.Context, queue string, f JobFixture, jobs ...NewForwardJob) ([]int64, error) {
	if f.State == "" {
		f.State = rivertype.JobStateAvailable
	}
	encoded := make([][]byte, 0, len(jobs))
	maxAttempts := make([]int, 0, len(jobs))
	for _, j := range jobs {
		if j.EventID == uuid.Nil {
			id, err := uuid.NewV7()
			if err != nil {
				return nil, err
			}
			j.EventID = id
		}
		a := map[string]string{"sender": j.Sender, "event_id": j.EventID.String(), "delivery_id": j.DeliveryID}
		if j.Target != "" {
			a["target"] = j.Target
		}
		if j.URL != "" {
			a["url"] = j.URL
		}
		b, err := json.Marshal(a)
		if err != nil {
			return nil, fmt.Errorf("encode args: %w", err)
		}
		encoded = append(encoded, b)
		maxAttempts = append(maxAttempts, max(j.MaxAttempts, 1))
	}
	args, err := f.args()
	if err != nil {
		return nil, err
	}
	var ids []int64
	err = pgx.BeginFunc(ctx, q.db, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `INSERT INTO river_job (kind, args, max_attempts, queue, state, priority)
SELECT '`+ForwardKind+`', x.a, x.m, $3, 'available', 1 FROM unnest($1::jsonb[], $2::int[]) WITH ORDINALITY AS x(a, m, ord) ORDER BY x.ord
RETURNING id`, encoded, maxAttempts, queue)
		if err != nil {
			return err
		}
		if ids, err = pgx.CollectRows(rows, pgx.RowTo[int64]); err != nil {
			return err
		}
		if f.State == rivertype.JobStateAvailable && f.Attempt == 0 && len(f.Errors) == 0 && f.Output == nil && f.ScheduledAt.IsZero() && f.AttemptedBy == nil {
			return nil // new jobs, as River inserts them
		}
		_, err = tx.Exec(ctx, `UPDATE river_job SET `+fixtureSet+` WHERE id = ANY($6::bigint[])`,
			args[0], args[1], args[2], args[3], args[4], ids, args[5], args[6])
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("insert forward jobs: %w", err)
	}
	return ids, nil
}

// Current is the newest forward of an event to one target, as a
// redelivery sees it.
type Current struct {
	// JobID is its newest job (0: none), in State after Attempt attempts;
	// Queued: that job is a redelivery queued after an earlier forward (its
	// args name the job it follows).
	JobID   int64
	State   rivertype.JobState
	Attempt int
	Queued  bool
	// Outbox: the forward is still in the outbox; Leased: a fast path is
	// attempting it now.
	Outbox, Leased bool
}

// currentJobsSQL finds the newest forward of sender $1's event $3 to each
// of the targets $2 (its jobs, through hookgate's index on the forward
// jobs, and its delivered first attempt), a redelivery queued after an
// earlier forward and not finished yet (a job with "after") coming before
// any newer one: a newer forward that is not itself queued after one is
// the record of the fast path's first attempt that the redelivery was
// queued after (it gets its ID when the attempt ends: a River job, or a
// forward_delivered row) or the relay's job of that forward (handed over),
// so the queued redelivery is the one to come.
const currentJobsSQL = `SELECT DISTINCT ON (target) target, id, state, attempt, queued FROM (
  SELECT args->>'target' AS target, id, state::text AS state, attempt, args ? 'after' AS queued
  FROM river_job
  WHERE kind = '` + ForwardKind + `' AND args->>'sender' = $1 AND args->>'target' = ANY($2) AND args->>'event_id' = $3::text
  UNION ALL
  SELECT target, id, 'completed', 1, false FROM forward_delivered WHERE sender = $1 AND target = ANY($2) AND event_id = $3::text) f
ORDER BY target, (queued AND state IN ('available', 'scheduled', 'pending', 'running', 'retryable')) DESC, id DESC`

// CurrentForwards returns, for each of targets that has any, the newest
// forward of sender's event to it: its job (an unfinished redelivery
// queued after an earlier forward before any newer job: see
// currentJobsSQL), or its outbox row.
func (q *Queries) CurrentForwards(ctx context.Context, sender string, eventID uuid.UUID, targets []string) (map[string]Current, error) {
	out := map[string]Current{}
	rows, err := q.db.Query(ctx, currentJobsSQL, sender, targets, eventID.String()) //nolint:rowserrcheck // pgx.ForEachRow checks rows.Err
	if err != nil {
		return nil, fmt.Errorf("current forwards of event %s: %w", eventID, err)
	}
	var (
		target, state string
		c             Current
	)
	_, err = pgx.ForEachRow(rows, []any{&target, &c.JobID, &state, &c.Attempt, &c.Queued}, func() error {
		c.State = rivertype.JobState(state)
		out[target] = c
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("current forwards of event %s: %w", eventID, err)
	}
	fwds, err := q.outboxOfEvent(ctx, sender, eventID)
	if err != nil {
		return nil, err
	}
	for _, f := range fwds {
		c := out[f.Target]
		c.Outbox, c.Leased = true, f.State == StateRunning
		out[f.Target] = c
	}
	return out, nil
}

// earlierForwardSQL tells whether job $4, a forward of sender $1's event $3
// to target $2 queued after the one under way, must still wait: while the
// forward is in the outbox, or another of its jobs is unfinished that is
// older or is not itself a queued redelivery (the job a relay or the fast
// path inserted after it). Both are probes of a key: forward_outbox's
// primary key, and hookgate's index on the forward jobs, which the ORDER
// BY (the event compared by a range) makes the one path without a sort
// under indexOrderScans: not River's index on kind, nor its primary key,
// each of which some statistics made the cheaper (see plans.go). A scalar
// subquery, since EXISTS drops its ORDER BY.
const earlierForwardSQL = `SELECT EXISTS (SELECT 1 FROM forward_outbox WHERE sender = $1 AND event_id = $3 AND target = $2)
  OR (SELECT n.id FROM river_job n WHERE n.kind = '` + ForwardKind + `'
    AND n.args->>'sender' = $1 AND n.args->>'target' = $2 AND n.args->>'event_id' >= $3::text AND n.args->>'event_id' <= $3::text
    AND n.id <> $4 AND n.state IN ('available', 'scheduled', 'pending', 'running', 'retryable')
    AND (n.id < $4 OR NOT n.args ? 'after')
    ORDER BY n.args->>'event_id', n.id LIMIT 1) IS NOT NULL`

// EarlierForwardUnfinished reports whether the forward job jobID of
// sender's event to target, queued after an earlier forward, must wait for
// one that is not finished yet.
func (q *Queries) EarlierForwardUnfinished(ctx context.Context, sender, target string, eventID uuid.UUID, jobID int64) (bool, error) {
	var b pgx.Batch
	b.Queue(indexOrderScans)
	b.Queue(earlierForwardSQL, sender, target, eventID.String(), jobID)
	br := q.db.SendBatch(ctx, &b)
	defer br.Close()
	var wait bool
	_, err := br.Exec()
	if err == nil {
		err = br.QueryRow().Scan(&wait)
	}
	if err != nil {
		return false, fmt.Errorf("earlier forwards of event %s to %s: %w", eventID, target, err)
	}
	return wait, nil
}

// Redeliveries serialise on PostgreSQL advisory locks taken for the rest
// of a transaction, so that they hold across processes on one database. A
// redelivery of one event reads the event's forwards (CurrentForwards) and
// inserts the new ones in one transaction (Redelivering) that holds its
// sender's redelivery lock in share mode and then its event's lock
// (LockRedelivery): two redeliveries of one event run one after the other,
// and the second sees what the first inserted. A batch of a bulk
// redelivery takes its sender's lock alone, exclusively
// (LockBulkRedelivery), before it reads its forwards again and inserts
// their new ones: it waits for the single redeliveries of the sender under
// way, and those that come meanwhile wait for its COMMIT. Without them,
// two concurrent redeliveries of a forward under way both saw it running
// and both queued a forward after it (such a forward has no unique key).
//
// A bulk batch takes one lock, not one per event: a batch of BulkBatch
// events would hold a thousand entries of the server's shared lock table
// (max_locks_per_transaction × max_connections, 6,400 by default, shared
// by every session), and running out of it fails other sessions'
// statements too. A single redelivery takes its two locks in that order
// (sender, then event), the bulk batch only one, so no two of them wait
// for each other in a cycle. The cost: a single redelivery of a sender
// waits for a bulk batch of that sender being written (one transaction of
// up to BulkBatch inserts), and bulk batches of one sender's targets take
// turns.
//
// The locks are the two-key form, pg_advisory_xact_lock(int4, int4): a
// class (redeliverySenderLock, redeliveryEventLock), then a 32-bit hash of
// the sender (and the event). Keys whose hashes collide only wait for each
// other. The two-key form never collides with one-key locks (goose's,
// pgtest's) nor with Citus's own (other lock tag fields). On Citus the
// locks are the coordinator's (the functions name no table, and Citus does
// not propagate them), which every gateway process talks to.

// The first keys of the redelivery locks: the bytes "hkrs" and "hkrd".
const (
	redeliverySenderLock int32 = 0x686b7273
	redeliveryEventLock  int32 = 0x686b7264
)

// redeliveryLockKey is the second key of the redelivery lock of sender's
// event, or of sender itself when eventID is nil.
func redeliveryLockKey(sender string, eventID *uuid.UUID) int32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(sender))
	if eventID != nil {
		_, _ = h.Write([]byte{'/'})
		_, _ = h.Write(eventID[:])
	}
	return int32(h.Sum32())
}

// LockRedelivery takes the redelivery locks of sender's event: its
// sender's in share mode, then the event's, waiting for the transactions
// that hold them (a redelivery of the event, a bulk batch of the sender),
// and keeps them until the end of the transaction q runs in (on a pool,
// until the end of the statement: no use). One round trip. It returns an
// error when the wait ends with ctx or the connection.
func (q *Queries) LockRedelivery(ctx context.Context, sender string, eventID uuid.UUID) error {
	var b pgx.Batch
	b.Queue(`SELECT pg_advisory_xact_lock_shared($1::int4, $2::int4)`, redeliverySenderLock, redeliveryLockKey(sender, nil))
	b.Queue(`SELECT pg_advisory_xact_lock($1::int4, $2::int4)`, redeliveryEventLock, redeliveryLockKey(sender, &eventID))
	if err := q.db.SendBatch(ctx, &b).Close(); err != nil {
		return fmt.Errorf("lock redeliveries of event %s: %w", eventID, err)
	}
	return nil
}

// LockBulkRedelivery takes sender's redelivery lock exclusively, waiting
// for the redeliveries of its events under way (LockRedelivery) and for
// another bulk batch of the sender, and keeps it until the end of the
// transaction q runs in. It returns an error when the wait ends with ctx
// or the connection.
func (q *Queries) LockBulkRedelivery(ctx context.Context, sender string) error {
	if _, err := q.db.Exec(ctx, `SELECT pg_advisory_xact_lock($1::int4, $2::int4)`, redeliverySenderLock, redeliveryLockKey(sender, nil)); err != nil {
		return fmt.Errorf("lock redeliveries of %s: %w", sender, err)
	}
	return nil
}

// Redelivering runs fn in a transaction (a savepoint when q runs in one)
// that holds the redelivery locks of sender's event (LockRedelivery),
// with the queries on that transaction, and commits it when fn returns
// nil. fn reads the event's forwards and inserts its new ones in tx: a
// concurrent redelivery of the event, in this process or another, waits
// for the COMMIT and then sees what fn inserted.
func (q *Queries) Redelivering(ctx context.Context, sender string, eventID uuid.UUID, fn func(q *Queries, tx pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, q.db, func(tx pgx.Tx) error {
		tq := New(tx)
		if err := tq.LockRedelivery(ctx, sender, eventID); err != nil {
			return err
		}
		return fn(tq, tx)
	})
}
