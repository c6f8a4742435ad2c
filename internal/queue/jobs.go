package queue

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/hookgate/hookgate/internal/store"
	"github.com/riverqueue/river/rivertype"
)

// A target's jobs, and an event's newer forward, are found through
// hookgate's index on the forward jobs' sender, target, event and ID
// (migration 9), whose expressions (args->>'sender' = …) and predicate
// (kind = 'hookgate_forward', as a literal: forwardKind) the queries
// repeat exactly. River's GIN index on args would take milliseconds per
// lookup (jsonb_ops indexes the keys every job has).
//
// "Failed" means a forward that failed and was not followed by a newer
// forward of the same event to the same target (a redelivery): once an
// event has been redelivered its old failure is no longer counted, listed
// or matched, so redelivering the failures twice sends each event once.
// The JSON API and the console count and list with the same definition:
// the failed jobs not marked superseded (failed.go).
//
// A forward the fast path delivered at its first attempt is not a River
// job: it is a row of forward_delivered (migration 14), a narrow table
// that costs PostgreSQL a fraction of a job. Every read here takes both
// tables as one set of forwards: such a row is a forward in River's state
// completed after one attempt, whose ID comes from River's job sequence,
// so that IDs order forwards across both tables.

// ForwardKind is the River job kind of forwards.
const ForwardKind = "hookgate_forward"

// forwardKind is ForwardKind as an SQL literal: the one place it is
// formatted into SQL. The statements on River's table write
// {forward_kind} where they name the forward jobs' kind, and are passed
// through jobSQL once, when the package is initialised. A literal, not a
// parameter: hookgate's index on the forward jobs (migration 9) is partial,
// WHERE kind = 'hookgate_forward', and PostgreSQL plans with a partial
// index only a query whose conditions imply its predicate when it is
// planned. kind = $n implies nothing in a generic plan, which PostgreSQL
// may choose for pgx's prepared statements from their sixth execution on,
// and the statements would then read River's index on kind instead (every
// forward job, per job: see plans.go).
var forwardKind = "'" + strings.ReplaceAll(ForwardKind, "'", "''") + "'"

// jobSQL returns the statement sql with each {forward_kind} replaced by
// forwardKind.
func jobSQL(sql string) string { return strings.ReplaceAll(sql, "{forward_kind}", forwardKind) }

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

// forwardPriority is the River priority of every forward job: River's
// default, which jobParams gives and the fast path's recording writes.
// The statements that find waiting forwards through River's fetching
// index (state, queue, priority, scheduled_at, id) name it, so that the
// time is a bound of the index scan, not a filter over every waiting job.
const forwardPriority = 1

// staysUnique is the condition, over a job j in River's state $<p> to be
// changed to available, that the change keeps j in River's unique index
// (river_job_unique_idx: a job with a unique key is in it while its state
// is one of its unique states) or keeps it out: a job that would enter it
// could conflict with another job of its key, which River's scheduler
// discards, and is left to River. Every forward has both states among its
// unique states (uniqueStates), or no unique key.
func staysUnique(available int) string {
	return fmt.Sprintf(`(unique_key IS NULL OR unique_states IS NULL
      OR river_job_state_in_bitmask(unique_states, state) = river_job_state_in_bitmask(unique_states, $%d::river_job_state))`, available)
}

