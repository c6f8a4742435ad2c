package forward

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/hookgate/hookgate/internal/queue"
)

// The forward package reads and changes forward jobs through the small
// interfaces below. The process builds one [queue.Jobs], which implements
// them all, and hands it to each component.

// Sequence orders a redelivery after the forwards of its event that are
// still under way. The [Worker] uses it.
type Sequence interface {
	EarlierForwardUnfinished(ctx context.Context, sender, target string, eventID uuid.UUID, jobID int64) (bool, error)
	MarkSupersededFailures(ctx context.Context, sender, target string, eventID uuid.UUID) error
}

// Waker makes the waiting forwards of a target available at once. The
// [Gate] wakes them when a breaker closes, [Pauses] when a pause ends.
type Waker interface {
	WakeWaitingForwards(ctx context.Context, queue, sender, target string) (int64, error)
	WakeHeldForwards(ctx context.Context, queue, sender, target string) (int64, error)
}

// Orphans finds and releases the jobs left running by processes that are
// gone. The [Takeover] uses it.
type Orphans interface {
	RunningJobsOf(ctx context.Context, process string, age time.Duration) ([]queue.RunningJob, error)
	ReleaseOrphans(ctx context.Context, process string, ids []int64) ([]queue.TakenOver, error)
	TakeOverJobs(ctx context.Context, prefix string, stale time.Duration, limit int) ([]queue.TakenOver, error)
}

// BacklogCounter counts the forwards not yet finished, by state. The
// collector of [NewBacklogCollector] uses it.
type BacklogCounter interface {
	Backlog(ctx context.Context, senders []string) (map[string]int64, error)
}

// The one [queue.Jobs] of a process serves every interface.
var (
	_ Sequence       = (*queue.Jobs)(nil)
	_ Waker          = (*queue.Jobs)(nil)
	_ Orphans        = (*queue.Jobs)(nil)
	_ BacklogCounter = (*queue.Jobs)(nil)
)
