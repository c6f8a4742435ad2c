package forward

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/rivertype"

	"github.com/hookgate/hookgate/internal/dedup"
)

// The queries operators need about one target's forwards: counts by state
// (CountByTarget), a page of forwards (ListTarget) and the set a bulk
// redelivery matches (BulkRedeliver, bulk.go). They find a target's jobs,
// and an event's newer forward, through hookgate's index on the forward
// jobs' sender, target, event and ID (migration 9), whose expressions
// (args->>'sender' = …, kind = 'hookgate_forward' as a constant) they
// repeat exactly. River's GIN index on args would take milliseconds per
// lookup (jsonb_ops indexes the keys every job has).
//
// "Failed" means a forward that failed and was not followed by a newer
// forward of the same event to the same target (a redelivery): once an
// event has been redelivered its old failure is no longer counted, listed
// or matched, so redelivering the failures twice sends each event once.

// riverStates returns the River job states of a forward state; nil for a
// state that is not one of the five.
func riverStates(s State) []string {
	switch s {
	case StatePending:
		return []string{"available", "scheduled", "pending"}
	case StateRunning:
		return []string{"running"}
	case StateRetrying:
		return []string{"retryable"}
	case StateDelivered:
		return []string{"completed"}
	case StateFailed:
		return []string{"cancelled", "discarded"}
	}
	return nil
}

// ValidState reports whether s is one of the five forward states.
func ValidState(s State) bool { return riverStates(s) != nil }

// notSuperseded is the condition that job j (of sender $1, target $2) is
// the newest forward of its event to its target: one probe of the index
// per job (OFFSET 0 keeps PostgreSQL from turning it into an anti-join,
// which on a table it has no statistics of yet compares every pair of the
// target's jobs).
const notSuperseded = `NOT EXISTS (SELECT 1 FROM river_job n WHERE n.kind = 'hookgate_forward'
    AND n.args->>'sender' = $1 AND n.args->>'target' = $2 AND n.args->>'event_id' = j.args->>'event_id' AND n.id > j.id OFFSET 0)`

// Counts are a target's forwards by state. Pending includes the forwards
// still in the outbox; Delivered counts every delivery River still keeps
// (CompletedJobRetentionPeriod: the longest sender retention), an event
// redelivered counting once per delivery; Failed counts the failures not
// followed by a newer forward of the same event.
type Counts struct {
	Pending, Running, Retrying, Delivered, Failed int64
}

// countsSQL counts the forwards of sender $1 by target and River state.
const countsSQL = `SELECT j.args->>'target', j.state::text, count(*) FROM river_job j
WHERE j.kind = 'hookgate_forward' AND j.args->>'sender' = $1
  AND (j.state NOT IN ('cancelled', 'discarded') OR NOT EXISTS (SELECT 1 FROM river_job n WHERE n.kind = 'hookgate_forward'
    AND n.args->>'sender' = $1 AND n.args->>'target' = j.args->>'target' AND n.args->>'event_id' = j.args->>'event_id' AND n.id > j.id))
GROUP BY 1, 2`

// outboxCountsSQL counts the forwards of sender $1 not yet relayed, by
// target (forward_outbox's key leads with sender).
const outboxCountsSQL = `SELECT target, count(*) FROM forward_outbox WHERE sender = $1 GROUP BY target`

