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
	// rows than a batch: the bound of the time from an ingest COMMIT to its
	// forward's job (half of it on average).
	DefaultRelayInterval = 25 * time.Millisecond
	// DefaultRelayIdleInterval is RelayConfig.IdleInterval in a process
	// whose fast path leases the forwards it accepts (--role all): most of
	// the relay's looks there find every row leased, and the fast path
	// wakes it when it leaves rows to it. A row it is not told of (one
	// accepted by a process without a fast path, one whose lease ended
	// after a crash) waits up to this long more.
	DefaultRelayIdleInterval = 250 * time.Millisecond
	// DefaultRelayStatementTimeout bounds each statement of a sender's look
	// and of its batch's transaction (the take, the jobs' insert, the
	// COMMIT): one that runs longer fails, the rows stay in the outbox, and
	// the relay tries again.
	DefaultRelayStatementTimeout = 10 * time.Second
	// DefaultRelaySlowAfter is how long a sender's batch (its look, and the
	// transaction that moves its rows) or a whole round may take before the
	// relay logs it at WARN (and counts a batch in
	// hookgate_forward_relay_slow_total): a batch takes milliseconds.
	DefaultRelaySlowAfter = 2 * time.Second
)

// Relay moves forward intents from forward_outbox into River's job table.
// Several relays (one per worker process) may run at once: each takes rows
// with FOR UPDATE SKIP LOCKED, so no row is relayed by two. A relay that dies
// mid-way rolls back, leaving its rows for the next one; the insert into
// River is idempotent on (sender, event, target) while such a job is not
// finished (Args' unique fields), so even a River in another database would
// get each forward once per relay of its row.
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

	// looks counts Run's rounds that ended in a wait (the tests').
	looks atomic.Int64
}

// RelayConfig configures a Relay (NewRelay): its settings and its
// dependencies. Zero means zero (docs/configuration.md): no setting is
// defaulted from a 0, and validate refuses one; DefaultRelayConfig has the
// defaults. Pool, Queue, Senders and Log are required.
type RelayConfig struct {
	// Batch is how many outbox rows one relay transaction moves
	// (DefaultRelayBatch).
	Batch int
	// Interval is how long the relay waits, once the outbox is drained,
	// before it looks again (DefaultRelayInterval).
	Interval time.Duration
	// IdleInterval is how long it waits after a look that moved nothing
	// (at least Interval; DefaultRelayConfig: Interval, the same wait).
	// A signal on Wake ends the wait at once.
	IdleInterval time.Duration
	// Wake, when not nil, ends the relay's wait: the process's fast path
	// signals it when it leaves rows to the relay
	// (DispatcherConfig.HandedOver).
	Wake <-chan struct{}
	// StatementTimeout bounds each statement of a sender's look and of its
	// batch's transaction, set transaction-locally in the look's round trip
	// and in the BEGIN's (DefaultRelayStatementTimeout).
	StatementTimeout time.Duration
	// SlowAfter is how long a sender's batch or a round may take before it
	// is logged at WARN (DefaultRelaySlowAfter).
	SlowAfter time.Duration
	// Distributed: the outbox is a distributed table (Citus) and River's
	// job table a local table of the coordinator, so that a transaction
	// writing both commits on the worker before the coordinator, without
	// two-phase commit, and a coordinator that dies between the two would
	// lose the forwards it took. The relay then inserts a batch's jobs in
	// a transaction that marks its outbox rows recorded (MarkOutbox) and
	// deletes them in one of its own once that has committed
	// (DeleteRecorded): a crash can only leave a row to be relayed again
	// after RecordedGrace. False: the take deletes the rows in the jobs'
	// transaction (one atomic transaction on PostgreSQL).
	Distributed bool
	// RecordedGrace is how long a row marked recorded is left alone before
	// the relay takes it again (store.DefaultRecordedGrace): its delete
	// never came.
	RecordedGrace time.Duration
	// Registerer, when not nil, is where hookgate_forward_relay_slow_total
	// is registered (a relay counts without one).
	Registerer prometheus.Registerer

	// Pool is the database of the outbox.
	Pool *pgxpool.Pool
	// Queue is where the forwards are enqueued, in the transaction that
	// takes them from the outbox (queue.River).
	Queue queue.Queue
	// Senders is the senders' configuration: the senders whose outbox rows
	// the relay looks for first (and the stray ones of senders no longer
	// configured, less often), read at each round (a *config.Config, or
	// the process's sender.Live).
	Senders config.Source
	// Log is where slow and failed relays are logged.
	Log *slog.Logger
}

