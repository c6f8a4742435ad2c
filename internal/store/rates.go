package store

import (
	"context"
	"fmt"
	"time"
)

// target_rates holds, per target with a rate, the state that every process
// forwarding to it shares.

// takeRateSQL takes a turn of target ($1, $2)'s rate at the database's
// clock, in one round trip. $3 is the interval and $4 the tolerance, (burst
// - 1) intervals. $5 is how far ahead a turn may be granted, and $6 the
// longest wait of a forward put back. All are in microseconds.
const takeRateSQL = `SELECT granted, turn, wait_seconds FROM take_rate_turn($1, $2,
    $3 * interval '1 microsecond', $4 * interval '1 microsecond', $5 * interval '1 microsecond', $6 * interval '1 microsecond')`

// RateTurn is the outcome of [Queries.TakeRate].
type RateTurn struct {
	// Granted: the forward may go In from now. Otherwise it waits In and
	// asks again.
	Granted bool
	In      time.Duration
	// At is the turn, on the database's clock.
	At time.Time
}

// TakeRate asks for a turn of sender's target's rate for one forward.
// interval is a second divided by the forwards per second. tolerance is how
// far ahead of the rate a burst may go, and ahead how far ahead a turn may
// be granted. maxWait is the longest wait given to a forward put back.
func (q *Queries) TakeRate(ctx context.Context, sender, target string, interval, tolerance, ahead, maxWait time.Duration) (RateTurn, error) {
	var (
		t    RateTurn
		secs float64
	)
	err := q.db.QueryRow(ctx, takeRateSQL, sender, target, interval.Microseconds(), tolerance.Microseconds(),
		ahead.Microseconds(), maxWait.Microseconds()).Scan(&t.Granted, &t.At, &secs)
	if err != nil {
		return RateTurn{}, fmt.Errorf("take a turn of the rate of sender %s, target %s: %w", sender, target, err)
	}
	t.In = max(time.Duration(secs*float64(time.Second)), 0)
	return t, nil
}
