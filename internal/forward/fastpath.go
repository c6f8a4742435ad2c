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
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river/rivertype"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/store"
)

// The fast path (issue 18): most forwards succeed at their first attempt,
// and the process that committed a delivery still holds its body and
// headers. That process leases the delivery's outbox rows in the ingest
// transaction (QueueOutbox with Dispatcher.Lease's duration), and right
// after COMMIT hands the forwards to its Dispatcher, which POSTs them
// through a bounded set of goroutines, admitted by the same per-target
// limiter as the River worker of the process (max_in_flight, breaker,
// Retry-After pauses), and records the outcomes in batches: one statement
// per batch and sender deletes the outbox rows and inserts their River
// jobs already finished (completed, or retryable or failed after a failed
// attempt; riverjob.go), so that the operator API, the metrics, the
// console and redelivery see them like any other forward.
//
// Until the outcome is recorded, the outbox row is the durable promise. A
// forward the dispatcher cannot take (its queue is full, the target's
// limiter refuses it, the process is stopping) is released (its lease
// cleared) for the relay to move into River at once; a crash, or a
// recording that fails, leaves the row leased until the lease ends, and
// the relay then moves it into River. The only window in which a forward
// can be repeated is between the target's 2xx and the recording's COMMIT;
// the repeat carries the same Idempotency-Key.

// Defaults of the fast path.
const (
	// DefaultDispatchWorkers is how many fast-path forwards a process runs at
	// once.
	DefaultDispatchWorkers = 64
	// DefaultDispatchQueue is how many fast-path forwards may wait for a
	// dispatch worker; more are left to the relay.
	DefaultDispatchQueue = 1024
	// DefaultDispatchBytes bounds the bytes of bodies the fast path holds
	// (queued and in flight, a body counted once per target): past it,
	// forwards are left to the relay, which reads them from the database.
	// The ingest body budget no longer covers a body once its delivery is
	// answered, so without it a burst of large bodies to slow targets would
	// hold up to DefaultDispatchQueue bodies of max_body_bytes each.
	DefaultDispatchBytes = 64 << 20
	// recordMargin is the part of the lease kept for recording the outcome
	// after the attempt's timeout (a third of a shorter lease).
	recordMargin = 5 * time.Second
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
	// recordRetries is how often a failed recording is tried again before
	// its rows are left to the relay at the end of their lease.
	recordRetries = 3
)

// DefaultLease returns the default lease of the fast path's outbox rows for
// cfg: the longest target timeout plus 10s, at least 15s. A crash leaves a
// forward waiting that long before the relay takes it.
func DefaultLease(cfg *config.Config) time.Duration {
	longest := time.Duration(0)
	for _, s := range cfg.Senders {
		for _, t := range s.Forward {
			longest = max(longest, time.Duration(t.Timeout))
		}
	}
	return max(longest+10*time.Second, 15*time.Second)
}

// Lease is what Dispatcher.Lease grants an ingest: the lease to write on
// its outbox rows (zero: none), and when it was granted.
type Lease struct {
	Duration time.Duration
	granted  time.Time
}

// Fast is a committed delivery whose forwards the fast path attempts.
type Fast struct {
	Sender     *config.Sender
	EventID    uuid.UUID
	DeliveryID string
	// Headers and Body are the event's, as stored.
	Headers http.Header
	Body    []byte
	// Targets are the names of the targets its outbox rows were written for.
	Targets []string
	Lease   Lease
}

// fastJob is one forward of a Fast.
type fastJob struct {
	f      *Fast
	target *config.Target
}

// Dispatcher is the fast path of one process. Its methods are safe for
// concurrent use.
type Dispatcher struct {
	w       *Worker
	gate    *Gate
	db      *pgxpool.Pool
	log     *slog.Logger
	lease   time.Duration
	queue   chan fastJob
	records chan store.FirstAttempt
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

	mu      sync.RWMutex // held to send on queue; Close takes it to close it
	closed  bool
	workers sync.WaitGroup
	rec     sync.WaitGroup

	closeOnce sync.Once
	closeErr  error
}

