package queue

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/hookgate/hookgate/internal/config"
)

// ClientConfig configures the River client (New): its settings and its
// dependencies. Zero means zero (docs/configuration.md): no setting takes
// a default from a 0, and validate refuses one; DefaultClientConfig has the
// defaults, two of them computed from the senders' configuration. Pool,
// Senders and Log are required; Worker is optional (nil: a client that
// only inserts).
type ClientConfig struct {
	// MaxWorkers is how many forwards run at once in this process
	// (DefaultMaxWorkers), at least 1, shared fairly among the targets by
	// the worker's Gate, which should have the same capacity.
	MaxWorkers int
	// RescueAfter is how long a job may stay running before another worker
	// takes it over, which is what happens to the jobs of a killed process.
	// River requires it to exceed every job's timeout, and it must exceed a
	// forward's (the longest target timeout plus 5s; New returns an
	// error otherwise). DefaultClientConfig makes it a forward's timeout
	// plus a minute, so that the forwards of a killed process are taken
	// over within about that long. The longer job kinds (a bulk
	// redelivery, up to BulkTimeout; the maintenance job, up to
	// Maintenance.Timeout) run in slices of at most RescueAfter minus 5s
	// and carry on where they stopped.
	RescueAfter time.Duration
	// FetchPollInterval is how often River polls for jobs when no
	// notification arrives (DefaultFetchPollInterval), positive.
	FetchPollInterval time.Duration
	// Retention is how long finished forward jobs stay queryable,
	// positive: DefaultClientConfig makes it the longest sender retention.
	Retention time.Duration
	// ID is the River client ID the process works jobs as: NewProcessID,
	// whose heartbeats (Takeover) let other processes take over the jobs
	// it leaves running if it dies. Empty: River's default ID, whose jobs
	// only River's rescuer rescues.
	ID string
	// Tracker, when not nil, learns which jobs this process's workers run
	// (forward.Takeover, which releases the jobs River shows running here
	// that no worker holds).
	Tracker JobTracker
	// Maintenance is the job a working client runs beside the forwards
	// (the retention job), enqueued periodically. A zero Maintenance has
	// none.
	Maintenance Maintenance
	// Distributed: forward_outbox is distributed by Citus, River's table and
	// forward_delivered are local tables of the coordinator. A transaction
	// writing both commits on the worker first, without two-phase commit,
	// and a coordinator that died between the two commits would lose the
	// record of a forward whose outbox row is gone; the fast path's
	// recording then writes the records first and deletes the outbox rows
	// after (Jobs.Distributed).
	Distributed bool

	// Pool is the database of River's jobs (and of the events the bulk
	// redeliveries read).
	Pool *pgxpool.Pool
	// Senders is the senders' configuration: their targets' attempts and
	// timeouts, and the senders bulk redeliveries may name. The rescue
	// horizon's check (New) reads it once; the jobs, at their insert or
	// their start (a *config.Config, or the process's sender.Live).
	Senders config.Source
	// Worker, when not nil, works the forward jobs (forward.Worker), and
	// the client works the bulk redeliveries and the maintenance job too;
	// nil (a nil interface, not a nil *forward.Worker): the client only
	// inserts (the api role, tools).
	Worker ForwardWorker
	// Log is River's logger, and the bulk redeliveries'.
	Log *slog.Logger
}

// DefaultClientConfig returns the client's defaults for the senders of
// cfg: DefaultMaxWorkers, the rescue horizon of a forward's timeout plus a
// minute, DefaultFetchPollInterval, the longest sender retention, no
// maintenance job, and no dependencies (the caller gives them, cfg as
// Senders).
func DefaultClientConfig(cfg *config.Config) ClientConfig {
	retention := time.Duration(0)
	for _, s := range cfg.Senders {
		retention = max(retention, time.Duration(s.Retention))
	}
	if retention <= 0 {
		retention = config.DefaultRetention // a configuration without senders
	}
	return ClientConfig{
		MaxWorkers:        DefaultMaxWorkers,
		RescueAfter:       forwardTimeout(cfg) + time.Minute,
		FetchPollInterval: DefaultFetchPollInterval,
		Retention:         retention,
	}
}

