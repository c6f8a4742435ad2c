package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/riverqueue/river"
)

// Maintenance is a periodic job that a working client runs beside the
// forwards, such as hookgate's retention. It runs on a queue of its own,
// one run at a time, every Interval and once at start. A zero Maintenance
// has none.
type Maintenance struct {
	// Interval is how often a run is enqueued. At most one run waits or
	// runs at a time.
	Interval time.Duration
	// Timeout is the longest a run takes. A shorter rescue horizon cuts it
	// to RescueAfter minus 5s. A run cut short leaves the rest to the next.
	Timeout time.Duration
	// Run does the work. Its ctx ends at the timeout, or when the client
	// stops and cancels its jobs. An error fails the attempt, which is
	// retried up to [MaintenanceMaxAttempts] in all.
	Run func(ctx context.Context) error
}

// validate returns an error naming the field at fault.
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

// MaintenanceKind is the River job kind of the maintenance job. It keeps
// the retention job's kind, so that a waiting run in the table and its
// unique key stay the same job's.
const MaintenanceKind = "hookgate_retention"

// MaintenanceMaxAttempts is how many attempts a maintenance run gets.
const MaintenanceMaxAttempts = 3

// maintenanceArgs are the maintenance job's arguments. It has none.
type maintenanceArgs struct{}

// Kind is MaintenanceKind.
func (maintenanceArgs) Kind() string { return MaintenanceKind }

// InsertOpts keeps at most one maintenance job waiting or running.
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

// Timeout is [Maintenance.Timeout], cut to the client's long-job horizon.
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
