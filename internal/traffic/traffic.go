// Package traffic counts deliveries and forwards in memory, per sender,
// target and kind. About once a minute it adds the counts to the database's
// per-minute rows, for the console's charts. Ingest and forwarding pay an
// atomic add per event, and never wait on the database for it.
package traffic

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hookgate/hookgate/internal/store"
)

// DefaultInterval is how often Run adds the counts to the database.
const DefaultInterval = time.Minute

type key struct{ sender, target, kind string }

type counter struct {
	n, sumMS atomic.Int64
	// hist is the latency histogram of forward attempts, with the bounds of
	// [store.LatencyBoundsMS]. Ingest does not use it.
	hist [store.LatencyBuckets]atomic.Int64
}

// Recorder counts events until they are flushed. Its methods are safe for
// concurrent use, and a nil *Recorder counts nothing.
type Recorder struct {
	q   *store.Queries
	log *slog.Logger
	now func() time.Time

	counters sync.Map // key → *counter; the set is bounded by the configuration's senders and targets
	mu       sync.Mutex
	pending  []store.TrafficDelta // counts taken but not yet stored (the database was away)
}

// Config holds the dependencies of a [Recorder]. Queries and Log are
// required.
type Config struct {
	// Queries stores the counts.
	Queries *store.Queries
	// Log is where Run reports a flush that failed.
	Log *slog.Logger
	// Now is the clock that the counts are stored by, or time.Now when
	// nil. A test sets a fixed clock.
	Now func() time.Time
}

func (c Config) validate() error {
	var errs []error
	if c.Queries == nil {
		errs = append(errs, errors.New("traffic config: Queries: nil: the queries the counts are stored with are required"))
	}
	if c.Log == nil {
		errs = append(errs, errors.New("traffic config: Log: nil: a logger is required"))
	}
	return errors.Join(errs...)
}

// New returns a Recorder that stores its counts with cfg.Queries. An
// error names the field when cfg lacks a dependency.
func New(cfg Config) (*Recorder, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	r := &Recorder{q: cfg.Queries, log: cfg.Log, now: time.Now}
	if cfg.Now != nil {
		r.now = cfg.Now
	}
	return r, nil
}

func (r *Recorder) counter(k key) *counter {
	if c, ok := r.counters.Load(k); ok {
		return c.(*counter)
	}
	c, _ := r.counters.LoadOrStore(k, &counter{})
	return c.(*counter)
}

// Ingest counts one delivery of sender: accepted, replayed, or any other
// outcome as refused.
func (r *Recorder) Ingest(sender, outcome string) {
	if r == nil {
		return
	}
	kind := store.TrafficRefused
	switch outcome {
	case store.TrafficAccepted, store.TrafficReplayed:
		kind = outcome
	}
	r.counter(key{sender, "", kind}).n.Add(1)
}

// Forward counts one forward attempt of sender to target, delivered or
// not, which took d, in the count and in the latency histogram.
func (r *Recorder) Forward(sender, target string, delivered bool, d time.Duration) {
	if r == nil {
		return
	}
	kind := store.TrafficFailed
	if delivered {
		kind = store.TrafficDelivered
	}
	c := r.counter(key{sender, target, kind})
	c.n.Add(1)
	c.sumMS.Add(d.Milliseconds())
	c.hist[store.LatencyBucket(d)].Add(1)
}

// Flush adds the counts made since the last flush to the database, in the
// current minute. Counts that cannot be stored are kept for the next flush,
// up to a day's worth of rows.
func (r *Recorder) Flush(ctx context.Context) error {
	minute := r.now().UTC().Truncate(time.Minute)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.counters.Range(func(k, v any) bool {
		kk, c := k.(key), v.(*counter)
		n := c.n.Swap(0)
		ms := c.sumMS.Swap(0)
		var (
			hist    []int64
			hasHist bool
		)
		if kk.target != "" {
			hist = make([]int64, store.LatencyBuckets)
			for i := range c.hist {
				hist[i] = c.hist[i].Swap(0)
				hasHist = hasHist || hist[i] != 0
			}
		}
		if n != 0 || ms != 0 || hasHist {
			r.pending = append(r.pending, store.TrafficDelta{Sender: kk.sender, Target: kk.target, Kind: kk.kind, Minute: minute, N: n, SumMS: ms, Hist: hist})
		}
		return true
	})
	if len(r.pending) == 0 {
		return nil
	}
	if err := r.q.AddTraffic(ctx, r.pending, r.now()); err != nil {
		if max := 24 * 60 * 16; len(r.pending) > max {
			r.pending = r.pending[len(r.pending)-max:]
		}
		return err
	}
	r.pending = r.pending[:0]
	return nil
}

// Run flushes every interval until ctx ends. The caller flushes once more
// after its last event. Zero means zero: interval must be positive, and Run
// panics otherwise, as time.NewTicker does. [DefaultInterval] is the
// default.
func (r *Recorder) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := r.Flush(ctx); err != nil {
				r.log.Warn("traffic counts not stored; will retry", "err", err)
			}
		}
	}
}
