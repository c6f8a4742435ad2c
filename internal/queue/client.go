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

// ClientConfig holds the settings and dependencies of the River client
// that [New] returns. Zero means zero: no setting takes a default from a 0,
// and New refuses one. [DefaultClientConfig] has the defaults. Pool,
// Senders and Log are required. Without a Worker, the client only inserts.
type ClientConfig struct {
	// MaxWorkers is how many forwards run at once in this process, at
	// least 1. The worker's gate shares them among the targets and should
	// have the same capacity.
	MaxWorkers int
	// RescueAfter is how long a job may stay running before another worker
	// takes it over, as happens to the jobs of a killed process. It must
	// exceed a forward's timeout: the longest target timeout plus 5s. The
	// default adds a minute to that. Bulk redeliveries and the maintenance
	// job run in slices of at most RescueAfter minus 5s, and each slice
	// carries on where the last one stopped.
	RescueAfter time.Duration
	// FetchPollInterval is how often River polls for jobs when no
	// notification arrives. It must be positive.
	FetchPollInterval time.Duration
	// Retention is how long finished forward jobs stay queryable. It must
	// be positive.
	Retention time.Duration
	// ID is the River client ID that the process works jobs as. Its
	// heartbeats let other processes take over the jobs it leaves running
	// if it dies. When empty, only River's rescuer rescues its jobs.
	ID string
	// Tracker, when not nil, learns which jobs this process's workers run.
	Tracker JobTracker
	// Maintenance is a periodic job that a working client runs beside the
	// forwards. A zero Maintenance has none.
	Maintenance Maintenance
	// Distributed is set when Citus distributes forward_outbox while
	// River's table and forward_delivered stay on the coordinator. A
	// transaction that writes both has no two-phase commit. A coordinator
	// that died between the two commits would lose a forward's record. So
	// the fast path writes the records first and deletes the outbox rows
	// after; see [Jobs.Distributed].
	Distributed bool

	// Pool is the database of River's jobs and of the events that bulk
	// redeliveries read.
	Pool *pgxpool.Pool
	// Senders gives the targets' attempts and timeouts. New reads it once
	// to check the rescue horizon. The jobs read it when they are inserted
	// or start.
	Senders config.Source
	// Worker, when not nil, works the forward jobs. The client then also
	// works the bulk redeliveries and the maintenance job. With a nil
	// interface, the client only inserts.
	Worker ForwardWorker
	// Log is the logger of River and of the bulk redeliveries.
	Log *slog.Logger
}

// DefaultClientConfig returns the client's defaults for the senders of
// cfg. The rescue horizon is a forward's timeout plus a minute, and the
// retention is the longest sender retention. The caller adds the
// dependencies.
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

// validate returns an error naming the field at fault. newHorizons checks
// RescueAfter against the targets' timeouts.
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

// rescueMargin is the least gap between a job's timeout and the rescue
// horizon. It is also a forward job's margin over the longest target
// timeout.
const rescueMargin = 5 * time.Second

// horizons are the job timeouts and the rescue horizon of a client.
type horizons struct {
	forward time.Duration // a forward job's timeout: the longest target timeout + rescueMargin
	long    time.Duration // the longest a bulk redelivery or maintenance job may run
	rescue  time.Duration // RescueStuckJobsAfter: more than every job's timeout
}

// forwardTimeout is a forward job's timeout: the longest target timeout
// of cfg plus rescueMargin.
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
// rescueAfter, which must exceed the forwards' timeout. The longer kinds
// run in slices, cut to the horizon minus rescueMargin.
func newHorizons(cfg *config.Config, rescueAfter, maintenance time.Duration) (horizons, error) {
	h := horizons{forward: forwardTimeout(cfg), rescue: rescueAfter}
	if rescueAfter <= h.forward {
		return h, fmt.Errorf("forward client config: RescueAfter (--forward-rescue-after) %s: must be longer than the longest target timeout plus 5s (%s), or a running forward could be taken over while it still runs", rescueAfter, h.forward)
	}
	h.long = min(max(BulkTimeout, maintenance), h.rescue-rescueMargin)
	return h, nil
}

// CheckRescueAfter returns an error naming each target of cfg whose
// timeout plus 5s is not below rescueAfter. It is the check that [New]
// makes, for a reloaded configuration. Only a restart changes the horizon.
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
// maxWorkers forwards. They only ever decide that a forward waits.
func spareWorkers(maxWorkers int) int { return max(maxWorkers/10, 2) }

// DefaultFetchPollInterval is how often workers look for available
// forwards between River's notifications. River throttles notifications
// and may miss them. At River's default poll of 1s, a forward could then
// wait a second. An empty poll is one indexed query.
const DefaultFetchPollInterval = 100 * time.Millisecond

// slowQueuePoll is how often the bulk-redelivery and maintenance queues
// poll between River's notifications, River's default. When a
// notification is missed, their jobs start up to this late.
const slowQueuePoll = time.Second

// fetchCooldown is the least time between two fetches of available
// forwards. River's default of 100ms caps a process at MaxWorkers forwards
// per 100ms, far below ingestion.
const fetchCooldown = 10 * time.Millisecond

// New returns the River client that inserts forward jobs. When
// cfg.Worker is not nil, it also works them, the bulk redeliveries and the
// maintenance job. An error names the field when cfg is invalid.
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
		bulk, err := NewBulkWorker(BulkWorkerConfig{Pool: cfg.Pool, Senders: cfg.Senders, Log: cfg.Log})
		if err != nil {
			return nil, err
		}
		bulk.timeout = min(bulk.timeout, h.long)
		if err := river.AddWorkerSafely(workers, bulk); err != nil {
			return nil, fmt.Errorf("register bulk redelivery worker: %w", err)
		}
		// River runs a few more jobs than the gate lets forwards run. When
		// hanging targets hold every slot, River can still fetch other
		// forwards and snooze those whose target has its share.
		// Only the forwards' queue polls every FetchPollInterval. Each
		// queue polls on its own, so three fast queues would poll 30 times
		// a second in an idle process.
		rc.Queues = map[string]river.QueueConfig{
			ForwardQueue: {MaxWorkers: cfg.MaxWorkers + spareWorkers(cfg.MaxWorkers)},
			BulkQueue:    {MaxWorkers: 1, FetchPollInterval: slowQueuePoll},
		}
		if m := cfg.Maintenance; m.Run != nil {
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