// DispatcherConfig configures a Dispatcher. Zero means zero
// (docs/configuration.md): no field is defaulted from a 0, and validate
// refuses one; DefaultDispatcherConfig has the defaults.
type DispatcherConfig struct {
	// Lease is how long the fast path holds a forward's outbox row before
	// the relay may take it (DefaultLease).
	Lease time.Duration
	// Workers is how many forwards the fast path attempts at once
	// (DefaultDispatchWorkers).
	Workers int
	// Queue is how many forwards may wait for a worker; more are left to
	// the relay (DefaultDispatchQueue).
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
}

// DefaultDispatcherConfig returns the fast path's defaults for cfg (its
// lease depends on the targets' timeouts: DefaultLease).
func DefaultDispatcherConfig(cfg *config.Config) DispatcherConfig {
	return DispatcherConfig{Lease: DefaultLease(cfg), Workers: DefaultDispatchWorkers, Queue: DefaultDispatchQueue, MaxBytes: DefaultDispatchBytes}
}

// validate returns an error naming the fields at fault, or nil.
func (c DispatcherConfig) validate() error {
	var errs []error
	if c.Lease <= 0 {
		errs = append(errs, fmt.Errorf("dispatcher config: Lease %s: must be positive (DefaultDispatcherConfig computes it)", c.Lease))
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
	return errors.Join(errs...)
}

// NewDispatcher returns the fast path of a process whose River worker is w
// (its HTTP client, metrics, backoff and Gate are shared, so that the
// gate's fair shares, max_in_flight, breakers and pauses hold across both):
// dc.Workers goroutines attempt the forwards that a queue of dc.Queue
// holds, and their outcomes are recorded in db. Rows are leased for
// dc.Lease. reg receives hookgate_forward_fast_path_total. Close stops it.
// It returns an error, naming the field, when dc is invalid.
func NewDispatcher(w *Worker, db *pgxpool.Pool, dc DispatcherConfig, reg prometheus.Registerer, log *slog.Logger) (*Dispatcher, error) {
	if err := dc.validate(); err != nil {
		return nil, err
	}
	lease, workers, queue := dc.Lease, dc.Workers, dc.Queue
	ctx, cancel := context.WithCancel(context.Background())
	d := &Dispatcher{
		w: w, gate: w.gate, db: db, log: log, lease: lease, maxBytes: dc.MaxBytes, handedOver: dc.HandedOver,
		queue: make(chan fastJob, queue), records: make(chan store.FirstAttempt, queue+workers),
		ctx: ctx, cancel: cancel,
		count: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookgate_forward_fast_path_total",
			Help: "Forwards offered to the fast path (attempted right after the ingest COMMIT by the process that accepted them), by result: delivered, retry (failed, handed to River), failed, handed_over (not attempted: the dispatcher was full, the target's limits refused it, or the process was stopping), unrecorded (the outcome could not be recorded: the relay takes the row when its lease ends).",
		}, []string{"result"}),
	}
	reg.MustRegister(d.count)
	d.delivered = d.count.WithLabelValues("delivered")
	d.workers.Add(workers)
	for range workers {
		go d.work()
	}
	d.rec.Add(1)
	go d.record()
	return d, nil
}

// Lease returns the lease an ingest with forwards to n targets and a body
// of size bytes should write on its outbox rows: none when the
// dispatcher's queue is full, its body bytes would pass their bound, or it
// is closed (the relay then takes them at once).
func (d *Dispatcher) Lease(n, size int) Lease {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.closed || len(d.queue) >= cap(d.queue) || d.bytes.Load()+int64(n)*int64(size) > d.maxBytes {
		d.count.WithLabelValues("handed_over").Add(float64(n))
		return Lease{}
	}
	return Lease{Duration: d.lease, granted: time.Now()}
}

// Dispatch attempts f's forwards, whose outbox rows are leased with
// f.Lease and committed. It does not block: a forward that finds the queue
// full is released to the relay. With a zero lease (Lease found no room),
// the committed rows are the relay's: Dispatch only tells it.
func (d *Dispatcher) Dispatch(f *Fast) {
	if f.Lease.Duration <= 0 {
		d.wakeRelay()
		return
	}
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.closed {
		// Stopping: the rows stay leased, and the relay of a running
		// process takes them when the lease ends.
		return
	}
	for _, name := range f.Targets {
		t, ok := f.Sender.Target(name)
		if !ok {
			d.handOver(f, name)
			continue
		}
		size := int64(len(f.Body))
		if d.bytes.Add(size) > d.maxBytes {
			d.bytes.Add(-size)
			d.handOver(f, name)
			continue
		}
		select {
		case d.queue <- fastJob{f: f, target: t}:
		default:
			d.bytes.Add(-size)
			d.handOver(f, name)
		}
	}
}

