package queue

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/riverqueue/river"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/store"
)

// Enqueued is a forward job that a redelivery inserted or found waiting.
type Enqueued struct {
	JobID  int64
	Target string
	// AlreadyPending is true when a forward of the event to the target
	// still waited for its first attempt, or a redelivery was already
	// queued. No second one was inserted, and JobID is the waiting one's.
	// JobID is 0 while that forward is in the outbox.
	AlreadyPending bool
	// AfterCurrent is true when the forward was running or retrying, so
	// the new job runs after it. CurrentJobID is that forward's job, or 0
	// for a fast-path attempt that is not a job yet.
	AfterCurrent bool
	CurrentJobID int64
	// OrderKey is set for a forward of an ordered target: its key. InPlace
	// reports that it held its key and is tried again in its place.
	// Otherwise, unless AlreadyPending, it went after the key's queue, in
	// the outbox, QueuedBehind forwards after the key's head.
	OrderKey     string
	InPlace      bool
	QueuedBehind int64
}

// redeliver inserts one new forward job of the event for each target that
// sender has now. The new jobs keep the event ID as the idempotency key.
// Where the event's forward is running or retrying, the new job is queued
// after it and waits without using attempts. Where a forward still waits
// for its first attempt, nothing is inserted.
//
// It reads and inserts in one transaction that holds the event's
// redelivery lock; see [Jobs.Redelivering]. So concurrent redeliveries of
// the event, in any process, queue at most one new forward per target.
func redeliver(ctx context.Context, q *Jobs, client *river.Client[pgx.Tx], sender *config.Sender, eventID uuid.UUID, deliveryID string) ([]Enqueued, error) {
	if len(sender.Forward) == 0 {
		return nil, nil
	}
	var out []Enqueued
	err := q.Redelivering(ctx, sender.Name, eventID, func(q *Jobs, tx pgx.Tx) error {
		var err error
		out, err = redeliverTx(ctx, q, tx, client, sender, eventID, deliveryID)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("redeliver event %s: %w", eventID, err)
	}
	return out, nil
}

// redeliverTx is redeliver in tx, which holds the event's redelivery lock.
// q runs in tx.
func redeliverTx(ctx context.Context, q *Jobs, tx pgx.Tx, client *river.Client[pgx.Tx], sender *config.Sender, eventID uuid.UUID, deliveryID string) ([]Enqueued, error) {
	cur, err := q.CurrentForwards(ctx, sender.Name, eventID, sender.TargetNames())
	if err != nil {
		return nil, err
	}
	// The loop below writes the ordered targets' keys in the
	// configuration's order: lock them first, in the ingest's.
	if err := lockOrderKeys(ctx, tx, sender.Name, sender.Forward, []uuid.UUID{eventID}); err != nil {
		return nil, err
	}
	params := make([]river.InsertManyParams, 0, len(sender.Forward))
	out := make([]Enqueued, 0, len(sender.Forward))
	var inserted []int // indexes in out of the jobs params inserts, in order
	for _, t := range sender.Forward {
		c := cur[t.Name]
		e := Enqueued{Target: t.Name}
		pending, err := waiting(ctx, q, sender.Name, t.Name, eventID, c)
		if err != nil {
			return nil, err
		}
		if t.Ordering != nil {
			p, done, err := redeliverOrdered(ctx, tx, sender.Name, &t, eventID, deliveryID, c, pending, &e)
			if err != nil {
				return nil, err
			}
			if p != nil {
				params = append(params, *p)
				inserted = append(inserted, len(out))
			}
			if done {
				out = append(out, e)
				continue
			}
		}
		switch {
		case pending:
			e.JobID, e.AlreadyPending = c.JobID, true
			out = append(out, e)
			continue
		case c.Leased: // the fast path is attempting it
			e.AfterCurrent = true
			params = append(params, afterParams(sender.Name, sender, t.Name, eventID, deliveryID, -1))
		case c.Outbox:
			// Not relayed yet. Its job is inserted now, and the relay's
			// insert is skipped as a duplicate.
			params = append(params, jobParams(sender.Name, sender, t.Name, eventID, deliveryID))
		case c.JobID != 0 && c.State.Unfinished():
			e.AfterCurrent, e.CurrentJobID = true, c.JobID
			params = append(params, afterParams(sender.Name, sender, t.Name, eventID, deliveryID, c.JobID))
		default: // delivered, failed, or never forwarded
			params = append(params, jobParams(sender.Name, sender, t.Name, eventID, deliveryID))
		}
		inserted = append(inserted, len(out))
		out = append(out, e)
	}
	if len(params) == 0 {
		return out, nil
	}
	by := RedeliveredBy(ctx)
	for i := range params {
		params[i] = redeliveredBy(params[i], by)
	}
	res, err := client.InsertManyTx(ctx, tx, params)
	if err != nil {
		return nil, err
	}
	var keys []ForwardKey
	for i, r := range res {
		e := &out[inserted[i]]
		e.JobID = r.Job.ID
		if r.UniqueSkippedAsDuplicate {
			e.AlreadyPending = true
			continue
		}
		keys = append(keys, ForwardKey{Target: e.Target, EventID: eventID, Newer: r.Job.ID})
	}
	// The new jobs supersede the forwards that they follow.
	if err := q.markSuperseded(ctx, sender.Name, keys, true); err != nil {
		return nil, err
	}
	return out, nil
}

// redeliverOrdered redelivers the forward of eventID to the ordered target
// t, whose current state is c (pending: its job is still to come). A
// forward that failed and holds its key is tried again in its place: p is
// its new job, at the key's head. One that waits in the key or is under
// way keeps its turn. Any other goes after the key's queue, as an outbox
// row that its turn releases. done is false for an event without the
// key: it is redelivered as an unordered forward.
func redeliverOrdered(ctx context.Context, tx pgx.Tx, sender string, t *config.Target, eventID uuid.UUID, deliveryID string, c Current, pending bool, e *Enqueued) (p *river.InsertManyParams, done bool, err error) {
	var (
		key string
		seq int64
	)
	err = tx.QueryRow(ctx, store.UnblockSQL, sender, t.Name, pgtype.UUID{Bytes: eventID, Valid: true}).Scan(&key, &seq)
	switch {
	case err == nil:
		e.OrderKey, e.InPlace = key, true
		jp := jobParams(sender, nil, t.Name, eventID, deliveryID)
		if c.JobID != 0 && c.State.Unfinished() {
			// Its last job blocked the key and is still being finished:
			// the new one waits for it, beside it.
			jp = afterParams(sender, nil, t.Name, eventID, deliveryID, c.JobID)
			e.AfterCurrent, e.CurrentJobID = true, c.JobID
		}
		jp = orderedParams(jp, key, seq)
		jp.InsertOpts.MaxAttempts = OrderedMaxAttempts(t.MaxAttempts)
		return &jp, true, nil
	case !errors.Is(err, pgx.ErrNoRows):
		return nil, false, fmt.Errorf("unblock the ordering key of %s: %w", t.Name, err)
	}
	if pending || c.Leased || c.Outbox || c.JobID != 0 && c.State.Unfinished() {
		e.JobID, e.AlreadyPending = c.JobID, true
		return nil, true, nil
	}
	content, err := store.New(tx).EventContent(ctx, sender, eventID)
	if err != nil {
		return nil, false, err
	}
	if key = t.Ordering.KeyOf(content.Headers, content.Body); key == "" {
		return nil, false, nil
	}
	e.OrderKey = key
	e.QueuedBehind, err = store.New(tx).AppendOrdered(ctx, sender, t.Name, key, eventID, deliveryID)
	switch {
	case errors.Is(err, pgx.ErrNoRows): // in the outbox already: it keeps its turn
		e.AlreadyPending = true
	case err != nil:
		return nil, false, fmt.Errorf("queue the forward to %s after its ordering key's: %w", t.Name, err)
	}
	return nil, true, nil
}

// lockOrderKeys locks the ordering keys that the events' forwards to
// sender's ordered targets among ts have, in the order of every other
// writer of the keys (see [store.Queries.LockOrderKeys]), before a
// redelivery writes them one by one: in the order of its targets, or of
// the forwards a bulk redelivery matched. It reads the events' contents,
// one at a time, for their keys.
func lockOrderKeys(ctx context.Context, tx pgx.Tx, sender string, ts []config.Target, events []uuid.UUID) error {
	var ordered []*config.Target
	for i := range ts {
		if ts[i].Ordering != nil {
			ordered = append(ordered, &ts[i])
		}
	}
	if len(ordered) == 0 || len(events) == 0 {
		return nil
	}
	seen := map[string]bool{}
	var targets, keys []string
	for _, t := range ordered {
		targets = append(targets, t.Name)
	}
	q := store.New(tx)
	err := q.EachEventContent(ctx, sender, events, func(c store.Content) error {
		for _, t := range ordered {
			if k := t.Ordering.KeyOf(c.Headers, c.Body); k != "" && !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	return q.LockOrderKeys(ctx, sender, targets, keys)
}

// waiting reports whether c's job is still to come. That is so when it
// has not been attempted yet. It is also so for a redelivery queued after
// a forward that is still under way, even if it is running only to find
// that it must wait.
func waiting(ctx context.Context, q *Jobs, sender, target string, eventID uuid.UUID, c Current) (bool, error) {
	if c.JobID == 0 {
		return false, nil
	}
	if c.Queued && c.State.Unfinished() {
		wait, err := q.EarlierForwardUnfinished(ctx, sender, target, eventID, c.JobID)
		if err != nil || wait {
			return wait, err
		}
	}
	if c.State == StatePending {
		return c.Attempt == 0, nil
	}
	return false, nil
}
