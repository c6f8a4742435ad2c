// Package retention deletes what hookgate no longer needs to remember:
// delivery keys whose retention has passed (their IDs are then accepted as
// new), events older than their sender's event_retention, the fast path's
// delivered forwards older than the longest sender retention (as River
// deletes its finished jobs), and the single-use signature tokens
// (package sigtoken) whose timestamps the signature check refuses by now.
// It runs as the job queue's periodic maintenance job (Worker.Maintenance,
// queue.Maintenance), so one replica at a time does the work, in small
// batches, so that no long-held lock blocks ingestion.
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

// Defaults of the retention job (DefaultConfig).
const (
	DefaultInterval = time.Minute
	// BatchSize is how many rows one statement deletes at most.
	BatchSize = 1000
)

// Result counts what one run deleted.
type Result struct {
	Keys   int64
	Events int64
	// Forwards are the fast path's delivered forwards deleted (River
	// deletes its own finished jobs).
	Forwards int64
	// Tokens are the expired signature tokens deleted.
	Tokens int64
}

// forgetAll is how far after now the tokens of a sender no longer
// configured are deleted up to: all of them (a timestamp in the future is
// refused beyond the tolerance, and no tolerance is this long).
const forgetAll = 100 * 365 * 24 * time.Hour

// Run deletes, in batches of BatchSize, every key expired at now, every
// signature token whose timestamp its sender's tolerance (plus
// sigtoken.ClockMargin) has passed at now (all of a sender no longer
// configured), every event older than its sender's
// event retention (config.DefaultRetention for a sender no longer
// configured) and every delivered forward of the fast path older than the
// longest sender retention, until none is left or ctx ends. It returns
// what it deleted (also on error).
//
// It finds the senders no longer configured by reading every sender's rows
// (strays); Worker.Work does that only every StrayEvery.
func Run(ctx context.Context, db store.DB, cfg *config.Config, now time.Time) (Result, error) {
	return run(ctx, store.New(db), sigtoken.New(db), cfg, now, true)
}

// StrayEvery is how often the retention job also looks for the rows of
// senders the configuration no longer names (removed senders, whose keys,
// events and tokens expire all the same): in a process's first run, and
// then this rarely. The look reads every sender's rows of each table (on
// Citus, every shard: docs/distributed.md names these as the job's rare
// statements); every other statement of the job names its sender, taken
// from the configuration.
const StrayEvery = time.Hour

// withStrays returns the names of the configured senders and, when strays,
// those that find returns besides.
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

// run is Run with the queries and the token store of its database; the
// senders are the configured ones, and with strays those no longer
// configured that have rows.
func run(ctx context.Context, q *store.Queries, tokens *sigtoken.Store, cfg *config.Config, now time.Time, strays bool) (Result, error) {
	var res Result
	// The signature tokens first: they are few, and bounded only by this.
	// A configured sender's are kept while their timestamps are within its
	// tolerance (and sigtoken.ClockMargin); those of a sender no longer
	// configured all go, as no request of it is accepted.
	withTokens, err := withStrays(cfg, strays, func() ([]string, error) { return tokens.Senders(ctx) })
	if err != nil {
		return res, err
	}
	for _, sender := range withTokens {
		cutoff := now.Add(forgetAll)
		if s, ok := cfg.Sender(sender); ok {
			cutoff = now.Add(-time.Duration(s.Tolerance) - sigtoken.ClockMargin)
		}
		for {
			n, err := tokens.DeleteSignedBefore(ctx, sender, cutoff, BatchSize)
			res.Tokens += n
			if err != nil {
				return res, err
			}
			if n < BatchSize {
				break
			}
		}
	}
	senders, err := withStrays(cfg, strays, func() ([]string, error) { return q.ExpiredSenders(ctx, now) })
	if err != nil {
		return res, err
	}
	for _, sender := range senders { // configured or not: every key expires
		for {
			n, err := q.DeleteExpiredKeys(ctx, sender, now, BatchSize)
			res.Keys += n
			if err != nil {
				return res, err
			}
			if n < BatchSize {
				break
			}
		}
	}
	// Every sender that has events: a configured one keeps them for its
	// event_retention, one no longer configured for DefaultRetention.
	withEvents, err := withStrays(cfg, strays, func() ([]string, error) { return q.EventSenders(ctx) })
	if err != nil {
		return res, err
	}
	// The fast path's delivered forwards, after the longest sender
	// retention: as long as River keeps its finished forward jobs
	// (queue.New).
	keepForwards := time.Duration(0)
	for _, s := range cfg.Senders {
		keepForwards = max(keepForwards, time.Duration(s.Retention))
	}
	if keepForwards <= 0 {
		keepForwards = config.DefaultRetention
	}
	for {
		n, err := queue.NewJobs(q.DB()).DeleteDeliveredBefore(ctx, now.Add(-keepForwards), BatchSize)
		res.Forwards += n
		if err != nil {
			return res, err
		}
		if n < BatchSize {
			break
		}
	}
	for _, sender := range withEvents {
		keep := config.DefaultRetention
		if s, ok := cfg.Sender(sender); ok {
			keep = time.Duration(s.EventRetention)
		}
		cutoff := now.Add(-keep)
		for {
			n, err := q.DeleteEventsBefore(ctx, sender, cutoff, BatchSize)
			res.Events += n
			if err != nil {
				return res, err
			}
			if n < BatchSize {
				break
			}
		}
	}
	return res, nil
}

