package forward

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/hookgate/hookgate/internal/config"
)

// State is a forward's state as the operator API shows it.
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

// StateOf maps a River job state to a forward's state: available,
// scheduled and pending are pending; running is running; retryable is
// retrying; completed is delivered; cancelled and discarded are failed. A
// state River may add later is pending.
func StateOf(s rivertype.JobState) State {
	switch s {
	case rivertype.JobStateRunning:
		return StateRunning
	case rivertype.JobStateRetryable:
		return StateRetrying
	case rivertype.JobStateCompleted:
		return StateDelivered
	case rivertype.JobStateCancelled, rivertype.JobStateDiscarded:
		return StateFailed
	default: // available, scheduled, pending, and any new state
		return StatePending
	}
}

// Status is one forward of an event.
type Status struct {
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
	// LastError is why the most recent finished attempt failed: "" when it
	// succeeded or none finished. Errors recorded by versions that named
	// targets by URL may contain it: redact with LegacyURL.
	LastError string
	// DeliveredAt is when the target accepted the forward; zero until then.
	DeliveredAt time.Time
	// CreatedAt is when the job was inserted.
	CreatedAt time.Time
}

// Querier is what List needs of a *pgxpool.Pool, *pgx.Conn or pgx.Tx.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// listSQL finds an event's forwards through River's GIN index on args
// (river_job_args_index): args @> {"event_id": …} is the indexable form.
const listSQL = `SELECT id, state, attempt, max_attempts, coalesce(args->>'target', ''), coalesce(args->>'url', ''), created_at,
       errors[array_upper(errors, 1)], metadata->'output'
FROM river_job
WHERE kind = $1 AND args @> jsonb_build_object('event_id', $2::text)
ORDER BY id`

// outboxListSQL finds an event's forwards not yet relayed into River.
// A row a fast path holds (leased) is running: its attempt is under way.
const outboxListSQL = `SELECT target, created_at, coalesce(leased_until > statement_timestamp(), false)
FROM forward_outbox WHERE sender = $1 AND event_id = $2 ORDER BY target`

// List returns the forwards of the event of sender: first those still in the
// outbox (JobID 0: pending, or running while a fast path holds its lease),
// then its jobs, oldest first: one per target of its sender when it was
// accepted, and one per target for each redelivery.
// It returns an empty slice, not nil, when the event has none (its sender
// had no targets, or the jobs were deleted after River's retention).
func List(ctx context.Context, db Querier, sender string, eventID uuid.UUID) ([]Status, error) {
	rows, err := db.Query(ctx, outboxListSQL, sender, eventID)
	if err != nil {
		return nil, fmt.Errorf("list outbox rows of event %s: %w", eventID, err)
	}
	pending, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Status, error) {
		st := Status{State: StatePending}
		var leased bool
		err := row.Scan(&st.Target, &st.CreatedAt, &leased)
		if leased {
			st.State = StateRunning
		}
		return st, err
	})
	if err != nil {
		return nil, fmt.Errorf("list outbox rows of event %s: %w", eventID, err)
	}
	rows, err = db.Query(ctx, listSQL, Args{}.Kind(), eventID.String())
	if err != nil {
		return nil, fmt.Errorf("list forwards of event %s: %w", eventID, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Status, error) {
		var (
			st        Status
			state     string
			lastErr   []byte // jsonb, NULL without errors
			outputRaw []byte // jsonb, NULL without output
		)
		if err := row.Scan(&st.JobID, &state, &st.Attempts, &st.MaxAttempts, &st.Target, &st.LegacyURL, &st.CreatedAt, &lastErr, &outputRaw); err != nil {
			return Status{}, err
		}
		if err := decodeOutcome(&st, rivertype.JobState(state), lastErr, outputRaw); err != nil {
			return Status{}, fmt.Errorf("job %d: %w", st.JobID, err)
		}
		return st, nil
	})
	if err != nil {
		return nil, fmt.Errorf("list forwards of event %s: %w", eventID, err)
	}
	return append(append([]Status{}, pending...), out...), nil
}

// answered finds the status in the text of an errStatus, which River keeps
// as the attempt's error (prefixed by River's JobCancelError when the
// forward failed at once).
var answered = regexp.MustCompile(`target answered ([1-5][0-9][0-9])\b`)

// statusIn returns the target's status named in an attempt's error text,
// or 0 when it names none.
func statusIn(errText string) int {
	m := answered.FindStringSubmatch(errText)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1]) // three digits always parse
	return n
}

// Enqueued is a forward job Redeliver inserted, or found waiting.
type Enqueued struct {
	JobID  int64
	Target string
	// AlreadyPending is true when a forward of the event to the target was
	// still waiting, running or retrying: no second one was inserted.
	AlreadyPending bool
}

// Redeliver inserts, outside any transaction, one new forward job of the
// event for each target sender has now, with the same idempotency key (the
// event ID) as its first forwards; a target whose forward of the event is
// still waiting, running or retrying gets no second one. It returns the
// jobs, or nil and no error when sender has no targets.
func Redeliver(ctx context.Context, client *river.Client[pgx.Tx], sender *config.Sender, eventID uuid.UUID, deliveryID string) ([]Enqueued, error) {
	if len(sender.Forward) == 0 {
		return nil, nil
	}
	params := make([]river.InsertManyParams, 0, len(sender.Forward))
	for _, t := range sender.Forward {
		params = append(params, jobParams(sender.Name, sender, t.Name, eventID, deliveryID))
	}
	res, err := client.InsertMany(ctx, params)
	if err != nil {
		return nil, fmt.Errorf("redeliver event %s: %w", eventID, err)
	}
	out := make([]Enqueued, 0, len(res))
	for _, r := range res {
		var a Args
		if err := json.Unmarshal(r.Job.EncodedArgs, &a); err != nil {
			return nil, fmt.Errorf("redeliver event %s: decode args of job %d: %w", eventID, r.Job.ID, err)
		}
		out = append(out, Enqueued{JobID: r.Job.ID, Target: a.Target, AlreadyPending: r.UniqueSkippedAsDuplicate})
	}
	return out, nil
}
