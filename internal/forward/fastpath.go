package forward

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/queue"
)

// The fast path. Most forwards succeed at their first attempt, and the
// process that committed a delivery still holds its body. The ingest
// transaction leases the delivery's outbox rows, with the durations
// [Dispatcher.Lease] grants. Right after COMMIT the process hands the
// forwards to its [Dispatcher]. The dispatcher sends them through its
// worker's transport, admitted by the same [Gate] as the queue's worker.
// It records the outcomes in batches, one transaction per sender. A
// delivered forward gets a forward_delivered row; a failed attempt becomes
// a job. The API, the metrics and the console then see it like any other.
//
// Forwards wait in one queue per target, and the workers serve the
// targets in turn. A target holds at most a fair share of the workers and
// of the queue. A burst to slow targets then never delays a healthy one.
// A forward whose target is held back is not leased at all. One that
// waited too long for its lease to cover the attempt is handed to the
// queue.
//
// Until the outcome is recorded, the outbox row is the durable promise. A
// forward the dispatcher cannot take has its lease cleared, and the relay
// moves it at once. After a crash the relay moves the row when its lease
// ends: the target's timeout plus [DefaultLeaseMargin]. A forward can be
// repeated only between the target's 2xx and the recording's COMMIT. The
// repeat carries the same idempotency key.

// Defaults of the fast path.
const (
	// DefaultDispatchWorkers is how many fast-path forwards a process runs at
	// once.
	DefaultDispatchWorkers = 64
	// DefaultDispatchQueue is how many fast-path forwards may wait for a
	// dispatch worker; more are left to the relay. One target may have at
	// most a quarter of them waiting.
	DefaultDispatchQueue = 1024
	// DefaultDispatchBytes bounds the bytes of bodies the fast path holds
	// (queued and in flight, a body counted once per target): past it,
	// forwards are left to the relay, which reads them from the database.
	// The ingest body budget no longer covers a body once its delivery is
	// answered, so without it a burst of large bodies to slow targets would
	// hold up to DefaultDispatchQueue bodies of max_body_bytes each.
	DefaultDispatchBytes = 64 << 20
	// DefaultLeaseMargin is how much longer than its target's timeout a
	// forward's outbox row is leased: recordMargin to record the outcome,
	// and about 2 s the forward may wait in its target's queue (a longer
	// wait hands it to River). A crash leaves the row waiting at most the
	// target's timeout plus this long before the relay takes it, within
	// the timeout + 10 s that delivery may take to resume after a crash.
	DefaultLeaseMargin = 4 * time.Second
	// recordMargin is the part of the lease kept for recording the outcome
	// after the attempt's timeout (a third of a shorter lease): a recording
	// takes milliseconds (the 10 ms it gathers a batch, and its write); one
	// that misses the lease's end only lets the relay send the forward
	// again, with the same key.
	recordMargin = 2 * time.Second
	// recordBatch is the most outcomes recorded by one statement.
	recordBatch = 500
	// recordLinger is how long the recorder waits, after an outcome
	// arrives, for more to record with it: each recording is a transaction
	// whose COMMIT waits for a WAL flush, and a statement whose fixed cost
	// (planning, execution start) is shared by its rows. At a few thousand
	// forwards a second that makes batches of tens instead of a few. It
	// delays only the recording (the forward has been sent), and widens by
	// as much the window in which a SIGKILL repeats a delivered forward.
	recordLinger = 10 * time.Millisecond
	// recordPersist is how long a failed recording is tried again before
	// its rows are left to the relay at the end of their lease, and
	// recordRetries how often at least, when the dispatcher is cut short.
	recordPersist = 15 * time.Second
	recordRetries = 3
	// idleRecheck bounds how long a worker waits, with forwards queued and
	// none admitted, before it looks again without being told to: a
	// target's fair share grows when other targets fall idle, which no
	// event signals.
	idleRecheck = 50 * time.Millisecond
)

// Lease is what Dispatcher.Lease grants an ingest: the lease to write on
// each of its outbox rows, in the order of its targets (zero: none, the
// row is the relay's), and when it was granted. The zero Lease leases
// nothing.
type Lease struct {
	Durations []time.Duration
	granted   time.Time
}