// validate returns an error naming the field at fault, or nil. That
// RescueAfter exceeds a forward's timeout is checked by newHorizons, which
// knows the targets.
func (c ClientConfig) validate() error {
	var errs []error
	if c.MaxWorkers < 1 {
		errs = append(errs, fmt.Errorf("forward client config: MaxWorkers %d: must be at least 1", c.MaxWorkers))
	}
	if c.RescueAfter <= 0 {
		errs = append(errs, fmt.Errorf("forward client config: RescueAfter %s: must be positive (DefaultClientConfig computes it)", c.RescueAfter))
	}
	if c.FetchPollInterval <= 0 {
		errs = append(errs, fmt.Errorf("forward client config: FetchPollInterval %s: must be positive", c.FetchPollInterval))
	}
	if c.Retention <= 0 {
		errs = append(errs, fmt.Errorf("forward client config: Retention %s: must be positive", c.Retention))
	}
	if err := c.Maintenance.validate(); err != nil {
		errs = append(errs, err)
	}
	if c.Pool == nil {
		errs = append(errs, errors.New("forward client config: Pool: nil: the database of the jobs is required"))
	}
	if c.Senders == nil {
		errs = append(errs, errors.New("forward client config: Senders: nil: the senders' configuration is required"))
	}
	if c.Log == nil {
		errs = append(errs, errors.New("forward client config: Log: nil: a logger is required"))
	}
	return errors.Join(errs...)
}

// rescueMargin is how much shorter than the rescue horizon a job's timeout
// is at least, and Worker.Timeout's margin over the longest target timeout.
const rescueMargin = 5 * time.Second

// horizons are the job timeouts and the rescue horizon of a client.
type horizons struct {
	forward time.Duration // a forward job's timeout: the longest target timeout + rescueMargin
	long    time.Duration // the longest a bulk redelivery or maintenance job may run
	rescue  time.Duration // RescueStuckJobsAfter: more than every job's timeout
}

// forwardTimeout is a forward job's timeout for the targets of cfg: the
// longest target timeout plus rescueMargin.
func forwardTimeout(cfg *config.Config) time.Duration {
	longest := time.Duration(0)
	for _, s := range cfg.Senders {
		for _, t := range s.Forward {
			longest = max(longest, time.Duration(t.Timeout))
		}
	}
	return longest + rescueMargin
}

// newHorizons derives the job timeouts under the rescue horizon
// rescueAfter, which must exceed the forwards' timeout. The longer kinds'
// timeouts are cut to the horizon minus rescueMargin: they run in slices.
func newHorizons(cfg *config.Config, rescueAfter, maintenance time.Duration) (horizons, error) {
	h := horizons{forward: forwardTimeout(cfg), rescue: rescueAfter}
	if rescueAfter <= h.forward {
		return h, fmt.Errorf("forward client config: RescueAfter (--forward-rescue-after) %s: must be longer than the longest target timeout plus 5s (%s), or a running forward could be taken over while it still runs", rescueAfter, h.forward)
	}
	h.long = min(max(BulkTimeout, maintenance), h.rescue-rescueMargin)
	return h, nil
}

// CheckRescueAfter returns an error naming each target of cfg whose
// forward's timeout (its timeout + 5s) the rescue horizon rescueAfter does
// not exceed, or nil: the check New makes at start, for a configuration
// reloaded into a process whose client runs with that horizon, which only
// a restart changes.
func CheckRescueAfter(cfg *config.Config, rescueAfter time.Duration) error {
	var errs []error
	for i, s := range cfg.Senders {
		for j, t := range s.Forward {
			if need := time.Duration(t.Timeout) + rescueMargin; rescueAfter <= need {
				errs = append(errs, fmt.Errorf("senders[%d].forward[%d].timeout: %s needs a rescue horizon over %s (the timeout plus 5s), and this process runs with %s "+
					"(--forward-rescue-after, or when unset the longest target timeout at start-up plus 5s and a minute), which only a restart changes: "+
					"restart with the longer timeout, or keep it under %s", i, j, time.Duration(t.Timeout), need, rescueAfter, rescueAfter-rescueMargin))
			}
		}
	}
	return errors.Join(errs...)
}

// DefaultMaxWorkers is how many forwards a process runs at once by default.
const DefaultMaxWorkers = 100

// spareWorkers is how many River workers a process runs beside its
// maxWorkers forwards: they only ever decide that a forward waits.
func spareWorkers(maxWorkers int) int { return max(maxWorkers/10, 2) }

// DefaultFetchPollInterval is how often workers look for available
// forwards between River's notifications: River throttles and may miss
// them, and at its default poll (1s) a forward then waited up to a second
// (make bench: p99 from ingest to the first attempt 1,157 ms in one run,
// under 160 ms in others). An empty poll is one indexed query.
const DefaultFetchPollInterval = 100 * time.Millisecond