// CountByTarget returns the counts of sender's forwards by target name. A
// target without forwards is absent (its counts are all zero). Jobs of
// versions that named targets by URL are not counted.
func CountByTarget(ctx context.Context, db Querier, sender string) (map[string]Counts, error) {
	out := map[string]Counts{}
	rows, err := db.Query(ctx, countsSQL, sender)
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
	rows, err = db.Query(ctx, outboxCountsSQL, sender)
	if err != nil {
		return nil, fmt.Errorf("count outbox rows of %s: %w", sender, err)
	}
	var name string
	_, err = pgx.ForEachRow(rows, []any{&name, &n}, func() error {
		c := out[name]
		c.Pending += n
		out[name] = c
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("count outbox rows of %s: %w", sender, err)
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
}

// where returns the WHERE clause of f over river_job j and its arguments,
// $1 and $2 being the sender and the target. It adds the not-superseded
// condition for failed forwards, or for every state when latest is true.
func (f Filter) where(latest bool) (string, []any) {
	var b strings.Builder
	args := []any{f.Sender, f.Target}
	b.WriteString(`j.kind = 'hookgate_forward' AND j.args->>'sender' = $1 AND j.args->>'target' = $2`)
	col := "j.created_at"
	if f.State != "" {
		args = append(args, riverStates(f.State))
		fmt.Fprintf(&b, " AND j.state = ANY($%d::river_job_state[])", len(args))
		if f.State == StateDelivered || f.State == StateFailed {
			col = "j.finalized_at"
		}
	}
	if !f.Since.IsZero() {
		args = append(args, f.Since)
		fmt.Fprintf(&b, " AND %s >= $%d", col, len(args))
	}
	if !f.Until.IsZero() {
		args = append(args, f.Until)
		fmt.Fprintf(&b, " AND %s < $%d", col, len(args))
	}
	if latest || f.State == StateFailed {
		b.WriteString(" AND " + notSuperseded)
	}
	return b.String(), args
}

// TargetForward is one forward of a target, as ListTarget returns it.
type TargetForward struct {
	Status
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

// ForwardCursor is a position in ListTarget's order: the job ID of the last
// forward of a page.
type ForwardCursor struct {
	JobID int64
}

// String returns the cursor's opaque form (URL-safe base64 without padding
// of a small JSON document); ParseForwardCursor reads it back.
func (c ForwardCursor) String() string {
	return base64.RawURLEncoding.EncodeToString([]byte(`{"j":` + strconv.FormatInt(c.JobID, 10) + `}`))
}

// errBadCursor is what ParseForwardCursor wraps for every malformed cursor.
var errBadCursor = errors.New("malformed cursor")

// ParseForwardCursor returns the cursor whose String is s, or an error for
// anything String cannot have produced.
func ParseForwardCursor(s string) (ForwardCursor, error) {
	raw, err := base64.RawURLEncoding.Strict().DecodeString(s)
	if err != nil {
		return ForwardCursor{}, fmt.Errorf("%w: %w", errBadCursor, err)
	}
	var cj struct {
		J int64 `json:"j"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cj); err != nil {
		return ForwardCursor{}, fmt.Errorf("%w: %w", errBadCursor, err)
	}
	c := ForwardCursor{JobID: cj.J}
	if cj.J < 1 || c.String() != s {
		return ForwardCursor{}, fmt.Errorf("%w: not in canonical form", errBadCursor)
	}
	return c, nil
}

// ForwardPage is one page of ListTarget.
type ForwardPage struct {
	// Forwards are newest first; empty, not nil, when there are none.
	Forwards []TargetForward
	// Next is the cursor of the next page; nil on the last page.
	Next *ForwardCursor
}

// MaxForwardLimit is the largest page ListTarget returns: the operator
// API's one page limit, as for a sender's deliveries.
const MaxForwardLimit = dedup.MaxListLimit

// ListTarget returns up to limit (1 to MaxForwardLimit) forwards of f's
// target that match f, newest first (by job ID, descending), starting
// right after after when it is not nil. Pages are stable while forwards
// are added (newer ones go to a new first page). Forwards still in the
// outbox are not listed (they have no job yet; Counts includes them).
func ListTarget(ctx context.Context, db Querier, f Filter, limit int, after *ForwardCursor) (ForwardPage, error) {
	if limit < 1 || limit > MaxForwardLimit {
		return ForwardPage{}, fmt.Errorf("list forwards: limit %d is not from 1 to %d", limit, MaxForwardLimit)
	}
	where, args := f.where(false)
	if after != nil {
		args = append(args, after.JobID)
		where += fmt.Sprintf(" AND j.id < $%d", len(args))
	}
	args = append(args, limit+1)
	q := `SELECT j.id, j.state::text, j.attempt, j.max_attempts, coalesce(j.args->>'event_id', ''), coalesce(j.args->>'delivery_id', ''),
       j.created_at, j.attempted_at, j.finalized_at, j.errors[array_upper(j.errors, 1)], j.metadata->'output'
FROM river_job j WHERE ` + where + fmt.Sprintf(" ORDER BY j.id DESC LIMIT $%d", len(args))
	rows, err := db.Query(ctx, q, args...)
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
		if err := decodeOutcome(&tf.Status, rivertype.JobState(state), lastErr, output); err != nil {
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
		page.Next = &ForwardCursor{JobID: page.Forwards[limit-1].JobID}
	}
	if err := eventTypes(ctx, db, f.Sender, page.Forwards); err != nil {
		return ForwardPage{}, err
	}
	return page, nil
}

// eventTypes sets the event type of each forward from its stored event, in
// one indexed query (webhook_events' key is (sender, id)).
func eventTypes(ctx context.Context, db Querier, sender string, fwds []TargetForward) error {
	if len(fwds) == 0 {
		return nil
	}
	ids := make([]uuid.UUID, len(fwds))
	for i := range fwds {
		ids[i] = fwds[i].EventID
	}
	rows, err := db.Query(ctx, `SELECT id, event_type FROM webhook_events WHERE sender = $1 AND id = ANY($2::uuid[])`, sender, ids)
	if err != nil {
		return fmt.Errorf("event types of %s's forwards: %w", sender, err)
	}
	types := map[uuid.UUID]string{}
	var (
		id  uuid.UUID
		typ string
	)
	if _, err := pgx.ForEachRow(rows, []any{&id, &typ}, func() error { types[id] = typ; return nil }); err != nil {
		return fmt.Errorf("event types of %s's forwards: %w", sender, err)
	}
	for i := range fwds {
		fwds[i].EventType = types[fwds[i].EventID]
	}
	return nil
}

// decodeOutcome sets st's state, and its last status, error and delivery
// time from a job's latest error and recorded output (either may be nil).
func decodeOutcome(st *Status, state rivertype.JobState, lastErr, output []byte) error {
	st.State = StateOf(state)
	if st.State == StateDelivered {
		var out Output
		if len(output) > 0 && json.Unmarshal(output, &out) == nil {
			st.LastStatus = out.Status
			st.DeliveredAt = out.DeliveredAt
		}
		return nil
	}
	var err error
	st.LastError, st.LastStatus, err = lastAttempt(lastErr)
	return err
}

// lastAttempt returns the error text of a job's latest attempt error (River's
// jsonb, nil when none) and the target's status in it, if any.
func lastAttempt(lastErr []byte) (text string, status int, err error) {
	if len(lastErr) == 0 {
		return "", 0, nil
	}
	var ae rivertype.AttemptError
	if err := json.Unmarshal(lastErr, &ae); err != nil {
		return "", 0, fmt.Errorf("decode last error: %w", err)
	}
	return ae.Error, statusIn(ae.Error), nil
}
