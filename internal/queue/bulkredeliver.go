package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/hookgate/hookgate/internal/config"
)

// Bulk redelivery: every failed (or delivered) forward of one target in a
// time window is forwarded again, with the same idempotency key (the event
// ID). The request counts the forwards it matches and enqueues one River
// job (BulkArgs) that inserts their new forward jobs in batches of
// BulkBatch, each batch its own short transaction, so that neither the
// request nor any transaction grows with the number matched.
//
// It is safe to repeat at any time, and to run the job twice (River rescues
// a job it believes stuck): a forward matched is the newest forward of its
// event to the target, and each batch's new jobs supersede what it
// redelivered, so a second run (or a second request) does not match them
// again; a forward still pending is never inserted twice (River's unique
// insert on sender, event and target, as everywhere). A batch and a single
// redelivery (Redeliver) of one of its events never both queue a new
// forward: the batch takes its sender's redelivery lock, reads the batch
// again and inserts in one transaction (lockedAgain), as a single
// redelivery reads and inserts under its event's lock (and its sender's,
// shared: Jobs.LockRedelivery).
//
// A redelivery is a new attempt: the forwards of a target that are running
// or retrying can be redelivered in bulk too (state running or retrying).
// Each gets a new forward queued after it, as a single redelivery of its
// event queues one (afterParams): sent once the forward under way has
// ended, without using attempts while it waits. The job matches the
// forwards that were in the state when the request was made, whatever they
// have become since (a new attempt was asked for all the same:
// Filter.InStateAt); the new forward then is the newest of its
// event, so that a second request does not match it again.

// BulkQueue is the River queue of bulk redeliveries; each worker process
// works one at a time.
const BulkQueue = "hookgate_bulk"

// BulkBatch is how many forwards one transaction of a bulk redelivery
// inserts.
const BulkBatch = 1000

// BulkArgs are the arguments of a bulk redelivery job. Two requests with the
// same sender, target, state and window while one's job has not finished
// make one job.
type BulkArgs struct {
	Sender string     `json:"sender" river:"unique"`
	Target string     `json:"target" river:"unique"`
	State  State      `json:"state" river:"unique"`
	Since  *time.Time `json:"since,omitempty" river:"unique"`
	Until  *time.Time `json:"until,omitempty" river:"unique"`
	// MaxJobID is the newest forward job when the request was made: the
	// job redelivers forwards up to it, never the ones inserted since.
	MaxJobID int64 `json:"max_job_id"`
	// At is when the request was made (the database's time): a bulk
	// redelivery of forwards under way matches those that were in State
	// then, whatever they have become since.
	At *time.Time `json:"at,omitempty"`
}

// Kind is the River job kind of bulk redeliveries.
func (BulkArgs) Kind() string { return "hookgate_bulk_redeliver" }

func (a BulkArgs) filter() Filter {
	f := Filter{Sender: a.Sender, Target: a.Target, State: a.State}
	if a.Since != nil {
		f.Since = *a.Since
	}
	if a.Until != nil {
		f.Until = *a.Until
	}
	if a.At != nil {
		f.InStateAt = *a.At
	}
	return f
}

// afterCurrent reports whether a bulk redelivery of forwards in state s
// queues each new forward after the one under way.
func afterCurrent(s State) bool { return s == StateRunning || s == StateRetrying }

// BulkRequest is what to redeliver: the forwards of Sender's target Target
// that are in State (StateFailed, StateDelivered, StateRunning or
// StateRetrying) and reached it at or after Since and before Until (no
// bound when zero; for forwards under way, when they were enqueued).
type BulkRequest struct {
	Sender       *config.Sender
	Target       string
	State        State
	Since, Until time.Time
}

// ErrBulkState is returned for a bulk redelivery of a state other than
// failed, delivered, running or retrying.
var ErrBulkState = errors.New("only failed, delivered, running or retrying forwards can be redelivered in bulk")

// Bulk is what a bulk redelivery request did.
type Bulk struct {
	// Matched is how many forwards it matched (0: nothing was enqueued).
	Matched int64
	// AfterCurrent: the matched forwards were under way (running or
	// retrying), and each new forward is queued after its current one.
	AfterCurrent bool
}

