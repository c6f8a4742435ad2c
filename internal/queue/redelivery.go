package queue

import (
	"context"
	"fmt"
	"hash/fnv"

	"github.com/google/uuid"
	"github.com/hookgate/hookgate/internal/store"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/rivertype"
)

// Redelivery of one event: its current forward to each target, whether a
// redelivery queued after a forward must still wait, and the locks that
// serialise redeliveries.

// Current is the newest forward of an event to one target, as a
// redelivery sees it.
type Current struct {
	// JobID is its newest job (0: none), in State after Attempt attempts;
	// Queued: that job is a redelivery queued after an earlier forward (its
	// args name the job it follows).
	JobID   int64
	State   State
	Attempt int
	Queued  bool
	// Outbox: the forward is still in the outbox; Leased: a fast path is
	// attempting it now.
	Outbox, Leased bool
}

// currentJobsSQL finds the newest forward of sender $1's event $3 to each
// of the targets $2 (its jobs, through hookgate's index on the forward
// jobs, and its delivered first attempt), a redelivery queued after an
// earlier forward and not finished yet (a job with "after") coming before
// any newer one: a newer forward that is not itself queued after one is
// the record of the fast path's first attempt that the redelivery was
// queued after (it gets its ID when the attempt ends: a River job, or a
// forward_delivered row) or the relay's job of that forward (handed over),
// so the queued redelivery is the one to come. $4 is the River state of a
// delivered first attempt (completed), $5 those of an unfinished forward;
// failed tells a retrying forward from a pending one (failedAttempt).
var currentJobsSQL = jobSQL(`SELECT DISTINCT ON (target) target, id, state, attempt, queued, failed FROM (
  SELECT args->>'target' AS target, id, state::text AS state, attempt, args ? 'after' AS queued, ` + failedAttempt("river_job") + ` AS failed
  FROM river_job
  WHERE kind = {forward_kind} AND args->>'sender' = $1 AND args->>'target' = ANY($2) AND args->>'event_id' = $3::text
  UNION ALL
  SELECT target, id, $4::text, 1, false, false FROM forward_delivered WHERE sender = $1 AND target = ANY($2) AND event_id = $3::text) f
ORDER BY target, (queued AND state = ANY($5::text[])) DESC, id DESC`)

// CurrentForwards returns, for each of targets that has any, the newest
// forward of sender's event to it: its job (an unfinished redelivery
// queued after an earlier forward before any newer job: see
// currentJobsSQL), or its outbox row.
func (q *Jobs) CurrentForwards(ctx context.Context, sender string, eventID uuid.UUID, targets []string) (map[string]Current, error) {
	out := map[string]Current{}
	rows, err := q.db.Query(ctx, currentJobsSQL, sender, targets, eventID.String(), jobCompleted, unfinishedJobs) //nolint:rowserrcheck // pgx.ForEachRow checks rows.Err
	if err != nil {
		return nil, fmt.Errorf("current forwards of event %s: %w", eventID, err)
	}
	var (
		target, state string
		failed        bool
		c             Current
	)
	_, err = pgx.ForEachRow(rows, []any{&target, &c.JobID, &state, &c.Attempt, &c.Queued, &failed}, func() error {
		c.State = stateOf(rivertype.JobState(state), failed)
		out[target] = c
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("current forwards of event %s: %w", eventID, err)
	}
	fwds, err := q.outboxOfEvent(ctx, sender, eventID)
	if err != nil {
		return nil, err
	}
	for _, f := range fwds {
		c := out[f.Target]
		c.Outbox, c.Leased = true, f.State == StateRunning
		out[f.Target] = c
	}
	return out, nil
}

// earlierForwardSQL tells whether job $4, a forward of sender $1's event $3
// to target $2 queued after the one under way, must still wait: while the
// forward is in the outbox, or another of its jobs is unfinished that is
// older (unfinished: in the River states $5) or is not itself a queued
// redelivery (the job a relay or the fast path inserted after it). Both are
// probes of a key: forward_outbox's primary key, and hookgate's index on
// the forward jobs, which the ORDER BY (the event compared by a range)
// makes the one path without a sort under store.IndexOrderScans: not River's
// index on kind, nor its primary key, each of which some statistics made
// the cheaper (see plans.go). A scalar subquery, since EXISTS drops its
// ORDER BY.
var earlierForwardSQL = jobSQL(`SELECT EXISTS (SELECT 1 FROM forward_outbox WHERE sender = $1 AND event_id = $3 AND target = $2 AND ` + store.Unrecorded("") + `)
  OR (SELECT n.id FROM river_job n WHERE n.kind = {forward_kind}
    AND n.args->>'sender' = $1 AND n.args->>'target' = $2 AND n.args->>'event_id' >= $3::text AND n.args->>'event_id' <= $3::text
    AND n.id <> $4 AND n.state = ANY($5::river_job_state[])
    AND (n.id < $4 OR NOT n.args ? 'after')
    ORDER BY n.args->>'event_id', n.id LIMIT 1) IS NOT NULL`)

// earlierForwardArgs are earlierForwardSQL's arguments.
func earlierForwardArgs(sender, target string, eventID uuid.UUID, jobID int64) []any {
	return []any{sender, target, eventID.String(), jobID, unfinishedJobs}
}

// EarlierForwardUnfinished reports whether the forward job jobID of
// sender's event to target, queued after an earlier forward, must wait for
// one that is not finished yet.
func (q *Jobs) EarlierForwardUnfinished(ctx context.Context, sender, target string, eventID uuid.UUID, jobID int64) (bool, error) {
	var b pgx.Batch
	b.Queue(store.IndexOrderScans)
	b.Queue(earlierForwardSQL, earlierForwardArgs(sender, target, eventID, jobID)...)
	br := q.db.SendBatch(ctx, &b)
	defer br.Close()
	var wait bool
	_, err := br.Exec()
	if err == nil {
		err = br.QueryRow().Scan(&wait)
	}
	if err != nil {
		return false, fmt.Errorf("earlier forwards of event %s to %s: %w", eventID, target, err)
	}
	return wait, nil
}

// Redeliveries serialise on PostgreSQL advisory locks taken for the rest
// of a transaction, so that they hold across processes on one database. A
// redelivery of one event reads the event's forwards (CurrentForwards) and
// inserts the new ones in one transaction (Redelivering) that holds its
// sender's redelivery lock in share mode and then its event's lock
// (LockRedelivery): two redeliveries of one event run one after the other,
// and the second sees what the first inserted. A batch of a bulk
// redelivery takes its sender's lock alone, exclusively
// (LockBulkRedelivery), before it reads its forwards again and inserts
// their new ones: it waits for the single redeliveries of the sender under
// way, and those that come meanwhile wait for its COMMIT. Without them,
// two concurrent redeliveries of a forward under way both saw it running
// and both queued a forward after it (such a forward has no unique key).
//
// A bulk batch takes one lock, not one per event: a batch of BulkBatch
// events would hold a thousand entries of the server's shared lock table
// (max_locks_per_transaction × max_connections, 6,400 by default, shared
// by every session), and running out of it fails other sessions'
// statements too. A single redelivery takes its two locks in that order
// (sender, then event), the bulk batch only one, so no two of them wait
// for each other in a cycle. The cost: a single redelivery of a sender
// waits for a bulk batch of that sender being written (one transaction of
// up to BulkBatch inserts), and bulk batches of one sender's targets take
// turns.
//
// The locks are the two-key form, pg_advisory_xact_lock(int4, int4): a
// class (redeliverySenderLock, redeliveryEventLock), then a 32-bit hash of
// the sender (and the event). Keys whose hashes collide only wait for each
// other. The two-key form never collides with one-key locks (goose's,
// pgtest's) nor with Citus's own (other lock tag fields). On Citus the
// locks are the coordinator's (the functions name no table, and Citus does
// not propagate them), which every gateway process talks to.

// The first keys of the redelivery locks: the bytes "hkrs" and "hkrd".
const (
	redeliverySenderLock int32 = 0x686b7273
	redeliveryEventLock  int32 = 0x686b7264
)

// redeliveryLockKey is the second key of the redelivery lock of sender's
// event, or of sender itself when eventID is nil.
func redeliveryLockKey(sender string, eventID *uuid.UUID) int32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(sender))
	if eventID != nil {
		_, _ = h.Write([]byte{'/'})
		_, _ = h.Write(eventID[:])
	}
	return int32(h.Sum32())
}

