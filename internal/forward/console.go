package forward

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/rivertype"
)

// Queries of the console (package console) beside List and Breakers.

// unfinishedCountsSQL counts the unfinished and failed forwards of a sender by target
// and state. It names the states, so that River's indexes that lead with
// state (its fetch index for the unfinished ones, its finalized index for
// the failed ones) narrow the scan, and the delivered jobs of a long
// history are never read. Outbox rows count as pending.
const unfinishedCountsSQL = `SELECT coalesce(args->>'target', ''), state::text, count(*) FROM river_job
WHERE state IN ('available', 'scheduled', 'pending', 'running', 'retryable', 'discarded', 'cancelled')
  AND kind = $1 AND args->>'sender' = $2
GROUP BY 1, 2
UNION ALL
SELECT target, 'available', count(*) FROM forward_outbox WHERE sender = $2 GROUP BY 1`

// UnfinishedCounts returns, for each target of sender that has any, how
// many of its forwards are pending, running, retrying and failed (forwards
// still in the outbox are pending; delivered ones are not counted, so that
// a long history is never read; every failed job counts, redelivered since
// or not — CountByTarget counts only the latest forward of each event), by
// target name. Jobs of versions that named targets by URL count under "".
func UnfinishedCounts(ctx context.Context, db Querier, sender string) (map[string]map[State]int64, error) {
	rows, err := db.Query(ctx, unfinishedCountsSQL, Args{}.Kind(), sender)
	if err != nil {
		return nil, fmt.Errorf("count forwards of %s: %w", sender, err)
	}
	out := map[string]map[State]int64{}
	var (
		target, state string
		n             int64
	)
	_, err = pgx.ForEachRow(rows, []any{&target, &state, &n}, func() error {
		m := out[target]
		if m == nil {
			m = map[State]int64{}
			out[target] = m
		}
		m[StateOf(rivertype.JobState(state))] += n
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("count forwards of %s: %w", sender, err)
	}
	return out, nil
}

// FailedForward is a forward that will not be attempted again.
type FailedForward struct {
	JobID       int64
	EventID     uuid.UUID
	DeliveryID  string
	Attempts    int
	MaxAttempts int
	// LastStatus and LastError are as in Status.
	LastStatus int
	LastError  string
	// FailedAt is when it was given up.
	FailedAt time.Time
}

// failedSQL lists a target's failed forwards, newest first, through River's
// index on (state, finalized_at).
const failedSQL = `SELECT id, args->>'event_id', coalesce(args->>'delivery_id', ''), attempt, max_attempts,
       errors[array_upper(errors, 1)], finalized_at
FROM river_job
WHERE state IN ('discarded', 'cancelled') AND kind = $1 AND args->>'sender' = $2 AND args->>'target' = $3
ORDER BY finalized_at DESC, id DESC
LIMIT $4`

// Failed returns up to limit of the failed forwards of sender's target
// named target, the most recently failed first; empty, not nil, when there
// are none. A forward redelivered since is still listed: its failed job
// stays until River's retention deletes it.
func Failed(ctx context.Context, db Querier, sender, target string, limit int) ([]FailedForward, error) {
	rows, err := db.Query(ctx, failedSQL, Args{}.Kind(), sender, target, limit)
	if err != nil {
		return nil, fmt.Errorf("list failed forwards of %s/%s: %w", sender, target, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (FailedForward, error) {
		var (
			f       FailedForward
			eventID string
			lastErr []byte
		)
		if err := row.Scan(&f.JobID, &eventID, &f.DeliveryID, &f.Attempts, &f.MaxAttempts, &lastErr, &f.FailedAt); err != nil {
			return FailedForward{}, err
		}
		id, err := uuid.Parse(eventID)
		if err != nil {
			return FailedForward{}, fmt.Errorf("job %d: event ID: %w", f.JobID, err)
		}
		f.EventID = id
		if f.LastError, f.LastStatus, err = lastAttempt(lastErr); err != nil {
			return FailedForward{}, fmt.Errorf("job %d: %w", f.JobID, err)
		}
		return f, nil
	})
	if err != nil {
		return nil, fmt.Errorf("list failed forwards of %s/%s: %w", sender, target, err)
	}
	return out, nil
}
