package queue

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/riverqueue/river/rivertype"

	"github.com/hookgate/hookgate/internal/testing/pgtest"
	"github.com/hookgate/hookgate/internal/testing/queuetest"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// TestMaintenanceJobKeepsItsRows: the maintenance job is the job package
// retention inserted when it was River's: kind hookgate_retention, on the
// queue "maintenance", 3 attempts, unique while unfinished (available,
// pending, retryable, running or scheduled), so that the rows of an
// earlier version are this job's.
func TestMaintenanceJobKeepsItsRows(t *testing.T) {
	t.Parallel()
	a := maintenanceArgs{}
	if a.Kind() != "hookgate_retention" {
		t.Errorf("kind %q, want hookgate_retention", a.Kind())
	}
	opts := a.InsertOpts()
	if opts.Queue != "maintenance" || opts.MaxAttempts != 3 || opts.UniqueOpts.ByArgs || opts.UniqueOpts.ByPeriod != 0 || opts.UniqueOpts.ByQueue {
		t.Errorf("insert options %+v, want the queue maintenance, 3 attempts, unique by state only", opts)
	}
	want := []rivertype.JobState{rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRetryable,
		rivertype.JobStateRunning, rivertype.JobStateScheduled}
	got := slices.Clone(opts.UniqueOpts.ByState)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("unique while %v, want while %v", got, want)
	}
}

// TestMaintenanceRunsOnStart: a working client with a Maintenance runs it
// once at start (and then every Interval), on the maintenance queue, with
// a context that ends at its timeout cut to the client's long-job horizon
// (the rescue horizon minus 5s, here shorter than the Timeout); the job
// completes when Run returns nil.
func TestMaintenanceRunsOnStart(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDB(t)
	cfg := testkit.ParseConfig(t, statesYAML)
	cc := DefaultClientConfig(cfg)
	cc.Pool, cc.Senders, cc.Worker, cc.Log = pool, cfg, unreachable{}, testkit.Logger(t)
	cc.RescueAfter = forwardTimeout(cfg) + 10*time.Second // the long jobs' horizon: 5s below it
	horizon := cc.RescueAfter - rescueMargin
	ran := make(chan time.Duration, 10)
	cc.Maintenance = Maintenance{Interval: time.Hour, Timeout: time.Hour, Run: func(ctx context.Context) error {
		deadline, _ := ctx.Deadline()
		ran <- time.Until(deadline)
		return nil
	}}
	startClient(t, cc)
	select {
	case left := <-ran:
		if left <= 0 || left > horizon {
			t.Errorf("the run's context ends in %s; want within the long-job horizon %s (the Timeout, 1h, cut to it)", left, horizon)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the maintenance job did not run at start")
	}
	testkit.Poll(t, 30*time.Second, "the maintenance run completed", func() bool {
		n, err := queuetest.New(pool).CountJobs(t.Context(), MaintenanceKind, rivertype.JobStateCompleted)
		return err == nil && n == 1
	})
}
