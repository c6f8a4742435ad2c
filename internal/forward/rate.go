package forward

import (
	"context"
	"time"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/store"
)

// A target's rate (config.Target.Rate) holds for the whole deployment:
// every attempt of a limited target's forward first takes a turn of the
// rate from the target's row of target_rates (store.TakeRate, one
// statement), which every process that forwards shares, whatever their
// number. A turn due within rateAhead is the forward's: the worker waits
// for it and sends. Otherwise the forward is put back in River (a snooze:
// no attempt used, the breaker untouched) until the turn it was given:
// those put back get turns an interval apart, in the order they asked, so
// they come back at about the rate, oldest first, instead of all at once.
// The fast path leaves a limited target's forwards to River (Dispatcher).

const (
	// maxRateAhead bounds how far ahead a turn is granted (the worker
	// waits for it, holding its River worker): longer than River's fetch
	// poll interval, so that forwards fetched together all get their turn.
	maxRateAhead = 250 * time.Millisecond
	// maxRateWait bounds the wait of a forward put back: then it asks
	// again (a reload may have changed the rate).
	maxRateWait = time.Minute
)

// rateTiming returns the interval of t's rate, its burst's tolerance (how
// far ahead of the rate a burst goes) and how far ahead a turn is granted:
// up to 20 intervals, so that few forwards wait at once for their turn in
// a process. The time forwards take from their turns to their target
// varies (a connection to open, a busy machine), and one that took longer
// arrives together with later ones. So that no second at the target holds
// more than the rate plus the burst all the same, turns go 1% slower than
// the rate (10 ms a second of margin), and the burst's tolerance is half
// an interval short.
func rateTiming(t *config.Target) (interval, tolerance, ahead time.Duration) {
	interval = time.Duration(1.01 * float64(time.Second) / t.Rate.PerSecond())
	tolerance = max(time.Duration(t.RateBurst()-1)*interval-interval/2, 0)
	return interval, tolerance, min(maxRateAhead, 20*interval)
}

// overRate is the error of an attempt put back for want of a turn of its
// target's rate: the forward waits wait and asks again.
type overRate struct{ wait time.Duration }

func (o overRate) Error() string { return "over the target's rate: waits " + o.wait.String() }

// takeTurn takes a turn of t's rate for a forward of sender's. ok: the
// turn is the forward's, and it waited for it; otherwise wait is how long
// the forward waits before asking again.
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
		// The process was held up (a busy machine): sent now, the forward
		// would arrive together with those of the turns after its own.
		// It gives its turn up and asks again.
		return false, min(late, time.Second)
	}
	return true, 0
}
