package handler

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookgate/hookgate/internal/dedup"
)

// What is shed, and when. docs/operations.md tells operators.
//
//   - The body budget bounds the request body bytes held in memory at once
//     ([Config.BodyBudget]). A request holds room as its bytes arrive, never
//     what its Content-Length announces. It takes a first step of firstStep
//     bytes, then twice as much each time its buffer is full, so it holds
//     at most about twice what arrived. A gzip body's inflated bytes count
//     too. When the budget has no room, the request waits, then gets 503
//     with reason body_budget. A quarter of the budget is kept for bodies of
//     at most smallBody bytes, so large bodies held open cannot stop small
//     deliveries of other clients.
//   - Each client holds at most a quarter of the budget. Past it, its
//     request waits the same way, then gets 503 with reason
//     body_client_share. A client is the key [authlimit.Limiter.ClientKey]
//     gives. Other clients are not held up.
//   - Half-read bodies that wait for each other could hold the whole
//     budget. So the oldest request of the budget, and of each client, is
//     never refused room while it is the oldest.
//   - A client that holds nothing always finds room for a small body. Its
//     body takes room from the client holding the most, if that one holds
//     more than it asks ([bodyBudget.preemptFor]). That client's newest body
//     still being read is cut with 503, reason body_preempted. So clients
//     that never finish their bodies cannot lock out a sender.
//   - A body must arrive at a minimum rate after a grace period, within a
//     total time, and must never stall for the idle timeout. [bodyPace]
//     moves the connection's read deadline as the bytes arrive. Past either
//     bound the request gets 408 and its connection is closed.
//   - The store sheds on queueing delay ([dedup.Config.Shedding]), with
//     reasons queue_delay and queue_timeout. Copies of a delivery in flight
//     in this process wait for the first and are never counted.

// Defaults of the body budget and of the minimum rate of bodies.
const (
	// DefaultBodyBudget suits a small machine: 64 MiB of bodies in
	// memory at once, 64 requests of the default 1 MiB limit.
	DefaultBodyBudget = 64 << 20
	// DefaultBodyBudgetWait is how long a request waits for room in the
	// budget before it is answered 503.
	DefaultBodyBudgetWait = 2 * time.Second
	// DefaultBodyMinRate (bytes per second) and DefaultBodyMinRateGrace:
	// after its first 5 s, a body must have arrived at 1 KiB/s on average
	// (8 kbit/s, slower than any link a webhook sender uses; a body that
	// came fast has credit for long pauses). A connection that sends a byte
	// now and then is cut after 5 s.
	DefaultBodyMinRate      = 1024
	DefaultBodyMinRateGrace = 5 * time.Second
	// DefaultBodyIdleTimeout: a body from which no byte arrived for 5 s
	// is cut, whatever came before it (its credit of the minimum rate
	// does not buy a longer pause).
	DefaultBodyIdleTimeout = 5 * time.Second
	// DefaultBodyReadTimeout is how long a body may take in all, whatever
	// its rate: the HTTP server's ReadTimeout (cmd/server).
	DefaultBodyReadTimeout = 60 * time.Second
)

// smallBody is the largest body that may use the budget's reserve for
// small bodies; firstStep is the first step of a body's buffer, before
// any of it arrived (net/http's own buffer of a connection is as large).
const (
	smallBody = 64 << 10
	firstStep = 4 << 10
)

// Shed reasons, the values of hookgate_ingest_shed_total's reason label
// (dedup.ShedQueueDelay and dedup.ShedQueueTimeout are the others).
const (
	shedBodyBudget      = "body_budget"
	shedBodyClientShare = "body_client_share"
	shedBodyPreempted   = "body_preempted"
)

// maxPreempt bounds the bodies that one newcomer's step may cut short.
const maxPreempt = 64

// bodyBudget is the memory budget of request bodies: all bounds every
// body's bytes, large (three quarters of all) those of bodies over
// smallBody, so that a quarter stays for small bodies, and each client
// holds at most clientSize (a quarter of all). Its holds are kept oldest
// first, in all and per client, and its waiters in the order they began to
// wait.
type bodyBudget struct {
	size, largeSize, clientSize int64
	wait                        time.Duration

	mu                  sync.Mutex
	all, large          int64 // held now
	oldest, newest      *bodyHold
	waitFirst, waitLast *bodyHold
	clients             map[netip.Prefix]*bodyClient
	inFlight            atomic.Int64 // all, read without the lock
}

