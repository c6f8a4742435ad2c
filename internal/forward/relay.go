package forward

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/queue"
	"github.com/hookgate/hookgate/internal/store"
)

// Defaults of the relay.
const (
	// DefaultRelayBatch is how many outbox rows one relay transaction moves.
	DefaultRelayBatch = 500
	// DefaultRelayInterval is how long the relay waits after finding fewer
	// rows than a batch. It bounds the time from an ingest to its job.
	DefaultRelayInterval = 25 * time.Millisecond
	// DefaultRelayIdleInterval is the relay's idle wait in a process with a
	// fast path. The fast path wakes the relay when it leaves rows to it.
	// Other rows wait up to this long more.
	DefaultRelayIdleInterval = 250 * time.Millisecond
	// DefaultRelayStatementTimeout bounds each statement of the relay. A
	// statement that runs longer fails, and the relay tries again.
	DefaultRelayStatementTimeout = 10 * time.Second
	// DefaultRelaySlowAfter is how long a batch or a round may take before
	// the relay logs it and counts it as slow. A batch takes milliseconds.
	DefaultRelaySlowAfter = 2 * time.Second
)

// Relay moves forwards from forward_outbox into the job queue. Several
// relays may run at once: each takes rows with FOR UPDATE SKIP LOCKED. A
// relay that dies mid-way rolls back and leaves its rows for the next one.
// The queue inserts no second job for a forward whose job is unfinished.
type Relay struct {
	pool     *pgxpool.Pool
	queue    queue.Queue
	config   config.Source
	log      *slog.Logger
	batch    int
	interval time.Duration
	idle     time.Duration
	wake     <-chan struct{}
	timeout  time.Duration // each statement's (RelayConfig.StatementTimeout)
	split    bool          // RelayConfig.Distributed
	grace    time.Duration // RelayConfig.RecordedGrace
	slowAt   time.Duration // RelayConfig.SlowAfter
	slow     prometheus.Counter

	mu      sync.Mutex
	strayAt time.Time // when senders last looked for stray senders

	// looks counts Run's rounds that ended in a wait, for tests.
	looks atomic.Int64
}

// RelayConfig configures a [Relay]. A zero setting is refused, not
// defaulted; [DefaultRelayConfig] has the defaults. Pool, Queue, Senders
// and Log are required.
type RelayConfig struct {
	// Batch is how many outbox rows one transaction moves.
	Batch int
	// Interval is the wait once the outbox is drained.
	Interval time.Duration
	// IdleInterval is the wait after a look that moved nothing. It is at
	// least Interval.
	IdleInterval time.Duration
	// Wake, when not nil, ends the relay's wait. The fast path signals it
	// when it leaves rows to the relay.
	Wake <-chan struct{}
	// StatementTimeout bounds each statement of a look and of a batch.
	StatementTimeout time.Duration
	// SlowAfter is how long a batch or a round may take before a warning.
	SlowAfter time.Duration
	// Distributed says the outbox is distributed by Citus while the job
	// table is local. One transaction writing both is then not atomic. So
	// the relay marks the rows in the jobs' transaction, and deletes them
	// in a second one. A crash can only relay a row again after
	// RecordedGrace.
	Distributed bool
	// RecordedGrace is how long a row marked recorded is left alone before
	// the relay takes it again.
	RecordedGrace time.Duration
	// Registerer, when not nil, receives hookgate_forward_relay_slow_total.
	Registerer prometheus.Registerer

	// Pool is the database of the outbox.
	Pool *pgxpool.Pool
	// Queue enqueues the forwards in the transaction that takes them.
	Queue queue.Queue
	// Senders is the configuration in force, read at each round.
	Senders config.Source
	// Log is where slow and failed relays are logged.
	Log *slog.Logger
}

// DefaultRelayConfig returns the relay's defaults.
func DefaultRelayConfig() RelayConfig {
	return RelayConfig{Batch: DefaultRelayBatch, Interval: DefaultRelayInterval, IdleInterval: DefaultRelayInterval,
		StatementTimeout: DefaultRelayStatementTimeout, SlowAfter: DefaultRelaySlowAfter, RecordedGrace: store.DefaultRecordedGrace}
}

