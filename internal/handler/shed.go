package handler

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/semaphore"

	"github.com/hookgate/hookgate/internal/dedup"
)

// What is shed, and when (docs/operations.md tells operators):
//
//   - The body budget bounds the bytes of request bodies that ingest
//     requests hold in memory at once (Config.BodyBudget). A request takes its
//     share before its body is read: its Content-Length when announced,
//     otherwise chunk by chunk as the body arrives (and again for a gzip
//     body's inflated bytes). When the budget is used up it waits for room
//     (the budget's wait), then gets 503 overloaded with Retry-After, reason
//     body_budget. A quarter of the budget is kept for small bodies (at
//     most smallBody bytes): a sender, or an attacker, holding large bodies
//     open cannot stop small deliveries of other clients.
//   - The store sheds on queueing delay (dedup.Config.Shedding): reasons
//     queue_delay and queue_timeout. Copies of a delivery in flight in this
//     process wait for the first copy and are never counted.

// Defaults of the body budget.
const (
	// DefaultBodyBudget suits a small machine: 64 MiB of bodies in
	// memory at once, 64 requests of the default 1 MiB limit.
	DefaultBodyBudget = 64 << 20
	// DefaultBodyBudgetWait is how long a request waits for room in the
	// budget before it is answered 503.
	DefaultBodyBudgetWait = 2 * time.Second
)

// smallBody is the largest body that may use the budget's reserve for
// small bodies; budgetChunk is the step in which a body of unknown length
// takes its share.
const (
	smallBody   = 64 << 10
	budgetChunk = 32 << 10
)

// Shed reasons, the values of hookgate_ingest_shed_total's reason label
// (dedup.ShedQueueDelay and dedup.ShedQueueTimeout are the others).
const shedBodyBudget = "body_budget"

// bodyBudget is the memory budget of request bodies: all bounds every
// body's bytes, large (three quarters of all) those of bodies over
// smallBody, so that a quarter stays for small bodies.
type bodyBudget struct {
	size, largeSize int64
	wait            time.Duration
	all, large      *semaphore.Weighted
	inFlight        atomic.Int64
}

// newBodyBudget returns a budget of size bytes (at least 1) whose requests
// wait at most wait (positive) for room (Config.validate checks both).
func newBodyBudget(size int64, wait time.Duration) *bodyBudget {
	large := max(size-size/4, 1)
	return &bodyBudget{
		size: size, largeSize: large, wait: wait,
		all: semaphore.NewWeighted(size), large: semaphore.NewWeighted(large),
	}
}

// hold returns an empty share of the budget for a request with context
// ctx; give it back with release when the request ends.
func (b *bodyBudget) hold(ctx context.Context) bodyHold {
	return bodyHold{b: b, ctx: ctx}
}

// bodyHold is the share of the budget that one request holds.
type bodyHold struct {
	b          *bodyBudget
	ctx        context.Context
	deadline   time.Time // of the wait for room; zero until the first wait
	all, large int64
	shed       bool // the wait ran out
}

// errBodyBudget is returned when the wait for room ran out.
var errBodyBudget = errors.New("body budget used up")

// grow makes h hold room for to bytes of body in all (at most the whole
// budget, and the share of large bodies for a body over smallBody),
// waiting for it until the request's wait runs out: then it returns a
// problem 503 overloaded.
func (h *bodyHold) grow(to int64) error {
	if to > smallBody {
		if want := min(to, h.b.largeSize); want > h.large {
			if err := h.acquire(h.b.large, want-h.large); err != nil {
				return err
			}
			h.large = want
		}
	}
	if want := min(to, h.b.size); want > h.all {
		if err := h.acquire(h.b.all, want-h.all); err != nil {
			return err
		}
		h.b.inFlight.Add(want - h.all)
		h.all = want
	}
	return nil
}

func (h *bodyHold) acquire(sem *semaphore.Weighted, n int64) error {
	if sem.TryAcquire(n) {
		return nil
	}
	if h.deadline.IsZero() {
		h.deadline = time.Now().Add(h.b.wait)
	}
	ctx, cancel := context.WithDeadline(h.ctx, h.deadline)
	defer cancel()
	if err := sem.Acquire(ctx, n); err != nil {
		if h.ctx.Err() != nil {
			return &problemError{typ: probInvalidBody, detail: "The request ended before its body was read. Nothing was recorded.", cause: err}
		}
		h.shed = true
		return &problemError{typ: probOverloaded, detail: "The gateway holds as many request bodies in memory as its budget allows and no room came free in time. Nothing was recorded; retry after the time in Retry-After.", cause: errBodyBudget}
	}
	return nil
}

// release gives back everything h holds.
func (h *bodyHold) release() {
	if h.all > 0 {
		h.b.all.Release(h.all)
		h.b.inFlight.Add(-h.all)
	}
	if h.large > 0 {
		h.b.large.Release(h.large)
	}
	h.all, h.large = 0, 0
}

// readAll reads r to its end into a buffer that grows in steps, holding
// base + the buffer's capacity in h before each step. It reads at most
// limit+1 bytes (the caller tells a body over limit by its length).
func (h *bodyHold) readAll(r io.Reader, base, limit int64) ([]byte, error) {
	var buf []byte
	for {
		if len(buf) == cap(buf) {
			c := min(max(2*int64(cap(buf)), budgetChunk), limit+1)
			if c <= int64(len(buf)) {
				return buf, nil // limit+1 bytes read
			}
			if err := h.grow(base + c); err != nil {
				return nil, err
			}
			nb := make([]byte, len(buf), c)
			copy(nb, buf)
			buf = nb
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// shedReason returns the reason a delivery answered err was shed, "" when
// it was not.
func shedReason(err error) string {
	var oe *dedup.OverloadError
	switch {
	case errors.As(err, &oe):
		return oe.Reason
	case errors.Is(err, errBodyBudget):
		return shedBodyBudget
	}
	return ""
}

// registerShedMetrics registers hookgate_ingest_shed_total by reason, which
// it returns, and the gauges of the body budget and of the queue for the
// store.
func registerShedMetrics(reg prometheus.Registerer, s *Server) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hookgate_ingest_shed_total",
		Help: "Deliveries answered 503 overloaded at once, nothing recorded, by reason: queue_delay (the queue for the database has stood above its target), queue_timeout (waited the longest queueing time), body_budget (no room in the memory budget of request bodies).",
	}, []string{"reason"})
	for _, r := range []string{dedup.ShedQueueDelay, dedup.ShedQueueTimeout, shedBodyBudget} {
		c.WithLabelValues(r)
	}
	inFlight := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "hookgate_ingest_body_bytes_in_flight",
		Help: "Bytes of request bodies that ingest requests hold in memory now (counted against the body budget).",
	}, func() float64 { return float64(s.budget.inFlight.Load()) })
	budget := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "hookgate_ingest_body_budget_bytes",
		Help: "The memory budget of request bodies (--ingest-body-budget).",
	}, func() float64 { return float64(s.budget.size) })
	queued := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "hookgate_ingest_store_queued",
		Help: "Deliveries admitted and waiting for the database now (a batch slot or a connection; copies of a delivery in flight are not counted).",
	}, func() float64 { return float64(s.deliveries.Queued()) })
	reg.MustRegister(c, inFlight, budget, queued)
	return c
}
