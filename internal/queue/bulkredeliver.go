package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/hookgate/hookgate/internal/config"
)

// Bulk redelivery forwards again every forward of one target that is in a
// given state within a time window. The new forwards keep their event ID as
// the idempotency key. The request counts the matches and enqueues one
// [BulkArgs] job. That job inserts the new forward jobs in batches of
// [BulkBatch], one short transaction each, so no transaction grows with the
// number matched.
//
// It is safe to repeat, and safe when River runs the job twice. A match is
// the newest forward of its event to the target, and each batch's new jobs
// supersede it, so a second run does not match it again. River's unique
// insert never queues a pending forward twice. A batch and a single
// redelivery of one of its events never both queue a forward: see
// lockedAgain.
//
// Running and retrying forwards can be redelivered too. Each gets a new
// forward queued after the one under way, which waits without using
// attempts. The job matches the forwards that were in the state when the
// request was made, whatever they became since ([Filter.InStateAt]).

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
	// MaxJobID is the newest forward job when the request was made. The
	// job never redelivers forwards inserted after it.
	MaxJobID int64 `json:"max_job_id"`
	// At is the database's time of the request. A redelivery of forwards
	// under way matches those that were in State at that time.
	At *time.Time `json:"at,omitempty"`
	// By is who asked for the redelivery; see [Args.By].
	By string `json:"by,omitempty"`
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

// BulkRequest is what to redeliver: the forwards of Sender's Target that
// are in State and reached it in [Since, Until). A zero time is no bound.
// For forwards under way, the window applies to when they were enqueued.
// State is [StateFailed], [StateDelivered], [StateRunning] or
// [StateRetrying].
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
	// Matched is how many forwards it matched. Nothing is enqueued for 0.
	Matched int64
	// AfterCurrent reports that the matched forwards were under way, so
	// each new forward is queued after the current one.
	AfterCurrent bool
}

// ErrUnknownTarget is returned for a target the sender does not have.
var ErrUnknownTarget = errors.New("no such target")

// bulkRedeliver counts the forwards that req matches. When there are any,
// it enqueues a job that forwards each matched event again to the target.
// The count includes forwards that a running job of an identical request
// is about to redeliver; each is still redelivered once.
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
	args.MaxJobID, args.By = maxID, RedeliveredBy(ctx)
	if res.AfterCurrent {
		args.At = &at
	}
	// Count the forwards in req.State now, as the request sees them.
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

// BulkTimeout is the longest a bulk redelivery runs before it stops. Its
// next attempt carries on where it stopped.
const BulkTimeout = time.Hour

// BulkWorkerConfig holds the dependencies of a [BulkWorker]. All are
// required.
type BulkWorkerConfig struct {
	// Pool is the database of the forwards redelivered.
	Pool *pgxpool.Pool
	// Senders is the senders' configuration, read when a job starts. A
	// job fails for a sender or target it no longer has. The new jobs get
	// their target's max_attempts.
	Senders config.Source
	// Log is where what a bulk redelivery did is logged.
	Log *slog.Logger
}

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

// NewBulkWorker returns the worker of bulk redeliveries. It inserts the
// new forward jobs with the River client that runs it.
func NewBulkWorker(cfg BulkWorkerConfig) (*BulkWorker, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &BulkWorker{pool: cfg.Pool, senders: cfg.Senders, log: cfg.Log, batch: BulkBatch, timeout: BulkTimeout}, nil
}

// Timeout lets a bulk redelivery run for up to [BulkTimeout]. Each batch
// commits on its own, so a retry carries on where the job stopped.
func (w *BulkWorker) Timeout(*river.Job[BulkArgs]) time.Duration { return w.timeout }