// validate returns an error naming the field at fault, or nil.
func (c RelayConfig) validate() error {
	if c.Batch < 1 {
		return fmt.Errorf("relay batch %d: must be at least 1", c.Batch)
	}
	if c.Interval <= 0 {
		return fmt.Errorf("relay interval %s: must be positive", c.Interval)
	}
	if c.IdleInterval < c.Interval {
		return fmt.Errorf("relay idle interval %s: must be at least the interval %s", c.IdleInterval, c.Interval)
	}
	if c.StatementTimeout < time.Millisecond {
		return fmt.Errorf("relay statement timeout %s: must be at least 1ms", c.StatementTimeout)
	}
	if c.SlowAfter <= 0 {
		return fmt.Errorf("relay slow-after %s: must be positive", c.SlowAfter)
	}
	if c.RecordedGrace < time.Millisecond {
		return fmt.Errorf("relay recorded grace %s: must be at least 1ms", c.RecordedGrace)
	}
	var errs []error
	if c.Pool == nil {
		errs = append(errs, errors.New("relay config: Pool: nil: the database of the outbox is required"))
	}
	if c.Queue == nil {
		errs = append(errs, errors.New("relay config: Queue: nil: the queue forwards are enqueued in is required"))
	}
	if c.Senders == nil {
		errs = append(errs, errors.New("relay config: Senders: nil: the senders' configuration is required"))
	}
	if c.Log == nil {
		errs = append(errs, errors.New("relay config: Log: nil: a logger is required"))
	}
	return errors.Join(errs...)
}

// NewRelay returns a relay of cfg.Pool's outbox into cfg.Queue. It returns
// an error naming the field when cfg is invalid.
func NewRelay(cfg RelayConfig) (*Relay, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	slow := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "hookgate_forward_relay_slow_total",
		Help: "Relay batches (one sender's look, and the transaction that moves its outbox rows into River) that took longer than the relay's slow threshold (2s by default).",
	})
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(slow); err != nil {
			are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err)
			if !ok {
				return nil, fmt.Errorf("register the relay's metric: %w", err)
			}
			slow = are.ExistingCollector.(prometheus.Counter) // another relay of the process
		}
	}
	return &Relay{pool: cfg.Pool, queue: cfg.Queue, config: cfg.Senders, log: cfg.Log, batch: cfg.Batch, interval: cfg.Interval, idle: cfg.IdleInterval, wake: cfg.Wake,
		timeout: cfg.StatementTimeout, slowAt: cfg.SlowAfter, slow: slow, split: cfg.Distributed, grace: cfg.RecordedGrace}, nil
}

// strayEvery is how often the relay looks for rows of senders the
// configuration no longer names. That look reads every shard on Citus, so
// it runs rarely.
const strayEvery = 5 * time.Minute

// Once relays one batch of each sender, each in its own transaction. It
// returns how many rows it moved.
func (r *Relay) Once(ctx context.Context) (int, error) {
	n, _, err := r.once(ctx)
	return n, err
}

// once is Once, and also reports whether some sender filled its batch.
func (r *Relay) once(ctx context.Context) (moved int, full bool, err error) {
	start := time.Now()
	senders, err := r.senders(ctx)
	if err != nil {
		return 0, false, err
	}
	looked, all := false, len(senders)
	if !r.split {
		// One statement looks at every sender: an idle round costs one
		// round trip, not one per sender (500 senders looked four times a
		// second made 2,000 statements a second in an idle process).
		// On Citus, that statement would run on every shard.
		// A slow look shows in the round's time.
		if senders, err = store.New(r.pool).WithStatementTimeout(r.timeout).OutboxSendersWaiting(ctx, senders, r.grace); err != nil {
			return 0, false, err
		}
		looked = true
	}
	var (
		errs     []error
		slowSeen bool
	)
	for _, sender := range senders {
		began := time.Now()
		n, err := r.onceSender(ctx, sender, looked)
		if d := time.Since(began); d > r.slowAt {
			slowSeen = true
			r.slow.Inc()
			attrs := []any{"sender", sender, "duration", d, "moved", n}
			if err != nil {
				attrs = append(attrs, "err", err)
			}
			r.log.Warn("forward relay batch slow", attrs...)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("sender %s: %w", sender, err))
			continue
		}
		moved += n
		full = full || n == r.batch
	}
	if d := time.Since(start); d > r.slowAt && !slowSeen {
		r.log.Warn("forward relay round slow", "senders", all, "duration", d, "moved", moved)
	}
	return moved, full, errors.Join(errs...)
}