// wakeSQL makes available now (River's state $4; scheduled_at now, or
// with $8 when each was created, at the latest now, so that River's fetch,
// by priority, scheduled_at and ID, takes them in the order they were
// accepted) up to $7 forwards of sender $2's target $3 on queue $1 that
// wait: snoozed
// behind its breaker or waiting for a retry (River's states $5, scheduled
// and retryable, whatever their time), and up to $7 waiting in River's
// state available for a later time (River leaves a snooze or a retry due
// within its scheduler's interval so). A target whose breaker closes
// answers again, so its forwards are attempted at once, its retries too:
// they failed while it was down.
//
// The jobs are selected in two InitPlans that read River's fetching index
// (state, queue, priority, scheduled_at, id) in its order (the one path
// without a sort under store.IndexOrderScans, see plans.go): the queue's
// waiting forwards of priority $6 (forwardPriority), the target's kept by
// a filter on args; the available ones from now on only. They are locked
// with FOR UPDATE SKIP LOCKED and updated by ctid (a TID scan): the
// statement never waits for a job another transaction holds (River's
// fetch takes it, its scheduler makes it available, its completer writes
// it), so it takes part in no deadlock (see the lock order, doc.go). A job
// it skips is woken by the next statement, if it still waits.
var wakeSQL = jobSQL(`UPDATE river_job SET state = $4::river_job_state, scheduled_at = CASE WHEN $8::bool THEN least(created_at, now()) ELSE now() END
WHERE ctid = ANY(ARRAY(SELECT ctid FROM river_job
    WHERE state = ANY($5::river_job_state[]) AND queue = $1 AND priority = $6
      AND kind = {forward_kind} AND args @> jsonb_build_object('sender', $2::text, 'target', $3::text) AND ` + staysUnique(4) + `
    ORDER BY state, queue, priority, scheduled_at, id LIMIT $7 FOR UPDATE SKIP LOCKED)
  || ARRAY(SELECT ctid FROM river_job
    WHERE state = $4::river_job_state AND queue = $1 AND priority = $6 AND scheduled_at > now()
      AND kind = {forward_kind} AND args @> jsonb_build_object('sender', $2::text, 'target', $3::text)
    ORDER BY state, queue, priority, scheduled_at, id LIMIT $7 FOR UPDATE SKIP LOCKED))`)

// wakeBatch is the most jobs of each kind (see wakeSQL) one statement of
// a wake takes: a transaction of a wake holds at most twice as many jobs,
// for milliseconds.
const wakeBatch = 1000

// wakeArgs are wakeSQL's arguments: inOrder keeps the order of creation.
func wakeArgs(queue, sender, target string, limit int, inOrder bool) []any {
	return []any{queue, sender, target, jobAvailable, []string{jobScheduled, jobRetryable}, forwardPriority, limit, inOrder}
}

// WakeWaitingForwards makes the waiting forwards of sender's target on
// queue available now: those snoozed behind its breaker, waiting for a
// retry, or for a later time (see wakeSQL), wakeBatch at a time until a
// statement finds fewer, and returns how many. It never waits for a job
// another transaction holds: a job River's fetch, scheduler or completer
// holds meanwhile is left as they leave it (running, or available).
func (q *Jobs) WakeWaitingForwards(ctx context.Context, queue, sender, target string) (int64, error) {
	return q.wake(ctx, queue, sender, target, false)
}

// WakeHeldForwards is WakeWaitingForwards for the forwards of a target an
// operator resumed: each is made available as of when it was created (or
// now, if later), so that River's fetch takes them in the order they were
// accepted, before the forwards accepted since.
func (q *Jobs) WakeHeldForwards(ctx context.Context, queue, sender, target string) (int64, error) {
	return q.wake(ctx, queue, sender, target, true)
}

func (q *Jobs) wake(ctx context.Context, queue, sender, target string, inOrder bool) (int64, error) {
	var total int64
	for {
		n, err := execUnder(ctx, q.db, store.IndexOrderScans, wakeSQL, wakeArgs(queue, sender, target, wakeBatch, inOrder)...)
		total += n
		if err != nil {
			return total, fmt.Errorf("wake the forwards of %s/%s: %w", sender, target, err)
		}
		if n < wakeBatch {
			return total, nil
		}
	}
}

// decodeOutcome sets f's state, and its last status, Retry-After, error
// and delivery time from a job's latest attempt error and recorded output
// (either may be nil), f.Attempts being already set: a waiting job after a
// failed attempt (attempted, with an error) is retrying (stateOf).
func decodeOutcome(f *Forward, state rivertype.JobState, lastErr, output []byte) error {
	f.State = stateOf(state, f.Attempts >= 1 && len(lastErr) > 0)
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
		f.LastError = strings.TrimPrefix(ae.Error, riverCancelPrefix)
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

// riverCancelPrefix is what River's JobCancel puts before the error of a
// forward failed at once (rivertype's JobCancelError), and the fast path
// does not: a forward's last error is read without it, so that one outcome
// has one text whichever path attempted it.
const riverCancelPrefix = "JobCancelError: "

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
