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
	"github.com/hookgate/hookgate/internal/rules"
	"github.com/hookgate/hookgate/internal/store"
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
	// worker. More are left to the relay.
	DefaultDispatchQueue = 1024
	// DefaultDispatchBytes bounds the body bytes the fast path holds, a
	// body counted once per target. Past it, forwards are left to the
	// relay. The ingest body budget no longer covers an answered delivery.
	DefaultDispatchBytes = 64 << 20
	// DefaultLeaseMargin is how much longer than its target's timeout a
	// forward's outbox row is leased. It leaves recordMargin to record the
	// outcome, and about 2 s to wait in the target's queue.
	DefaultLeaseMargin = 4 * time.Second
	// recordMargin is the part of the lease kept to record the outcome. A
	// recording that misses it only lets the relay send the forward again.
	recordMargin = 2 * time.Second
	// recordBatch is the most outcomes recorded by one statement.
	recordBatch = 500
	// recordLinger is how long the recorder waits for more outcomes to
	// record together. Each recording is a transaction that costs
	// PostgreSQL about 400 µs whatever its size (BenchmarkRecordDelivered:
	// about 20 µs per forward in batches of 40, 16 in batches of 80, 13 in
	// batches of 160), so batches save much. It delays only the recording,
	// not the forward; a SIGKILL within it makes the relay send those
	// forwards again (docs/forwarding-crashes.md). 40 ms rather than 10
	// took 3–5 µs off a forward's CPU in make bench.
	recordLinger = 40 * time.Millisecond
	// orderedLinger is recordLinger for a batch with an ordered
	// forward's end, whose key's next forward waits for it.
	orderedLinger = time.Millisecond
	// recordTimeout bounds one try of a recording.
	recordTimeout = 5 * time.Second
	// recordPersist is how long a failed recording is tried again.
	// recordRetries is how often at least, when the dispatcher is cut short.
	recordPersist = 15 * time.Second
	recordRetries = 3
	// idleRecheck bounds the wait of a worker with forwards queued and none
	// admitted. A fair share grows when other targets fall idle, which no
	// event signals.
	idleRecheck = 50 * time.Millisecond
)

// Lease is what [Dispatcher.Lease] grants an ingest: one lease per outbox
// row, in the order of its targets. A zero duration leaves the row to the
// relay. The zero Lease leases nothing.
type Lease struct {
	Durations []time.Duration
	granted   time.Time
}

// For returns the lease of the i-th target's row, or 0.
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
	// EventType is the event's type, or "".
	EventType string
	// Headers and Body are the event's, as stored.
	Headers http.Header
	Body    []byte
	// Parsed is Body as the sender's filters parsed it, or nil: the
	// targets' transforms read it instead of parsing Body again.
	Parsed *rules.Parsed
	// Targets are the names of the targets its outbox rows were written for.
	Targets []string
	// OrderKeys are the targets' ordering keys, nil or one per target, ""
	// for an unordered forward ([sender.Prepared.OrderKeys]). An ordered
	// forward is attempted only when its row is its key's head.
	OrderKeys []string
	Lease     Lease
	// New reports that the ingest that dispatches the event created it,
	// in the transaction that wrote its outbox rows: no other forward of
	// it can have failed before this attempt, so recording its delivery
	// looks for no failed forward to supersede ([queue.FirstAttempt.New]).
	New bool
}

// orderKey returns the ordering key of f's i-th target, or "".
func (f *Fast) orderKey(i int) string {
	if i < len(f.OrderKeys) {
		return f.OrderKeys[i]
	}
	return ""
}

// fastJob is one forward of a Fast.
type fastJob struct {
	f *Fast
	// target is the configured target when the dispatcher last looked.
	target *config.Target
	lease  time.Duration // its row's lease, from f.Lease.granted
	q      *targetQueue  // its target's queue
	// key and seq are an ordered forward's key and position, "" and 0
	// for another.
	key string
	seq int64
}

