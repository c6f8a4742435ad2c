package forward

import (
	"context"
	"time"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/store"
)

// A target's rate holds for the whole deployment. Each attempt first takes
// a turn from the target's row of target_rates, which every process
// shares. When the turn is due soon, the worker waits for it and sends.
// Otherwise the forward is snoozed until its turn, without using an
// attempt. Forwards put back come back at the rate, oldest first. The fast
// path leaves a limited target's forwards to the queue.

const (
	// maxRateAhead bounds how far ahead a turn is granted. It exceeds the
	// queue's poll interval, so forwards fetched together all get a turn.
	maxRateAhead = 250 * time.Millisecond
	// maxRateWait bounds the wait of a forward put back. It then asks
	// again, since a reload may have changed the rate.
	maxRateWait = time.Minute
)

// rateTiming returns the interval of t's rate, its burst's tolerance, and
// how far ahead a turn is granted. A forward may reach the target late and
// arrive with later ones. So turns go 1% slower than the rate, and the
// burst's tolerance is half an interval short.
func rateTiming(t *config.Target) (interval, tolerance, ahead time.Duration) {
	interval = time.Duration(1.01 * float64(time.Second) / t.Rate.PerSecond())
	tolerance = max(time.Duration(t.RateBurst()-1)*interval-interval/2, 0)
	return interval, tolerance, min(maxRateAhead, 20*interval)
}

// overRate is the error of an attempt put back for want of a turn.
type overRate struct{ wait time.Duration }

func (o overRate) Error() string { return "over the target's rate: waits " + o.wait.String() }

// takeTurn takes a turn of t's rate and waits for it. When no turn is
// granted, wait is how long the forward waits before asking again.
func (w *Worker) takeTurn(ctx context.Context, sender string, t *config.Target) (ok bool, wait time.Duration) {
	interval, tolerance, ahead := rateTiming(t)
	turn, err := store.New(w.db).TakeRate(ctx, sender, t.Name, interval, tolerance, ahead, maxRateWait)
	if err != nil {
		w.log.Warn("take a turn of a target's rate; the forward waits and asks again", "sender", sender, "target", t.Name, "err", err)
		return false, jitter(time.Second)
	}
	if !turn.Granted {
		return false, turn.In
	}
	due := time.Now().Add(turn.In)
	if turn.In > 0 {
		timer := time.NewTimer(turn.In)
		defer timer.Stop()
		select {
		case <-ctx.Done():
			return false, jitter(time.Second) // stopping: the turn is lost
		case <-timer.C:
		}
	}
	if late := time.Since(due); late > max(interval, 10*time.Millisecond) {
		// Sent now, the forward would arrive with later turns' forwards.
		return false, min(late, time.Second)
	}
	return true, 0
}
