package forward

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Breaker states.
const (
	BreakerClosed   = "closed"    // forwards flow
	BreakerOpen     = "open"      // forwards wait (snoozed, no attempt used) until a probe succeeds
	BreakerHalfOpen = "half-open" // probes are under way
)

// BreakerState is a target's circuit breaker as the workers last recorded it.
type BreakerState struct {
	Sender, Target string
	State          string
	// OpenedAt is when the breaker opened; zero when closed.
	OpenedAt  time.Time
	UpdatedAt time.Time
	// LastError is the failure that opened it (no URL in it), "" when closed.
	LastError string
}

// Breakers returns the recorded breaker of every target of sender that has
// one, by target name. A target no worker has recorded is closed.
func Breakers(ctx context.Context, db Querier, sender string) (map[string]BreakerState, error) {
	rows, err := db.Query(ctx, `SELECT target, state, opened_at, updated_at, last_error FROM target_breakers WHERE sender = $1`, sender)
	if err != nil {
		return nil, fmt.Errorf("read breakers of %s: %w", sender, err)
	}
	out := map[string]BreakerState{}
	var (
		b        BreakerState
		openedAt *time.Time
	)
	_, err = pgx.ForEachRow(rows, []any{&b.Target, &b.State, &openedAt, &b.UpdatedAt, &b.LastError}, func() error {
		b.Sender = sender
		b.OpenedAt = time.Time{}
		if openedAt != nil {
			b.OpenedAt = *openedAt
		}
		out[b.Target] = b
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read breakers of %s: %w", sender, err)
	}
	return out, nil
}

// wakeSQL makes the forwards of a target that wait for a later time (snoozed
// behind its breaker) available now. Forwards waiting for a retry after a
// failed attempt (retryable) keep their backoff.
const wakeSQL = `UPDATE river_job SET state = 'available', scheduled_at = now()
WHERE kind = 'hookgate_forward' AND queue = $1 AND state IN ('scheduled', 'available')
  AND scheduled_at > now() AND args @> jsonb_build_object('sender', $2::text, 'target', $3::text)`

// wakeWaiting makes the waiting forwards of sender's target available now:
// its breaker closed, so they need not wait for their snooze to end.
func wakeWaiting(ctx context.Context, db *pgxpool.Pool, sender, target string) error {
	if _, err := db.Exec(ctx, wakeSQL, Queue, sender, target); err != nil {
		return fmt.Errorf("wake the forwards of %s/%s: %w", sender, target, err)
	}
	return nil
}
