package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/hookgate/hookgate/internal/pgarray"
)

// The causes of an attempt of a forward.
const (
	// CauseFirst is a forward's first attempt.
	CauseFirst = "first"
	// CauseRetry is a retry after a failed attempt; Attempt numbers it.
	CauseRetry = "retry"
	// CauseRedelivery is the first attempt of a redelivery; Actor names
	// who asked.
	CauseRedelivery = "redelivery"
	// CauseTakeover is the attempt that follows a takeover: the process
	// running the forward died, and another took it over.
	CauseTakeover = "takeover"
)

// DefaultAttemptsKept is how many attempts of a forward are kept by
// default, the newest.
const DefaultAttemptsKept = 20

// Attempt is one attempt of a forward, with the target's answer.
type Attempt struct {
	Sender  string
	EventID uuid.UUID
	Target  string
	// StartedAt is when the attempt started, in UTC; Took how long it ran.
	StartedAt time.Time
	Took      time.Duration
	// Outcome is delivered, retry or failed.
	Outcome string
	// Cause is one of the Cause constants. Attempt is River's attempt
	// number (1 for the fast path's). Actor is who asked for a
	// redelivery, "" otherwise. JobID is the River job, 0 for the fast
	// path's attempt.
	Cause   string
	Attempt int
	Actor   string
	JobID   int64
	// Status is the target's HTTP status, 0 without one. Ack is a
	// broker's acknowledgement, "" without one.
	Status int
	Ack    string
	// Error is why the attempt did not deliver, "" when it did.
	Error string
	// Header are the response headers, already redacted. Body is the
	// first 4 KiB of the response body, as received.
	Header map[string][]string
	Body   []byte
}

// Retry returns the retry number of a, 0 when a is not a retry.
func (a Attempt) Retry() int {
	if a.Cause == CauseRetry {
		return a.Attempt - 1
	}
	return 0
}

// CauseText is a's cause in words: "first attempt", "retry 2",
// "redelivery by ops-alice", "retry 1 of the redelivery by ops-alice",
// "takeover after a crash".
func (a Attempt) CauseText() string {
	switch a.Cause {
	case CauseFirst:
		return "first attempt"
	case CauseRetry:
		t := "retry " + strconv.Itoa(a.Retry())
		if a.Actor != "" {
			t += " of the redelivery by " + a.Actor
		}
		return t
	case CauseRedelivery:
		if a.Actor == "" {
			return "redelivery"
		}
		return "redelivery by " + a.Actor
	case CauseTakeover:
		return "takeover after a crash"
	}
	return a.Cause
}

// AttemptColumns are the columns an insert of attempts writes, in order.
const AttemptColumns = `sender, event_id, target, started_at, took_us, outcome, cause, attempt, actor, job_id, status, ack, error, headers, body`

// InsertAttemptsSQL inserts attempts of sender $1's forwards, one per
// element of the arrays $2 to $15, in AttemptColumns' order after the
// sender. An attempt recorded already (same forward, same start) is
// skipped. The fast path queues it in the batch and transaction that
// record its outcomes; [AttemptArgs] builds its arguments.
const InsertAttemptsSQL = `INSERT INTO forward_attempts (` + AttemptColumns + `)
SELECT $1::text, a.* FROM unnest($2::uuid[], $3::text[], $4::timestamptz[], $5::int8[], $6::text[], $7::text[], $8::int4[],
  $9::text[], $10::int8[], $11::int2[], $12::text[], $13::text[], $14::jsonb[], $15::bytea[]) AS a
ON CONFLICT ON CONSTRAINT forward_attempts_pkey DO NOTHING`

