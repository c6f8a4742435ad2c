package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/riverqueue/river"
)

// Maintenance is the job a working client runs beside the forwards, on a
// queue of its own one run at a time: hookgate's retention
// (retention.Worker.Maintenance), enqueued every Interval and once at
// start, by one process at a time. A zero Maintenance (Run nil) has none.
type Maintenance struct {
	// Interval is how often a run is enqueued (and once at start),
	// positive. At most one run waits or runs at a time: a run not started
	// by the next interval is not enqueued again.
	Interval time.Duration
	// Timeout is the longest a run takes, positive: less when the client's
	// rescue horizon is shorter (its RescueAfter minus 5s). A run cut
	// short leaves the rest to the next one.
	Timeout time.Duration
	// Run does the work; its ctx ends at the timeout, or when the client
	// is stopped and cancels its jobs. An error fails the attempt: it is
	// retried, at most MaintenanceMaxAttempts attempts in all.
	Run func(ctx context.Context) error
}

// validate returns an error naming the field at fault, or nil (none for a
// zero Maintenance).
func (m Maintenance) validate() error {
	if m.Run == nil {
		return nil
	}
	var errs []error
	if m.Interval <= 0 {
		errs = append(errs, fmt.Errorf("forward client config: Maintenance.Interval %s: must be positive", m.Interval))
	}
	if m.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("forward client config: Maintenance.Timeout %s: must be positive", m.Timeout))
	}
	return errors.Join(errs...)
}

// MaintenanceQueue is the River queue of the maintenance job.
const MaintenanceQueue = "maintenance"

// MaintenanceKind is the River job kind of the maintenance job: the kind
// package retention gave its job when it was River's, kept so that the
// rows of earlier versions (a run waiting, its unique key) are the same
// job's.
const MaintenanceKind = "hookgate_retention"

// MaintenanceMaxAttempts is how many attempts a maintenance run gets.
const MaintenanceMaxAttempts = 3

// maintenanceArgs are the maintenance job's arguments (none).
type maintenanceArgs struct{}

// Kind is MaintenanceKind.
func (maintenanceArgs) Kind() string { return MaintenanceKind }

// InsertOpts keeps at most one maintenance job waiting or running (unique
// while unfinished: uniqueStates, River's states of a job not finished
// yet), on MaintenanceQueue, with MaintenanceMaxAttempts.
func (maintenanceArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{
		Queue:       MaintenanceQueue,
		MaxAttempts: MaintenanceMaxAttempts,
		UniqueOpts:  river.UniqueOpts{ByState: uniqueStates},
	}
}

// maintenanceWorker is River's worker of the maintenance job.
type maintenanceWorker struct {
	river.WorkerDefaults[maintenanceArgs]
	run     func(ctx context.Context) error
	timeout time.Duration
}

// Timeout is Maintenance.Timeout, cut to the client's long-job horizon.
func (w *maintenanceWorker) Timeout(*river.Job[maintenanceArgs]) time.Duration { return w.timeout }

// Work runs Maintenance.Run.
func (w *maintenanceWorker) Work(ctx context.Context, _ *river.Job[maintenanceArgs]) error {
	return w.run(ctx)
}

// periodicJob enqueues the maintenance job every m.Interval, and once at
// start.
func (m Maintenance) periodicJob() *river.PeriodicJob {
	return river.NewPeriodicJob(river.PeriodicInterval(m.Interval),
		func() (river.JobArgs, *river.InsertOpts) { return maintenanceArgs{}, nil },
		&river.PeriodicJobOpts{RunOnStart: true})
}
