package dedup

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookgate/hookgate/internal/idempotency"
)

// Group commit ([Config.Batching]). The deliveries of one sender that
// arrive while its batches are in flight wait in a queue. Up to maxBatch of
// them then go into the next pipeline: one transaction, one round trip and
// one WAL flush. A delivery that finds no batch of its sender running starts
// one at once, so a lone delivery waits for nothing. With overlapAfter
// positive, a further batch starts beside those running (up to
// maxInFlight) only once each of them has run for overlapAfter, so a batch
// held up does not hold up its sender; with zero, whenever fewer than
// maxInFlight run. Every delivery of a batch is answered after the batch's
// COMMIT.
//
// A batch that fails is retried delivery by delivery, so only a delivery
// that fails by itself gets an error. Two failures fail the whole batch
// instead. After a lost connection the batch may have committed, and
// running it again could apply a change twice: each delivery gets
// [ErrUnavailable], and the sender's retry replays or does the work. After a
// panic each delivery gets an error, and later batches run as usual.

// Defaults of batching (DefaultConfig). One batch of a sender runs at a
// time while each takes less than DefaultOverlapAfter: on make bench's
// machine a batch of 15 deliveries takes about 1.25 ms. Two batches
// overlapping as a rule made batches half as large, each delivery cost
// PostgreSQL 63 µs instead of 44, and took 10% fewer deliveries per second
// (docs/benchmarks/2026-ingest-and-forward.md).
const (
	DefaultMaxBatch     = 64
	DefaultMaxInFlight  = 2
	DefaultOverlapAfter = 10 * time.Millisecond
)

// call is one delivery waiting for its batch.
type call struct {
	ctx    context.Context
	d      idempotency.Delivery
	change Change
	res    Result
	err    error
	done   chan struct{}
	// held: the batch's claim found the key held (a delegated or
	// returning claim did not insert it): the single path reads what
	// holds it, without calling the delegated function first.
	held bool
}

// batcher queues the deliveries of one sender.
type batcher struct {
	s        *Store
	mu       sync.Mutex
	pending  []*call
	inFlight int
	// slow counts the batches in flight that have run for overlapAfter.
	slow int
}

// free reports whether a new batch may start now; b.mu is held.
func (b *batcher) free() bool {
	return b.inFlight < b.s.maxInFlight && (b.s.overlapAfter <= 0 || b.slow == b.inFlight)
}

// overlap is a batch's timer of overlapAfter: when it fires, the batch
// counts as slow, and a batch of the queued deliveries may start beside it.
type overlap struct {
	b     *batcher
	t     *time.Timer
	slow  bool // counted in b.slow
	ended bool // the batch has run; the timer does nothing
}

// fire marks the batch slow and starts the next batch if one may start.
func (o *overlap) fire() {
	b := o.b
	b.mu.Lock()
	if o.ended {
		b.mu.Unlock()
		return
	}
	o.slow = true
	b.slow++
	if len(b.pending) == 0 || !b.free() {
		b.mu.Unlock()
		return
	}
	b.inFlight++
	batch := b.take()
	b.mu.Unlock()
	b.work(batch)
}

// run queues d and returns its result once the batch that carried it has
// committed (or once the single path has run it).
func (b *batcher) run(ctx context.Context, d idempotency.Delivery, change Change) (Result, error) {
	c := &call{ctx: ctx, d: d, change: change, done: make(chan struct{})}
	b.mu.Lock()
	b.pending = append(b.pending, c)
	if b.free() {
		b.inFlight++
		batch := b.take()
		b.mu.Unlock()
		b.work(batch)
	} else {
		b.mu.Unlock()
		if t := ticketOf(ctx); t != nil {
			// Queued behind the sender's batches in flight: at most until
			// the delivery's queueing deadline.
			timer := time.NewTimer(time.Until(t.deadline))
			select {
			case <-c.done:
				timer.Stop()
				return c.res, c.err
			case <-timer.C:
			}
			b.mu.Lock()
			if i := slices.Index(b.pending, c); i >= 0 {
				b.pending = slices.Delete(b.pending, i, i+1)
				b.mu.Unlock()
				t.leave()
				return Result{}, &OverloadError{Reason: ShedQueueTimeout}
			}
			b.mu.Unlock() // taken into a batch meanwhile: wait for it
		}
	}
	<-c.done
	return c.res, c.err
}

// take removes up to maxBatch calls from the queue; b.mu is held.
func (b *batcher) take() []*call {
	n := min(len(b.pending), b.s.maxBatch)
	batch := make([]*call, n)
	copy(batch, b.pending)
	b.pending = append(b.pending[:0], b.pending[n:]...)
	return batch
}

// work runs batch, then, while calls are queued, hands the slot to a new
// goroutine that runs the next batch: the caller goes back to answer its
// own request.
func (b *batcher) work(batch []*call) {
	var o *overlap
	if b.s.overlapAfter > 0 && b.s.maxInFlight > 1 {
		o = &overlap{b: b}
		o.t = time.AfterFunc(b.s.overlapAfter, o.fire)
	}
	b.s.runBatch(batch)
	b.mu.Lock()
	if o != nil {
		o.t.Stop()
		o.ended = true
		if o.slow {
			b.slow--
		}
	}
	if len(b.pending) == 0 {
		b.inFlight--
		b.mu.Unlock()
		return
	}
	next := b.take()
	b.mu.Unlock()
	go b.work(next)
}

