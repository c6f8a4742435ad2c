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

// The statements find a target's jobs, and an event's newer forward,
// through hookgate's index on the forward jobs' sender, target, event and
// ID. They repeat that index's expressions exactly. River's GIN index on
// args would take milliseconds per lookup, because it indexes the keys
// that every job has.
//
// A forward that the fast path delivered at its first attempt is not a
// River job. It is a row of forward_delivered, a narrow table that costs a
// fraction of a job. Every read takes both tables as one set of forwards.
// Such a row stands for a job completed after one attempt. Its ID comes
// from River's job sequence, so IDs order forwards across both tables.

// ForwardKind is the River job kind of forwards.
const ForwardKind = "hookgate_forward"

// forwardKind is [ForwardKind] as an SQL literal, the one place it is
// formatted into SQL. Statements write {forward_kind} and pass through
// jobSQL once, when the package is initialised. It is a literal, not a
// parameter, because hookgate's index on the forward jobs is partial on
// the kind. PostgreSQL may pick a generic plan for a prepared statement
// from its sixth run, and kind = $n would then match no partial index.
var forwardKind = "'" + strings.ReplaceAll(ForwardKind, "'", "''") + "'"

// jobSQL returns the statement sql with each {forward_kind} replaced by
// forwardKind.
func jobSQL(sql string) string { return strings.ReplaceAll(sql, "{forward_kind}", forwardKind) }

// Output is what a forward's attempt records on its job as River's
// recorded output. It holds the target's HTTP status, the Retry-After it
// asked for and the time of delivery. Status is 0 when the target gave no
// answer, as after a timeout or a connection error.
type Output struct {
	// Attempt is the attempt that recorded it.
	Attempt     int       `json:"attempt,omitempty"`
	Status      int       `json:"status"`
	DeliveredAt time.Time `json:"delivered_at,omitzero"`
	// RetryAfter is the target's Retry-After in seconds, fractions kept.
	// It is 0 when the target sent none.
	RetryAfter float64 `json:"retry_after,omitempty"`
	// Ack is a broker's acknowledgement of the delivered forward.
	Ack string `json:"ack,omitempty"`
}

// Forward is one forward of an event.
type Forward struct {
	// JobID is the forward's River job. It is 0 while the forward is still
	// in the outbox, and its state is then pending.
	JobID int64
	// Target is the target's name, or "" for a job that names its target
	// by LegacyURL.
	Target string
	// LegacyURL is the target URL that such a job names. It may hold
	// credentials, so never show it unredacted.
	LegacyURL string
	State     State
	// Attempts is how many attempts have started, MaxAttempts how many may.
	Attempts    int
	MaxAttempts int
	// LastStatus is the target's HTTP status in the latest finished
	// attempt. It is 0 when none finished or the target gave no answer.
	LastStatus int
	// LastRetryAfter is the Retry-After that came with LastStatus.
	LastRetryAfter time.Duration
	// LastError is why the latest finished attempt failed. Errors of jobs
	// that name their target by URL may contain it: redact with LegacyURL.
	LastError string
	// DeliveredAt is when the target accepted the forward. Ack is a
	// broker's acknowledgement of it.
	DeliveredAt time.Time
	Ack         string
	CreatedAt   time.Time
	// Waiting says why a forward of an ordered target in the outbox waits
	// for its turn: "blocked by <event> (N waiting)" when the forward that
	// holds its key failed, or "waiting for its ordering key's turn (N
	// before it)"; "" for any other.
	Waiting string
}

// forwardPriority is the River priority of every forward job, River's
// default. The statements that find waiting forwards through River's
// fetching index name it. The time then bounds the index scan instead of
// filtering every waiting job.
const forwardPriority = 1

// staysUnique is the condition that making job j available neither puts
// it into River's unique index nor takes it out. A job that would enter
// the index could conflict with another job of its key, so it is left to
// River's scheduler, which discards such a job. Every forward has no
// unique key, or both states among its unique states.
func staysUnique(available int) string {
	return fmt.Sprintf(`(unique_key IS NULL OR unique_states IS NULL
      OR river_job_state_in_bitmask(unique_states, state) = river_job_state_in_bitmask(unique_states, $%d::river_job_state))`, available)
}

