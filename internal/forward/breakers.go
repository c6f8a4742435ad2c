package forward

import (
	"context"
	"errors"
	"time"

	"github.com/hookgate/hookgate/internal/queue"
	"github.com/hookgate/hookgate/internal/store"
)

// The states of a target's circuit breaker, as recorded for operators.
const (
	BreakerClosed   = store.BreakerClosed
	BreakerOpen     = store.BreakerOpen
	BreakerHalfOpen = store.BreakerHalfOpen
)

// wakeAgainAfter is when a target's forwards are woken a second time. A
// snooze written just after the first wake would otherwise be missed.
const wakeAgainAfter = time.Second

// wakeWaiting makes the waiting forwards of sender's target available now,
// and again wakeAgainAfter later.
func wakeWaiting(ctx context.Context, jobs Waker, sender, target string) error {
	return twice(ctx, func() error {
		_, err := jobs.WakeWaitingForwards(ctx, queue.ForwardQueue, sender, target)
		return err
	})
}

// twice calls wake now and again wakeAgainAfter later, and returns both
// errors.
func twice(ctx context.Context, wake func() error) error {
	err := wake()
	t := time.NewTimer(wakeAgainAfter)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return errors.Join(err, ctx.Err())
	case <-t.C:
	}
	return errors.Join(err, wake())
}

// WakeTarget makes the waiting forwards of sender's target available now,
// and again a second later. A reload that configures the target again
// calls it. It returns when both passes are done or ctx ends.
func WakeTarget(ctx context.Context, jobs Waker, sender, target string) error {
	return wakeWaiting(ctx, jobs, sender, target)
}
