package forward

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
// insert on sender, event and target, as everywhere).

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
	return f
}

// BulkRequest is what to redeliver: the forwards of Sender's target Target
// that are in State (StateFailed or StateDelivered) and reached it at or
// after Since and before Until (no bound when zero).
type BulkRequest struct {
	Sender       *config.Sender
	Target       string
	State        State
	Since, Until time.Time
}

// ErrBulkState is returned for a bulk redelivery of a state other than
// failed or delivered.
var ErrBulkState = errors.New("only failed or delivered forwards can be redelivered in bulk")

// ErrUnknownTarget is returned for a target the sender does not have.
var ErrUnknownTarget = errors.New("no such target")

// matchSQL returns the query of the forwards a bulk redelivery matches, up
// to job maxID and after job afterID, and its arguments.
func matchSQL(f Filter, maxID, afterID int64) (string, []any) {
	where, args := f.where(true)
	args = append(args, maxID, afterID)
	return where + fmt.Sprintf(" AND j.id <= $%d AND j.id > $%d", len(args)-1, len(args)), args
}

// BulkRedeliver counts the forwards req matches and, when there are any,
// enqueues a job (worked by any worker process) that forwards each matched
// event again to the target. It returns how many it matched: 0, with no
// job, when none. The count includes forwards that a job of an identical
// request still running is about to redeliver; they are redelivered once.
func BulkRedeliver(ctx context.Context, db Querier, client *river.Client[pgx.Tx], req BulkRequest) (int64, error) {
	if req.State != StateFailed && req.State != StateDelivered {
		return 0, ErrBulkState
	}
	if _, ok := req.Sender.Target(req.Target); !ok {
		return 0, fmt.Errorf("target %q of sender %q: %w", req.Target, req.Sender.Name, ErrUnknownTarget)
	}
	args := BulkArgs{Sender: req.Sender.Name, Target: req.Target, State: req.State}
	if !req.Since.IsZero() {
		t := req.Since.UTC()
		args.Since = &t
	}
	if !req.Until.IsZero() {
		t := req.Until.UTC()
		args.Until = &t
	}
	rows, err := db.Query(ctx, `SELECT coalesce(max(id), 0) FROM river_job`)
	if err != nil {
		return 0, fmt.Errorf("bulk redeliver: newest job: %w", err)
	}
	args.MaxJobID, err = pgx.CollectExactlyOneRow(rows, pgx.RowTo[int64])
	if err != nil {
		return 0, fmt.Errorf("bulk redeliver: newest job: %w", err)
	}
	where, qargs := matchSQL(args.filter(), args.MaxJobID, 0)
	rows, err = db.Query(ctx, `SELECT count(*) FROM river_job j WHERE `+where, qargs...)
	if err != nil {
		return 0, fmt.Errorf("bulk redeliver: count: %w", err)
	}
	n, err := pgx.CollectExactlyOneRow(rows, pgx.RowTo[int64])
	if err != nil {
		return 0, fmt.Errorf("bulk redeliver: count: %w", err)
	}
	if n == 0 {
		return 0, nil
	}
	_, err = client.Insert(ctx, args, &river.InsertOpts{
		Queue:       BulkQueue,
		MaxAttempts: 5,
		UniqueOpts:  river.UniqueOpts{ByArgs: true, ByState: uniqueStates},
	})
	if err != nil {
		return 0, fmt.Errorf("bulk redeliver: enqueue: %w", err)
	}
	return n, nil
}

// BulkWorker works bulk redelivery jobs.
type BulkWorker struct {
	river.WorkerDefaults[BulkArgs]
	pool  *pgxpool.Pool
	cfg   *config.Config
	log   *slog.Logger
	batch int
	// timeout is BulkTimeout, or less under a shorter rescue horizon.
	timeout time.Duration
}

// BulkTimeout is the longest a bulk redelivery runs before it stops; it
// carries on where it stopped at its next attempt.
const BulkTimeout = time.Hour

// NewBulkWorker returns the worker of bulk redeliveries, which inserts the
// new forward jobs with the River client that runs it.
func NewBulkWorker(pool *pgxpool.Pool, cfg *config.Config, log *slog.Logger) *BulkWorker {
	return &BulkWorker{pool: pool, cfg: cfg, log: log, batch: BulkBatch, timeout: BulkTimeout}
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
	sender, ok := w.cfg.Sender(a.Sender)
	if !ok {
		return river.JobCancel(fmt.Errorf("sender %q is not configured", a.Sender))
	}
	if _, ok := sender.Target(a.Target); !ok {
		return river.JobCancel(fmt.Errorf("target %q of sender %q is not configured", a.Target, a.Sender))
	}
	client := river.ClientFromContext[pgx.Tx](ctx)
	var after, total int64
	for {
		var n int
		err := pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
			where, args := matchSQL(a.filter(), a.MaxJobID, after)
			args = append(args, w.batch)
			rows, err := tx.Query(ctx, `SELECT j.id, j.args->>'event_id', coalesce(j.args->>'delivery_id', '') FROM river_job j WHERE `+
				where+fmt.Sprintf(" ORDER BY j.id LIMIT $%d", len(args)), args...)
			if err != nil {
				return fmt.Errorf("select batch: %w", err)
			}
			var params []river.InsertManyParams
			var (
				id         int64
				eventID    uuid.UUID
				deliveryID string
			)
			_, err = pgx.ForEachRow(rows, []any{&id, &eventID, &deliveryID}, func() error {
				params = append(params, jobParams(a.Sender, sender, a.Target, eventID, deliveryID))
				after = id
				return nil
			})
			if err != nil {
				return fmt.Errorf("select batch: %w", err)
			}
			if len(params) == 0 {
				return nil
			}
			if _, err := client.InsertManyTx(ctx, tx, params); err != nil {
				return fmt.Errorf("insert forwards: %w", err)
			}
			n = len(params)
			return nil
		})
		if err != nil {
			return fmt.Errorf("bulk redeliver %s/%s after job %d: %w", a.Sender, a.Target, after, err)
		}
		total += int64(n)
		if n < w.batch {
			w.log.Info("bulk redelivery done", "sender", a.Sender, "target", a.Target, "state", a.State, "forwards", total)
			return nil
		}
	}
}