// bodyClient is what one client holds: held bytes, by its holds (oldest
// first). It is forgotten when its last hold is released.
type bodyClient struct {
	held           int64
	oldest, newest *bodyHold
	// cut is what its preempted holds hold until they are released: they
	// are as good as gone when a newcomer looks for the client holding
	// the most.
	cut int64
}

// newBodyBudget returns a budget of size bytes (at least 1) whose requests
// wait at most wait (positive) for room (Config.validate checks both).
func newBodyBudget(size int64, wait time.Duration) *bodyBudget {
	return &bodyBudget{
		size: size, largeSize: max(size-size/4, 1), clientSize: max(size/4, 1), wait: wait,
		clients: map[netip.Prefix]*bodyClient{},
	}
}

// hold returns an empty share of the budget for a request of client with
// context ctx whose body is read from w's connection (nil: none that can
// be cut short); give it back with release when the request ends.
func (b *bodyBudget) hold(ctx context.Context, client netip.Prefix, w http.ResponseWriter) *bodyHold {
	h := &bodyHold{b: b, ctx: ctx, key: client, w: w}
	b.mu.Lock()
	c := b.clients[client]
	if c == nil {
		c = &bodyClient{}
		b.clients[client] = c
	}
	h.client = c
	h.prev, b.newest = b.newest, h
	if h.prev != nil {
		h.prev.next = h
	} else {
		b.oldest = h
	}
	h.cprev, c.newest = c.newest, h
	if h.cprev != nil {
		h.cprev.cnext = h
	} else {
		c.oldest = h
	}
	b.mu.Unlock()
	return h
}

func (b *bodyBudget) clientCount() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.clients)
}

// bodyHold is the share of the budget that one request holds.
type bodyHold struct {
	b      *bodyBudget
	ctx    context.Context
	key    netip.Prefix
	client *bodyClient
	// In the budget's holds, its client's holds, and (while it waits) the
	// budget's waiters; guarded by b.mu, as are all and large.
	prev, next, cprev, cnext, wprev, wnext *bodyHold
	all, large                             int64 // held: large is all or 0
	want                                   int64 // while waiting: the size waited for
	ready                                  chan struct{}
	granted, released                      bool
	// w is the request's, whose connection's read deadline a newcomer
	// moves to the past to cut the body short (bodyBudget.preemptFor)
	// while read is false. Set once, before the hold is shared.
	w http.ResponseWriter
	// read: the body was read from the connection (and is no longer to
	// be cut short); preempted: a newcomer took its room, and the request
	// is answered 503 (reason body_preempted) at its next step or read.
	read, preempted atomic.Bool

	waited time.Duration // spent waiting for room, in all
}

// errBodyBudget and errBodyClientShare are returned when the wait for room
// ran out, in the budget or in the client's share of it.
var (
	errBodyBudget      = errors.New("body budget used up")
	errBodyClientShare = errors.New("client's share of the body budget used up")
	errBodyPreempted   = errors.New("body budget's room given to a client that held none")
)

// preemptedProblem is the answer to a request whose room a newcomer took.
func preemptedProblem() error {
	return &problemError{typ: probOverloaded, detail: "The gateway holds as many request bodies in memory as its budget allows, and this body's room was given to a client that held none (this client held the most). Nothing was recorded; retry after the time in Retry-After.", cause: errBodyPreempted}
}

// fits reports whether h may hold to bytes now, and if not whether its
// client's share is what it lacks. A body over smallBody holds all of it
// in the share of large bodies too. A hold alone in the budget (or in its
// client's share) may take it all and more; so may the oldest.
func (b *bodyBudget) fits(h *bodyHold, to int64) (ok, clientFull bool) {
	more := to - h.all
	c := h.client
	clientOK := c.oldest == h || c.held == h.all || c.held+more <= b.clientSize
	return clientOK && b.budgetFits(h, to, b.all, b.large), !clientOK
}