// Work redelivers the matched forwards batch by batch, oldest first. The
// job is cancelled when its sender or target is no longer configured.
func (w *BulkWorker) Work(ctx context.Context, job *river.Job[BulkArgs]) error {
	a := job.Args
	sender, ok := w.senders.Current().Sender(a.Sender)
	if !ok {
		return river.JobCancel(fmt.Errorf("sender %q is not configured", a.Sender))
	}
	target, ok := sender.Target(a.Target)
	if !ok {
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
			// Read the batch again under the sender's redelivery lock. A
			// forward that a single redelivery superseded meanwhile drops out.
			last := matched[read-1].JobID
			if matched, err = lockedAgain(ctx, q, a.Sender, matched, func(limit int) ([]Matched, error) {
				return q.BulkMatchBatch(ctx, a.filter(), last, after, limit)
			}); err != nil {
				return err
			}
			after = last
			if target.Ordering != nil && !afterCurrent(a.State) {
				// The batch writes its keys in the order it matched the
				// forwards: lock them first, in the ingest's order.
				events := make([]uuid.UUID, len(matched))
				for i, m := range matched {
					events[i] = m.EventID
				}
				if err := lockOrderKeys(ctx, tx, a.Sender, []config.Target{*target}, events); err != nil {
					return err
				}
			}
			params := make([]river.InsertManyParams, 0, len(matched))
			jobs := make([]Matched, 0, len(matched)) // those params inserts, in order
			for _, m := range matched {
				switch {
				case target.Ordering != nil && afterCurrent(a.State):
					// An ordered forward under way keeps its turn: a
					// redelivery after it would find its key moved on.
				case target.Ordering != nil:
					// A failed one that holds its key goes again in its
					// place; any other goes after its key's queue.
					var e Enqueued
					p, done, err := redeliverOrdered(ctx, tx, a.Sender, target, m.EventID, m.DeliveryID, Current{JobID: m.JobID, State: StateFailed}, false, &e)
					if err != nil {
						return err
					}
					switch {
					case p != nil:
						params, jobs = append(params, redeliveredBy(*p, a.By)), append(jobs, m)
					case done && !e.AlreadyPending:
						n++
					case done: // waiting in the outbox already
					default: // no key: unordered
						params, jobs = append(params, redeliveredBy(jobParams(a.Sender, sender, a.Target, m.EventID, m.DeliveryID), a.By)), append(jobs, m)
					}
				case afterCurrent(a.State):
					params, jobs = append(params, redeliveredBy(afterParams(a.Sender, sender, a.Target, m.EventID, m.DeliveryID, m.JobID), a.By)), append(jobs, m)
				default:
					params, jobs = append(params, redeliveredBy(jobParams(a.Sender, sender, a.Target, m.EventID, m.DeliveryID), a.By)), append(jobs, m)
				}
			}
			if len(params) == 0 {
				return nil
			}
			res, err := client.InsertManyTx(ctx, tx, params)
			if err != nil {
				return fmt.Errorf("insert forwards: %w", err)
			}
			n += len(params)
			return q.markSuperseded(ctx, a.Sender, insertedKeys(a.Target, jobs, res), true)
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
			// The slice is nearly over. Snoozing carries on in a new slice
			// without using an attempt.
			w.log.Info("bulk redelivery continues in a new slice", "sender", a.Sender, "target", a.Target, "forwards", total)
			return river.JobSnooze(0)
		}
	}
}

// fastPathRunning queues a redelivery after each fast-path first attempt
// that was under way when the request was made. It reads them with
// [Jobs.FastPathRunningBatch], batch by batch, and returns how many it
// queued. An attempt that is not a job yet has the job ID -1, as in
// [River.Redeliver]. Each batch's redeliveries leave the next batch, and
// a second run of the job.
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
				params = append(params, redeliveredBy(afterParams(a.Sender, sender, a.Target, m.EventID, m.DeliveryID, m.JobID), a.By))
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

// lockedAgain takes the sender's redelivery lock exclusively, so it waits
// for the single redeliveries under way. Then it reads the batch again with
// again and returns the forwards of matched that still match.
//
// A single redelivery that committed before the lock has superseded its
// forward, so the batch no longer matches it and queues no second forward.
// One that comes later waits for the batch's COMMIT and finds its new
// forward pending. Forwards that only the second read matches are left
// out. The second read asks for twice the batch, and doubles the limit
// while it gets as many as it asked for. So new matches cannot push a
// forward of the batch out.
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

// bulkSliceMargin is the time left in a slice when a bulk redelivery
// snoozes itself to carry on. It is far more than a batch takes.
const bulkSliceMargin = 10 * time.Second

// insertedKeys returns the keys of the matched forwards whose new jobs res
// inserted, with the new jobs' IDs. res is in matched's order. These are
// the forwards that the new jobs supersede.
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
