package forward

import (
	"context"
	"errors"
	"time"

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

// wakeAgainAfter is how long after a breaker closed its target's waiting
// forwards are woken a second time: a forward the breaker told to wait
// just before it closed may have its snooze written by River after the
// first wake (River's completer writes outcomes in batches, every 50 ms).
const wakeAgainAfter = time.Second

// wakeWaiting makes the waiting forwards of sender's target available now:
// its breaker closed, so they need not wait for their snooze, or their
// retry, to come (queue.Jobs.WakeWaitingForwards), and again wakeAgainAfter
// later.
func wakeWaiting(ctx context.Context, jobs Waker, sender, target string) error {
	return twice(ctx, func() error {
		_, err := jobs.WakeWaitingForwards(ctx, queue.ForwardQueue, sender, target)
		return err
	})
}

// twice calls wake, and again wakeAgainAfter later (unless ctx ends
// first), and returns both errors.
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
// and again a second later (as when its breaker closes): a reload that
// configures the target again calls it, so that the forwards held while it
// was not configured are sent at once, not when their wait ends. It
// returns when both passes are done or ctx ends.
func WakeTarget(ctx context.Context, jobs Waker, sender, target string) error {
	return wakeWaiting(ctx, jobs, sender, target)
}