// ErrUnknownTarget is returned for a target the sender does not have.
var ErrUnknownTarget = errors.New("no such target")

// BulkRedeliver counts the forwards req matches and, when there are any,
// enqueues a job (worked by any worker process) that forwards each matched
// event again to the target: for forwards running or retrying, after the
// one under way. It returns how many it matched: 0, with no job, when
// none. The count includes forwards that a job of an identical request
// still running is about to redeliver; they are redelivered once.
func bulkRedeliver(ctx context.Context, q *Jobs, client *river.Client[pgx.Tx], req BulkRequest) (Bulk, error) {
	if req.State != StateFailed && req.State != StateDelivered && !afterCurrent(req.State) {
		return Bulk{}, ErrBulkState
	}
	if _, ok := req.Sender.Target(req.Target); !ok {
		return Bulk{}, fmt.Errorf("target %q of sender %q: %w", req.Target, req.Sender.Name, ErrUnknownTarget)
	}
	res := Bulk{AfterCurrent: afterCurrent(req.State)}
	args := BulkArgs{Sender: req.Sender.Name, Target: req.Target, State: req.State}
	if !req.Since.IsZero() {
		t := req.Since.UTC()
		args.Since = &t
	}
	if !req.Until.IsZero() {
		t := req.Until.UTC()
		args.Until = &t
	}
	maxID, at, err := q.NewestJobID(ctx)
	if err != nil {
		return Bulk{}, fmt.Errorf("bulk redeliver: %w", err)
	}
	args.MaxJobID = maxID
	if res.AfterCurrent {
		args.At = &at
	}
	// Counted as the request sees them: in req.State now.
	count := args.filter()
	count.InStateAt = time.Time{}
	if res.Matched, err = q.CountBulkMatch(ctx, count, args.MaxJobID); err != nil {
		return Bulk{}, fmt.Errorf("bulk redeliver: %w", err)
	}
	if req.State == StateRunning {
		// The fast path's first attempts in flight: outbox rows, not jobs.
		n, err := q.CountFastPathRunning(ctx, count, at)
		if err != nil {
			return Bulk{}, fmt.Errorf("bulk redeliver: %w", err)
		}
		res.Matched += n
	}
	if res.Matched == 0 {
		return res, nil
	}
	_, err = client.Insert(ctx, args, &river.InsertOpts{
		Queue:       BulkQueue,
		MaxAttempts: 5,
		UniqueOpts:  river.UniqueOpts{ByArgs: true, ByState: uniqueStates},
	})
	if err != nil {
		return Bulk{}, fmt.Errorf("bulk redeliver: enqueue: %w", err)
	}
	return res, nil
}

// BulkWorker works bulk redelivery jobs.
type BulkWorker struct {
	river.WorkerDefaults[BulkArgs]
	pool    *pgxpool.Pool
	senders config.Source
	log     *slog.Logger
	batch   int
	// timeout is BulkTimeout, or less under a shorter rescue horizon.
	timeout time.Duration
}

// BulkTimeout is the longest a bulk redelivery runs before it stops; it
// carries on where it stopped at its next attempt.
const BulkTimeout = time.Hour

// BulkWorkerConfig configures a BulkWorker (NewBulkWorker): its
// dependencies, all required.
type BulkWorkerConfig struct {
	// Pool is the database of the forwards redelivered.
	Pool *pgxpool.Pool
	// Senders is the senders' configuration: a bulk redelivery of a
	// sender or target it no longer has fails, and the new jobs get their
	// target's max_attempts. Read when a job starts (a *config.Config, or
	// the process's sender.Live).
	Senders config.Source
	// Log is where what a bulk redelivery did is logged.
	Log *slog.Logger
}

// validate returns an error naming the dependency missing, or nil.
func (c BulkWorkerConfig) validate() error {
	var errs []error
	if c.Pool == nil {
		errs = append(errs, errors.New("bulk worker config: Pool: nil: the database of the forwards is required"))
	}
	if c.Senders == nil {
		errs = append(errs, errors.New("bulk worker config: Senders: nil: the senders' configuration is required"))
	}
	if c.Log == nil {
		errs = append(errs, errors.New("bulk worker config: Log: nil: a logger is required"))
	}
	return errors.Join(errs...)
}

