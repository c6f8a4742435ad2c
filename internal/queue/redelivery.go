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

// Current is the newest forward of an event to one target, as a
// redelivery sees it.
type Current struct {
	// JobID is its newest job, or 0. The job is in State after Attempt
	// attempts. Queued reports a redelivery queued after an earlier forward.
	JobID   int64
	State   State
	Attempt int
	Queued  bool
	// Outbox reports that the forward is still in the outbox. Leased
	// reports that a fast path is attempting it now.
	Outbox, Leased bool
}

// currentJobsSQL finds the forwards of sender $1's event $3 to each target
// in $2: its jobs and its delivered first attempt, and for each whether it
// is an unfinished redelivery queued after an earlier forward. Each
// target's are found by probes of River's index of forwards by event and
// of forward_delivered's primary key, the event compared as a range in
// each index's order, under [store.IndexOrderScans]. Compared by
// equality, with the kind by equality too, PostgreSQL read every forward
// job through River's index on kind and the sender's every delivered
// forward through the index of targets when its statistics said the
// tables were small. CurrentForwards picks the newest of each target. It
// runs in a redelivery's transaction: the settings end with it.
var currentJobsSQL = jobSQL(`SELECT t.target, f.id, f.state, f.attempt, f.queued, f.queued AND f.state = ANY($5::text[]), f.failed
FROM unnest($2::text[]) AS t(target) CROSS JOIN LATERAL (
  (SELECT j.id, j.state::text AS state, j.attempt, j.args ? 'after' AS queued, ` + failedAttempt("j") + ` AS failed
   FROM river_job j
   WHERE j.kind = {forward_kind} AND j.args->>'sender' = $1 AND j.args->>'target' = t.target
     AND j.args->>'event_id' >= $3::text AND j.args->>'event_id' <= $3::text
   ORDER BY j.args->>'event_id', j.id)
  UNION ALL
  (SELECT d.id, $4::text, 1, false, false FROM forward_delivered d
   WHERE d.sender = $1 AND d.event_id >= $3::text AND d.event_id <= $3::text AND d.target = t.target
   ORDER BY d.event_id)) f`)

// CurrentForwards returns the newest forward of sender's event to each
// target that has one: its job or its outbox row. An unfinished
// redelivery queued after an earlier forward comes before any newer
// forward. That newer forward can only be the relay's job of the forward
// that the redelivery follows, or the record of that fast-path attempt,
// which gets its ID when it ends. So the queued redelivery is the one
// still to come.
func (q *Jobs) CurrentForwards(ctx context.Context, sender string, eventID uuid.UUID, targets []string) (map[string]Current, error) {
	out := map[string]Current{}
	rows, err := store.QueryOnlyUnder(ctx, q.db, store.IndexOrderScans, currentJobsSQL, sender, targets, eventID.String(), jobCompleted, unfinishedJobs) //nolint:rowserrcheck // pgx.ForEachRow checks rows.Err
	if err != nil {
		return nil, fmt.Errorf("current forwards of event %s: %w", eventID, err)
	}
	var (
		target, state   string
		waiting, failed bool
		c               Current
	)
	// waits[t] reports that target t's current forward is an unfinished
	// redelivery queued after an earlier forward.
	waits := map[string]bool{}
	_, err = pgx.ForEachRow(rows, []any{&target, &c.JobID, &state, &c.Attempt, &c.Queued, &waiting, &failed}, func() error {
		if prev, seen := out[target]; seen && (waits[target] && !waiting || waits[target] == waiting && prev.JobID > c.JobID) {
			return nil
		}
		c.State = stateOf(rivertype.JobState(state), failed)
		out[target], waits[target] = c, waiting
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

// earlierForwardSQL tells whether job $4, a redelivery queued after the
// forward under way, must still wait. It waits while the forward is in the
// outbox. It also waits while another unfinished job of the forward is
// older, or is not itself a queued redelivery. Both parts probe a key.
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

// EarlierForwardUnfinished reports whether job jobID, queued after an
// earlier forward of sender's event to target, must still wait for it.
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

// Redeliveries serialise on transaction-level advisory locks, so the locks
// hold across processes on one database. A redelivery of one event reads
// and inserts in one transaction. That transaction holds the sender's lock
// in share mode, then the event's lock. So two redeliveries of one event
// run one after the other, and the second sees what the first inserted.
// Without the locks, two redeliveries of a running forward could both
// queue a forward after it, since such a forward has no unique key.
//
// A bulk batch takes the sender's lock alone, exclusively, before it reads
// its forwards again. It waits for the sender's single redeliveries under
// way, and later ones wait for its COMMIT. One lock per event would fill
// the server's shared lock table, and then other sessions' statements fail
// too. Single redeliveries lock sender then event, and a bulk batch takes
// one lock, so no cycle of waits can form. The cost is that a sender's
// single redeliveries wait while its bulk batch is written.
//
// The locks use the two-key form of pg_advisory_xact_lock: a class, then a
// 32-bit hash of the sender and event. Keys whose hashes collide only wait
// for each other. The two-key form never collides with one-key locks or
// with Citus's own. On Citus the locks live on the coordinator, which
// every gateway process talks to.

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

// LockRedelivery takes the redelivery locks of sender's event in one round
// trip: the sender's in share mode, then the event's. It waits for the
// transactions that hold them. The locks last until the end of q's
// transaction, so q must run in one.
func (q *Jobs) LockRedelivery(ctx context.Context, sender string, eventID uuid.UUID) error {
	var b pgx.Batch
	b.Queue(`SELECT pg_advisory_xact_lock_shared($1::int4, $2::int4)`, redeliverySenderLock, redeliveryLockKey(sender, nil))
	b.Queue(`SELECT pg_advisory_xact_lock($1::int4, $2::int4)`, redeliveryEventLock, redeliveryLockKey(sender, &eventID))
	if err := q.db.SendBatch(ctx, &b).Close(); err != nil {
		return fmt.Errorf("lock redeliveries of event %s: %w", eventID, err)
	}
	return nil
}

// LockBulkRedelivery takes sender's redelivery lock exclusively until the
// end of q's transaction. It waits for the sender's redeliveries under way
// and for another bulk batch of the sender.
func (q *Jobs) LockBulkRedelivery(ctx context.Context, sender string) error {
	if _, err := q.db.Exec(ctx, `SELECT pg_advisory_xact_lock($1::int4, $2::int4)`, redeliverySenderLock, redeliveryLockKey(sender, nil)); err != nil {
		return fmt.Errorf("lock redeliveries of %s: %w", sender, err)
	}
	return nil
}

// Redelivering runs fn in a transaction that holds the redelivery locks of
// sender's event, and commits when fn returns nil. fn gets the statements
// on that transaction. A concurrent redelivery of the event, in any
// process, waits for the COMMIT and then sees what fn inserted.
func (q *Jobs) Redelivering(ctx context.Context, sender string, eventID uuid.UUID, fn func(q *Jobs, tx pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, q.db, func(tx pgx.Tx) error {
		tq := NewJobs(tx)
		if err := tq.LockRedelivery(ctx, sender, eventID); err != nil {
			return err
		}
		return fn(tq, tx)
	})
}