// For returns the lease of the i-th target's row: 0 when none.
func (l Lease) For(i int) time.Duration {
	if i < len(l.Durations) {
		return l.Durations[i]
	}
	return 0
}

// Fast is a committed delivery whose forwards the fast path attempts.
type Fast struct {
	Sender     *config.Sender
	EventID    uuid.UUID
	DeliveryID string
	// EventType is the event's type ("" when the sender gave none).
	EventType string
	// Headers and Body are the event's, as stored.
	Headers http.Header
	Body    []byte
	// Targets are the names of the targets its outbox rows were written for.
	Targets []string
	Lease   Lease
}

// fastJob is one forward of a Fast.
type fastJob struct {
	f *Fast
	// target is its queue's target, as the configuration in force had it
	// when the dispatcher last looked (Dispatcher.current).
	target *config.Target
	lease  time.Duration // its row's lease, from f.Lease.granted
	q      *targetQueue  // its target's queue
}

// targetQueue is one target's forwards waiting for a dispatch worker,
// oldest first, and its use of the workers. Under the dispatcher's mu,
// but share, which is under the dispatcher's fair.mu.
type targetQueue struct {
	sender string
	target *config.Target
	jobs   []fastJob
	inRing bool
	share  share
}

// Dispatcher is the fast path of one process. Its methods are safe for
// concurrent use.
type Dispatcher struct {
	w           *Worker
	gate        *Gate
	recorder    FirstAttemptRecorder
	log         *slog.Logger
	fixedLease  time.Duration // 0: each target's timeout + leaseMargin
	leaseMargin time.Duration
	records     chan queue.FirstAttempt
	// bytes are the body bytes of the queued and running forwards, at most
	// maxBytes (DispatcherConfig.MaxBytes).
	bytes    atomic.Int64
	maxBytes int64
	// handedOver is DispatcherConfig.HandedOver.
	handedOver chan<- struct{}
	count      *prometheus.CounterVec
	// delivered is count's series of the common result, looked up once.
	delivered prometheus.Counter

	ctx    context.Context // of the attempts; cancelled by Close's deadline
	cancel context.CancelFunc

	// fair shares the workers among the targets.
	fair fair
	// slots holds a token per forward under way (at most Workers).
	slots chan struct{}
	// kick wakes the scheduler: a forward was queued, or an attempt (of
	// this dispatcher's or of River's worker) ended.
	kick chan struct{}

	mu        sync.Mutex
	queues    map[[2]string]*targetQueue
	ring      []*targetQueue // the targets with forwards queued, served in turn
	next      int            // the ring's next target to serve
	queued    int            // forwards queued, at most maxQueued
	maxQueued int
	perTarget int // the most forwards one target may have queued
	closed    bool

	running sync.WaitGroup // the scheduler and the attempts under way
	rec     sync.WaitGroup

	closeOnce sync.Once
	closeErr  error
}

// DispatcherConfig configures a Dispatcher (NewDispatcher): its settings
// and its dependencies. Zero means zero (docs/configuration.md): no setting
// is defaulted from a 0, and validate refuses one where it is not a value
// of its own (FixedLease); DefaultDispatcherConfig has the defaults.
// Worker, Recorder, Registerer and Log are required.
type DispatcherConfig struct {
	// LeaseMargin is how much longer than its target's timeout a forward's
	// outbox row is leased (DefaultLeaseMargin), positive.
	LeaseMargin time.Duration
	// FixedLease, when positive, is the lease of every forward instead,
	// whatever its target's timeout (--forward-lease); an attempt is then
	// cut short at the lease's end minus the recording's margin. Zero:
	// each target's timeout + LeaseMargin.
	FixedLease time.Duration
	// Workers is how many forwards the fast path attempts at once
	// (DefaultDispatchWorkers).
	Workers int
	// Queue is how many forwards may wait for a worker; more are left to
	// the relay (DefaultDispatchQueue). One target may have a quarter of
	// them waiting (at least one).
	Queue int
	// MaxBytes bounds the body bytes of the queued and running forwards
	// (DefaultDispatchBytes).
	MaxBytes int64
	// HandedOver, when not nil, is signalled (without blocking: a buffered
	// channel of one keeps one signal) whenever forwards are left to the
	// relay: committed without a lease, or released unattempted. The
	// process's relay (RelayConfig.Wake) then looks at once instead of
	// at its idle interval.
	HandedOver chan<- struct{}

	// Worker is the process's River worker (NewWorker), whose Transport,
	// metrics, backoff and Gate the fast path shares, so that the gate's
	// fair shares, max_in_flight, breakers and pauses hold across both.
	Worker *Worker
	// Recorder records the outcomes of the attempts (the process's queue,
	// queue.River).
	Recorder FirstAttemptRecorder
	// Registerer receives hookgate_forward_fast_path_total.
	Registerer prometheus.Registerer
	// Log is where what fails beside the attempts is logged.
	Log *slog.Logger
}