// LockRedelivery takes the redelivery locks of sender's event: its
// sender's in share mode, then the event's, waiting for the transactions
// that hold them (a redelivery of the event, a bulk batch of the sender),
// and keeps them until the end of the transaction q runs in (on a pool,
// until the end of the statement: no use). One round trip. It returns an
// error when the wait ends with ctx or the connection.
func (q *Jobs) LockRedelivery(ctx context.Context, sender string, eventID uuid.UUID) error {
	var b pgx.Batch
	b.Queue(`SELECT pg_advisory_xact_lock_shared($1::int4, $2::int4)`, redeliverySenderLock, redeliveryLockKey(sender, nil))
	b.Queue(`SELECT pg_advisory_xact_lock($1::int4, $2::int4)`, redeliveryEventLock, redeliveryLockKey(sender, &eventID))
	if err := q.db.SendBatch(ctx, &b).Close(); err != nil {
		return fmt.Errorf("lock redeliveries of event %s: %w", eventID, err)
	}
	return nil
}

// LockBulkRedelivery takes sender's redelivery lock exclusively, waiting
// for the redeliveries of its events under way (LockRedelivery) and for
// another bulk batch of the sender, and keeps it until the end of the
// transaction q runs in. It returns an error when the wait ends with ctx
// or the connection.
func (q *Jobs) LockBulkRedelivery(ctx context.Context, sender string) error {
	if _, err := q.db.Exec(ctx, `SELECT pg_advisory_xact_lock($1::int4, $2::int4)`, redeliverySenderLock, redeliveryLockKey(sender, nil)); err != nil {
		return fmt.Errorf("lock redeliveries of %s: %w", sender, err)
	}
	return nil
}

// Redelivering runs fn in a transaction (a savepoint when q runs in one)
// that holds the redelivery locks of sender's event (LockRedelivery),
// with the queries on that transaction, and commits it when fn returns
// nil. fn reads the event's forwards and inserts its new ones in tx: a
// concurrent redelivery of the event, in this process or another, waits
// for the COMMIT and then sees what fn inserted.
func (q *Jobs) Redelivering(ctx context.Context, sender string, eventID uuid.UUID, fn func(q *Jobs, tx pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, q.db, func(tx pgx.Tx) error {
		tq := NewJobs(tx)
		if err := tq.LockRedelivery(ctx, sender, eventID); err != nil {
			return err
		}
		return fn(tq, tx)
	})
}