// slowQueuePoll is how often the bulk-redelivery and maintenance queues
// poll for jobs between River's notifications (River's default): an
// operator's bulk redelivery or a periodic job may start up to this late
// when a notification is missed.
const slowQueuePoll = time.Second

// fetchCooldown is the least time between two fetches of available forwards.
// River's default, 100ms, caps a process at MaxWorkers forwards per 100ms
// (200/s with 20 workers, measured by make bench), far below ingestion.
const fetchCooldown = 10 * time.Millisecond

// New returns the River client that inserts forward jobs for the senders
// of cfg.Senders and, when cfg.Worker is not nil, works them with it (and
// the bulk redeliveries, and cfg's maintenance job); a nil Worker makes a
// client that only inserts (the api role, tools). cfg's settings tune it
// (DefaultClientConfig); an error names the field when cfg is invalid or
// lacks a dependency.
func New(cfg ClientConfig) (*River, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	rc := &river.Config{
		ID:                          cfg.ID,
		Logger:                      cfg.Log,
		CompletedJobRetentionPeriod: cfg.Retention,
		CancelledJobRetentionPeriod: cfg.Retention,
		DiscardedJobRetentionPeriod: cfg.Retention,
	}
	if cfg.Worker != nil {
		h, err := newHorizons(cfg.Senders.Current(), cfg.RescueAfter, cfg.Maintenance.Timeout)
		if err != nil {
			return nil, err
		}
		workers := river.NewWorkers()
		if err := river.AddWorkerSafely(workers, &forwardWorker{w: cfg.Worker}); err != nil {
			return nil, fmt.Errorf("register forward worker: %w", err)
		}
		// Bulk redeliveries run on a queue of their own, one at a time.
		bulk, err := NewBulkWorker(BulkWorkerConfig{Pool: cfg.Pool, Senders: cfg.Senders, Log: cfg.Log})
		if err != nil {
			return nil, err
		}
		bulk.timeout = min(bulk.timeout, h.long)
		if err := river.AddWorkerSafely(workers, bulk); err != nil {
			return nil, fmt.Errorf("register bulk redelivery worker: %w", err)
		}
		// River runs a few more jobs at once than the gate lets forwards
		// run: with every forward slot held (by targets that hang, say),
		// River can still fetch the others' forwards and, when their target
		// has its share, snooze them at once.
		// The bulk and maintenance queues poll at River's default: their
		// jobs start on River's insert notification, and a missed one waits
		// at most a second; only the forwards' queue polls every
		// FetchPollInterval. Each queue polls on its own, and an idle
		// process made 30 polls a second with all three at 100ms.
		rc.Queues = map[string]river.QueueConfig{
			ForwardQueue: {MaxWorkers: cfg.MaxWorkers + spareWorkers(cfg.MaxWorkers)},
			BulkQueue:    {MaxWorkers: 1, FetchPollInterval: slowQueuePoll},
		}
		if m := cfg.Maintenance; m.Run != nil {
			// At most m.Timeout: shorter under a shorter rescue horizon.
			mw := &maintenanceWorker{run: m.Run, timeout: min(m.Timeout, h.long)}
			if err := river.AddWorkerSafely(workers, mw); err != nil {
				return nil, fmt.Errorf("register maintenance worker: %w", err)
			}
			rc.Queues[MaintenanceQueue] = river.QueueConfig{MaxWorkers: 1, FetchPollInterval: slowQueuePoll}
			rc.PeriodicJobs = []*river.PeriodicJob{m.periodicJob()}
		}
		rc.Workers = workers
		if cfg.Tracker != nil {
			rc.Middleware = []rivertype.Middleware{&trackJobs{t: cfg.Tracker}}
		}
		rc.JobTimeout = h.forward
		rc.RescueStuckJobsAfter = h.rescue
		rc.FetchCooldown = fetchCooldown
		rc.FetchPollInterval = cfg.FetchPollInterval
	}
	client, err := river.NewClient(riverpgxv5.New(cfg.Pool), rc)
	if err != nil {
		return nil, fmt.Errorf("create river client: %w", err)
	}
	jobs := NewJobs(cfg.Pool)
	if cfg.Distributed {
		jobs = jobs.Distributed()
	}
	r := &River{client: client, pool: cfg.Pool, jobs: jobs, senders: cfg.Senders}
	if cfg.Worker != nil {
		r.sched = &forwardScheduler{jobs: NewJobs(cfg.Pool), queue: ForwardQueue, log: cfg.Log, retention: cfg.Retention}
	}
	return r, nil
}