// FirstAttemptRecorder records the outcomes of the fast path's first
// attempts, in the transactions of their senders (queue.Queue's
// RecordFirstAttempts, which queue.River has).
type FirstAttemptRecorder interface {
	RecordFirstAttempts(ctx context.Context, batch []queue.FirstAttempt) error
}

// DefaultDispatcherConfig returns the fast path's defaults.
func DefaultDispatcherConfig() DispatcherConfig {
	return DispatcherConfig{LeaseMargin: DefaultLeaseMargin, Workers: DefaultDispatchWorkers, Queue: DefaultDispatchQueue, MaxBytes: DefaultDispatchBytes}
}

// validate returns an error naming the fields at fault, or nil: the
// settings, and the dependencies NewDispatcher requires.
func (c DispatcherConfig) validate() error {
	var errs []error
	if c.LeaseMargin <= 0 {
		errs = append(errs, fmt.Errorf("dispatcher config: LeaseMargin %s: must be positive", c.LeaseMargin))
	}
	if c.FixedLease < 0 {
		errs = append(errs, fmt.Errorf("dispatcher config: FixedLease %s: must not be negative", c.FixedLease))
	}
	if c.Workers < 1 {
		errs = append(errs, fmt.Errorf("dispatcher config: Workers %d: must be at least 1", c.Workers))
	}
	if c.Queue < 1 {
		errs = append(errs, fmt.Errorf("dispatcher config: Queue %d: must be at least 1", c.Queue))
	}
	if c.MaxBytes < 1 {
		errs = append(errs, fmt.Errorf("dispatcher config: MaxBytes %d: must be at least 1", c.MaxBytes))
	}
	if c.Worker == nil {
		errs = append(errs, errors.New("dispatcher config: Worker: nil: the process's forward worker is required"))
	}
	if c.Recorder == nil {
		errs = append(errs, errors.New("dispatcher config: Recorder: nil: the queue that records the outcomes is required"))
	}
	if c.Registerer == nil {
		errs = append(errs, errors.New("dispatcher config: Registerer: nil: a metrics registerer is required"))
	}
	if c.Log == nil {
		errs = append(errs, errors.New("dispatcher config: Log: nil: a logger is required"))
	}
	return errors.Join(errs...)
}

// NewDispatcher returns the fast path of a process whose River worker is
// cfg.Worker (its Transport, metrics, backoff and Gate are shared): up to
// cfg.Workers forwards are attempted at once, from per-target queues of
// cfg.Queue forwards in all, and their outcomes are recorded by
// cfg.Recorder. Close stops it. It returns an error, naming the field,
// when cfg is invalid or lacks a dependency.
func NewDispatcher(cfg DispatcherConfig) (*Dispatcher, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	d := newDispatcher(cfg)
	cfg.Registerer.MustRegister(d.count)
	d.delivered = d.count.WithLabelValues("delivered")
	// An attempt of River's worker that ends may free a slot a queued
	// forward waits for.
	d.gate.OnRelease(d.wake)
	d.running.Add(1)
	go d.schedule()
	d.rec.Add(1)
	go d.record()
	return d, nil
}