// DefaultRelayConfig returns the relay's defaults.
func DefaultRelayConfig() RelayConfig {
	return RelayConfig{Batch: DefaultRelayBatch, Interval: DefaultRelayInterval, IdleInterval: DefaultRelayInterval,
		StatementTimeout: DefaultRelayStatementTimeout, SlowAfter: DefaultRelaySlowAfter, RecordedGrace: store.DefaultRecordedGrace}
}

// validate returns an error naming the field at fault, or nil: the
// settings, and the dependencies NewRelay requires.
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

// NewRelay returns a relay of cfg.Pool's outbox into cfg.Queue for the
// senders of cfg.Senders, configured by cfg; an error naming the field when
// cfg is invalid or lacks a dependency.
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

// strayEvery is how often the relay looks for outbox rows of senders the
// configuration no longer names (written before a restart that removed
// them, or by a process of another configuration), which it relays like
// the others: in its first round, and then this rarely. The look reads
// every sender's rows (on Citus, every shard: the one relay statement that
// names no sender, docs/distributed.md); every other statement names its
// sender.
const strayEvery = 5 * time.Minute

// Once relays, sender by sender, one batch of each sender in a transaction
// of its own (one shard each when the tables are distributed by sender),
// and returns how many rows it moved: 0 when the outbox had none that no
// other relay held.
func (r *Relay) Once(ctx context.Context) (int, error) {
	n, _, err := r.once(ctx)
	return n, err
}

// once is Once, also telling whether some sender filled its batch.
func (r *Relay) once(ctx context.Context) (moved int, full bool, err error) {
	senders, err := r.senders(ctx)
	if err != nil {
		return 0, false, err
	}
	var (
		errs     []error
		start    = time.Now()
		slowSeen bool
	)
	for _, sender := range senders {
		began := time.Now()
		n, err := r.onceSender(ctx, sender)
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
		r.log.Warn("forward relay round slow", "senders", len(senders), "duration", d, "moved", moved)
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

// onceSender relays one batch of sender's rows in one transaction, when
// it has any to take (a look first, without a transaction). The look and
// every statement of the transaction run under the statement timeout: the
// look's set in its own batch (WithStatementTimeout), the transaction's in
// the round trip of its BEGIN, so that it also bounds the first parse of a
// statement on a connection (pgx prepares it in a round trip of its own,
// and the parse takes the table's lock). In the split form (Distributed)
// the transaction marks the rows and the delete that follows its COMMIT
// runs under the same timeout.
func (r *Relay) onceSender(ctx context.Context, sender string) (int, error) {
	if waiting, err := store.New(r.pool).WithStatementTimeout(r.timeout).OutboxWaiting(ctx, sender, r.grace); err != nil || !waiting {
		return 0, err
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
			forwards = append(forwards, queue.NewForward{Sender: o.Sender, Target: o.Target, EventID: o.EventID, DeliveryID: o.DeliveryID})
		}
		_, err = r.queue.Enqueue(ctx, tx, forwards)
		return err
	})
	if err != nil {
		return 0, err
	}
	if r.split {
		// The jobs have committed: the rows can go. A failure here leaves
		// them marked, for the relay to take again after the grace (River
		// inserts no second job while the first is unfinished).
		if err := store.New(r.pool).WithStatementTimeout(r.timeout).DeleteRecorded(ctx, sender, taken, at); err != nil {
			return len(taken), err
		}
	}
	return len(taken), nil
}

// Run relays until ctx is done: batch after batch while the outbox is full,
// then every interval, or every idle interval after a look that moved
// nothing (a signal on Wake ends that wait). A failing batch is logged and
// tried again after a pause that doubles up to 5s; nothing is lost, the
// rows stay in the outbox.
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