// budgetFits reports whether the budget has room for h to hold to bytes
// if all bodies held all bytes, large of them in the share of large ones
// (fits's rule for the budget, also asked of the budget as it will be
// once preempted holds are released).
func (b *bodyBudget) budgetFits(h *bodyHold, to, all, large int64) bool {
	more := to - h.all
	var l int64
	if to > smallBody {
		l = to
	}
	// When the oldest took the share of large bodies past its bound, the
	// budget is larger by as much: the quarter for small bodies stays.
	allSize := b.size + max(large-b.largeSize, 0)
	return b.oldest == h ||
		(all == h.all || all+more <= allSize) &&
			(l <= h.large || large == h.large || large+l-h.large <= b.largeSize)
}

// newcomer reports whether h is its client's only hold: a client that
// holds nothing else, whose body may take room from the client holding
// the most (preemptFor).
func (h *bodyHold) newcomer() bool { return h.client.oldest == h && h.client.newest == h }

// preemptFor makes room for the newcomer h to hold to bytes, as the budget
// will be once the holds it preempts are released: each time from the
// client that holds the most (less what it is losing already), if that
// client holds more than to, its newest hold still reading from its
// connection (never the budget's oldest), at most maxPreempt of them. A
// preempted hold that waits for room stops waiting; one that reads has
// its connection's read deadline moved to the past, so that its read ends
// at once (under b.mu: the request cannot have ended meanwhile). Either
// way its request is answered 503 and its room released; grantWaiters
// then gives it to the newcomer first. It reports whether it preempted
// any.
func (b *bodyBudget) preemptFor(h *bodyHold, to int64) bool {
	all, large := b.all, b.large
	n := 0
	for ; n < maxPreempt && !b.budgetFits(h, to, all, large); n++ {
		v := b.victim(h, to)
		if v == nil {
			break
		}
		v.preempted.Store(true)
		v.client.cut += v.all
		all -= v.all
		large -= v.large
		if v.waiting() {
			b.unwait(v)
			close(v.ready)
			continue
		}
		_ = http.NewResponseController(v.w).SetReadDeadline(time.Unix(1, 0))
	}
	return n > 0
}

// victim returns the hold preemptFor cuts short for newcomer h, which
// asks for to bytes, or nil when there is none.
func (b *bodyBudget) victim(h *bodyHold, to int64) *bodyHold {
	var (
		best     *bodyHold
		bestHeld int64
	)
	for _, c := range b.clients {
		held := c.held - c.cut
		if c == h.client || held <= to || held <= bestHeld {
			continue
		}
		for v := c.newest; v != nil; v = v.cprev {
			if v != b.oldest && v.w != nil && v.all > 0 && !v.read.Load() && !v.preempted.Load() {
				best, bestHeld = v, held
				break
			}
		}
	}
	return best
}

func (h *bodyHold) waiting() bool {
	return h.wprev != nil || h.b.waitFirst == h
}

// take makes h hold to bytes (fits said it may).
func (b *bodyBudget) take(h *bodyHold, to int64) {
	var large int64
	if to > smallBody {
		large = to
	}
	b.all += to - h.all
	b.large += large - h.large
	h.client.held += to - h.all
	h.all, h.large = to, large
	b.inFlight.Store(b.all)
}

// grantWaiters gives room to the waiters that fit now: first to those
// whose client holds nothing else (newcomers, for whom preemptFor made the
// room), then to the others; each time in the order they began to wait (a
// waiter that does not fit does not hold up the others).
func (b *bodyBudget) grantWaiters() {
	for _, newcomers := range [...]bool{true, false} {
		for h := b.waitFirst; h != nil; {
			next := h.wnext
			if !newcomers || h.newcomer() {
				if ok, _ := b.fits(h, h.want); ok {
					b.take(h, h.want)
					h.granted = true
					b.unwait(h)
					close(h.ready)
				}
			}
			h = next
		}
	}
}

func (b *bodyBudget) unwait(h *bodyHold) {
	if h.wprev != nil {
		h.wprev.wnext = h.wnext
	} else {
		b.waitFirst = h.wnext
	}
	if h.wnext != nil {
		h.wnext.wprev = h.wprev
	} else {
		b.waitLast = h.wprev
	}
	h.wprev, h.wnext = nil, nil
}

