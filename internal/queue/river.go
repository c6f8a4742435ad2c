package queue

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/store"
)

// Queue is what the relay, the fast path, the operator API and the console
// ask of the job queue. It speaks in forwards and their five states, never
// in the queue's own terms. [River] is its one implementation.
type Queue interface {
	// Enqueue inserts the jobs of forwards in tx. That transaction takes
	// them from the outbox, or holds a redelivery's locks.
	Enqueue(ctx context.Context, tx pgx.Tx, forwards []NewForward) ([]Inserted, error)
	// Redeliver queues a new forward of an event to each of its sender's
	// targets. See [River.Redeliver].
	Redeliver(ctx context.Context, sender *config.Sender, eventID uuid.UUID, deliveryID string) ([]Enqueued, error)
	// BulkRedeliver queues a new forward of each forward of a target in a
	// state. See [River.BulkRedeliver].
	BulkRedeliver(ctx context.Context, req BulkRequest) (Bulk, error)
	// RecordFirstAttempts records the outcomes of the fast path's first
	// attempts, and returns the ordered forwards handed off to it. See
	// [Jobs.RecordAndHandOff].
	RecordFirstAttempts(ctx context.Context, batch []FirstAttempt) ([]store.HandedOff, error)
	// EventForwards reads the state of an event's forwards.
	EventForwards(ctx context.Context, sender string, eventID uuid.UUID) ([]Forward, error)
}

var _ Queue = (*River)(nil)

// NewForward is a forward to enqueue: an event of Sender to Target.
type NewForward struct {
	Sender     string
	Target     string
	EventID    uuid.UUID
	DeliveryID string
	// After, when not 0, queues the forward after the one under way, as
	// [Args.After] says. Such a forward is inserted beside the one it
	// follows. Any other forward is not inserted while one of the same
	// event to the same target is unfinished.
	After int64
	// OrderKey and Seq are an ordered forward's key and position.
	OrderKey string
	Seq      int64
}

// Inserted is what Enqueue did with a forward.
type Inserted struct {
	// JobID is the new job, or the unfinished one that made it a
	// duplicate.
	JobID int64
	// Duplicate reports that a forward of the event to the target was
	// unfinished, so none was inserted.
	Duplicate bool
}

// River is the [Queue] on River. Its client inserts forward jobs. When it
// was made with a worker, it also works them, the bulk redeliveries and the
// maintenance job.
type River struct {
	client *river.Client[pgx.Tx]
	pool   *pgxpool.Pool
	jobs   *Jobs
	// senders gives the forwards' max_attempts when they are inserted.
	senders config.Source
	// sched makes the forwards available when they are due. It is nil in
	// a client that only inserts.
	sched     *forwardScheduler
	schedMu   sync.Mutex
	stopSched func()
}

// Jobs returns the forwards' statements on the queue's pool.
func (r *River) Jobs() *Jobs { return r.jobs }

// Start starts working jobs; a client that only inserts does nothing. It
// starts the forwards' scheduler first, which makes the due forwards
// available once before River's client starts.
func (r *River) Start(ctx context.Context) error {
	if r.sched != nil {
		r.schedMu.Lock()
		if r.stopSched == nil {
			r.stopSched = r.sched.start(ctx)
		}
		r.schedMu.Unlock()
	}
	if err := r.client.Start(ctx); err != nil {
		r.stopScheduling()
		return err
	}
	return nil
}

// Stop stops fetching jobs and waits for those under way until ctx ends,
// and stops the scheduling of the forwards.
func (r *River) Stop(ctx context.Context) error {
	defer r.stopScheduling()
	return r.client.Stop(ctx)
}

// StopAndCancel cancels the jobs under way and waits for them until ctx
// ends, and stops the scheduling of the forwards.
func (r *River) StopAndCancel(ctx context.Context) error {
	defer r.stopScheduling()
	return r.client.StopAndCancel(ctx)
}

func (r *River) stopScheduling() {
	r.schedMu.Lock()
	stop := r.stopSched
	r.stopSched = nil
	r.schedMu.Unlock()
	if stop != nil {
		stop()
	}
}

