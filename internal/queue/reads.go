package queue

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/hookgate/hookgate/internal/store"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/rivertype"
)

// eventJobsSQL finds an event's jobs through River's GIN index on args,
// for which args @> … is the indexable form, under [store.GINScans]: that
// index is read by bitmap scans, which are the only ones left enabled.
// Under plain index scans, when the statistics said river_job was small,
// PostgreSQL read every forward job of every sender through River's index
// on kind (the kind is now compared as an expression, which no index
// serves), and a scan of River's primary key would read them all too.
var eventJobsSQL = jobSQL(`SELECT id, state::text, attempt, max_attempts, coalesce(args->>'target', ''), coalesce(args->>'url', ''), created_at,
       errors[array_upper(errors, 1)], metadata->'output'
FROM river_job
WHERE kind || '' = {forward_kind} AND args @> jsonb_build_object('event_id', $1::text)`)

// eventDeliveredSQL finds the event's delivered first attempts in
// forward_delivered, by a probe of its primary key, the event compared as
// a range in its order, under [store.IndexOrderScans]. By equality, the
// index of targets served it as well, reading the sender's every
// delivered forward, and PostgreSQL chose it when its statistics said
// the sender's were few.
const eventDeliveredSQL = `SELECT d.id, $3::text, 1, d.max_attempts, d.target, '', d.created_at, NULL::jsonb, ` + deliveredOutput + `
FROM forward_delivered d WHERE d.sender = $2 AND d.event_id >= $1::text AND d.event_id <= $1::text
ORDER BY d.event_id`

// deliveredOutput is the [Output] of forward_delivered's row d, as River's
// worker records it under metadata.output.
const deliveredOutput = `jsonb_build_object('attempt', 1, 'status', d.status, 'delivered_at', d.delivered_at, 'ack', d.ack)`

// EventForwards returns the forwards of sender's event. Those still in the
// outbox come first, with JobID 0. Its jobs follow, oldest first: one per
// target when it was accepted, and one per target for each redelivery. It
// returns an empty slice, not nil, when the event has none.
func (q *Jobs) EventForwards(ctx context.Context, sender string, eventID uuid.UUID) ([]Forward, error) {
	out, err := q.outboxOfEvent(ctx, sender, eventID)
	if err != nil {
		return nil, err
	}
	// Each statement runs under the settings that leave it the one path
	// intended, which end with it.
	var jobs []Forward
	collect := func(rows pgx.Rows) error {
		some, err := pgx.CollectRows(rows, scanEventForward)
		jobs = append(jobs, some...)
		return err
	}
	var b pgx.Batch
	b.Queue(store.GINScans)
	b.Queue(eventJobsSQL, eventID.String()).Query(collect)
	b.Queue(store.ResetScans)
	b.Queue(store.IndexOrderScans)
	b.Queue(eventDeliveredSQL, eventID.String(), sender, jobCompleted).Query(collect)
	b.Queue(store.ResetScans) // when q.db is a transaction
	if err := q.db.SendBatch(ctx, &b).Close(); err != nil {
		return nil, fmt.Errorf("list forwards of event %s: %w", eventID, err)
	}
	slices.SortFunc(jobs, func(a, b Forward) int { return cmp.Compare(a.JobID, b.JobID) })
	return append(out, jobs...), nil
}

// scanEventForward scans a row of eventJobsSQL or eventDeliveredSQL.
func scanEventForward(row pgx.CollectableRow) (Forward, error) {
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
}

// notSuperseded is the condition that job j of sender $1 and target $2 is
// the newest forward of its event to its target. It is one index probe per
// job. A scalar subquery is never turned into an anti-join, which on a
// table without statistics compared every pair of jobs.
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