// newDispatcher returns a dispatcher of dc whose scheduler and recorder
// are not started (NewDispatcher starts them; tests of the queues do not,
// and may leave out the dependencies).
func newDispatcher(dc DispatcherConfig) *Dispatcher {
	ctx, cancel := context.WithCancel(context.Background())
	d := &Dispatcher{
		w: dc.Worker, recorder: dc.Recorder, log: dc.Log, fixedLease: dc.FixedLease, leaseMargin: dc.LeaseMargin,
		maxBytes: dc.MaxBytes, handedOver: dc.HandedOver,
		records: make(chan queue.FirstAttempt, dc.Queue+dc.Workers),
		ctx:     ctx, cancel: cancel,
		fair:   newFair(dc.Workers),
		slots:  make(chan struct{}, dc.Workers),
		kick:   make(chan struct{}, 1),
		queues: map[[2]string]*targetQueue{}, maxQueued: dc.Queue, perTarget: max(dc.Queue/4, 1),
		count: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookgate_forward_fast_path_total",
			Help: "Forwards offered to the fast path (attempted right after the ingest COMMIT by the process that accepted them), by result: delivered, retry (failed, handed to River), failed, handed_over (not attempted: its target's queue was full or the target held back, it waited too long for a worker, or the process was stopping), unrecorded (the outcome could not be recorded: the relay takes the row when its lease ends).",
		}, []string{"result"}),
	}
	if dc.Worker != nil {
		d.gate = dc.Worker.gate
	}
	return d
}

// leaseFor returns the lease of a forward to t.
func (d *Dispatcher) leaseFor(t *config.Target) time.Duration {
	if d.fixedLease > 0 {
		return d.fixedLease
	}
	return time.Duration(t.Timeout) + d.leaseMargin
}

// heldBack reports whether t's forwards are left to River: t has a rate
// (its turns are taken by River's workers, rate.go), or the gate holds
// them back (paused, breaker not closed).
func (d *Dispatcher) heldBack(sender string, t *config.Target) bool {
	if !t.Rate.IsZero() {
		return true
	}
	if d.gate == nil {
		return false
	}
	held, _ := d.gate.HeldBack(sender, t)
	return held
}

// queueOf returns the queue of sender's target t, made on first use. Under
// d.mu.
func (d *Dispatcher) queueOf(sender string, t *config.Target) *targetQueue {
	k := [2]string{sender, t.Name}
	tq := d.queues[k]
	if tq == nil {
		tq = &targetQueue{sender: sender, target: t}
		d.queues[k] = tq
		d.fair.add(&tq.share)
	}
	return tq
}

// Lease returns the leases an ingest of sender with forwards to targets
// and a body of size bytes should write on its outbox rows: for each
// target, its timeout + the lease margin, or none (the relay takes the row
// at once) when the target is held back (paused, its breaker open: River
// holds its forwards without using attempts), its queue or the
// dispatcher's is full, the body bytes would pass their bound, or the
// dispatcher is closed.
func (d *Dispatcher) Lease(sender *config.Sender, targets []string, size int) Lease {
	d.mu.Lock()
	defer d.mu.Unlock()
	var (
		l      = Lease{granted: time.Now()}
		n      int
		refuse int
	)
	for i, name := range targets {
		t, ok := sender.Target(name)
		if d.closed || !ok || d.queued+n >= d.maxQueued || d.bytes.Load()+int64(n+1)*int64(size) > d.maxBytes {
			refuse++
			continue
		}
		if tq := d.queueOf(sender.Name, t); len(tq.jobs) >= d.perTarget || d.heldBack(sender.Name, t) {
			refuse++
			continue
		}
		if l.Durations == nil {
			l.Durations = make([]time.Duration, len(targets))
		}
		l.Durations[i] = d.leaseFor(t)
		n++
	}
	if refuse > 0 {
		d.count.WithLabelValues("handed_over").Add(float64(refuse))
	}
	return l
}

// Dispatch queues f's forwards whose outbox rows are leased (f.Lease) and
// committed, each in its target's queue. It does not block: a forward that
// finds its queue full is released to the relay. The rows without a lease
// are the relay's: Dispatch only tells it.
func (d *Dispatcher) Dispatch(f *Fast) {
	unleased := false
	var released []*config.Target
	d.mu.Lock()
	for i, name := range f.Targets {
		lease := f.Lease.For(i)
		if lease <= 0 {
			unleased = true
			continue
		}
		t, ok := f.Sender.Target(name)
		if !ok {
			released = append(released, &config.Target{Name: name})
			continue
		}
		if d.closed {
			// Stopping: the row stays leased, and the relay of a running
			// process takes it when the lease ends.
			continue
		}
		tq := d.queueOf(f.Sender.Name, t)
		if d.queued >= d.maxQueued || len(tq.jobs) >= d.perTarget {
			released = append(released, t)
			continue
		}
		size := int64(len(f.Body))
		if d.bytes.Add(size) > d.maxBytes {
			d.bytes.Add(-size)
			released = append(released, t)
			continue
		}
		tq.jobs = append(tq.jobs, fastJob{f: f, target: tq.target, lease: lease, q: tq})
		d.queued++
		if !tq.inRing {
			tq.inRing = true
			d.ring = append(d.ring, tq)
		}
	}
	d.mu.Unlock()
	for _, t := range released {
		d.handOver(f, t.Name)
	}
	if unleased {
		d.wakeRelay()
	}
	d.wake()
}

