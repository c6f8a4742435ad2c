package forward

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookgate/hookgate/internal/queue"
	"github.com/hookgate/hookgate/internal/store"
)

// The takeover of the jobs of processes that are gone. River's rescuer
// would leave a killed process's forward waiting a minute or two. So every
// process that works forwards writes a heartbeat every HeartbeatEvery. It
// also looks for running jobs of processes not seen for Stale, and makes
// them available again at once. A process looks only after its own
// heartbeats have succeeded for longer than Stale. After a database crash
// every live process thus has time to write its row again. River's rescuer
// stays as the backstop.

// Defaults of the takeover.
const (
	// DefaultHeartbeatEvery is how often a process writes its heartbeat
	// and looks for the jobs of processes that are gone.
	DefaultHeartbeatEvery = time.Second
	// DefaultStale is how long a process may go without a heartbeat before
	// its running jobs are taken over. Five heartbeats let a slow statement
	// pass without taking a live process for dead.
	DefaultStale = 5 * time.Second
	// takeoverBatch is the most jobs one look takes over.
	takeoverBatch = 1000
	// forgetAfter is how long the row of a process not seen is kept.
	forgetAfter = time.Hour
)

// ProcessIDPrefix starts the client ID of every hookgate process. The
// takeover takes over only the jobs of such clients, which write heartbeats.
const ProcessIDPrefix = "hookgate:"

// NewProcessID returns a client ID unique to this start of the process:
// hookgate:<host>:<pid>:<random>, at most 100 bytes.
func NewProcessID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	if len(host) > 60 {
		host = host[:60]
	}
	var b [4]byte
	_, _ = rand.Read(b[:]) // never fails
	return ProcessIDPrefix + host + ":" + strconv.Itoa(os.Getpid()) + ":" + hex.EncodeToString(b[:])
}

// TakeoverConfig configures a [Takeover]. A zero setting is refused;
// [DefaultTakeoverConfig] has the defaults. DB, Jobs, Registerer and Log
// are required.
type TakeoverConfig struct {
	// ID is the client ID this process works jobs as, from [NewProcessID].
	// It must start with [ProcessIDPrefix].
	ID string
	// HeartbeatEvery is how often the heartbeat is written and orphans are
	// looked for.
	HeartbeatEvery time.Duration
	// Stale is how long a process may go without a heartbeat before its
	// jobs are taken over. It must exceed HeartbeatEvery.
	Stale time.Duration

	// DB is where the heartbeats are written.
	DB *pgxpool.Pool
	// Jobs finds and releases the jobs taken over.
	Jobs Orphans
	// Registerer receives hookgate_forward_taken_over_total.
	Registerer prometheus.Registerer
	// Log is where the jobs taken over, and the failed heartbeats, are
	// logged.
	Log *slog.Logger
}

// DefaultTakeoverConfig returns the defaults for the process whose client
// ID is id, without dependencies.
func DefaultTakeoverConfig(id string) TakeoverConfig {
	return TakeoverConfig{ID: id, HeartbeatEvery: DefaultHeartbeatEvery, Stale: DefaultStale}
}

// validate returns an error naming the field at fault, or nil.
func (c TakeoverConfig) validate() error {
	var errs []error
	if len(c.ID) <= len(ProcessIDPrefix) || c.ID[:len(ProcessIDPrefix)] != ProcessIDPrefix || len(c.ID) > 100 {
		errs = append(errs, fmt.Errorf("takeover config: ID %q: must start with %q and be at most 100 bytes (NewProcessID)", c.ID, ProcessIDPrefix))
	}
	if c.HeartbeatEvery <= 0 {
		errs = append(errs, fmt.Errorf("takeover config: HeartbeatEvery %s: must be positive", c.HeartbeatEvery))
	}
	if c.Stale <= c.HeartbeatEvery {
		errs = append(errs, fmt.Errorf("takeover config: Stale %s: must be longer than HeartbeatEvery (%s)", c.Stale, c.HeartbeatEvery))
	}
	if c.DB == nil {
		errs = append(errs, errors.New("takeover config: DB: nil: the database of the heartbeats and jobs is required"))
	}
	if c.Jobs == nil {
		errs = append(errs, errors.New("takeover config: Jobs: nil: the forward jobs (queue.NewJobs) are required"))
	}
	if c.Registerer == nil {
		errs = append(errs, errors.New("takeover config: Registerer: nil: a metrics registerer is required"))
	}
	if c.Log == nil {
		errs = append(errs, errors.New("takeover config: Log: nil: a logger is required"))
	}
	return errors.Join(errs...)
}

// Takeover writes this process's heartbeat and takes over the running jobs
// of processes that are gone. Run runs it; Stop deletes the process's row.
type Takeover struct {
	q       *store.Queries
	jobs    Orphans
	cfg     TakeoverConfig
	log     *slog.Logger
	started time.Time
	taken   prometheus.Counter

	mu sync.Mutex
	// upSince is when the heartbeats last started to succeed in a row.
	upSince time.Time
	// working are the jobs this process's workers run. finishing are those
	// whose outcome River may still be writing.
	working, finishing map[int64]struct{}
}

// NewTakeover returns the takeover of the process whose client ID is
// cfg.ID. It returns an error naming the field when cfg is invalid.
func NewTakeover(cfg TakeoverConfig) (*Takeover, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	taken := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "hookgate_forward_taken_over_total",
		Help: "Jobs (forwards, bulk redeliveries, retention runs) left running by a hookgate process that is gone (no heartbeat for the stale time), or shown running in this process while none of its workers ran them (a fetch whose answer was cut off), which this process made available again.",
	})
	cfg.Registerer.MustRegister(taken)
	return &Takeover{q: store.New(cfg.DB), jobs: cfg.Jobs, cfg: cfg, log: cfg.Log, started: time.Now(), taken: taken,
		working: map[int64]struct{}{}, finishing: map[int64]struct{}{}}, nil
}