// senders returns the configured senders, and every strayEvery also the
// senders with outbox rows that the configuration does not name.
func (r *Relay) senders(ctx context.Context) ([]string, error) {
	cfg := r.config.Current()
	names := make([]string, 0, len(cfg.Senders))
	for i := range cfg.Senders {
		names = append(names, cfg.Senders[i].Name)
	}
	r.mu.Lock()
	due := time.Since(r.strayAt) >= strayEvery
	if due {
		r.strayAt = time.Now()
	}
	r.mu.Unlock()
	if !due {
		return names, nil
	}
	stray, err := store.New(r.pool).OutboxSenders(ctx, names)
	if err != nil {
		return nil, err
	}
	return append(names, stray...), nil
}

// onceSender relays one batch of sender's rows in one transaction, after a
// look finds some: its own, unless looked says that the round's look
// found them. The timeout is set in BEGIN's round trip, so it also bounds
// the first parse of a statement, which takes the table's lock.
func (r *Relay) onceSender(ctx context.Context, sender string, looked bool) (int, error) {
	if !looked {
		if waiting, err := store.New(r.pool).WithStatementTimeout(r.timeout).OutboxWaiting(ctx, sender, r.grace); err != nil || !waiting {
			return 0, err
		}
	}
	var (
		taken []store.OutboxRow
		at    = time.Now().UTC().Truncate(time.Microsecond) // the mark of the split form; PostgreSQL keeps microseconds
	)
	begin := pgx.TxOptions{BeginQuery: fmt.Sprintf("BEGIN; SET LOCAL statement_timeout = %d", max(r.timeout.Milliseconds(), 1))}
	err := pgx.BeginTxFunc(ctx, r.pool, begin, func(tx pgx.Tx) error {
		var err error
		if r.split {
			taken, err = store.New(tx).MarkOutbox(ctx, sender, r.batch, r.grace, at)
		} else {
			taken, err = store.New(tx).TakeOutbox(ctx, sender, r.batch, r.grace)
		}
		if err != nil {
			return err
		}
		forwards := make([]queue.NewForward, 0, len(taken))
		for _, o := range taken {
			forwards = append(forwards, queue.NewForward{Sender: o.Sender, Target: o.Target, EventID: o.EventID, DeliveryID: o.DeliveryID, OrderKey: o.OrderKey, Seq: o.Seq})
		}
		_, err = r.queue.Enqueue(ctx, tx, forwards)
		return err
	})
	if err != nil {
		return 0, err
	}
	if r.split {
		// The jobs have committed. A failed delete leaves the rows marked,
		// to be taken again after the grace.
		if err := store.New(r.pool).WithStatementTimeout(r.timeout).DeleteRecorded(ctx, sender, taken, at); err != nil {
			return len(taken), err
		}
	}
	return len(taken), nil
}

// Run relays until ctx is done. It moves batch after batch while the
// outbox is full, then waits an interval. A failing batch is logged and
// tried again after a pause that doubles up to 5s. The rows stay in the
// outbox meanwhile.
func (r *Relay) Run(ctx context.Context) {
	pause := r.interval
	for {
		moved, full, err := r.once(ctx)
		wait := r.interval
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			r.log.Warn("forward relay failed; its outbox rows stay for the next try", "err", err, "retry_in", pause)
			pause = min(pause*2, 5*time.Second)
			wait = pause
		case full:
			pause = r.interval
			continue
		case moved == 0:
			pause, wait = r.interval, r.idle
		default:
			pause = r.interval
		}
		r.looks.Add(1)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		case <-r.wake: // a nil channel never receives
			t.Stop()
		}
	}
}
