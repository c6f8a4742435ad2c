package forward

import (
	"cmp"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/hookgate/hookgate/internal/config"
)

// Options tune the River client. Zero values take the defaults.
type Options struct {
	// Work makes the client work forward jobs; without it the client only
	// inserts them (the api role).
	Work bool
	// MaxWorkers is how many forwards run at once in this process
	// (DefaultMaxWorkers), shared fairly among the targets (Gate).
	MaxWorkers int
	// Gate admits the forwards; nil: a gate of MaxWorkers of its own. A
	// process that also sends forwards outside River passes the one gate
	// both use.
	Gate *Gate
	// Worker is the forward worker to register with Work (one the process's
	// Dispatcher shares); nil: NewClient makes one with NewHTTPClient,
	// Backoff and the Gate.
	Worker *Worker
	// Backoff is the retry schedule (DefaultBackoff).
	Backoff Backoff
	// BreakerProbe is how long an open circuit breaker waits before its
	// first probes (DefaultProbeInterval); it doubles after a failed round,
	// up to 3s.
	BreakerProbe time.Duration
	// BreakerWindow is the time over which a target's failure rate is
	// measured (DefaultBreakerWindow).
	BreakerWindow time.Duration
	// RescueAfter is how long a job may stay running before another worker
	// takes it over, which is what happens to the jobs of a killed process.
	// River requires it to exceed every job's timeout. By default it is a
	// forward's timeout (the longest target timeout plus 5s) plus a minute,
	// so that the forwards of a killed process are taken over within about
	// that long. Set, it must exceed the forwards' timeout (NewClient
	// returns an error otherwise). The longer job kinds (a bulk redelivery,
	// up to BulkTimeout; the maintenance jobs, up to Maintenance.Timeout)
	// run in slices of at most RescueAfter minus 5s and carry on where they
	// stopped.
	RescueAfter time.Duration
	// FetchPollInterval is how often River polls for jobs when no
	// notification arrives (DefaultFetchPollInterval when zero).
	FetchPollInterval time.Duration
	// Retention is how long finished forward jobs stay queryable; by
	// default the longest sender retention.
	Retention time.Duration
	// Maintenance are other jobs the client works with Work (the retention
	// job): their workers, the periodic jobs that enqueue them, and their
	// queue, worked one job at a time.
	Maintenance Maintenance
}