// runBatch runs the calls of one sender in one pipeline and answers each.
// A panic on the way fails every call of the batch with an error (its value
// and stack): the callers are answered, and the sender's next batch runs.
func (s *Store) runBatch(batch []*call) {
	defer func() {
		if v := recover(); v != nil {
			err := fmt.Errorf("claim delivery: panic: %v\n%s", v, debug.Stack())
			for _, c := range batch {
				c.res, c.err = Result{}, err
			}
		}
		for _, c := range batch {
			close(c.done)
		}
	}()
	if s.observeBatch != nil {
		s.observeBatch(len(batch))
	}
	if len(batch) == 1 {
		c := batch[0]
		c.res, c.err = s.runSingle(c.ctx, c.d, c.change, true)
		return
	}
	retry := s.runMany(batch)
	var (
		wg       sync.WaitGroup
		panicked atomic.Value
	)
	for _, c := range retry {
		wg.Go(func() {
			defer func() {
				if v := recover(); v != nil {
					panicked.CompareAndSwap(nil, fmt.Sprintf("%v\n%s", v, debug.Stack()))
				}
			}()
			c.res, c.err = s.runSingle(c.ctx, c.d, c.change, !c.held)
		})
	}
	wg.Wait()
	if v := panicked.Load(); v != nil {
		panic(v) // in this goroutine, where runBatch's recover answers the batch
	}
}

// runMany sends the batch as one pipeline and sets the results of the calls
// it decided; it returns those to run again on the single path: all of them
// when the batch failed, and those whose key the claim found held but no
// read after the COMMIT answered (see plan): an expired or vanished key, a
// failed read, or a delegated call, which has no read.
func (s *Store) runMany(batch []*call) (retry []*call) {
	// Claim keys in one order, so that two batches that share keys (from
	// two processes) wait for each other rather than deadlock.
	batch = slices.Clone(batch)
	slices.SortStableFunc(batch, func(a, b *call) int { return strings.Compare(a.d.DeliveryID, b.d.DeliveryID) })
	ds := make([]idempotency.Delivery, len(batch))
	changes := make([]Change, len(batch))
	for i, c := range batch {
		ds[i], changes[i] = c.d, c.change
	}
	ctx := batch[0].ctx
	if err := s.detectLayout(ctx); err != nil {
		return batch
	}
	var (
		p   *plan
		err error
	)
	if s.delegating() {
		// One call of the delegated function, which returns the keys it
		// inserted, as a returning claim does.
		if p, err = s.planDelegated(ds, changes, s.batchWait); err != nil {
			return batch
		}
	}
	if p == nil {
		if p, err = s.plan(ds, changes, s.batchLockTimeout, true); err != nil {
			return batch
		}
	}
	tickets := make([]*ticket, len(batch))
	for i, c := range batch {
		tickets[i] = ticketOf(c.ctx)
	}
	var (
		conn    *pgx.Conn
		release func()
	)
	if p.autocommit { // the delegated call: on the sender's worker when routed
		conn, release, err = s.acquireDelegated(ctx, ds[0].Sender, tickets...)
	} else {
		conn, release, err = s.acquireQueued(ctx, tickets...)
	}
	if err != nil {
		for _, c := range batch {
			c.err = fmt.Errorf("claim delivery: acquire connection: %w: %w", ErrUnavailable, err)
		}
		return nil
	}
	var held []stored // what holds the keys the claim found held, by delivery
	res, err := func() (*results, error) {
		defer release() // also on a panic: a connection left busy is discarded by the pool
		res, err := s.pipeline(ctx, conn, p)
		if err == nil && res.failed == nil && p.returning && !p.autocommit && slices.Contains(res.claimed, false) {
			// Committed. A failed read only sends those deliveries to the
			// single path, which reads again.
			held, _ = s.readHeld(ctx, conn, ds, res.claimed)
		}
		return res, err
	}()
	if errors.Is(err, ErrUnavailable) {
		// The connection was lost, maybe after the COMMIT reached the
		// server: fail the whole batch, run nothing again.
		for _, c := range batch {
			c.err = err
		}
		return nil
	}
	if err != nil || res.failed != nil {
		return batch
	}
	if p.returning {
		// The claim returned the keys it inserted: those deliveries are
		// done. The others found their keys held: each is answered by the
		// row read after the COMMIT, or goes the single path when there is
		// none (the delegated call, a failed read, a key that vanished or
		// expired since), which reads what holds the key.
		for i, c := range batch {
			if res.claimed[i] {
				c.res, c.err = s.result(c.d, outcome{claimed: true})
				continue
			}
			if held == nil || !held[i].found {
				c.held = true
				retry = append(retry, c)
				continue
			}
			c.res, c.err = s.result(c.d, outcome{row: held[i]})
			if errors.Is(c.err, errExpired) {
				c.held = true
				retry = append(retry, c)
			}
		}
		return retry
	}
	outs, ok := res.outcomes(ds)
	if !ok {
		return batch // a key vanished between claim and read: sort it out one by one
	}
	for i, c := range batch {
		c.res, c.err = s.result(c.d, outs[i])
		if errors.Is(c.err, errExpired) {
			retry = append(retry, c)
		}
	}
	return retry
}
