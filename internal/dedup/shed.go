package dedup

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Shedding on delay ([Config.Shedding]). A delivery queues for the store
// from the moment Run admits it until it holds a connection for its
// pipeline. It waits for a batch slot of its sender and for a connection of
// the pool. That time, not a count of requests, tells whether PostgreSQL
// keeps up. A burst makes a queue that empties; an overload makes one that
// stands.
//
// The rule is CoDel's (Nichols and Jacobson, "Controlling Queue Delay"),
// applied at admission rather than by dropping queued work:
//
//   - Each delivery that reaches the database reports how long it queued.
//     When every report has been above Target for at least Interval, the
//     queue stands. Run then sheds new deliveries at once with reason
//     [ShedQueueDelay]. It stops when a report is below Target again or the
//     queue has emptied.
//   - A delivery that has queued for MaxWait gives up with reason
//     [ShedQueueTimeout]. Every answer comes within MaxWait plus the
//     transaction's time, even while PostgreSQL hangs.
//
// Copies of a delivery in flight in this process never queue. They wait for
// the first copy before admission, so a retry storm of one delivery costs
// one place in the queue.

// Defaults of shedding (DefaultConfig).
const (
	DefaultShedTarget   = 100 * time.Millisecond
	DefaultShedInterval = time.Second
	DefaultMaxQueueWait = 3 * time.Second
)

// Reasons a delivery is shed: the values of [OverloadError].Reason.
const (
	// ShedQueueDelay: the queue stood above the target for an interval.
	ShedQueueDelay = "queue_delay"
	// ShedQueueTimeout: the delivery queued for MaxWait.
	ShedQueueTimeout = "queue_timeout"
)

// ErrOverloaded means the database could not take the delivery in time.
// Nothing was recorded, and its retry is a first delivery. Run returns an
// [*OverloadError], which matches it with errors.Is.
var ErrOverloaded = errors.New("dedup: the database cannot take the delivery in time")

// OverloadError is a delivery shed for Reason.
type OverloadError struct {
	Reason string
}

func (e *OverloadError) Error() string { return ErrOverloaded.Error() + " (" + e.Reason + ")" }

// Is makes errors.Is(err, ErrOverloaded) true.
func (e *OverloadError) Is(target error) bool { return target == ErrOverloaded }

// ShedPolicy configures shedding on delay ([Config.Shedding]). Its durations
// must be positive.
type ShedPolicy struct {
	// Target is the queueing delay that a standing queue stays above.
	Target time.Duration
	// Interval is how long it must stay above Target before deliveries are
	// shed at admission.
	Interval time.Duration
	// MaxWait is the longest a delivery queues for the store.
	MaxWait time.Duration
	// Observe, when not nil, gets each admitted delivery's time queueing,
	// also when it gave up.
	Observe func(wait time.Duration)
}

// Queued returns the deliveries admitted and not yet at the database; 0
// without shedding.
func (s *Store) Queued() int64 {
	if s.shed == nil {
		return 0
	}
	return s.shed.queued.Load()
}

// shedder is the state of shedding on delay.
type shedder struct {
	policy ShedPolicy
	now    func() time.Time
	queued atomic.Int64 // admitted, not yet at the database

	mu         sync.Mutex
	firstAbove time.Time // of the reports above target since the last below it; zero for none
	dropping   bool      // the queue stands: shed at admission
}

// ticket is an admitted delivery's place in the queue for the store.
type ticket struct {
	sh       *shedder
	enqueued time.Time
	deadline time.Time
	left     atomic.Bool
}

// admit returns the place in the queue of a delivery arriving now, or an
// [*OverloadError] when the queue stands. A nil shedder admits everything,
// with a nil ticket whose methods do nothing.
func (sh *shedder) admit() (*ticket, error) {
	if sh == nil {
		return nil, nil
	}
	now := sh.now()
	sh.mu.Lock()
	if sh.queued.Load() == 0 {
		// Nothing waits for the database: whatever stood has drained.
		sh.dropping, sh.firstAbove = false, time.Time{}
	}
	dropping := sh.dropping
	sh.mu.Unlock()
	if dropping {
		return nil, &OverloadError{Reason: ShedQueueDelay}
	}
	sh.queued.Add(1)
	return &ticket{sh: sh, enqueued: now, deadline: now.Add(sh.policy.MaxWait)}, nil
}

// leave ends t's queueing, once, and reports its delay.
func (t *ticket) leave() {
	if t == nil || t.left.Swap(true) {
		return
	}
	sh := t.sh
	now := sh.now()
	wait := now.Sub(t.enqueued)
	sh.queued.Add(-1)
	if sh.policy.Observe != nil {
		sh.policy.Observe(wait)
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	switch {
	case wait < sh.policy.Target:
		sh.dropping, sh.firstAbove = false, time.Time{}
	case sh.firstAbove.IsZero():
		sh.firstAbove = now
	case now.Sub(sh.firstAbove) >= sh.policy.Interval:
		sh.dropping = true
	}
}

func (t *ticket) expired() bool {
	return t != nil && !t.sh.now().Before(t.deadline)
}

// ticketKey is the context key of a delivery's ticket.
type ticketKey struct{}

func withTicket(ctx context.Context, t *ticket) context.Context {
	if t == nil {
		return ctx
	}
	return context.WithValue(ctx, ticketKey{}, t)
}

func ticketOf(ctx context.Context) *ticket {
	t, _ := ctx.Value(ticketKey{}).(*ticket)
	return t
}

// acquireQueued acquires a connection for the deliveries of tickets ts, nil
// entries allowed. It waits at most until their earliest deadline, then
// returns an [*OverloadError] of reason [ShedQueueTimeout]. Either way every
// ticket leaves the queue.
func (s *Store) acquireQueued(ctx context.Context, ts ...*ticket) (*pgx.Conn, func(), error) {
	return s.acquireQueuedWith(ctx, s.acquire, ts...)
}

// acquireDelegated is acquireQueued for a delegated call of sender's: a
// connection to the worker that holds the sender's shard group when
// Config.Routes knows it (and its pool gives one), else the store's.
func (s *Store) acquireDelegated(ctx context.Context, sender string, ts ...*ticket) (*pgx.Conn, func(), error) {
	var pool *pgxpool.Pool
	if s.routes != nil {
		pool = s.routes.pool(sender)
	}
	if pool == nil {
		return s.acquireQueued(ctx, ts...)
	}
	return s.acquireQueuedWith(ctx, func(ctx context.Context) (*pgx.Conn, func(), error) {
		c, err := pool.Acquire(ctx)
		if err == nil {
			return c.Conn(), c.Release, nil
		}
		if ctx.Err() != nil {
			return nil, nil, err
		}
		return s.acquire(ctx) // the worker cannot be reached: through the coordinator
	}, ts...)
}

func (s *Store) acquireQueuedWith(ctx context.Context, acquire func(context.Context) (*pgx.Conn, func(), error), ts ...*ticket) (*pgx.Conn, func(), error) {
	var deadline time.Time
	for _, t := range ts {
		if t != nil && !t.left.Load() && (deadline.IsZero() || t.deadline.Before(deadline)) {
			deadline = t.deadline
		}
	}
	defer func() {
		for _, t := range ts {
			t.leave()
		}
	}()
	if deadline.IsZero() {
		return acquire(ctx)
	}
	actx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	conn, release, err := acquire(actx)
	if err != nil && ctx.Err() == nil && actx.Err() != nil {
		return nil, nil, &OverloadError{Reason: ShedQueueTimeout}
	}
	return conn, release, err
}