// wake tells the scheduler to look again, without blocking.
func (d *Dispatcher) wake() {
	select {
	case d.kick <- struct{}{}:
	default: // a signal is pending already
	}
}

// handOver releases a forward's outbox row to the relay. It never blocks:
// when the recorder is that far behind, the row stays leased until its
// lease ends.
func (d *Dispatcher) handOver(f *Fast, target string) {
	d.count.WithLabelValues("handed_over").Inc()
	select {
	case d.records <- queue.FirstAttempt{Sender: f.Sender.Name, EventID: f.EventID, Target: target, Release: true}:
	default:
	}
}

// wakeRelay signals HandedOver, if any, without blocking.
func (d *Dispatcher) wakeRelay() {
	if d.handedOver == nil {
		return
	}
	select {
	case d.handedOver <- struct{}{}:
	default: // a signal is pending already
	}
}

// schedule starts the queued forwards' attempts, one per free worker slot,
// taking the targets in turn, until the dispatcher is closed and its
// queues are empty.
func (d *Dispatcher) schedule() {
	defer d.running.Done()
	timer := time.NewTimer(idleRecheck)
	defer timer.Stop()
	for {
		d.slots <- struct{}{} // a worker is free
		for {
			j, tk, ok, done, wait := d.pick(time.Now())
			if done {
				<-d.slots
				return
			}
			if ok {
				d.running.Add(1)
				go func() {
					defer d.running.Done()
					d.attempt(j, tk)
					d.fair.release(&j.q.share)
					<-d.slots
					d.wake()
				}()
				break
			}
			timer.Reset(wait)
			select {
			case <-d.kick:
				if !timer.Stop() {
					<-timer.C
				}
			case <-timer.C:
			}
		}
	}
}