// Maintenance is a set of background jobs worked beside the forwards.
// Timeout is the longest Timeout of its jobs; Register registers their
// workers, whose Timeout must not exceed maxTimeout (at most Timeout: less
// when RescueAfter is shorter).
type Maintenance struct {
	Queue    string
	Timeout  time.Duration
	Register func(workers *river.Workers, maxTimeout time.Duration) error
	Periodic []*river.PeriodicJob
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

// newHorizons derives the rescue horizon and the job timeouts under it: by
// default the horizon is a forward's timeout plus a minute (a killed
// process's forwards are taken over that soon); an explicit rescueAfter
// must exceed the forwards' timeout. The longer kinds' timeouts are cut to
// the horizon minus rescueMargin: they run in slices.
func newHorizons(cfg *config.Config, rescueAfter, maintenance time.Duration) (horizons, error) {
	longest := time.Duration(0)
	for _, s := range cfg.Senders {
		for _, t := range s.Forward {
			longest = max(longest, time.Duration(t.Timeout))
		}
	}
	h := horizons{forward: longest + rescueMargin}
	long := max(BulkTimeout, maintenance)
	switch {
	case rescueAfter == 0:
		h.rescue = h.forward + time.Minute
	case rescueAfter <= h.forward:
		return h, fmt.Errorf("forward rescue-after %s: must be longer than the longest target timeout plus 5s (%s), or a running forward could be taken over while it still runs", rescueAfter, h.forward)
	default:
		h.rescue = rescueAfter
	}
	h.long = min(long, h.rescue-rescueMargin)
	return h, nil
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

// fetchCooldown is the least time between two fetches of available forwards.
// River's default, 100ms, caps a process at MaxWorkers forwards per 100ms
// (200/s with 20 workers, measured by make bench), far below ingestion.
const fetchCooldown = 10 * time.Millisecond

// NewHTTPClient returns the HTTP client of forwards, keeping up to
// maxIdlePerHost idle connections to each target.
func NewHTTPClient(maxIdlePerHost int) *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			Proxy:               http.ProxyFromEnvironment,
			MaxIdleConnsPerHost: maxIdlePerHost,
			IdleConnTimeout:     90 * time.Second,
		},
		// A forward is a POST of one body to one URL: a redirect is an
		// answer (a failed forward), not an instruction.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// NewClient returns the River client that inserts forward jobs and, with
// opts.Work, works them. m records the forward metrics.
func NewClient(pool *pgxpool.Pool, cfg *config.Config, opts Options, m *Metrics, log *slog.Logger) (*river.Client[pgx.Tx], error) {
	retention := time.Duration(0)
	for _, s := range cfg.Senders {
		retention = max(retention, time.Duration(s.Retention))
	}
	if opts.Retention <= 0 {
		opts.Retention = retention
	}
	rc := &river.Config{
		Logger:                      log,
		CompletedJobRetentionPeriod: opts.Retention,
		CancelledJobRetentionPeriod: opts.Retention,
		DiscardedJobRetentionPeriod: opts.Retention,
	}
	if opts.Work {
		if opts.MaxWorkers <= 0 {
			opts.MaxWorkers = DefaultMaxWorkers
		}
		if opts.Backoff == (Backoff{}) {
			opts.Backoff = DefaultBackoff
		}
		h, err := newHorizons(cfg, opts.RescueAfter, opts.Maintenance.Timeout)
		if err != nil {
			return nil, err
		}
		workers := river.NewWorkers()
		gate := opts.Gate
		if gate == nil {
			gate = NewGate(pool, opts.MaxWorkers, BreakerTiming{Probe: opts.BreakerProbe, Window: opts.BreakerWindow}, m, log)
		}
		worker := opts.Worker
		if worker == nil {
			worker = NewWorker(cfg, pool, NewHTTPClient(opts.MaxWorkers), opts.Backoff, gate, m, log)
		}
		if err := river.AddWorkerSafely(workers, worker); err != nil {
			return nil, fmt.Errorf("register forward worker: %w", err)
		}
		// Bulk redeliveries run on a queue of their own, one at a time.
		bulk := NewBulkWorker(pool, cfg, log)
		bulk.timeout = min(bulk.timeout, h.long)
		if err := river.AddWorkerSafely(workers, bulk); err != nil {
			return nil, fmt.Errorf("register bulk redelivery worker: %w", err)
		}
		// River runs a few more jobs at once than the gate lets forwards
		// run: with every forward slot held (by targets that hang, say),
		// River can still fetch the others' forwards and, when their target
		// has its share, snooze them at once.
		rc.Queues = map[string]river.QueueConfig{Queue: {MaxWorkers: opts.MaxWorkers + spareWorkers(opts.MaxWorkers)}, BulkQueue: {MaxWorkers: 1}}
		if m := opts.Maintenance; m.Register != nil {
			if err := m.Register(workers, min(m.Timeout, h.long)); err != nil {
				return nil, fmt.Errorf("register maintenance workers: %w", err)
			}
			rc.Queues[m.Queue] = river.QueueConfig{MaxWorkers: 1}
			rc.PeriodicJobs = m.Periodic
		}
		rc.Workers = workers
		rc.JobTimeout = h.forward
		rc.RescueStuckJobsAfter = h.rescue
		rc.FetchCooldown = fetchCooldown
		rc.FetchPollInterval = cmp.Or(opts.FetchPollInterval, DefaultFetchPollInterval)
	}
	client, err := river.NewClient(riverpgxv5.New(pool), rc)
	if err != nil {
		return nil, fmt.Errorf("create river client: %w", err)
	}
	return client, nil
}