// grow makes h hold room for to bytes of body, waiting for it at most the
// budget's wait (each step waits afresh: a body that gets room now and then
// makes progress): then it returns a problem 503 overloaded (its cause
// errBodyBudget or errBodyClientShare), or 400 invalid-body when the
// request ended first.
func (h *bodyHold) grow(to int64) error {
	if to <= h.all {
		return nil
	}
	b := h.b
	b.mu.Lock()
	if h.preempted.Load() {
		b.mu.Unlock()
		return preemptedProblem()
	}
	if ok, _ := b.fits(h, to); ok {
		b.take(h, to)
		b.mu.Unlock()
		return nil
	}
	if h.newcomer() && to <= smallBody {
		b.preemptFor(h, to)
	}
	h.want, h.granted, h.ready = to, false, make(chan struct{})
	h.wprev, b.waitLast = b.waitLast, h
	if h.wprev != nil {
		h.wprev.wnext = h
	} else {
		b.waitFirst = h
	}
	b.mu.Unlock()

	began := time.Now()
	timer := time.NewTimer(b.wait)
	select {
	case <-h.ready:
	case <-timer.C:
	case <-h.ctx.Done():
	}
	timer.Stop()
	b.mu.Lock()
	granted, clientFull := h.granted, false
	if !granted {
		if h.waiting() { // (not when preemptFor took it off)
			b.unwait(h)
		}
		_, clientFull = b.fits(h, to)
	}
	b.mu.Unlock()
	h.waited += time.Since(began)
	switch {
	case granted:
		return nil
	case h.preempted.Load():
		return preemptedProblem()
	case h.ctx.Err() != nil:
		return &problemError{typ: probInvalidBody, detail: "The request ended before its body was read. Nothing was recorded.", cause: h.ctx.Err()}
	case clientFull:
		return &problemError{typ: probOverloaded, detail: "The request bodies of this client (its address, or the client a trusted proxy named) hold as much memory as one client may, and no room came free in time. Nothing was recorded; retry after the time in Retry-After.", cause: errBodyClientShare}
	default:
		return &problemError{typ: probOverloaded, detail: "The gateway holds as many request bodies in memory as its budget allows and no room came free in time. Nothing was recorded; retry after the time in Retry-After.", cause: errBodyBudget}
	}
}

// release gives back everything h holds, forgets its client when it held
// the client's last share, and gives the room to the waiters that fit.
func (h *bodyHold) release() {
	b := h.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if h.released {
		return
	}
	h.released = true
	b.all -= h.all
	b.large -= h.large
	c := h.client
	c.held -= h.all
	if h.preempted.Load() {
		c.cut -= h.all
	}
	h.all, h.large = 0, 0
	b.inFlight.Store(b.all)
	if h.prev != nil {
		h.prev.next = h.next
	} else {
		b.oldest = h.next
	}
	if h.next != nil {
		h.next.prev = h.prev
	} else {
		b.newest = h.prev
	}
	if h.cprev != nil {
		h.cprev.cnext = h.cnext
	} else {
		c.oldest = h.cnext
	}
	if h.cnext != nil {
		h.cnext.cprev = h.cprev
	} else {
		c.newest = h.cprev
	}
	if c.oldest == nil {
		delete(b.clients, h.key)
	}
	b.grantWaiters()
}

// readAll reads r into a buffer that grows geometrically from firstStep,
// holding base + the buffer's capacity in h before each step: what h holds
// for the buffer is never more than twice what arrived (or firstStep).
// size is the body's announced length, -1 for none: the buffer never grows
// past it and reading stops there (a body that ends before it is
// io.ErrUnexpectedEOF). Without one, it reads to the end, at most limit+1
// bytes (the caller tells a body over limit by its length). p, when not
// nil, moves the connection's read deadline as the bytes arrive.
func (h *bodyHold) readAll(r io.Reader, base, size, limit int64, p *bodyPace) ([]byte, error) {
	end := limit + 1
	if size >= 0 {
		end = size
	}
	var buf []byte
	for {
		if len(buf) == cap(buf) {
			if int64(len(buf)) >= end {
				return buf, nil // all of size, or limit+1 bytes, read
			}
			c := min(max(2*int64(cap(buf)), firstStep), end)
			if err := h.grow(base + c); err != nil {
				return nil, err
			}
			nb := make([]byte, len(buf), c)
			copy(nb, buf)
			buf = nb
		}
		p.arm(int64(len(buf)), h.waited)
		// (After arm: a preemption that this load does not see moved the
		// deadline after arm did, and the read below ends at once.)
		if h.preempted.Load() {
			return nil, preemptedProblem()
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			if size >= 0 && int64(len(buf)) < size {
				return buf, io.ErrUnexpectedEOF
			}
			return buf, nil
		}
		if err != nil {
			if h.preempted.Load() {
				return nil, preemptedProblem()
			}
			return buf, err
		}
	}
}