// pick takes the next forward to attempt now, serving the targets with
// forwards queued in turn: the oldest forward of the first target, from
// the one after the last served, that may send one (its fair share of the
// workers, and the gate admits it: AcquireFirst). On the way it hands to
// River the forwards that can no longer be attempted within their lease,
// and all those of a target held back (paused, breaker open). When it
// finds none, wait is how long until it should look again unless woken;
// done reports that the dispatcher is closed and nothing is queued.
func (d *Dispatcher) pick(now time.Time) (j fastJob, tk Ticket, ok, done bool, wait time.Duration) {
	var out []fastJob // handed over, released once d.mu is unlocked
	defer func() {
		for _, h := range out {
			d.bytes.Add(-int64(len(h.f.Body)))
			d.handOver(h.f, h.target.Name)
		}
	}()
	d.mu.Lock()
	defer d.mu.Unlock()
	wait = idleRecheck
	stopping := d.ctx.Err() != nil
	for i := 0; i < len(d.ring) && !ok; i++ {
		k := (d.next + i) % len(d.ring)
		tq := d.ring[k]
		if len(tq.jobs) > 0 && !d.current(tq) {
			// A reload removed its target: River holds its forwards.
			d.w.metrics.waits.WithLabelValues(tq.sender, tq.target.Name, WaitTargetRemoved).Add(float64(len(tq.jobs)))
			out = append(out, tq.jobs...)
			d.queued -= len(tq.jobs)
			tq.jobs = nil
			continue
		}
		for len(tq.jobs) > 0 {
			h := tq.jobs[0]
			left, need := d.left(h, now)
			if !stopping && left >= need {
				wait = min(wait, max(left-need, time.Millisecond))
				break
			}
			tq.jobs[0] = fastJob{}
			tq.jobs = tq.jobs[1:]
			d.queued--
			out = append(out, h)
			if !stopping { // it waited too long for its target's turn
				d.w.metrics.waits.WithLabelValues(tq.sender, tq.target.Name, "busy").Inc()
			}
		}
		if len(tq.jobs) == 0 {
			continue
		}
		if held, why := d.gate.HeldBack(tq.sender, tq.target); held || !tq.target.Rate.IsZero() {
			if !held {
				why = "rate"
			}
			d.w.metrics.waits.WithLabelValues(tq.sender, tq.target.Name, why).Add(float64(len(tq.jobs)))
			out = append(out, tq.jobs...)
			d.queued -= len(tq.jobs)
			tq.jobs = nil
			continue
		}
		if !d.fair.acquire(&tq.share, now, d.gate.Quick(tq.sender, tq.target)) {
			continue
		}
		t, admitted, w, _ := d.gate.AcquireFirst(tq.sender, tq.target)
		if !admitted {
			d.fair.release(&tq.share)
			wait = min(wait, max(w, time.Millisecond))
			continue
		}
		j, tk, ok = tq.jobs[0], t, true
		tq.jobs[0] = fastJob{}
		tq.jobs = tq.jobs[1:]
		d.queued--
		d.next = k + 1
	}
	// The targets left without forwards leave the ring.
	kept := d.ring[:0]
	for i, tq := range d.ring {
		if len(tq.jobs) > 0 {
			kept = append(kept, tq)
			continue
		}
		tq.inRing = false
		if i < d.next {
			d.next--
		}
	}
	clear(d.ring[len(kept):])
	d.ring = kept
	if len(d.ring) > 0 {
		d.next %= len(d.ring)
	} else {
		d.next = 0
	}
	done = !ok && d.closed && d.queued == 0
	return j, tk, ok, done, wait
}

// current makes tq's target, and its queued forwards', the target of that
// name in the configuration in force (a reload may have changed it since
// they were queued: its timeout, URL or secret apply to their attempts),
// and returns true; false when that configuration has no such target.
// Under d.mu.
func (d *Dispatcher) current(tq *targetQueue) bool {
	t, ok := d.w.target(queue.Args{Sender: tq.sender, Target: tq.target.Name})
	if !ok {
		return false
	}
	if t != tq.target {
		tq.target = t
		for i := range tq.jobs {
			tq.jobs[i].target = t
		}
	}
	return true
}

// left returns how long the forward j may still take to be attempted and
// recorded within its lease, and how long its attempt needs: the target's
// timeout, or, under a fixed lease shorter than that plus the recording's
// margin, a second (the attempt is then cut short at the lease's end).
func (d *Dispatcher) left(j fastJob, now time.Time) (left, need time.Duration) {
	margin := min(recordMargin, j.lease/3)
	left = j.f.Lease.granted.Add(j.lease).Sub(now) - margin
	need = time.Duration(j.target.Timeout)
	if j.lease-margin < need {
		need = min(time.Second, j.lease-margin)
	}
	return left, need
}

// attempt sends one forward (Worker.post), admitted by the gate (tk), and
// queues its outcome for recording.
func (d *Dispatcher) attempt(j fastJob, tk Ticket) {
	f, t := j.f, j.target
	defer d.bytes.Add(-int64(len(f.Body)))
	// The attempt must end, and its outcome be recorded, before the lease
	// does: after it, the relay may move the row into River.
	left, _ := d.left(j, time.Now())
	a := queue.Args{Sender: f.Sender.Name, EventID: f.EventID, Target: t.Name, DeliveryID: f.DeliveryID}
	attemptedAt := time.Now().UTC()
	p := d.w.post(d.ctx, t, a, f.EventType, f.Headers, f.Body, max(left, time.Millisecond))
	snooze := tk.Done(d.ctx, p.res, p.pause, errText(p.err))
	o := queue.FirstAttempt{Sender: a.Sender, EventID: a.EventID, Target: a.Target, MaxAttempts: t.MaxAttempts, AttemptedAt: attemptedAt}
	if p.status != 0 {
		o.Output = p.output()
	}
	now := time.Now().UTC()
	switch {
	case p.res == ResultDelivered:
		o.State, o.FinalizedAt, o.ScheduledAt = queue.StateDelivered, &p.at, attemptedAt
		d.delivered.Inc()
	case p.res == ResultNone && !p.final:
		// No verdict (the process is stopping): nothing to record.
		d.count.WithLabelValues("handed_over").Inc()
		o = queue.FirstAttempt{Sender: a.Sender, EventID: a.EventID, Target: a.Target, Release: true}
	default:
		o.Error, o.ScheduledAt = p.err.Error(), now
		switch {
		case p.final:
			o.State, o.FailedAtOnce, o.FinalizedAt = queue.StateFailed, true, &now
			d.count.WithLabelValues("failed").Inc()
		case o.MaxAttempts <= 1:
			o.State, o.FinalizedAt = queue.StateFailed, &now
			d.count.WithLabelValues("failed").Inc()
		default:
			// As River would schedule the retry (Worker.NextRetry), or when
			// a failed breaker probe says.
			wait := d.w.retryWait(1, p.retryAfter)
			if snooze > 0 {
				wait = snooze
			}
			o.State, o.ScheduledAt = queue.StateRetrying, now.Add(wait)
			d.count.WithLabelValues("retry").Inc()
		}
	}
	d.records <- o
}