// deliveredNotSuperseded is notSuperseded for forward_delivered's row d.
// An event has at most one row there per target.
var deliveredNotSuperseded = jobSQL(`(SELECT n.id FROM river_job n WHERE n.kind = {forward_kind}
    AND n.args->>'sender' = $1 AND n.args->>'target' = $2
    AND n.args->>'event_id' >= d.event_id AND n.args->>'event_id' <= d.event_id AND n.id > d.id
    ORDER BY n.args->>'event_id', n.id LIMIT 1) IS NULL`)

// Counts are a target's forwards by state. Pending includes the forwards
// still in the outbox. Delivered counts every delivery that River still
// keeps, once per delivery of a redelivered event. Failed counts the
// failures that no newer forward of the same event followed.
type Counts struct {
	Pending, Running, Retrying, Delivered, Failed int64
}

// countsSQL counts sender $1's unfinished forward jobs by target, state
// and whether an attempt failed. It reads only those jobs, through
// hookgate's index on unfinished forwards. It never reads the finished
// jobs that River keeps, which can be millions. failedCountsSQL counts the
// failed ones.
var countsSQL = jobSQL(`SELECT j.target, j.state::text, j.failed, count(*) FROM (
  SELECT j.args->>'target' AS target, j.state, ` + failedAttempt("j") + ` AS failed FROM river_job j
  WHERE ` + unfinishedForwards + ` AND j.args->>'sender' = $1 AND j.state = ANY($2::river_job_state[])
  ORDER BY j.args->>'target', j.state, j.id) j
GROUP BY 1, 2, 3`)

// unfinishedForwards is the condition that job j is an unfinished
// forward: the predicate of hookgate's index on such jobs. A test checks
// its states.
const unfinishedForwards = `j.kind = {forward_kind} AND j.state NOT IN ('cancelled', 'completed', 'discarded')`

// completedCountsSQL counts sender $1's completed forward jobs by target,
// in rows like countsSQL's. It reads hookgate's index on the forwards, not
// River's index on job state, which would read every sender's jobs. It
// runs only when the delivered forwards are asked for.
var completedCountsSQL = jobSQL(`SELECT j.target, $2::text, false, count(*) FROM (
  SELECT j.args->>'target' AS target FROM river_job j
  WHERE j.kind = {forward_kind} AND j.args->>'sender' = $1 AND j.state = $2::river_job_state
  ORDER BY j.args->>'target', j.args->>'event_id', j.id) j
GROUP BY 1`)

// deliveredCountsSQL counts sender $1's delivered first attempts by
// target, in rows like countsSQL's. It reads the whole history, so it runs
// only when the delivered forwards are asked for.
const deliveredCountsSQL = `SELECT target, $2::text, false, count(*) FROM forward_delivered WHERE sender = $1 GROUP BY 1`

// CountForwards returns the counts of sender's forwards by target name,
// in one round trip. Delivered stays 0 unless delivered is true, because
// counting it reads the target's whole history. A target without forwards
// is absent. Jobs that name their target by URL are not counted. The JSON
// API and the console both count with it.
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

// Filter selects forwards of one target in State, or in any state when
// State is "". Their time is in [Since, Until), and a zero time is no
// bound. A delivered or failed forward's time is when it finished. Any
// other forward's time is when it was enqueued.
type Filter struct {
	Sender, Target string
	State          State
	Since, Until   time.Time
	// InStateAt, when not zero with State running or retrying, matches
	// the forwards that were in State at that time. A bulk redelivery's
	// job uses it to match what its request saw.
	InStateAt time.Time
}

// underWayAt are the conditions that job j was running, or retrying, at a
// given time. They read its state now, when its latest attempt started,
// when that attempt's error was recorded and when it finished. A job was
// running then if it still runs, or if that attempt ended since. It was
// retrying then if its failure came before and it still waits, or if its
// retry started since.
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
	// jobs is the condition over river_job j. delivered is the one over
	// forward_delivered d, or "" when the state excludes its rows.
	jobs, delivered string
	args            []any
}