// wakeSQL makes the waiting forwards of a target available now. It takes
// up to $7 scheduled or retryable jobs, whatever their time: those snoozed
// behind the breaker and those waiting for a retry. It also takes up to $7
// available jobs set for a later time, as River leaves a snooze or a retry
// that is due soon. A target whose breaker closes answers again, so even
// its retries are attempted at once: they failed while it was down. With
// $8, each job is scheduled at its creation time, so River's fetch takes
// them in the order they were accepted.
//
// Two InitPlans read River's fetching index, and a filter on args keeps
// the target's jobs. They skip locked jobs, as the lock order says, and
// the next statement wakes a job that this one skipped.
var wakeSQL = jobSQL(`UPDATE river_job SET state = $4::river_job_state, scheduled_at = CASE WHEN $8::bool THEN least(created_at, now()) ELSE now() END
WHERE ctid = ANY(ARRAY(SELECT ctid FROM river_job
    WHERE state = ANY($5::river_job_state[]) AND queue = $1 AND priority = $6
      AND kind = {forward_kind} AND args @> jsonb_build_object('sender', $2::text, 'target', $3::text) AND ` + staysUnique(4) + `
    ORDER BY state, queue, priority, scheduled_at, id LIMIT $7 FOR UPDATE SKIP LOCKED)
  || ARRAY(SELECT ctid FROM river_job
    WHERE state = $4::river_job_state AND queue = $1 AND priority = $6 AND scheduled_at > now()
      AND kind = {forward_kind} AND args @> jsonb_build_object('sender', $2::text, 'target', $3::text)
    ORDER BY state, queue, priority, scheduled_at, id LIMIT $7 FOR UPDATE SKIP LOCKED))`)

// wakeBatch is the most jobs of each kind that one statement of a wake
// takes. A wake's transaction holds at most twice as many, for
// milliseconds.
const wakeBatch = 1000

// wakeArgs are wakeSQL's arguments. inOrder keeps the order of creation.
func wakeArgs(queue, sender, target string, limit int, inOrder bool) []any {
	return []any{queue, sender, target, jobAvailable, []string{jobScheduled, jobRetryable}, forwardPriority, limit, inOrder}
}

// WakeWaitingForwards makes the waiting forwards of sender's target on
// queue available now, and returns how many it woke. These are the
// forwards snoozed behind the breaker, waiting for a retry or set for a
// later time. It never waits for a job that another transaction holds,
// but leaves that job to River.
func (q *Jobs) WakeWaitingForwards(ctx context.Context, queue, sender, target string) (int64, error) {
	return q.wake(ctx, queue, sender, target, false)
}

// WakeHeldForwards is [Jobs.WakeWaitingForwards] for a target that an
// operator resumed. Each forward is made available as of its creation, so
// River's fetch takes them in the order they were accepted.
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

// decodeOutcome sets f's state, last status, Retry-After, error and
// delivery time from a job's latest error and recorded output. Either may
// be nil. f.Attempts must be set already.
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
			f.LastStatus, f.DeliveredAt, f.Ack = out.Status, out.DeliveredAt, out.Ack
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
		// The attempt recorded no output: it ended before an answer, or
		// it is an old job whose status is in the error's text.
		f.LastStatus = statusIn(f.LastError)
	}
	return nil
}

// riverCancelPrefix is what River's JobCancel puts before the error of a
// forward that failed at once. The fast path does not add it. A forward's
// last error is read without it, so one outcome has one text on both paths.
const riverCancelPrefix = "JobCancelError: "

// answered finds the status in the error text that old jobs recorded for
// a target's answer.
var answered = regexp.MustCompile(`target answered ([1-5][0-9][0-9])\b`)

// statusIn returns the status named in an old attempt's error text, or 0.
func statusIn(errText string) int {
	m := answered.FindStringSubmatch(errText)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1]) // three digits always parse
	return n
}