// record writes outcomes in batches until records is closed: it takes
// what queues within recordLinger of the first outcome (up to
// recordBatch), writes it, and goes again, so that batches grow with the
// load.
func (d *Dispatcher) record() {
	defer d.rec.Done()
	linger := time.NewTimer(recordLinger)
	for {
		o, ok := <-d.records
		if !ok {
			return
		}
		batch := []queue.FirstAttempt{o}
		linger.Reset(recordLinger)
	fill:
		for len(batch) < recordBatch {
			select {
			case o, ok := <-d.records:
				if !ok {
					break fill
				}
				batch = append(batch, o)
			case <-linger.C:
				break fill
			}
		}
		linger.Stop()
		d.flush(batch)
	}
}

// flush records a batch, trying again with a growing pause (from 100 ms,
// at most 2 s) for up to recordPersist, or recordRetries times once the
// dispatcher is being cut short: a database outage of a few seconds then
// loses no outcome (a delivered forward would otherwise be sent again once
// its lease ends). Rows it cannot record stay leased, and the relay takes
// them when their lease ends; recording one the relay took already does
// nothing.
func (d *Dispatcher) flush(batch []queue.FirstAttempt) {
	var err error
	deadline := time.Now().Add(recordPersist)
	for try := 0; ; try++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = d.recorder.RecordFirstAttempts(ctx, batch)
		cancel()
		if err == nil {
			for _, o := range batch {
				if o.Release { // rows released to the relay: tell it
					d.wakeRelay()
					break
				}
			}
			return
		}
		if time.Now().After(deadline) || d.ctx.Err() != nil && try >= recordRetries-1 {
			break
		}
		t := time.NewTimer(min(time.Duration(100<<min(try, 5))*time.Millisecond, 2*time.Second))
		select {
		case <-t.C:
		case <-d.ctx.Done():
			t.Stop()
		}
	}
	n := 0
	for _, o := range batch {
		if !o.Release {
			n++
		}
	}
	d.count.WithLabelValues("unrecorded").Add(float64(n))
	d.log.Warn("fast path: could not record forward outcomes; the relay takes their outbox rows when their lease ends",
		"forwards", len(batch), "err", err)
}

// Close stops the dispatcher: no new forward is taken, queued and running
// ones finish (or, at ctx's end, are cancelled and released), and their
// outcomes are recorded. It returns an error when ctx's deadline cut
// attempts short. Calls after the first return the first's result.
func (d *Dispatcher) Close(ctx context.Context) error {
	d.closeOnce.Do(func() { d.closeErr = d.close(ctx) })
	return d.closeErr
}

func (d *Dispatcher) close(ctx context.Context) error {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	d.wake()
	done := make(chan struct{})
	go func() {
		d.running.Wait()
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
		d.cancel() // running attempts end with no verdict and are released, queued ones too
		d.wake()
		<-done
	}
	d.cancel()
	close(d.records)
	d.rec.Wait()
	if err != nil {
		return fmt.Errorf("fast path: attempts cut short at the end of the grace period: %w", err)
	}
	return nil
}
