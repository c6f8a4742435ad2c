// Package retention deletes what hookgate no longer needs to remember:
// expired delivery keys, old events, the fast path's old delivered
// forwards, signature tokens past their tolerance, and the audit trail's
// old rows. Once its key is
// deleted, a delivery ID is accepted as new.
//
// It runs as the job queue's maintenance job, see [Worker.Maintenance].
// One replica at a time does the work, in small batches, so that no long
// lock blocks ingestion.
package retention

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/queue"
	"github.com/hookgate/hookgate/internal/sigtoken"
	"github.com/hookgate/hookgate/internal/store"
)

// Defaults of the retention job.
const (
	DefaultInterval = time.Minute
	// DefaultAuditRetention is how long the audit trail keeps a row.
	DefaultAuditRetention = 90 * 24 * time.Hour
	// BatchSize is how many rows one statement deletes at most.
	BatchSize = 1000
)

// Result counts what one run deleted.
type Result struct {
	Keys   int64
	Events int64
	// Forwards counts the fast path's delivered forwards. River deletes
	// its own finished jobs.
	Forwards int64
	Tokens   int64
	// Audit counts the audit trail's rows.
	Audit int64
	// OrderKeys counts the ordering keys idle for [IdleOrderKeyKept].
	OrderKeys int64
}

// IdleOrderKeyKept is how long an ordered target's key with nothing
// waiting is kept after its last change. A key that comes back later
// starts a new sequence.
const IdleOrderKeyKept = 24 * time.Hour

// forgetAll is the cutoff after now for a sender no longer configured.
// No tolerance is this long, so all its tokens go.
const forgetAll = 100 * 365 * 24 * time.Hour

// Run deletes what has expired at now, in batches of [BatchSize], until
// none is left or ctx ends. It returns what it deleted, also on error.
//
// Run also looks for the rows of senders no longer configured.
// [Worker.Work] does that only every [StrayEvery].
// The audit trail keeps [DefaultAuditRetention].
func Run(ctx context.Context, db store.DB, forwards DeliveredForwards, cfg *config.Config, now time.Time) (Result, error) {
	return run(ctx, store.New(db), sigtoken.New(db), forwards, cfg, now, true, DefaultAuditRetention)
}

// DeliveredForwards deletes the fast path's delivered forwards.
// [queue.Jobs] implements it.
type DeliveredForwards interface {
	DeleteDeliveredBefore(ctx context.Context, cutoff time.Time, limit int) (int64, error)
}

// StrayEvery is how often the job looks for the rows of removed senders.
// It looks in a process's first run too. The look reads every sender's
// rows, on Citus every shard; every other statement names its sender.
const StrayEvery = time.Hour

// withStrays returns the configured senders, and with strays those find
// returns besides.
func withStrays(cfg *config.Config, strays bool, find func() ([]string, error)) ([]string, error) {
	names := make([]string, 0, len(cfg.Senders))
	known := make(map[string]bool, len(cfg.Senders))
	for i := range cfg.Senders {
		names = append(names, cfg.Senders[i].Name)
		known[cfg.Senders[i].Name] = true
	}
	if !strays {
		return names, nil
	}
	found, err := find()
	if err != nil {
		return nil, err
	}
	for _, s := range found {
		if !known[s] {
			names = append(names, s)
		}
	}
	return names, nil
}

// run is [Run] on q and tokens. With strays it also deletes for the
// senders no longer configured that have rows. The audit trail keeps
// auditKeep.
func run(ctx context.Context, q *store.Queries, tokens *sigtoken.Store, forwards DeliveredForwards, cfg *config.Config, now time.Time, strays bool, auditKeep time.Duration) (Result, error) {
	var res Result
	if err := inBatches(&res.Audit, func() (int64, error) { return q.DeleteAuditBefore(ctx, now.Add(-auditKeep), BatchSize) }); err != nil {
		return res, err
	}
	// Tokens go first: nothing else bounds them. A configured sender's stay
	// within its tolerance and [sigtoken.ClockMargin]. A removed sender's
	// all go, as none of its requests is accepted.
	withTokens, err := withStrays(cfg, strays, func() ([]string, error) { return tokens.Senders(ctx) })
	if err != nil {
		return res, err
	}
	for _, sender := range withTokens {
		cutoff := now.Add(forgetAll)
		if s, ok := cfg.Sender(sender); ok {
			cutoff = now.Add(-time.Duration(s.Tolerance) - sigtoken.ClockMargin)
		}
		if err := inBatches(&res.Tokens, func() (int64, error) { return tokens.DeleteSignedBefore(ctx, sender, cutoff, BatchSize) }); err != nil {
			return res, err
		}
	}
	senders, err := withStrays(cfg, strays, func() ([]string, error) { return q.ExpiredSenders(ctx, now) })
	if err != nil {
		return res, err
	}
	for _, sender := range senders {
		if err := inBatches(&res.Keys, func() (int64, error) { return q.DeleteExpiredKeys(ctx, sender, now, BatchSize) }); err != nil {
			return res, err
		}
	}
	// A removed sender's events are kept for [config.DefaultRetention].
	withEvents, err := withStrays(cfg, strays, func() ([]string, error) { return q.EventSenders(ctx) })
	if err != nil {
		return res, err
	}
	// Delivered forwards are kept for the longest sender retention, as
	// River keeps its finished jobs.
	keepForwards := time.Duration(0)
	for _, s := range cfg.Senders {
		keepForwards = max(keepForwards, time.Duration(s.Retention))
	}
	if keepForwards <= 0 {
		keepForwards = config.DefaultRetention
	}
	if err := inBatches(&res.Forwards, func() (int64, error) { return forwards.DeleteDeliveredBefore(ctx, now.Add(-keepForwards), BatchSize) }); err != nil {
		return res, err
	}
	for _, sender := range withEvents {
		if err := inBatches(&res.OrderKeys, func() (int64, error) { return q.DeleteIdleKeys(ctx, sender, now.Add(-IdleOrderKeyKept), BatchSize) }); err != nil {
			return res, err
		}
	}
	for _, sender := range withEvents {
		keep := config.DefaultRetention
		if s, ok := cfg.Sender(sender); ok {
			keep = time.Duration(s.EventRetention)
		}
		cutoff := now.Add(-keep)
		if err := inBatches(&res.Events, func() (int64, error) { return q.DeleteEventsBefore(ctx, sender, cutoff, BatchSize) }); err != nil {
			return res, err
		}
	}
	return res, nil
}

