package forward

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/queue"
	"github.com/hookgate/hookgate/internal/store"
)

// The states of a target's circuit breaker, as the workers record them
// (store.Queries.RecordBreaker) and operators read them (store.BreakerState).
const (
	BreakerClosed   = store.BreakerClosed
	BreakerOpen     = store.BreakerOpen
	BreakerHalfOpen = store.BreakerHalfOpen
)

// wakeWaiting makes the waiting forwards of sender's target available now:
// its breaker closed, so they need not wait for their snooze to end.
func wakeWaiting(ctx context.Context, db *pgxpool.Pool, sender, target string) error {
	return queue.NewJobs(db).WakeWaitingForwards(ctx, queue.ForwardQueue, sender, target)
}