// bodyPace keeps a body to its minimum rate and bounds its pauses: before
// each read it moves the connection's read deadline (never past end).
type bodyPace struct {
	w          http.ResponseWriter // whose connection's deadline is moved
	rate       int64               // 0: no minimum rate
	grace      time.Duration
	idle       time.Duration // 0: no bound on a pause
	start, end time.Time
	set        time.Time // the deadline set last
}

// arm sets the read deadline for a body of which n bytes arrived, after
// waiting for room for waited.
func (p *bodyPace) arm(n int64, waited time.Duration) {
	if p == nil || p.w == nil {
		return
	}
	d := p.deadline(n, waited, time.Now())
	if d.Equal(p.set) {
		return
	}
	// (A ResponseController of its own each time stays on the stack.)
	if err := http.NewResponseController(p.w).SetReadDeadline(d); err != nil {
		p.w = nil // no deadlines on this connection: no minimum rate
		return
	}
	p.set = d
}

// deadline is the read deadline, at now, of a body of which n bytes
// arrived, after waiting for room for waited: start + grace + waited +
// n/rate, and at most now + idle (a pause may not last longer, whatever
// arrived before), at most end.
func (p *bodyPace) deadline(n int64, waited time.Duration, now time.Time) time.Time {
	d := p.end
	if p.rate > 0 && n/p.rate < int64(p.end.Sub(p.start)/time.Second) { // (no overflow below)
		secs := n / p.rate
		credit := p.grace + waited + time.Duration(secs)*time.Second + time.Duration(n%p.rate)*time.Second/time.Duration(p.rate)
		if t := p.start.Add(credit); t.Before(d) {
			d = t
		}
	}
	if p.idle > 0 {
		if t := now.Add(p.idle); t.Before(d) {
			d = t
		}
	}
	return d
}

// done gives the connection back the deadline of the whole request (end),
// once the body is read: the server reads on in the background, and the
// body's own deadline must not end the request meanwhile.
func (p *bodyPace) done() {
	if p == nil || p.w == nil || p.set.IsZero() {
		return
	}
	_ = http.NewResponseController(p.w).SetReadDeadline(p.end)
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
	case errors.Is(err, errBodyClientShare):
		return shedBodyClientShare
	case errors.Is(err, errBodyPreempted):
		return shedBodyPreempted
	}
	return ""
}

// registerShedMetrics registers hookgate_ingest_shed_total by reason, which
// it returns, and the gauges of the body budget and of the queue for the
// store.
func registerShedMetrics(reg prometheus.Registerer, s *Server) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hookgate_ingest_shed_total",
		Help: "Deliveries answered 503 overloaded at once, nothing recorded, by reason: queue_delay (the queue for the database has stood above its target), queue_timeout (waited the longest queueing time), body_budget (no room in the memory budget of request bodies), body_client_share (no room in the client's share of that budget), body_preempted (a body still being read, cut short to give its room to a client that held none).",
	}, []string{"reason"})
	for _, r := range []string{dedup.ShedQueueDelay, dedup.ShedQueueTimeout, shedBodyBudget, shedBodyClientShare, shedBodyPreempted} {
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
	clients := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "hookgate_ingest_body_clients",
		Help: "Clients (TCP peers, or the clients trusted proxies name; an IPv6 address's /64) with ingest requests reading or holding a body now, each held to its share of the body budget.",
	}, func() float64 { return float64(s.budget.clientCount()) })
	queued := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "hookgate_ingest_store_queued",
		Help: "Deliveries admitted and waiting for the database now (a batch slot or a connection; copies of a delivery in flight are not counted).",
	}, func() float64 { return float64(s.deliveries.Queued()) })
	reg.MustRegister(c, inFlight, budget, clients, queued)
	return c
}