// and adds a condition to each table's condition.
func (w *where) and(jobs, delivered string) {
	w.jobs += " AND " + jobs
	if w.delivered != "" {
		w.delivered += " AND " + delivered
	}
}

// targetJobs is the condition that job j is a forward of sender $1 to
// target $2, in the terms of hookgate's index on the forward jobs.
var targetJobs = jobSQL(`j.kind = {forward_kind} AND j.args->>'sender' = $1 AND j.args->>'target' = $2`)

// where returns the conditions of f over river_job j and
// forward_delivered d, and their arguments. $1 is the sender and $2 the
// target. A failed forward must not be marked superseded, as in the
// counts. With latest, a forward in any other state must be the newest of
// its event to its target. With latest, a running or retrying job must
// also not be a redelivery still waiting. inOutbox lists the events whose
// forward to f's target is in the outbox.
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

// jobsByState returns the branches of a UNION ALL that selects columns
// of the river_job rows j that match w.jobs, one branch per River state
// that f's jobs may be in: f's state's, or every state when f has no
// state or a window of InStateAt (finished jobs match it too). It appends
// each state to w's arguments; "{state}" in w.jobs stands for the branch's.
// Each branch is a range of hookgate's index of forward jobs by sender,
// target, state and ID (migration 30), read in its order, dir (ASC or
// DESC), as a subquery of its own: so PostgreSQL merges the branches (a
// Merge Append) of a UNION ALL ordered by ID and limited, and reads each
// only as far as the rows merged so far. The statement then reads about
// its rows, however many jobs River keeps. (Branches without their own
// ORDER BY were appended and sorted: PostgreSQL 15 does not see that a
// branch's index gives its rows in the order of their IDs.) w.jobs keeps
// the sender ($1) and the target ($2) of that index.
func (w *where) jobsByState(f Filter, columns, dir string) string {
	states := stateNames(f.State)
	if f.State == "" || !f.InStateAt.IsZero() {
		states = allJobStates
	}
	branches := make([]string, len(states))
	for i, st := range states {
		w.args = append(w.args, st)
		p := fmt.Sprintf("$%d::river_job_state", len(w.args))
		branches[i] = orderedBranch(`SELECT `+columns+`
  FROM river_job j WHERE `+strings.ReplaceAll(w.jobs, "{state}", p)+` AND j.state = `+p+`
  ORDER BY j.id `+dir, fmt.Sprint("b", i))
	}
	return strings.Join(branches, "\nUNION ALL\n")
}

// orderedBranch is the branch of a UNION ALL that selects every column
// of sql, an ordered SELECT, as the subquery alias: see jobsByState.
func orderedBranch(sql, alias string) string {
	return "SELECT * FROM (" + sql + ") " + alias
}

// allJobStates are River's job states (a test checks them against the
// database's type).
var allJobStates = func() []string {
	var out []string
	for _, s := range rivertype.JobStates() {
		out = append(out, string(s))
	}
	return out
}()

// TargetForward is one forward of a target, as [Jobs.ListTargetForwards]
// returns it.
type TargetForward struct {
	Forward
	EventID    uuid.UUID
	DeliveryID string
	// EventType is the event's type, or "" when it has none or is no
	// longer stored.
	EventType string
	// AttemptedAt is when the latest attempt started. FinishedAt is when
	// the forward was delivered or failed.
	AttemptedAt time.Time
	FinishedAt  time.Time
}

// ForwardPage is one page of [Jobs.ListTargetForwards].
type ForwardPage struct {
	// Forwards are newest first. It is empty, not nil, when there are none.
	Forwards []TargetForward
	// Next is the cursor of the next page, or nil on the last page.
	Next *store.Cursor
}