// inBatches calls del, which deletes at most [BatchSize] rows, until it
// deletes fewer or fails, adding what it deleted to n.
func inBatches(n *int64, del func() (int64, error)) error {
	for {
		d, err := del()
		*n += d
		if err != nil || d < BatchSize {
			return err
		}
	}
}

// Config configures the retention job: its dependencies and its settings.
// A zero setting is refused, never taken for the default; [DefaultConfig]
// has the defaults. DB, Forwards, Senders and Log are required.
type Config struct {
	// DB is the database the job deletes from.
	DB store.DB
	// Forwards deletes the fast path's delivered forwards: the process's
	// [queue.Jobs].
	Forwards DeliveredForwards
	// Senders' retentions and tolerances decide what is deleted. Each run
	// reads the configuration in force.
	Senders config.Source
	// Log receives a line for each run that deleted something.
	Log *slog.Logger

	// Interval is how often the job runs, and once at start.
	Interval time.Duration
	// Timeout is the longest a run takes; the next run does the rest. The
	// queue may cut it shorter, see [queue.Maintenance].
	Timeout time.Duration
	// AuditRetention is how long the audit trail keeps a row
	// ([DefaultAuditRetention]).
	AuditRetention time.Duration
}

// DefaultConfig returns the job's default settings, without dependencies.
func DefaultConfig() Config {
	return Config{Interval: DefaultInterval, Timeout: JobTimeout, AuditRetention: DefaultAuditRetention}
}

// validate returns an error naming the fields at fault, or nil.
func (c Config) validate() error {
	if c.Interval <= 0 {
		return fmt.Errorf("retention config: Interval %s: must be positive", c.Interval)
	}
	if c.Timeout <= 0 {
		return fmt.Errorf("retention config: Timeout %s: must be positive", c.Timeout)
	}
	if c.AuditRetention <= 0 {
		return fmt.Errorf("retention config: AuditRetention %s: must be positive", c.AuditRetention)
	}
	var errs []error
	if c.DB == nil {
		errs = append(errs, errors.New("retention config: DB: nil: the database to delete from is required"))
	}
	if c.Forwards == nil {
		errs = append(errs, errors.New("retention config: Forwards: nil: the delivered forwards to delete from are required"))
	}
	if c.Senders == nil {
		errs = append(errs, errors.New("retention config: Senders: nil: the senders' configuration is required"))
	}
	if c.Log == nil {
		errs = append(errs, errors.New("retention config: Log: nil: a logger is required"))
	}
	return errors.Join(errs...)
}

// Worker runs the retention job.
type Worker struct {
	q        *store.Queries
	tokens   *sigtoken.Store
	forwards DeliveredForwards
	senders  config.Source
	log      *slog.Logger
	interval time.Duration
	timeout  time.Duration
	audit    time.Duration // the audit trail's retention

	mu      sync.Mutex
	strayAt time.Time // when a run last looked for stray senders
}

// JobTimeout is the default of [Config.Timeout]. It is longer than the
// forwards' job timeout, for the backlog after an outage.
const JobTimeout = 10 * time.Minute

// NewWorker returns the retention job's worker. It returns an error naming
// the field when cfg is invalid or lacks a dependency.
func NewWorker(cfg Config) (*Worker, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Worker{q: store.New(cfg.DB), tokens: sigtoken.New(cfg.DB), forwards: cfg.Forwards, senders: cfg.Senders, log: cfg.Log,
		interval: cfg.Interval, timeout: cfg.Timeout, audit: cfg.AuditRetention}, nil
}

// Work deletes what has expired when it starts, as [Run] does, and logs
// what it deleted. It looks for removed senders every [StrayEvery].
func (w *Worker) Work(ctx context.Context) error {
	now := time.Now()
	w.mu.Lock()
	strays := w.strayAt.IsZero() || now.Sub(w.strayAt) >= StrayEvery
	w.mu.Unlock()
	res, err := run(ctx, w.q, w.tokens, w.forwards, w.senders.Current(), now, strays, w.audit)
	if strays && err == nil {
		w.mu.Lock()
		w.strayAt = now
		w.mu.Unlock()
	}
	if res.Keys > 0 || res.Events > 0 || res.Forwards > 0 || res.Tokens > 0 || res.Audit > 0 || res.OrderKeys > 0 {
		w.log.Info("retention", "keys_deleted", res.Keys, "events_deleted", res.Events, "forwards_deleted", res.Forwards,
			"signature_tokens_deleted", res.Tokens, "audit_rows_deleted", res.Audit, "ordering_keys_deleted", res.OrderKeys)
	}
	if err != nil {
		return fmt.Errorf("retention: %w", err)
	}
	return nil
}

// Maintenance returns the queue's maintenance job that runs [Worker.Work].
// It goes in [queue.ClientConfig].Maintenance.
func (w *Worker) Maintenance() queue.Maintenance {
	return queue.Maintenance{Interval: w.interval, Timeout: w.timeout, Run: w.Work}
}