// targetQueue is one target's waiting forwards, oldest first. It is under
// the dispatcher's mu, except share, under fair.mu.
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
	// heads are the committed deliveries with ordered forwards, whose
	// rows must be found to be their keys' heads before an attempt.
	heads chan *Fast
	// bytes are the body bytes of the queued and running forwards.
	bytes    atomic.Int64
	maxBytes int64
	// handedOver is DispatcherConfig.HandedOver.
	handedOver chan<- struct{}
	count      *prometheus.CounterVec
	// delivered is count's most common series, looked up once.
	delivered prometheus.Counter

	ctx    context.Context // of the attempts; cancelled by Close's deadline
	cancel context.CancelFunc

	// fair shares the workers among the targets.
	fair fair
	// slots holds a token per forward under way.
	slots chan struct{}
	// kick wakes the scheduler when a forward is queued or an attempt ends.
	kick chan struct{}

	mu        sync.Mutex
	queues    map[[2]string]*targetQueue
	ring      []*targetQueue // the targets with forwards queued, served in turn
	next      int            // the ring's next target to serve
	queued    int            // forwards queued, at most maxQueued
	maxQueued int
	perTarget int // the most forwards one target may have queued
	closed    bool

	running sync.WaitGroup // the scheduler and the attempt workers
	// work hands a picked forward to an idle attempt worker. workers
	// counts them; only schedule reads and writes it.
	work    chan picked
	workers int
	rec     sync.WaitGroup

	closeOnce sync.Once
	closeErr  error
}

// DispatcherConfig configures a [Dispatcher]. A zero setting is refused,
// not defaulted, except FixedLease; [DefaultDispatcherConfig] has the
// defaults. Worker, Recorder, Registerer and Log are required.
type DispatcherConfig struct {
	// LeaseMargin is how much longer than its target's timeout a row is
	// leased.
	LeaseMargin time.Duration
	// FixedLease, when positive, is every forward's lease, whatever its
	// target's timeout. An attempt is then cut short before the lease ends.
	FixedLease time.Duration
	// Workers is how many forwards the fast path attempts at once.
	Workers int
	// Queue is how many forwards may wait for a worker. One target may
	// have a quarter of them waiting.
	Queue int
	// MaxBytes bounds the body bytes of the queued and running forwards.
	MaxBytes int64
	// HandedOver, when not nil, is signalled without blocking whenever
	// forwards are left to the relay. The relay then looks at once.
	HandedOver chan<- struct{}

	// Worker is the process's [Worker]. The fast path shares its
	// transport, metrics, backoff and Gate.
	Worker *Worker
	// Recorder records the outcomes of the attempts.
	Recorder FirstAttemptRecorder
	// Registerer receives hookgate_forward_fast_path_total.
	Registerer prometheus.Registerer
	// Log receives what fails beside the attempts.
	Log *slog.Logger
}

// FirstAttemptRecorder records the outcomes of the fast path's first
// attempts, one transaction per sender. [queue.River] implements it. It
// keeps nothing of batch once it returns: the dispatcher reuses the array.
type FirstAttemptRecorder interface {
	RecordFirstAttempts(ctx context.Context, batch []queue.FirstAttempt) ([]store.HandedOff, error)
}

// DefaultDispatcherConfig returns the fast path's defaults.
func DefaultDispatcherConfig() DispatcherConfig {
	return DispatcherConfig{LeaseMargin: DefaultLeaseMargin, Workers: DefaultDispatchWorkers, Queue: DefaultDispatchQueue, MaxBytes: DefaultDispatchBytes}
}

// validate returns an error naming the fields at fault, or nil.
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

// NewDispatcher returns the fast path of a process. [Dispatcher.Close]
// stops it. It returns an error naming the field when cfg is invalid.
func NewDispatcher(cfg DispatcherConfig) (*Dispatcher, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	d := newDispatcher(cfg)
	cfg.Registerer.MustRegister(d.count)
	cfg.Worker.fast.Store(d)
	d.delivered = d.count.WithLabelValues("delivered")
	// An attempt of the queue's worker may free a slot.
	d.gate.OnRelease(d.wake)
	d.running.Add(1)
	go d.schedule()
	d.rec.Add(1)
	go d.record()
	d.rec.Add(1)
	go d.findHeads()
	return d, nil
}