// NewBulkWorker returns the worker of bulk redeliveries, which inserts the
// new forward jobs with the River client that runs it; an error naming the
// field when cfg lacks a dependency.
func NewBulkWorker(cfg BulkWorkerConfig) (*BulkWorker, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &BulkWorker{pool: cfg.Pool, senders: cfg.Senders, log: cfg.Log, batch: BulkBatch, timeout: BulkTimeout}, nil
}

// Timeout lets a bulk redelivery run for up to BulkTimeout (less when the
// client's rescue horizon is shorter); each batch commits on its own, so a
// job cut short and retried carries on where it stopped.
func (w *BulkWorker) Timeout(*river.Job[BulkArgs]) time.Duration { return w.timeout }

// Work redelivers the matched forwards batch by batch, oldest first. The
// target's current configuration sets the new jobs' max_attempts; a sender
// or target no longer configured fails the job at once.
func (w *BulkWorker) Work(ctx context.Context, job *river.Job[BulkArgs]) error {
	a := job.Args
	sender, ok := w.senders.Current().Sender(a.Sender)
	if !ok {
		return river.JobCancel(fmt.Errorf("sender %q is not configured", a.Sender))
	}
	if _, ok := sender.Target(a.Target); !ok {
		return river.JobCancel(fmt.Errorf("target %q of sender %q is not configured", a.Target, a.Sender))
	}
	client := river.ClientFromContext[pgx.Tx](ctx)
	var after, total int64
	if a.State == StateRunning && a.At != nil {
		n, err := w.fastPathRunning(ctx, client, sender, a)
		if err != nil {
			return err
		}
		total += n
	}
	for {
		var n, read int
		err := pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
			q := NewJobs(tx)
			matched, err := q.BulkMatchBatch(ctx, a.filter(), a.MaxJobID, after, w.batch)
			if err != nil {
				return err
			}
			read = len(matched)
			if read == 0 {
				return nil
			}
			// The batch again under its sender's redelivery lock, up to its
			// last forward: one that a single redelivery superseded in
			// between is no longer matched.
			last := matched[read-1].JobID
			if matched, err = lockedAgain(ctx, q, a.Sender, matched, func(limit int) ([]Matched, error) {
				return q.BulkMatchBatch(ctx, a.filter(), last, after, limit)
			}); err != nil {
				return err
			}
			after = last
			params := make([]river.InsertManyParams, 0, len(matched))
			for _, m := range matched {
				if afterCurrent(a.State) {
					params = append(params, afterParams(a.Sender, sender, a.Target, m.EventID, m.DeliveryID, m.JobID))
				} else {
					params = append(params, jobParams(a.Sender, sender, a.Target, m.EventID, m.DeliveryID))
				}
			}
			if len(params) == 0 {
				return nil
			}
			res, err := client.InsertManyTx(ctx, tx, params)
			if err != nil {
				return fmt.Errorf("insert forwards: %w", err)
			}
			n = len(params)
			return q.markSuperseded(ctx, a.Sender, insertedKeys(a.Target, matched, res), true)
		})
		if err != nil {
			return fmt.Errorf("bulk redeliver %s/%s after job %d: %w", a.Sender, a.Target, after, err)
		}
		total += int64(n)
		if read < w.batch {
			w.log.Info("bulk redelivery done", "sender", a.Sender, "target", a.Target, "state", a.State, "forwards", total)
			return nil
		}
		if d, ok := ctx.Deadline(); ok && time.Until(d) < bulkSliceMargin {
			// The slice is nearly over: carry on in a new one without
			// using an attempt (what is redelivered no longer matches).
			w.log.Info("bulk redelivery continues in a new slice", "sender", a.Sender, "target", a.Target, "forwards", total)
			return river.JobSnooze(0)
		}
	}
}