// Started records that a worker of this process runs job id. A job shown
// running here that no worker runs was lost between River's fetch and the
// workers. The takeover makes it available again after Stale.
func (t *Takeover) Started(id int64) {
	t.mu.Lock()
	t.working[id] = struct{}{}
	t.mu.Unlock()
}

// Finished records job id as finishing: its worker is done, and River may
// still be writing its outcome.
func (t *Takeover) Finished(id int64) {
	t.mu.Lock()
	delete(t.working, id)
	t.finishing[id] = struct{}{}
	t.mu.Unlock()
}

// releaseOrphans makes available again the jobs shown running in this
// process for longer than Stale that none of its workers runs.
func (t *Takeover) releaseOrphans(ctx context.Context) ([]queue.TakenOver, error) {
	running, err := t.jobs.RunningJobsOf(ctx, t.cfg.ID, t.cfg.Stale)
	if err != nil {
		return nil, err
	}
	inDB := make(map[int64]bool, len(running))
	var orphans []int64
	t.mu.Lock()
	for _, j := range running {
		inDB[j.ID] = true
		_, w := t.working[j.ID]
		_, f := t.finishing[j.ID]
		if j.Old && !w && !f {
			orphans = append(orphans, j.ID)
		}
	}
	// An outcome no longer running has been written: forget it.
	for id := range t.finishing {
		if !inDB[id] {
			delete(t.finishing, id)
		}
	}
	t.mu.Unlock()
	if len(orphans) == 0 {
		return nil, nil
	}
	released, err := t.jobs.ReleaseOrphans(ctx, t.cfg.ID, orphans)
	if err != nil {
		return nil, err
	}
	if len(released) > 0 {
		t.taken.Add(float64(len(released)))
		t.log.Warn("made available again jobs River showed running in this process that none of its workers ran (a fetch cut off); they are attempted again now",
			"jobs", len(released))
	}
	return released, nil
}

// Heartbeat writes the process's heartbeat once. Call it before the queue
// works jobs, so that none of them is taken for a dead process's.
func (t *Takeover) Heartbeat(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, max(t.cfg.HeartbeatEvery, time.Second))
	defer cancel()
	err := t.q.Heartbeat(ctx, t.cfg.ID, t.started, forgetAfter)
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case err != nil:
		t.upSince = time.Time{}
	case t.upSince.IsZero():
		t.upSince = time.Now()
	}
	return err
}

// Once writes the heartbeat. Once the heartbeats have succeeded for longer
// than Stale, it also takes over the jobs of processes that are gone and
// this process's orphans, and returns them.
func (t *Takeover) Once(ctx context.Context) ([]queue.TakenOver, error) {
	if err := t.Heartbeat(ctx); err != nil {
		return nil, err
	}
	t.mu.Lock()
	up := time.Since(t.upSince)
	t.mu.Unlock()
	if up <= t.cfg.Stale {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, max(t.cfg.HeartbeatEvery, time.Second))
	defer cancel()
	taken, err := t.jobs.TakeOverJobs(ctx, ProcessIDPrefix, t.cfg.Stale, takeoverBatch)
	if err != nil {
		return nil, lookError{err}
	}
	if len(taken) > 0 {
		t.taken.Add(float64(len(taken)))
		byProcess := map[string]int{}
		for _, j := range taken {
			byProcess[j.Process]++
		}
		for p, n := range byProcess {
			t.log.Warn("took over jobs left running by a process that is gone; they are attempted again now",
				"process", p, "jobs", n, "stale_after", t.cfg.Stale)
		}
	}
	lost, err := t.releaseOrphans(ctx)
	if err != nil {
		return taken, lookError{err}
	}
	return append(taken, lost...), nil
}

// lookError is an error of a look for jobs to take over, after the
// heartbeat was written.
type lookError struct{ err error }

func (e lookError) Error() string { return "look for jobs to take over: " + e.err.Error() }
func (e lookError) Unwrap() error { return e.err }

// Run calls [Takeover.Once] every HeartbeatEvery until ctx is done. A
// failed heartbeat and a failed look are each logged once per outage. A
// failed look only delays the takeovers until a later look succeeds: the
// heartbeat was written, so other processes still see this one alive.
func (t *Takeover) Run(ctx context.Context) {
	tick := time.NewTicker(t.cfg.HeartbeatEvery)
	defer tick.Stop()
	beatFailing, lookFailing := false, false
	for {
		_, err := t.Once(ctx)
		if ctx.Err() != nil {
			return
		}
		var look lookError
		isLook := errors.As(err, &look)
		switch {
		case err != nil && !isLook && !beatFailing:
			beatFailing = true
			t.log.Warn("forward heartbeat failed; this process's jobs may be taken over by another if it lasts", "err", err, "stale_after", t.cfg.Stale)
		case (err == nil || isLook) && beatFailing:
			beatFailing = false
			t.log.Info("forward heartbeat written again")
		}
		switch {
		case isLook && !lookFailing:
			lookFailing = true
			t.log.Warn("the look for jobs to take over failed; it is tried again at every heartbeat", "err", look.err, "every", t.cfg.HeartbeatEvery)
		case err == nil && lookFailing:
			lookFailing = false
			t.log.Info("the look for jobs to take over succeeded again")
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Stop deletes the process's row. Call it once the queue stopped working
// jobs. Other processes then take over what it left running.
func (t *Takeover) Stop(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	return t.q.RemoveProcess(ctx, t.cfg.ID)
}