// handOver releases a forward's outbox row to the relay. It never blocks:
// when the recorder is that far behind, the row stays leased until its
// lease ends.
func (d *Dispatcher) handOver(f *Fast, target string) {
	d.count.WithLabelValues("handed_over").Inc()
	select {
	case d.records <- store.FirstAttempt{Sender: f.Sender.Name, EventID: f.EventID, Target: target, Release: true}:
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

// work attempts queued forwards until the queue is closed.
func (d *Dispatcher) work() {
	defer d.workers.Done()
	for j := range d.queue {
		d.attempt(j)
	}
}

// attempt POSTs one forward and queues its outcome for recording.
func (d *Dispatcher) attempt(j fastJob) {
	f, t := j.f, j.target
	defer d.bytes.Add(-int64(len(f.Body)))
	// The attempt must end, and its outcome be recorded, before the lease
	// does: after it, the relay may move the row into River.
	left := time.Until(f.Lease.granted.Add(f.Lease.Duration)) - min(recordMargin, f.Lease.Duration/3)
	if left < time.Second || d.ctx.Err() != nil {
		d.handOver(f, t.Name)
		return
	}
	tk, ok, _, why := d.gate.Acquire(f.Sender.Name, t, false) // never attempted
	if !ok {
		// Paused, breaker open, or the target has its share: River's worker
		// holds it back without using an attempt.
		d.w.metrics.waits.WithLabelValues(f.Sender.Name, t.Name, why).Inc()
		d.handOver(f, t.Name)
		return
	}
	a := Args{Sender: f.Sender.Name, EventID: f.EventID, Target: t.Name, DeliveryID: f.DeliveryID}
	attemptedAt := time.Now().UTC()
	p := d.w.post(d.ctx, t, a, f.Headers, f.Body, left)
	snooze := tk.Done(d.ctx, p.res, p.pause, errText(p.err))
	o := store.FirstAttempt{Sender: a.Sender, EventID: a.EventID, Target: a.Target, MaxAttempts: t.MaxAttempts, AttemptedAt: attemptedAt}
	if p.status != 0 {
		o.Output = p.output()
	}
	now := time.Now().UTC()
	switch {
	case p.res == ResultDelivered:
		o.State, o.FinalizedAt, o.ScheduledAt = rivertype.JobStateCompleted, &p.at, attemptedAt
		d.delivered.Inc()
	case p.res == ResultNone && !p.final:
		// No verdict (the process is stopping): nothing to record.
		d.count.WithLabelValues("handed_over").Inc()
		o = store.FirstAttempt{Sender: a.Sender, EventID: a.EventID, Target: a.Target, Release: true}
	default:
		o.Error, o.ScheduledAt = p.err.Error(), now
		switch {
		case p.final:
			o.State, o.FinalizedAt = rivertype.JobStateCancelled, &now
			d.count.WithLabelValues("failed").Inc()
		case o.MaxAttempts <= 1:
			o.State, o.FinalizedAt = rivertype.JobStateDiscarded, &now
			d.count.WithLabelValues("failed").Inc()
		default:
			// As River would schedule the retry (Worker.NextRetry), or when
			// a failed breaker probe says.
			wait := d.w.backoff.delay(1)
			if p.retryAfter > 0 {
				wait = min(max(p.retryAfter, wait), d.w.backoff.Max)
			}
			if snooze > 0 {
				wait = snooze
			}
			o.State, o.ScheduledAt = rivertype.JobStateRetryable, now.Add(wait)
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
		batch := []store.FirstAttempt{o}
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

// flush records a batch, trying again a few times; rows it cannot record
// stay leased, and the relay takes them when their lease ends.
func (d *Dispatcher) flush(batch []store.FirstAttempt) {
	var err error
	for try := range recordRetries {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = store.New(d.db).RecordFirstAttempts(ctx, Queue, batch)
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
		if try < recordRetries-1 {
			time.Sleep(time.Duration(100<<try) * time.Millisecond)
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
	close(d.queue)
	d.mu.Unlock()
	done := make(chan struct{})
	go func() {
		d.workers.Wait()
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
		d.cancel() // running attempts end with no verdict and are released
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
