package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// target_breakers: the circuit breaker of each target, as the workers last
// recorded it, for operators.

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
func (q *Queries) Breakers(ctx context.Context, sender string) (map[string]BreakerState, error) {
	rows, err := q.db.Query(ctx, `SELECT target, state, opened_at, updated_at, last_error FROM target_breakers WHERE sender = $1`, sender) //nolint:rowserrcheck // pgx.ForEachRow checks rows.Err
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

// RecordBreaker records the state of sender's target's breaker, opened at
// openedAt (nil when closed) with the failure lastError ("" when closed),
// updated now.
func (q *Queries) RecordBreaker(ctx context.Context, sender, target, state string, openedAt *time.Time, lastError string) error {
	_, err := q.db.Exec(ctx, `INSERT INTO target_breakers (sender, target, state, opened_at, updated_at, last_error)
VALUES ($1, $2, $3, $4, now(), $5)
ON CONFLICT ON CONSTRAINT target_breakers_pkey DO UPDATE
SET state = excluded.state, opened_at = excluded.opened_at, updated_at = excluded.updated_at, last_error = excluded.last_error`,
		sender, target, state, openedAt, lastError)
	if err != nil {
		return fmt.Errorf("record breaker of %s/%s: %w", sender, target, err)
	}
	return nil
}
