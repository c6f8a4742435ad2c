package store

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

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
	// PausedUntil is the end of the latest pause a worker recorded for the
	// target, after a 429 or 503 with Retry-After; it may have passed.
	// PauseReason is the answer that asked for it, without a URL.
	PausedUntil time.Time
	PauseReason string
}

// Breakers returns the recorded breaker of every target of sender that has
// one, by target name. A target no worker has recorded is closed.
func (q *Queries) Breakers(ctx context.Context, sender string) (map[string]BreakerState, error) {
	rows, err := q.db.Query(ctx, `SELECT target, state, opened_at, updated_at, last_error, paused_until, pause_reason FROM target_breakers WHERE sender = $1`, sender) //nolint:rowserrcheck // pgx.ForEachRow checks rows.Err
	if err != nil {
		return nil, fmt.Errorf("read breakers of %s: %w", sender, err)
	}
	out := map[string]BreakerState{}
	var (
		b                   BreakerState
		openedAt, pausedTil *time.Time
	)
	_, err = pgx.ForEachRow(rows, []any{&b.Target, &b.State, &openedAt, &b.UpdatedAt, &b.LastError, &pausedTil, &b.PauseReason}, func() error {
		b.Sender = sender
		b.OpenedAt, b.PausedUntil = time.Time{}, time.Time{}
		if openedAt != nil {
			b.OpenedAt = *openedAt
		}
		if pausedTil != nil {
			b.PausedUntil = *pausedTil
		}
		out[b.Target] = b
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read breakers of %s: %w", sender, err)
	}
	return out, nil
}

// RecordBreaker records the state of sender's target's breaker at now. It
// opened at openedAt, nil when closed, with the failure lastError. It
// records no transition ([Queries.RecordBreakerTransitions] does).
func (q *Queries) RecordBreaker(ctx context.Context, sender, target, state string, openedAt *time.Time, lastError string) error {
	_, err := q.db.Exec(ctx, upsertBreakerSQL, sender, target, state, openedAt, lastError)
	if err != nil {
		return fmt.Errorf("record breaker of %s/%s: %w", sender, target, err)
	}
	return nil
}

const upsertBreakerSQL = `INSERT INTO target_breakers (sender, target, state, opened_at, updated_at, last_error)
VALUES ($1, $2, $3, $4, now(), $5)
ON CONFLICT ON CONSTRAINT target_breakers_pkey DO UPDATE
SET state = excluded.state, opened_at = excluded.opened_at, updated_at = excluded.updated_at, last_error = excluded.last_error`

// RecordPause records that a worker holds sender's target's forwards until
// until, because the target answered reason with a Retry-After. A later
// pause already recorded stays. A target without a recorded breaker gets
// one, closed.
func (q *Queries) RecordPause(ctx context.Context, sender, target string, until time.Time, reason string) error {
	_, err := q.db.Exec(ctx, recordPauseSQL, sender, target, BreakerClosed, until, truncate(reason, MaxBreakerReason))
	if err != nil {
		return fmt.Errorf("record pause of %s/%s: %w", sender, target, err)
	}
	return nil
}

const recordPauseSQL = `INSERT INTO target_breakers (sender, target, state, opened_at, updated_at, last_error, paused_until, pause_reason)
VALUES ($1, $2, $3, NULL, now(), '', $4, $5)
ON CONFLICT ON CONSTRAINT target_breakers_pkey DO UPDATE
SET paused_until = excluded.paused_until, pause_reason = excluded.pause_reason
WHERE target_breakers.paused_until IS NULL OR target_breakers.paused_until < excluded.paused_until`

// BreakerHistoryRetention is how long target_breaker_transitions keeps a
// transition.
const BreakerHistoryRetention = 48 * time.Hour

// MaxBreakerReason bounds a transition's reason, in bytes.
const MaxBreakerReason = 500

// BreakerTransition is one change of a target's breaker in one worker
// process.
type BreakerTransition struct {
	At time.Time
	// Process names the worker process whose breaker it is (host/pid).
	Process string
	// Seq orders the process's transitions of the target.
	Seq         int64
	From, State string
	// Reason says why, in words (no URL in it).
	Reason string
}

// RecordBreakerTransitions appends trs, in the order they happened, to the
// history of sender's target's breaker. It records the last one as the
// breaker's state, as [Queries.RecordBreaker] does. In the same transaction
// it deletes transitions older than [BreakerHistoryRetention].
func (q *Queries) RecordBreakerTransitions(ctx context.Context, sender, target string, trs []BreakerTransition, openedAt *time.Time, lastError string) error {
	if len(trs) == 0 {
		return nil
	}
	last := trs[len(trs)-1]
	b := &pgx.Batch{}
	for _, tr := range trs {
		b.Queue(`INSERT INTO target_breaker_transitions (sender, target, at, process, seq, from_state, state, reason)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT ON CONSTRAINT target_breaker_transitions_pkey DO NOTHING`,
			sender, target, tr.At, tr.Process, tr.Seq, tr.From, tr.State, truncate(tr.Reason, MaxBreakerReason))
	}
	b.Queue(upsertBreakerSQL, sender, target, last.State, openedAt, lastError)
	b.Queue(`DELETE FROM target_breaker_transitions WHERE sender = $1 AND target = $2 AND at < $3`,
		sender, target, last.At.Add(-BreakerHistoryRetention))
	err := pgx.BeginFunc(ctx, q.db, func(tx pgx.Tx) error { return tx.SendBatch(ctx, b).Close() })
	if err != nil {
		return fmt.Errorf("record breaker transitions of %s/%s: %w", sender, target, err)
	}
	return nil
}

// BreakerHistory returns the transitions of sender's target's breaker from
// since to until, oldest first, at most limit of the newest. The last one
// before since comes first: the state at since. With openClose, only the
// transitions that open or close the breaker are returned. Each part is
// read with the table's key: a range and one probe.
func (q *Queries) BreakerHistory(ctx context.Context, sender, target string, since, until time.Time, limit int, openClose bool) ([]BreakerTransition, error) {
	rows, err := q.db.Query(ctx, `SELECT at, process, seq, from_state, state, reason FROM (
  (SELECT at, process, seq, from_state, state, reason FROM target_breaker_transitions
   WHERE sender = $1 AND target = $2 AND at < $3 AND (NOT $6 OR from_state = 'closed' OR state = 'closed')
   ORDER BY at DESC, process DESC, seq DESC LIMIT 1)
  UNION ALL
  (SELECT at, process, seq, from_state, state, reason FROM target_breaker_transitions
   WHERE sender = $1 AND target = $2 AND at >= $3 AND at <= $4 AND (NOT $6 OR from_state = 'closed' OR state = 'closed')
   ORDER BY at DESC, process DESC, seq DESC LIMIT $5)
) AS t ORDER BY at, process, seq`, sender, target, since, until, limit, openClose)
	if err != nil {
		return nil, fmt.Errorf("read breaker history of %s/%s: %w", sender, target, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (BreakerTransition, error) {
		var t BreakerTransition
		err := r.Scan(&t.At, &t.Process, &t.Seq, &t.From, &t.State, &t.Reason)
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("read breaker history of %s/%s: %w", sender, target, err)
	}
	return out, nil
}

// BreakerOpening returns the last transition at or before at that opened
// sender's target's breaker, in any process. It is the start of the
// incident an open breaker is in: pass its OpenedAt. ok is false when
// retention has deleted it. It is one backward range scan of the key.
func (q *Queries) BreakerOpening(ctx context.Context, sender, target string, at time.Time) (tr BreakerTransition, ok bool, err error) {
	err = q.db.QueryRow(ctx, `SELECT at, process, seq, from_state, state, reason FROM target_breaker_transitions
WHERE sender = $1 AND target = $2 AND at <= $3 AND from_state = 'closed'
ORDER BY at DESC, process DESC, seq DESC LIMIT 1`, sender, target, at).Scan(&tr.At, &tr.Process, &tr.Seq, &tr.From, &tr.State, &tr.Reason)
	if errors.Is(err, pgx.ErrNoRows) {
		return tr, false, nil
	}
	if err != nil {
		return tr, false, fmt.Errorf("read breaker opening of %s/%s: %w", sender, target, err)
	}
	return tr, true, nil
}

// truncate cuts s to at most n bytes, on a UTF-8 character boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