// Enqueue inserts the jobs of forwards in tx. A forward gets its target's
// max attempts. It gets River's default for a target that this process
// does not know; during a rolling deploy, workers that know it work it.
func (r *River) Enqueue(ctx context.Context, tx pgx.Tx, forwards []NewForward) ([]Inserted, error) {
	if len(forwards) == 0 {
		return nil, nil
	}
	params := make([]river.InsertManyParams, 0, len(forwards))
	cfg := r.senders.Current()
	for _, f := range forwards {
		s, _ := cfg.Sender(f.Sender)
		if f.After != 0 {
			params = append(params, afterParams(f.Sender, s, f.Target, f.EventID, f.DeliveryID, f.After))
		} else {
			params = append(params, orderedParams(jobParams(f.Sender, s, f.Target, f.EventID, f.DeliveryID), f.OrderKey, f.Seq))
		}
	}
	res, err := r.client.InsertManyTx(ctx, tx, params)
	if err != nil {
		return nil, fmt.Errorf("insert forward jobs: %w", err)
	}
	out := make([]Inserted, len(res))
	keys := map[string][]ForwardKey{}
	var senders []string
	for i, x := range res {
		out[i] = Inserted{JobID: x.Job.ID, Duplicate: x.UniqueSkippedAsDuplicate}
		if x.UniqueSkippedAsDuplicate {
			continue
		}
		f := forwards[i]
		if keys[f.Sender] == nil {
			senders = append(senders, f.Sender)
		}
		keys[f.Sender] = append(keys[f.Sender], ForwardKey{Target: f.Target, EventID: f.EventID, Newer: x.Job.ID})
	}
	// The new jobs supersede failed forwards of the same event to the same
	// target, such as one redelivered while this one was in the outbox.
	var b pgx.Batch
	for _, s := range senders {
		queueMarks(&b, s, keys[s], false)
	}
	if b.Len() > 0 {
		if err := tx.SendBatch(ctx, &b).Close(); err != nil {
			return nil, fmt.Errorf("mark the failed forwards the new jobs follow: %w", err)
		}
	}
	return out, nil
}

// Redeliver queues a new forward of an event to each of its sender's
// targets.
func (r *River) Redeliver(ctx context.Context, sender *config.Sender, eventID uuid.UUID, deliveryID string) ([]Enqueued, error) {
	return redeliver(ctx, r.jobs, r.client, sender, eventID, deliveryID)
}

// BulkRedeliver queues a new forward of each forward that req matches.
func (r *River) BulkRedeliver(ctx context.Context, req BulkRequest) (Bulk, error) {
	return bulkRedeliver(ctx, r.jobs, r.client, req)
}

// RecordFirstAttempts records the fast path's outcomes on
// [ForwardQueue].
func (r *River) RecordFirstAttempts(ctx context.Context, batch []FirstAttempt) ([]store.HandedOff, error) {
	return r.jobs.RecordAndHandOff(ctx, ForwardQueue, batch)
}

// EventForwards calls [Jobs.EventForwards] on the queue's pool.
func (r *River) EventForwards(ctx context.Context, sender string, eventID uuid.UUID) ([]Forward, error) {
	return r.jobs.EventForwards(ctx, sender, eventID)
}

// Job is a forward job as its worker sees it: the forward and how far its
// attempts are.
type Job struct {
	Args
	ID int64
	// Attempt is the attempt under way, from 1. MaxAttempts is how many
	// may be made.
	Attempt, MaxAttempts int
	// Probed reports that the forward was sent before as a probe of its
	// target's open breaker. River did not count that attempt.
	Probed bool
	// TakenOver reports that the previous attempt was cut by its
	// process's death, and this process took the job over.
	TakenOver bool
	// WaitedAfter is the attempt after which the job waited once it was
	// taken over ([MarkWaitedAfterTakeover]), or 0.
	WaitedAfter int
}

// Tried reports whether the job's forward was sent to its target before.
func (j Job) Tried() bool { return j.Attempt > 1 || j.Probed }