// newDispatcher returns a dispatcher whose scheduler and recorder are not
// started.
func newDispatcher(dc DispatcherConfig) *Dispatcher {
	ctx, cancel := context.WithCancel(context.Background())
	d := &Dispatcher{
		w: dc.Worker, recorder: dc.Recorder, log: dc.Log, fixedLease: dc.FixedLease, leaseMargin: dc.LeaseMargin,
		maxBytes: dc.MaxBytes, handedOver: dc.HandedOver,
		records: make(chan queue.FirstAttempt, dc.Queue+dc.Workers),
		heads:   make(chan *Fast, dc.Queue),
		ctx:     ctx, cancel: cancel,
		fair:   newFair(dc.Workers),
		slots:  make(chan struct{}, dc.Workers),
		work:   make(chan picked),
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

// heldBack reports whether t's forwards are left to the queue: t has a
// rate, or the gate holds it back.
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

// queueOf returns the queue of sender's target t. Under d.mu.
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

// Lease returns the leases an ingest should write on its outbox rows. A
// target gets none when it is held back, when a queue is full, when the
// body bytes would pass their bound, or when the dispatcher is closed.
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

// Dispatch queues f's leased forwards, each in its target's queue. It does
// not block: a forward whose queue is full is released to the relay. An
// ordered forward is queued once its row is found to be its key's head
// ([Dispatcher.findHeads]); one behind its head is left to wait.
func (d *Dispatcher) Dispatch(f *Fast) {
	ordered := false
	for i := range f.Targets {
		if f.orderKey(i) != "" && f.Lease.For(i) > 0 {
			ordered = true
		}
	}
	if ordered {
		select {
		case d.heads <- f:
		default:
			// Too many to look at: the heads go to the relay, and the
			// rows behind their heads keep waiting.
			for i, name := range f.Targets {
				if f.orderKey(i) != "" && f.Lease.For(i) > 0 {
					d.handOver(f, name)
				}
			}
		}
	}
	d.enqueue(f, func(i int) (int64, bool) { return 0, f.orderKey(i) == "" })
}

// enqueue queues the leased forwards of f that take says to take, with
// their positions.
func (d *Dispatcher) enqueue(f *Fast, take func(i int) (seq int64, ok bool)) {
	unleased := false
	var released []*config.Target
	d.mu.Lock()
	for i, name := range f.Targets {
		seq, ok := take(i)
		if !ok {
			continue
		}
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
			// Stopping: a relay takes the row when its lease ends.
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
		tq.jobs = append(tq.jobs, fastJob{f: f, target: tq.target, lease: lease, q: tq, key: f.orderKey(i), seq: seq})
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

// handOffLease is the lease to take on the next forward of an ordered key
// to t whose head this process ended, or 0 when the relay should take it:
// the dispatcher is closed, full, or holds the target back.
func (d *Dispatcher) handOffLease(sender string, t *config.Target) time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed || d.queued >= d.maxQueued || len(d.queueOf(sender, t).jobs) >= d.perTarget || d.heldBack(sender, t) {
		return 0
	}
	return d.leaseFor(t)
}

// takeHandedOff queues the ordered forwards that a recording handed off to
// this process: each is its key's head, leased to it. One it cannot queue
// is released to the relay.
// granted is when the recording began: its leases began after.
func (d *Dispatcher) takeHandedOff(handed []store.HandedOff, granted time.Time) {
	if len(handed) == 0 {
		return
	}
	cfg := d.w.senders.Current()
	for _, h := range handed {
		sd, ok := cfg.Sender(h.Sender)
		if !ok {
			d.handOver(&Fast{Sender: &config.Sender{Name: h.Sender}, EventID: h.EventID}, h.Target)
			continue
		}
		t, ok := sd.Target(h.Target)
		if !ok {
			d.handOver(&Fast{Sender: sd, EventID: h.EventID}, h.Target)
			continue
		}
		f := &Fast{Sender: sd, EventID: h.EventID, DeliveryID: h.DeliveryID, EventType: h.EventType, Headers: h.Headers, Body: h.Body,
			Targets: []string{h.Target}, OrderKeys: []string{h.OrderKey},
			Lease: Lease{granted: granted, Durations: []time.Duration{d.leaseFor(t)}}}
		d.enqueue(f, func(int) (int64, bool) { return h.Seq, true })
	}
}

// maxHeadsBatch bounds the deliveries whose ordered rows one look reads.
const maxHeadsBatch = 256

// findHeads looks, for the deliveries on heads, which of their ordered
// rows are their keys' heads with this process's lease, one round trip per
// sender and batch, and queues those. A row behind its head waits for the
// forward before it to end. When the look fails, the leased heads go to
// the relay when their lease ends. It returns when the dispatcher stops.
func (d *Dispatcher) findHeads() {
	defer d.rec.Done()
	for {
		var batch []*Fast
		select {
		case f := <-d.heads:
			batch = append(batch, f)
		case <-d.ctx.Done():
			return
		}
	fill:
		for len(batch) < maxHeadsBatch {
			select {
			case f := <-d.heads:
				batch = append(batch, f)
			default:
				break fill
			}
		}
		bySender := map[string][]*Fast{}
		for _, f := range batch {
			bySender[f.Sender.Name] = append(bySender[f.Sender.Name], f)
		}
		for sender, fs := range bySender {
			var (
				events  []uuid.UUID
				targets []string
			)
			for _, f := range fs {
				for i, name := range f.Targets {
					if f.orderKey(i) != "" && f.Lease.For(i) > 0 {
						events, targets = append(events, f.EventID), append(targets, name)
					}
				}
			}
			ctx, cancel := context.WithTimeout(d.ctx, 5*time.Second)
			heads, err := store.New(d.w.db).OrderedHeads(ctx, sender, events, targets)
			cancel()
			if err != nil {
				d.log.Warn("fast path: could not read which ordered forwards are their keys' heads; the relay takes the heads when their lease ends",
					"sender", sender, "forwards", len(events), "err", err)
				continue
			}
			for _, f := range fs {
				d.enqueue(f, func(i int) (int64, bool) {
					if f.orderKey(i) == "" {
						return 0, false
					}
					seq, ok := heads[store.ForwardRef{EventID: f.EventID, Target: f.Targets[i]}]
					return seq, ok
				})
			}
		}
	}
}

// wake tells the scheduler to look again, without blocking.
func (d *Dispatcher) wake() {
	select {
	case d.kick <- struct{}{}:
	default: // a signal is pending already
	}
}

// handOver releases a forward's outbox row to the relay. It never blocks;
// a row it cannot release stays leased until its lease ends.
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

// picked is a forward that schedule picked, with its ticket.
type picked struct {
	j  fastJob
	tk Ticket
}

// start hands p to an idle attempt worker, or to a new one when none is
// idle. Workers live on: a goroutine per attempt grew its stack at every
// attempt, about 2 µs of copying per forward. There are at most as many
// workers as slots, since each holds a slot while it attempts; one that
// just gave its slot back may not be idle yet, and start then waits for
// it.
func (d *Dispatcher) start(p picked) {
	select {
	case d.work <- p:
		return
	default:
	}
	if d.workers < cap(d.slots) {
		d.workers++
		d.running.Add(1)
		go d.attempts(p)
		return
	}
	d.work <- p
}

// attempts is an attempt worker: it attempts p, then each forward that
// start hands it, until schedule ends.
func (d *Dispatcher) attempts(p picked) {
	defer d.running.Done()
	for ok := true; ok; p, ok = <-d.work {
		d.attempt(p.j, p.tk)
		d.fair.release(&p.j.q.share)
		<-d.slots
		d.wake()
	}
}

// schedule starts the queued attempts, one per free worker, until the
// dispatcher is closed and its queues are empty.
func (d *Dispatcher) schedule() {
	defer d.running.Done()
	defer close(d.work) // the workers end once their attempts have
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
				d.start(picked{j, tk})
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

// pick takes the next forward to attempt, serving the targets in turn. It
// hands to the queue the forwards that no longer fit their lease, and
// those of a target held back. When it finds none, wait is how long until
// it looks again. done reports that nothing is left to do.
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
			// A reload removed its target: the queue holds its forwards.
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

// current updates tq's target from the configuration in force, since a
// reload may have changed it. It returns false when the target is gone.
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

// left returns how long j may still take within its lease, and how long
// its attempt needs.
func (d *Dispatcher) left(j fastJob, now time.Time) (left, need time.Duration) {
	margin := min(recordMargin, j.lease/3)
	left = j.f.Lease.granted.Add(j.lease).Sub(now) - margin
	need = time.Duration(j.target.Timeout)
	if j.lease-margin < need {
		need = min(time.Second, j.lease-margin)
	}
	return left, need
}

// attempt sends one admitted forward and queues its outcome for recording.
func (d *Dispatcher) attempt(j fastJob, tk Ticket) {
	f, t := j.f, j.target
	defer d.bytes.Add(-int64(len(f.Body)))
	// The attempt and its recording must end before the lease does.
	left, _ := d.left(j, time.Now())
	a := queue.Args{Sender: f.Sender.Name, EventID: f.EventID, Target: t.Name, DeliveryID: f.DeliveryID}
	attemptedAt := time.Now().UTC()
	p := d.w.post(d.ctx, t, a, f.EventType, f.Headers, f.Body, f.Parsed, max(left, time.Millisecond))
	snooze := tk.Done(d.ctx, p.res, p.pause, errText(p.err))
	o := queue.FirstAttempt{Sender: a.Sender, EventID: a.EventID, Target: a.Target, MaxAttempts: t.MaxAttempts, AttemptedAt: attemptedAt,
		OrderKey: j.key, Seq: j.seq, New: f.New}
	if j.key != "" {
		o.MaxAttempts = queue.OrderedMaxAttempts(t.MaxAttempts)
		o.OnFailure = config.OnFailureSkip
		if t.Ordering != nil {
			o.OnFailure = t.Ordering.OnFailure
		}
		// The key's next forward comes back to this process, to be
		// attempted at once, unless it could not take it now.
		o.HandOff = d.handOffLease(f.Sender.Name, t)
	}
	if p.status != 0 || p.res == ResultDelivered {
		o.Output = p.output()
	}
	// The attempt's answer goes in the outcome's batch: no round trip of
	// its own.
	o.Answer = p.answer(t, a, attemptedAt, cause{why: store.CauseFirst, attempt: 1})
	now := time.Now().UTC()
	switch {
	case p.res == ResultDelivered:
		o.State, o.FinalizedAt, o.ScheduledAt = queue.StateDelivered, &p.at, attemptedAt
		d.delivered.Inc()
	case p.res == ResultNone && !p.final && j.key != "":
		// Cut short, as the process stops: the request may still be under
		// way at the target. The row keeps its lease, which outlasts the
		// target's timeout, so the key's next attempt cannot overlap it.
		d.count.WithLabelValues("handed_over").Inc()
		return
	case p.res == ResultNone && !p.final:
		// No verdict: nothing to record.
		d.count.WithLabelValues("handed_over").Inc()
		o = queue.FirstAttempt{Sender: a.Sender, EventID: a.EventID, Target: a.Target, Release: true}
	default:
		o.Error, o.ScheduledAt = p.err.Error(), now
		switch {
		case p.final:
			o.State, o.FailedAtOnce, o.FinalizedAt = queue.StateFailed, true, &now
			d.count.WithLabelValues("failed").Inc()
		case t.MaxAttempts <= 1:
			o.State, o.FinalizedAt = queue.StateFailed, &now
			d.count.WithLabelValues("failed").Inc()
		default:
			// Schedule the retry as the queue would, or as a failed probe says.
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

// record writes outcomes in batches until records is closed. Batches grow
// with the load. Every batch is built in the same array, cleared after its
// flush: an outcome is a few hundred bytes, and a new slice per batch,
// grown by append, made about a kilobyte of garbage per forward.
// [FirstAttemptRecorder] keeps nothing of a batch after its call.
func (d *Dispatcher) record() {
	defer d.rec.Done()
	linger := time.NewTimer(recordLinger)
	buf := make([]queue.FirstAttempt, 0, recordBatch)
	for {
		o, ok := <-d.records
		if !ok {
			return
		}
		batch := append(buf[:0], o)
		// The next forward of an ordered key waits for this recording:
		// a batch with the end of one lingers less.
		short := o.OrderKey != ""
		linger.Reset(lingerFor(short))
	fill:
		for len(batch) < recordBatch {
			select {
			case o, ok := <-d.records:
				if !ok {
					break fill
				}
				batch = append(batch, o)
				if !short && o.OrderKey != "" {
					short = true
					if !linger.Stop() {
						<-linger.C
					}
					linger.Reset(lingerFor(short))
				}
			case <-linger.C:
				break fill
			}
		}
		linger.Stop()
		d.flush(batch)
		clear(batch) // drops the answers' headers and bodies
	}
}

// lingerFor is how long a recording waits for more outcomes: less when an
// ordered key's next forward waits for it.
func lingerFor(ordered bool) time.Duration {
	if ordered {
		return orderedLinger
	}
	return recordLinger
}

// flush records a batch, trying again for up to recordPersist. A short
// database outage then loses no outcome. Rows it cannot record stay
// leased, and the relay takes them when their lease ends.
func (d *Dispatcher) flush(batch []queue.FirstAttempt) {
	var err error
	deadline := time.Now().Add(recordPersist)
	batch[0].Mark = time.Now() // the same on every try: see queue.FirstAttempt.Mark
	for try := 0; ; try++ {
		ctx, cancel := context.WithTimeout(context.Background(), recordTimeout)
		var handed []store.HandedOff
		start := time.Now()
		handed, err = d.recorder.RecordFirstAttempts(ctx, batch)
		cancel()
		d.takeHandedOff(handed, start) // also those of senders recorded before an error
		if err == nil {
			for _, o := range batch {
				// Rows released to the relay, or an ordered forward's end
				// that may have released the next of its key to it: tell it.
				if o.Release || o.OrderKey != "" && o.HandOff <= 0 {
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

// Close stops the dispatcher. Queued and running forwards finish and are
// recorded; at ctx's end they are cancelled and released. It returns an
// error when ctx cut attempts short. Later calls return the first's result.
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