// AttemptArgs returns the arguments of [InsertAttemptsSQL] for attempts
// of sender. Empty texts and zero numbers are NULL.
func AttemptArgs(sender string, attempts []Attempt) ([]any, error) {
	n := len(attempts)
	// The arrays are pgarray's, which pgx encodes without an allocation
	// per element, but for the jsonb headers.
	var (
		events                   = make(pgarray.UUIDs, n)
		targets, outcomes, cause = make(pgarray.Texts, n), make(pgarray.Texts, n), make(pgarray.Texts, n)
		started                  = make(pgarray.Times, n)
		took                     = make(pgarray.Int64s, n)
		attempt                  = make([]int32, n)
		actor, ack, errs         = make(pgarray.NullTexts, n), make(pgarray.NullTexts, n), make(pgarray.NullTexts, n)
		hdrs                     = make([]*string, n)
		jobs, status             = make(pgarray.NullInt64s, n), make(pgarray.NullInt64s, n)
		statuses                 = make([]int64, n)
		bodies                   = make(pgarray.Bytes, n)
	)
	for i := range attempts {
		a := &attempts[i]
		events[i], targets[i], started[i], took[i] = pgtype.UUID{Bytes: a.EventID, Valid: true}, a.Target, a.StartedAt, a.Took.Microseconds()
		outcomes[i], cause[i], attempt[i] = a.Outcome, a.Cause, int32(a.Attempt)
		actor[i], ack[i], errs[i] = nullText(a.Actor), nullText(a.Ack), nullText(a.Error)
		if a.JobID != 0 {
			jobs[i] = &a.JobID
		}
		if a.Status != 0 {
			statuses[i] = int64(a.Status)
			status[i] = &statuses[i]
		}
		h, err := headersJSON(a.Header)
		if err != nil {
			return nil, err
		}
		hdrs[i], bodies[i] = h, a.Body
	}
	return []any{sender, events, targets, started, took, outcomes, cause, attempt, actor, jobs, status, ack, errs, hdrs, bodies}, nil
}

// AnswerColumns returns what a forward_delivered row keeps of a's
// attempt besides the body: how long it took, in microseconds, and its
// headers as JSON (nil without any).
func AnswerColumns(a Attempt) (tookUS int64, headers *string, err error) {
	h, err := headersJSON(a.Header)
	return a.Took.Microseconds(), h, err
}

// headersJSON is h as JSON, nil when empty.
func headersJSON(h map[string][]string) (*string, error) {
	if len(h) == 0 {
		return nil, nil
	}
	b, err := json.Marshal(h)
	if err != nil {
		return nil, fmt.Errorf("attempt headers: %w", err)
	}
	s := string(b)
	return &s, nil
}