// ForwardWorker works forward jobs. Work's error decides what follows.
// Nil means delivered. [Snooze] waits without using an attempt. [Cancel]
// fails the forward with no retries. Any other error retries it at
// NextRetry, or fails it when the attempts are used up.
type ForwardWorker interface {
	Work(ctx context.Context, job Job) error
	// Timeout is how long an attempt of job may run.
	Timeout(job Job) time.Duration
	// NextRetry is when the retry after job's failed attempt is due.
	NextRetry(job Job) time.Time
}

// Snooze returns the error that makes a job wait d without using an
// attempt.
func Snooze(d time.Duration) error { return river.JobSnooze(d) }

// Cancel returns the error that fails a job at once, for err.
func Cancel(err error) error { return river.JobCancel(err) }

// IsCancel reports whether err is, or wraps, an error of [Cancel].
func IsCancel(err error) bool {
	_, ok := errors.AsType[*rivertype.JobCancelError](err)
	return ok
}

// RecordOutput records out as the outcome of the attempt under way of the
// job whose context ctx is.
func RecordOutput(ctx context.Context, out Output) error { return river.RecordOutput(ctx, out) }

// probedKey marks a job's metadata when its forward was sent as a probe of
// an open breaker and snoozed after it failed. The forward then counts as
// tried, although River did not count the attempt.
const probedKey = "hookgate_probed"

// MarkProbed marks the job of ctx as sent, after a failed probe of an open
// breaker. From then on its [Job.Probed] is true.
func MarkProbed(ctx context.Context) error { return river.MetadataSet(ctx, probedKey, true) }

// waitedKey marks a job's metadata with the attempt after which it waited,
// once taken over.
const waitedKey = "hookgate_waited_after_takeover"

// MarkWaitedAfterTakeover marks the job of ctx, taken over after attempt,
// as having waited for that attempt's end: its [Job.WaitedAfter] is then
// attempt. Snoozed, the job runs again as the same attempt.
func MarkWaitedAfterTakeover(ctx context.Context, attempt int) error {
	return river.MetadataSet(ctx, waitedKey, attempt)
}

// waitedAfter reads waitedKey from a job's metadata, 0 when absent.
func waitedAfter(metadata []byte) int {
	if !bytes.Contains(metadata, []byte(`"`+waitedKey+`"`)) {
		return 0
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(metadata, &m) != nil {
		return 0
	}
	var n int
	_ = json.Unmarshal(m[waitedKey], &n)
	return n
}

// forwardWorker adapts a [ForwardWorker] to River's worker of forward jobs.
type forwardWorker struct {
	river.WorkerDefaults[Args]
	w ForwardWorker
}

func jobOf(job *river.Job[Args]) Job {
	return Job{Args: job.Args, ID: job.ID, Attempt: job.Attempt, MaxAttempts: job.MaxAttempts,
		Probed: bytes.Contains(job.Metadata, []byte(`"`+probedKey+`"`)), TakenOver: takenOver(job.Errors, job.Attempt), WaitedAfter: waitedAfter(job.Metadata)}
}

// takenOverPrefix starts the error a takeover adds to a job (takeOverSet).
const takenOverPrefix = "taken over: "

// takenOver reports whether the last of errs says a takeover ended the
// attempt before attempt.
func takenOver(errs []rivertype.AttemptError, attempt int) bool {
	if len(errs) == 0 {
		return false
	}
	e := errs[len(errs)-1]
	return e.Attempt == attempt-1 && strings.HasPrefix(e.Error, takenOverPrefix)
}

func (f *forwardWorker) Work(ctx context.Context, job *river.Job[Args]) error {
	return f.w.Work(ctx, jobOf(job))
}

func (f *forwardWorker) Timeout(job *river.Job[Args]) time.Duration { return f.w.Timeout(jobOf(job)) }

func (f *forwardWorker) NextRetry(job *river.Job[Args]) time.Time { return f.w.NextRetry(jobOf(job)) }

// JobTracker learns which jobs this process's workers run. Started is
// called when a worker takes a job, and Finished when it is done with it.
type JobTracker interface {
	Started(id int64)
	Finished(id int64)
}

// trackJobs is the River middleware that tells a JobTracker.
type trackJobs struct {
	river.MiddlewareDefaults
	t JobTracker
}

func (m *trackJobs) Work(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) error {
	m.t.Started(job.ID)
	defer m.t.Finished(job.ID)
	return doInner(ctx)
}