// fastPathRunning queues a redelivery after each of the fast path's first
// attempts that were under way when a bulk redelivery of running forwards
// was asked for (store.FastPathRunningBatch), as a single redelivery
// queues one after such an attempt (Redeliver: after -1 while it is not a
// job yet), batch by batch, and returns how many it queued. Each batch's
// redeliveries take their events out of the next batch, and out of a
// second run of the job.
func (w *BulkWorker) fastPathRunning(ctx context.Context, client *river.Client[pgx.Tx], sender *config.Sender, a BulkArgs) (int64, error) {
	var total int64
	for {
		var n, read int
		err := pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
			q := NewJobs(tx)
			matched, err := q.FastPathRunningBatch(ctx, a.filter(), w.batch)
			if err != nil {
				return err
			}
			read = len(matched)
			if read == 0 {
				return nil
			}
			if matched, err = lockedAgain(ctx, q, a.Sender, matched, func(limit int) ([]Matched, error) {
				return q.FastPathRunningBatch(ctx, a.filter(), limit)
			}); err != nil {
				return err
			}
			if len(matched) == 0 {
				return nil
			}
			params := make([]river.InsertManyParams, 0, len(matched))
			for _, m := range matched {
				params = append(params, afterParams(a.Sender, sender, a.Target, m.EventID, m.DeliveryID, m.JobID))
			}
			res, err := client.InsertManyTx(ctx, tx, params)
			if err != nil {
				return fmt.Errorf("insert forwards: %w", err)
			}
			n = len(params)
			return q.markSuperseded(ctx, a.Sender, insertedKeys(a.Target, matched, res), true)
		})
		if err != nil {
			return total, fmt.Errorf("bulk redeliver %s/%s: the fast path's forwards under way: %w", a.Sender, a.Target, err)
		}
		total += int64(n)
		if read < w.batch {
			return total, nil
		}
	}
}

// lockedAgain takes the redelivery lock of sender (exclusively: it waits
// for the single redeliveries of its events under way), then reads the
// batch matched, just read, again (again, up to limit forwards, in a
// statement that starts once the lock is held) and returns the forwards of
// matched that it still matches. A single redelivery of one of those
// events (Redeliver) that committed before the lock was taken has
// superseded its forward, or queued a redelivery after it: the batch no
// longer matches it, and it gets no second new forward. One that comes
// after waits for the batch's COMMIT, and then finds the batch's new
// forward pending. Forwards the second read matches that the first did not
// are left out: they were not in the batch. The second read is asked for
// twice as many as the batch, and again with twice the limit while it
// returns as many as asked, so that forwards matched since cannot push one
// of the batch out.
func lockedAgain(ctx context.Context, q *Jobs, sender string, matched []Matched, again func(limit int) ([]Matched, error)) ([]Matched, error) {
	if err := q.LockBulkRedelivery(ctx, sender); err != nil {
		return nil, err
	}
	var now []Matched
	for limit := 2 * len(matched); ; limit *= 2 {
		var err error
		if now, err = again(limit); err != nil {
			return nil, err
		}
		if len(now) < limit {
			break
		}
	}
	still := make(map[Matched]bool, len(now))
	for _, m := range now {
		still[m] = true
	}
	out := matched[:0]
	for _, m := range matched {
		if still[m] {
			out = append(out, m)
		}
	}
	return out, nil
}

// bulkSliceMargin is how much of a bulk redelivery's slice is left when it
// stops between batches and snoozes itself to carry on: far more than a
// batch takes.
const bulkSliceMargin = 10 * time.Second

// insertedKeys returns the keys of the forwards of target matched whose
// new jobs res inserted (in matched's order; none skipped as a
// duplicate), with those jobs' IDs: what they supersede (failed.go).
func insertedKeys(target string, matched []Matched, res []*rivertype.JobInsertResult) []ForwardKey {
	keys := make([]ForwardKey, 0, len(res))
	for i, r := range res {
		if r.UniqueSkippedAsDuplicate {
			continue
		}
		keys = append(keys, ForwardKey{Target: target, EventID: matched[i].EventID, Newer: r.Job.ID})
	}
	return keys
}