// Config configures the retention job: its worker's dependencies
// (NewWorker), and its settings. Zero means zero (docs/configuration.md):
// no field takes a default from a 0, and validate refuses one;
// DefaultConfig has the defaults.
type Config struct {
	// DB is the database the job deletes from (a *pgxpool.Pool). Required
	// by NewWorker.
	DB store.DB
	// Senders is the senders' configuration, whose retentions and
	// tolerances decide what is deleted, read at each run (a
	// *config.Config, or the process's sender.Live). Required by
	// NewWorker.
	Senders config.Source
	// Log is where each run that deleted something is logged. Required by
	// NewWorker.
	Log *slog.Logger

	// Interval is how often the job is enqueued (DefaultInterval),
	// positive; once at start too.
	Interval time.Duration
	// Timeout is the longest a run takes (JobTimeout), positive. A run cut
	// short leaves the rest to the next one. The queue cuts it shorter when
	// its rescue horizon is shorter (queue.Maintenance.Timeout).
	Timeout time.Duration
}

// DefaultConfig returns the retention job's defaults (and no
// dependencies: the caller gives them).
func DefaultConfig() Config {
	return Config{Interval: DefaultInterval, Timeout: JobTimeout}
}

// validate returns an error naming the field at fault, or nil: the
// settings, and the dependencies NewWorker requires.
func (c Config) validate() error {
	if c.Interval <= 0 {
		return fmt.Errorf("retention config: Interval %s: must be positive", c.Interval)
	}
	if c.Timeout <= 0 {
		return fmt.Errorf("retention config: Timeout %s: must be positive", c.Timeout)
	}
	var errs []error
	if c.DB == nil {
		errs = append(errs, errors.New("retention config: DB: nil: the database to delete from is required"))
	}
	if c.Senders == nil {
		errs = append(errs, errors.New("retention config: Senders: nil: the senders' configuration is required"))
	}
	if c.Log == nil {
		errs = append(errs, errors.New("retention config: Log: nil: a logger is required"))
	}
	return errors.Join(errs...)
}

// Worker runs the retention job: Work is what the job queue's maintenance
// job (Maintenance) runs.
type Worker struct {
	q        *store.Queries
	tokens   *sigtoken.Store
	senders  config.Source
	log      *slog.Logger
	interval time.Duration
	timeout  time.Duration

	mu      sync.Mutex
	strayAt time.Time // when a run last looked for stray senders
}

// JobTimeout is the longest a run takes (a large backlog after an outage)
// by default (Config.Timeout), instead of the client's job timeout, which is sized for
// forwards. A run cut short leaves the rest to the next one.
const JobTimeout = 10 * time.Minute

// NewWorker returns the retention job's worker on cfg.DB for cfg.Senders,
// run every cfg.Interval for at most cfg.Timeout (Maintenance); an error
// naming the field when cfg is invalid or lacks a dependency.
func NewWorker(cfg Config) (*Worker, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Worker{q: store.New(cfg.DB), tokens: sigtoken.New(cfg.DB), senders: cfg.Senders, log: cfg.Log,
		interval: cfg.Interval, timeout: cfg.Timeout}, nil
}

// Work deletes what has expired at the time it starts (Run, until ctx
// ends), and logs what it deleted.
func (w *Worker) Work(ctx context.Context) error {
	now := time.Now()
	w.mu.Lock()
	strays := w.strayAt.IsZero() || now.Sub(w.strayAt) >= StrayEvery
	w.mu.Unlock()
	res, err := run(ctx, w.q, w.tokens, w.senders.Current(), now, strays)
	if strays && err == nil {
		w.mu.Lock()
		w.strayAt = now
		w.mu.Unlock()
	}
	if res.Keys > 0 || res.Events > 0 || res.Forwards > 0 || res.Tokens > 0 {
		w.log.Info("retention", "keys_deleted", res.Keys, "events_deleted", res.Events, "forwards_deleted", res.Forwards,
			"signature_tokens_deleted", res.Tokens)
	}
	if err != nil {
		return fmt.Errorf("retention: %w", err)
	}
	return nil
}

// Maintenance returns the job queue's maintenance job that runs w's Work
// every Config.Interval, and once at start, for at most Config.Timeout
// (queue.ClientConfig.Maintenance).
func (w *Worker) Maintenance() queue.Maintenance {
	return queue.Maintenance{Interval: w.interval, Timeout: w.timeout, Run: w.Work}
}