// ListTargetForwards returns up to limit forwards of f's target that
// match f, newest first, from the cursor after when it is not nil. limit
// is from 1 to [store.MaxListLimit]. Failed forwards are ordered by when
// they failed, since a forward retried for hours fails after newer ones.
// The others are ordered by job ID. Pages stay stable while forwards are
// added. Forwards still in the outbox have no job yet and are not listed.
// f.InStateAt is not read.
//
// A page reads about its forwards, not the target's history of jobs
// (migration 30): failed forwards through their index by time of failure;
// the others as the newest jobs of each of River's states that f's state
// has, each through the index by state and ID, merged with the newest
// delivered first attempts. Pending and retrying share River's states, so
// one reads past the waiting forwards of the other. Since and Until on
// the creation of a forward that is not delivered or failed are filters:
// a window far in the past reads the newer jobs of its states first.
func (q *Jobs) ListTargetForwards(ctx context.Context, f Filter, limit int, after *store.Cursor) (ForwardPage, error) {
	if limit < 1 || limit > store.MaxListLimit {
		return ForwardPage{}, fmt.Errorf("list forwards: limit %d is not from 1 to %d", limit, store.MaxListLimit)
	}
	f.InStateAt = time.Time{}
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
	const columns = `j.id, j.state::text, j.attempt, j.max_attempts, coalesce(j.args->>'event_id', ''), coalesce(j.args->>'delivery_id', ''),
       j.created_at, j.attempted_at, j.finalized_at, j.errors[array_upper(j.errors, 1)], j.metadata->'output'`
	var sql string
	if byFinish {
		// The index's predicate, in its literal terms.
		w.args = append(w.args, limit+1)
		sql = `SELECT ` + columns + `
FROM river_job j WHERE ` + w.jobs + ` AND ` + failedForwards("j") + fmt.Sprintf(`
ORDER BY j.args->>'sender' DESC, j.args->>'target' DESC, j.finalized_at DESC, j.id DESC LIMIT $%d`, len(w.args))
	} else {
		// Newest first: each branch reads its index backwards.
		sql = `SELECT * FROM (` + w.jobsByState(f, columns, "DESC")
		if w.delivered != "" {
			sql += "\nUNION ALL\n" + orderedBranch(`SELECT d.id, `+fmt.Sprintf("$%d::text", completed)+`, 1::smallint, d.max_attempts, d.event_id, d.delivery_id,
       d.created_at, d.attempted_at, d.delivered_at, NULL::jsonb, `+deliveredOutput+`
  FROM forward_delivered d WHERE `+w.delivered+` ORDER BY d.id DESC`, "delivered")
		}
		w.args = append(w.args, limit+1)
		sql += fmt.Sprintf(`) u ORDER BY 1 DESC LIMIT $%d`, len(w.args))
	}
	// In the indexes' order: when the statistics said river_job was small,
	// PostgreSQL read every forward job through River's index on kind,
	// and sorted them.
	rows, err := store.QueryUnder(ctx, q.db, store.IndexOrderScans, sql, w.args...)
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

// BacklogStates are the names that [Jobs.Backlog] counts under: "outbox"
// and River's job states of unfinished forwards.
func BacklogStates() []string {
	return append([]string{"outbox"}, stateNames(StatePending, StateRunning, StateRetrying)...)
}

// backlogSQL counts the forward jobs in the River states $1 by state. It
// reads River's fetching index for those states alone. A sequential scan,
// or River's index on kind, would read every finished job that River
// keeps.
var backlogSQL = jobSQL(`SELECT state::text, count(*) FROM (
  SELECT state FROM river_job WHERE state = ANY($1::river_job_state[]) AND kind = {forward_kind}
  ORDER BY state, queue, priority, scheduled_at, id) j
GROUP BY state`)

// outboxCountSQL counts sender $1's outbox rows. There is one statement
// per sender, so Citus runs each on one shard, through the outbox's key.
var outboxCountSQL = `SELECT count(*) FROM forward_outbox WHERE sender = $1 AND ` + store.Unrecorded("")

// backlogOfSenderSQL is outboxCountSQL, and the count of sender $1's
// ordering keys that a failed forward holds (through their partial index),
// in one statement on the sender's shard.
var backlogOfSenderSQL = `SELECT (` + outboxCountSQL + `), (SELECT count(*) FROM forward_keys WHERE sender = $1 AND blocked_event IS NOT NULL)`

// BlockedKeys is the name under which [Jobs.Backlog] counts the ordering
// keys that a forward which failed for good holds (docs/forwarding.md,
// "Ordered delivery"). It is not a state of [BacklogStates].
const BlockedKeys = "blocked_keys"

// Backlog returns how many forwards are unfinished, by the names of
// [BacklogStates]. "outbox" counts the rows of senders that are accepted
// but not relayed yet. [BlockedKeys] counts the senders' blocked ordering
// keys. A state without any is absent. It is one round trip
// of indexed reads. Every process reads this metric at every scrape, so
// its cost must not grow with the finished jobs that River keeps.
func (q *Jobs) Backlog(ctx context.Context, senders []string) (map[string]int64, error) {
	var b pgx.Batch
	b.Queue(store.IndexOrderScans)
	b.Queue(backlogSQL, stateNames(StatePending, StateRunning, StateRetrying))
	for _, s := range senders {
		b.Queue(backlogOfSenderSQL, s)
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
	var outbox, blocked, nb int64
	for range senders {
		if err := br.QueryRow().Scan(&n, &nb); err != nil {
			return nil, fmt.Errorf("count forward backlog: %w", err)
		}
		outbox, blocked = outbox+n, blocked+nb
	}
	if outbox > 0 {
		out["outbox"] = outbox
	}
	if blocked > 0 {
		out[BlockedKeys] = blocked
	}
	return out, nil
}

// outboxOfEvent returns the forwards of sender's event still in the
// outbox, by target name. They are pending, or running while a fast path
// holds the lease. It returns an empty slice, not nil, when there are none.
func (q *Jobs) outboxOfEvent(ctx context.Context, sender string, eventID uuid.UUID) ([]Forward, error) {
	// Each row's key is a probe of its own (a LATERAL subquery that
	// OFFSET 0 keeps apart), under IndexScans: joined, PostgreSQL read
	// every key of the sender, or the whole table, when its statistics
	// said forward_keys was small.
	rows, err := store.QueryUnder(ctx, q.db, store.IndexScans, `SELECT o.target, o.created_at, coalesce(o.leased_until > statement_timestamp() AND o.leased_until < 'infinity', false),
  coalesce(o.leased_until = 'infinity', false), k.blocked_event, coalesce(o.seq - k.head_seq, 0), coalesce(k.last_seq - k.head_seq, 0)
FROM forward_outbox o LEFT JOIN LATERAL (SELECT k.blocked_event, k.head_seq, k.last_seq FROM forward_keys k
  WHERE k.sender = $1 AND k.target = o.target AND k.order_key = o.order_key OFFSET 0) k ON true
WHERE o.sender = $1 AND o.event_id = $2 AND `+store.Unrecorded("o")+` ORDER BY o.target`, sender, eventID)
	if err != nil {
		return nil, fmt.Errorf("list outbox rows of event %s: %w", eventID, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Forward, error) {
		f := Forward{State: StatePending}
		var (
			leased, waiting bool
			blocked         *uuid.UUID
			before, behind  int64
		)
		err := row.Scan(&f.Target, &f.CreatedAt, &leased, &waiting, &blocked, &before, &behind)
		switch {
		case leased:
			f.State = StateRunning
		case waiting && blocked != nil:
			f.Waiting = store.BlockedKey{EventID: *blocked, Waiting: behind}.Summary()
		case waiting:
			f.Waiting = fmt.Sprintf("waiting for its ordering key's turn (%d before it)", before)
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

// outboxCountsSQL counts sender $1's outbox rows by target, through the
// outbox's key.
var outboxCountsSQL = `SELECT target, count(*) FROM forward_outbox WHERE sender = $1 AND ` + store.Unrecorded("") + ` GROUP BY target`