func nullText(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// insertAttemptSQL inserts one attempt, like InsertAttemptsSQL, and
// deletes the forward's attempts older than the newest $16 - 1 it had
// before: the forward then keeps $16, the new one included.
const insertAttemptSQL = `WITH ins AS (` + InsertAttemptsSQL + `)
DELETE FROM forward_attempts
WHERE sender = $1 AND event_id = $2[1] AND target = $3[1] AND started_at <= (
  SELECT started_at FROM forward_attempts
  WHERE sender = $1 AND event_id = $2[1] AND target = $3[1]
  ORDER BY started_at DESC OFFSET $16::int - 1 LIMIT 1)`

// ClearFoldedSQL clears the attempt that forward $1/$2/$3's
// forward_delivered row keeps (a first attempt the fast path delivered,
// older than any of forward_attempts') once forward_attempts holds the
// newest $5 of the forward's attempts ($4 is the event as a uuid). Run
// after insertAttemptSQL, it keeps the forward's newest $5 attempts
// across both tables. The row is found by a probe of the primary key, the
// event compared as a range in its order, and updated by ctid, under
// [TIDScans]: by equality, the index of targets served it as well, the
// event checked on each of the sender's rows for the target. Only the
// clearing of the same columns changes these rows: a row another
// transaction cleared meanwhile is skipped, or (depending on PostgreSQL's
// minor version) its newest version fails took_us IS NOT NULL.
const ClearFoldedSQL = `UPDATE forward_delivered SET took_us = NULL, headers = NULL, body = NULL
WHERE ctid = ANY(ARRAY(SELECT ctid FROM forward_delivered
    WHERE sender = $1 AND event_id >= $2 AND event_id <= $2 AND target = $3 AND took_us IS NOT NULL AND attempted_at <= (
      SELECT started_at FROM forward_attempts
      WHERE sender = $1 AND event_id = $4 AND target = $3
      ORDER BY started_at DESC OFFSET $5::int - 1 LIMIT 1)
    ORDER BY event_id))
  AND sender = $1 AND took_us IS NOT NULL`

// queueAttempt queues the statements that record a, keeping the
// forward's newest keep attempts: the insert, and for an attempt of a
// redelivery (Actor set) the clearing of an attempt kept in the forward's
// forward_delivered row that falls out of them. Only a redelivery makes
// River attempt a forward that has such a row: the fast path writes it
// when it delivers the forward, in the statement that takes the forward's
// outbox row, so no job of the forward's own follows it.
func queueAttempt(b *pgx.Batch, a Attempt, keep int) error {
	args, err := AttemptArgs(a.Sender, []Attempt{a})
	if err != nil {
		return err
	}
	keep = max(keep, 1)
	b.Queue(insertAttemptSQL, append(args, keep)...)
	if a.Actor != "" {
		b.Queue(TIDScans)
		b.Queue(ClearFoldedSQL, a.Sender, a.EventID.String(), a.Target, pgtype.UUID{Bytes: a.EventID, Valid: true}, keep)
		b.Queue(ResetScans) // for the attempts that follow in the batch
	}
	return nil
}

// RecordAttempt records an attempt of River's worker, and deletes the
// forward's attempts beyond the newest keep in the same round trip and
// implicit transaction.
func (q *Queries) RecordAttempt(ctx context.Context, a Attempt, keep int) error {
	var b pgx.Batch
	if err := queueAttempt(&b, a, keep); err != nil {
		return err
	}
	if err := q.db.SendBatch(ctx, &b).Close(); err != nil {
		return fmt.Errorf("record the attempt of %s/%s to %s: %w", a.Sender, a.EventID, a.Target, err)
	}
	return nil
}

// RecordAttempts records attempts of River's worker as RecordAttempt does,
// all in one round trip (and one implicit transaction: one that fails
// fails them all).
func (q *Queries) RecordAttempts(ctx context.Context, attempts []Attempt, keep int) error {
	var b pgx.Batch
	for _, a := range attempts {
		if err := queueAttempt(&b, a, keep); err != nil {
			return err
		}
	}
	if err := q.db.SendBatch(ctx, &b).Close(); err != nil {
		return fmt.Errorf("record %d attempts: %w", len(attempts), err)
	}
	return nil
}

// eventAttemptsSQL reads an event's attempts, newest first: those of
// forward_attempts, and the first attempts kept in the event's
// forward_delivered rows (local tables on Citus, both).
const eventAttemptsSQL = `SELECT target, started_at, took_us, outcome, cause, attempt, coalesce(actor, ''), coalesce(job_id, 0),
  coalesce(status, 0), coalesce(ack, ''), coalesce(error, ''), headers, coalesce(body, '')
FROM forward_attempts WHERE sender = $1 AND event_id = $2
UNION ALL
SELECT target, attempted_at, took_us, 'delivered', 'first', 1, '', 0::int8,
  status, coalesce(ack, ''), '', headers, coalesce(body, '')
FROM forward_delivered WHERE sender = $1 AND event_id = $2::text AND took_us IS NOT NULL
ORDER BY 2 DESC, 1`

// EventAttempts returns the attempts of sender's event, to every target,
// newest first.
func (q *Queries) EventAttempts(ctx context.Context, sender string, eventID uuid.UUID) ([]Attempt, error) {
	rows, err := q.db.Query(ctx, eventAttemptsSQL, sender, eventID)
	if err != nil {
		return nil, fmt.Errorf("attempts of event %s: %w", eventID, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Attempt, error) {
		a := Attempt{Sender: sender, EventID: eventID}
		var (
			took    int64
			attempt int32
			status  int16
			hdrs    []byte
		)
		if err := row.Scan(&a.Target, &a.StartedAt, &took, &a.Outcome, &a.Cause, &attempt, &a.Actor, &a.JobID,
			&status, &a.Ack, &a.Error, &hdrs, &a.Body); err != nil {
			return Attempt{}, err
		}
		a.Took, a.Attempt, a.Status = time.Duration(took)*time.Microsecond, int(attempt), int(status)
		a.StartedAt = a.StartedAt.UTC()
		if len(hdrs) > 0 {
			if err := json.Unmarshal(hdrs, &a.Header); err != nil {
				return Attempt{}, fmt.Errorf("headers: %w", err)
			}
		}
		return a, nil
	})
	if err != nil {
		return nil, fmt.Errorf("attempts of event %s: %w", eventID, err)
	}
	return out, nil
}
