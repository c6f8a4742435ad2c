package queue

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/hookgate/hookgate/internal/store"
)

// Failed forwards: which a newer forward superseded, and their kept counts
// (migration 23, issue 43).
//
// A target's failed forwards are its failed jobs (River's states cancelled
// and discarded) that no newer forward of the same event to the same
// target followed. The counts once checked each failed job for a newer
// forward (two index probes each): about 10 µs per failed forward kept,
// 100 ms for a sender with 10,000. Now:
//
//   - Whatever adds a newer forward of an event to a target marks the older
//     forward jobs of that event and target superseded (metadata key
//     supersededKey), in its own transaction: a redelivery marks the jobs
//     it follows whatever their state (markOlderSQL: a forward under way
//     when it is redelivered is marked before it fails), and the relay's
//     jobs, the fast path's records and a redelivery queued after a
//     forward, once it goes ahead, mark the failed jobs a newer forward
//     followed (markFailedSQL). A redelivery queued after the fast path's
//     attempt (after -1) is inserted marked: the attempt's record comes
//     after it, with a larger ID.
//   - Each working process folds, every foldEvery, the failed jobs not
//     superseded into forward_failed_counts, by sender, target and hour of
//     failure (foldSQL), marking each counted (countedKey). Marking a
//     counted job superseded takes it out of its hour's count in the same
//     statement.
//   - A sender's failed forwards are the sum of its hours there and its
//     failed jobs not folded yet, in one statement (failedCountsSQL): a
//     few rows per target and hour whatever the number of failed
//     forwards, and the failures of the last second or so.
//
// The marks are taken FOR UPDATE SKIP LOCKED: a job another transaction
// holds is not waited for (the lock order, doc.go). River holds a job
// while it moves it (its fetch, its completer, its cleaner deleting it),
// hookgate's fold while it counts it. So that a marking does not skip a
// job the fold holds, the fold runs under the advisory lock countsLock
// taken exclusively (and skips its turn when it cannot have it at once),
// and a marking takes it in share mode when it finds a job to mark, in a
// statement of its own before the marking, the last two of its
// transaction: the fold never waits for a marking, a marking waits for a
// fold's few milliseconds (and then sees what it counted), and two
// markings never wait for each other on it. A job River held is left
// unmarked: a forward under way when it is redelivered is then marked by
// the redelivery once that goes ahead (MarkSupersededFailures). Jobs
// written by a version before migration 23 while it ran beside this one
// (a rolling upgrade) are not marked: such a redelivered failure counts
// until River deletes it.
//
// A failure stops counting with its hour, an hour after River's retention
// (River deletes it at its own time within that hour).

// The metadata keys hookgate sets on River's forward jobs: supersededKey,
// a newer forward of the job's event to its target followed it;
// countedKey, the job is failed and counted in forward_failed_counts.
const (
	supersededKey = "hookgate:superseded"
	countedKey    = "hookgate:counted"
)

// supersededMetadata is the metadata of a job inserted superseded.
var supersededMetadata = func() []byte {
	b, err := json.Marshal(map[string]bool{supersededKey: true})
	if err != nil {
		panic(err)
	}
	return b
}()

// failedLiteral is the condition, over job j, that it is in one of River's
// states of a failed forward (stateNames(StateFailed)), as literals: the
// predicate of hookgate's indexes on failed forwards (migration 23), which
// a statement must repeat for PostgreSQL to read them (a parameter implies
// nothing in a generic plan, see forwardKind). TestFailedLiteral checks
// it against the mapping of states.
const failedLiteral = `j.state IN ('cancelled', 'discarded')`

// notMarkedSuperseded is the condition that job alias is not marked
// superseded.
func notMarkedSuperseded(alias string) string {
	return fmt.Sprintf("NOT (%s.metadata ? '%s')", alias, supersededKey)
}

// failedForwards is the condition that job alias is a failed forward not
// marked superseded: the predicate of migration 23's index on the failed
// forwards by sender, target, event and ID.
func failedForwards(alias string) string {
	return strings.ReplaceAll(jobSQL(`j.kind = {forward_kind} AND `+failedLiteral), "j.", alias+".") + " AND " + notMarkedSuperseded(alias)
}

// uncountedFailures is failedForwards, and not counted yet: the predicate
// of migration 23's index on them by sender and ID.
func uncountedFailures(alias string) string {
	return failedForwards(alias) + fmt.Sprintf(" AND NOT (%s.metadata ? '%s')", alias, countedKey)
}

// failedHour is the hour (UTC, whatever the session's time zone) of job
// alias's failure: its count's in forward_failed_counts.
func failedHour(alias string) string {
	return fmt.Sprintf(`date_bin('1 hour', coalesce(%[1]s.finalized_at, %[1]s.created_at), TIMESTAMPTZ '2000-01-01 00:00:00+00')`, alias)
}

// countsLock is the first key of the advisory lock (the two-key form, see
// redelivery.go) that keeps the fold and the markings apart: the bytes
// "hkfc", and 0.
const countsLock int32 = 0x686b6663

// markSQL returns the statement that marks superseded the jobs candidates
// selects (their IDs, in an InitPlan, locked FOR UPDATE SKIP LOCKED), and
// takes those that were counted out of their hours' counts of sender $1,
// locking the counts' rows in their key's order (so that two markings
// never wait for each other in a cycle). The jobs are updated by ID, not
// by ctid: a job River changed between the statement's start and its
// lock (a forward under way that failed) is updated in its new version.
func markSQL(candidates string) string {
	return `WITH m AS (
  UPDATE river_job j SET metadata = j.metadata || jsonb_build_object('` + supersededKey + `', true)
  WHERE j.id = ANY(ARRAY(` + candidates + ` FOR UPDATE OF f SKIP LOCKED))
  RETURNING j.args->>'target' AS target, ` + failedHour("j") + ` AS hour, j.metadata ? '` + countedKey + `' AS counted
), d AS (
  SELECT target, hour, count(*) AS n FROM m WHERE counted AND target IS NOT NULL GROUP BY 1, 2
), b AS MATERIALIZED (
  SELECT c.target, c.hour, d.n FROM forward_failed_counts c JOIN d ON c.sender = $1 AND c.target = d.target AND c.hour = d.hour
  ORDER BY c.target, c.hour FOR UPDATE OF c
)
UPDATE forward_failed_counts c SET n = c.n - b.n FROM b WHERE c.sender = $1 AND c.target = b.target AND c.hour = b.hour`
}

// lockIfSQL returns the statement that takes countsLock in share mode,
// until the end of the transaction, when candidates selects any job: run
// before the marking, so that the marking, which starts after it, sees
// what a fold it waited for committed (the jobs counted, their counts).
func lockIfSQL(candidates string) string {
	return fmt.Sprintf(`SELECT pg_advisory_xact_lock_shared(%d, 0) FROM (%s LIMIT 1) f`, countsLock, candidates)
}

// olderCandidates selects, for each key ($2 targets, $3 events, $4 newer
// job IDs) of sender $1, the forward jobs of that event to that target
// older than the newer job, not completed (River's state $5) and not marked
// yet: probes of hookgate's index on the forward jobs (migration 9), which
// the ORDER BY (the event compared by a range) makes the one path without
// a sort under store.IndexOrderScans.
var olderCandidates = jobSQL(`SELECT f.id FROM unnest($2::text[], $3::text[], $4::bigint[]) AS k(target, event_id, newer)
  CROSS JOIN LATERAL (SELECT f.id FROM river_job f WHERE f.kind = {forward_kind}
    AND f.args->>'sender' = $1 AND f.args->>'target' = k.target
    AND f.args->>'event_id' >= k.event_id AND f.args->>'event_id' <= k.event_id AND f.id < k.newer
    AND f.state <> $5::river_job_state AND ` + notMarkedSuperseded("f") + `
    ORDER BY f.args->>'event_id', f.id) f`)

// failedCandidates selects, for each key ($2 targets, $3 events) of
// sender $1, the failed forward jobs not marked superseded (a probe of
// migration 23's index on them, small: the failures kept) that a newer
// forward followed (notSuperseded's probes, for those few).
var failedCandidates = `SELECT f.id FROM unnest($2::text[], $3::text[]) AS k(target, event_id)
  CROSS JOIN LATERAL (SELECT f.id FROM river_job f WHERE ` + failedForwards("f") + `
    AND f.args->>'sender' = $1 AND f.args->>'target' = k.target
    AND f.args->>'event_id' >= k.event_id AND f.args->>'event_id' <= k.event_id
    AND NOT (` + notSupersededOf("f", "k.target") + `)
    ORDER BY f.args->>'target', f.args->>'event_id', f.id) f`

// The marking statements: of a redelivery's older jobs, of the failed jobs
// a newer forward followed; and the statements that take countsLock
// before them.
var (
	markOlderSQL  = markSQL(olderCandidates)
	lockOlderSQL  = lockIfSQL(olderCandidates)
	markFailedSQL = markSQL(failedCandidates)
	lockFailedSQL = lockIfSQL(failedCandidates)
)

// ForwardKey is an event's forward to one target, and for a redelivery
// the ID of its newer job.
type ForwardKey struct {
	Target  string
	EventID uuid.UUID
	Newer   int64
}

// queueMarks queues on b the marking of sender's forwards of keys: with
// older, the jobs of each key older than its Newer job and not completed
// (a redelivery's), else the failed jobs a newer forward followed. The
// planner settings first (store.IndexOrderScans, for the rest of the
// transaction), then countsLock in share mode when there is anything to
// mark (lockIfSQL), then the marking. Nothing is queued without keys.
func queueMarks(b *pgx.Batch, sender string, keys []ForwardKey, older bool) {
	if len(keys) == 0 {
		return
	}
	targets := make([]string, len(keys))
	events := make([]string, len(keys))
	newer := make([]int64, len(keys))
	for i, k := range keys {
		targets[i], events[i], newer[i] = k.Target, k.EventID.String(), k.Newer
	}
	b.Queue(store.IndexOrderScans)
	if older {
		b.Queue(lockOlderSQL, sender, targets, events, newer, jobCompleted)
		b.Queue(markOlderSQL, sender, targets, events, newer, jobCompleted)
		return
	}
	b.Queue(lockFailedSQL, sender, targets, events)
	b.Queue(markFailedSQL, sender, targets, events)
}

// markSuperseded runs queueMarks' statements on q, in one round trip:
// q should be the transaction that added the newer forwards (its last
// statements), or a pool (one implicit transaction).
func (q *Jobs) markSuperseded(ctx context.Context, sender string, keys []ForwardKey, older bool) error {
	var b pgx.Batch
	queueMarks(&b, sender, keys, older)
	if b.Len() == 0 {
		return nil
	}
	if err := q.db.SendBatch(ctx, &b).Close(); err != nil {
		return fmt.Errorf("mark the forwards of %s a newer one followed: %w", sender, err)
	}
	return nil
}

// MarkSupersededFailures marks the failed forwards of sender's event to
// target that a newer forward followed (see the top of this file): what a
// redelivery queued after a forward under way does once it goes ahead,
// that forward having failed since.
func (q *Jobs) MarkSupersededFailures(ctx context.Context, sender, target string, eventID uuid.UUID) error {
	return q.markSuperseded(ctx, sender, []ForwardKey{{Target: target, EventID: eventID}}, false)
}

// foldSQL folds up to $1 failed forward jobs not superseded nor counted
// into forward_failed_counts (by sender, target and hour of failure),
// marking them counted, and returns how many: they are selected in an
// InitPlan in the order of migration 23's index on them (sender, ID),
// locked SKIP LOCKED, and updated by ctid; the counts' rows are written in
// their key's order. A job of a version that named targets by URL (no
// target) is marked counted and counted nowhere (the counts leave such
// jobs out).
var foldSQL = `WITH f AS (
  UPDATE river_job j SET metadata = j.metadata || jsonb_build_object('` + countedKey + `', true)
  WHERE j.ctid = ANY(ARRAY(SELECT j.ctid FROM river_job j WHERE ` + uncountedFailures("j") + `
    ORDER BY j.args->>'sender', j.id LIMIT $1 FOR UPDATE SKIP LOCKED))
  RETURNING j.args->>'sender' AS sender, j.args->>'target' AS target, ` + failedHour("j") + ` AS hour
), i AS (
  INSERT INTO forward_failed_counts (sender, target, hour, n)
  SELECT sender, target, hour, count(*) FROM f WHERE sender IS NOT NULL AND target IS NOT NULL GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
  ON CONFLICT (sender, target, hour) DO UPDATE SET n = forward_failed_counts.n + excluded.n
)
SELECT count(*) FROM f`

// expireCountsSQL deletes the counts of the hours before $1.
const expireCountsSQL = `DELETE FROM forward_failed_counts WHERE hour < $1`

// failedCountsSQL counts sender $1's failed forwards by target, as
// countsSQL's rows of River's state $2 (a failed one): its kept counts
// (forward_failed_counts, through their key: a row per target and hour
// with failures, for River's retention) and its failed jobs not superseded
// and not folded yet (those of about the last fold's interval, through
// migration 23's index on them). One statement, so that both are read in
// one snapshot: a fold commits its counts and its jobs' marks together.
// The jobs are read in the order of that index (sender, ID), which under
// store.IndexOrderScans (no sort) is the one path without a disabled node:
// not the index on all failed jobs not superseded (counted or not), which
// takes the same conditions.
var failedCountsSQL = `SELECT target, $2::text, false, sum(n)::bigint FROM (
  SELECT c.target, c.n FROM forward_failed_counts c WHERE c.sender = $1
  UNION ALL
  (SELECT j.args->>'target', 1 FROM river_job j WHERE ` + uncountedFailures("j") + ` AND j.args->>'sender' = $1
   ORDER BY j.args->>'sender', j.id)) f
GROUP BY 1 HAVING sum(n) <> 0`

// Settings of the fold of failed forwards into their counts.
const (
	// foldEvery is how often a working process folds the failures.
	foldEvery = time.Second
	// foldBatch is the most failures one statement folds; a fold runs
	// statements until one folds fewer.
	foldBatch = 5000
	// expireEvery is how often a fold also deletes the counts of hours
	// River no longer keeps.
	expireEvery = time.Minute
)

// FoldFailedForwards folds the failed forward jobs not superseded nor
// counted yet into their counts (foldSQL), in batches of batch, each in a
// transaction of its own under countsLock (none with batch 0); with
// expireBefore not zero the first also deletes the counts of the hours
// before it. It returns how many it folded, and false when another
// transaction held countsLock at the first batch (a marking, or another
// process's fold): it then does nothing, without waiting.
func (q *Jobs) FoldFailedForwards(ctx context.Context, batch int, expireBefore time.Time) (int64, bool, error) {
	var total int64
	for first := true; ; first = false {
		n, ok, err := q.foldOnce(ctx, batch, expireBefore)
		total += n
		if err != nil || !ok || n < int64(batch) || batch <= 0 {
			return total, ok || !first, err
		}
		expireBefore = time.Time{}
	}
}

// foldOnce is one batch of FoldFailedForwards.
func (q *Jobs) foldOnce(ctx context.Context, batch int, expireBefore time.Time) (int64, bool, error) {
	var (
		n  int64
		ok bool
	)
	err := pgx.BeginFunc(ctx, q.db, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock($1::int4, 0)`, countsLock).Scan(&ok); err != nil || !ok {
			return err
		}
		if !expireBefore.IsZero() {
			if _, err := tx.Exec(ctx, expireCountsSQL, expireBefore); err != nil {
				return err
			}
		}
		if batch <= 0 {
			return nil
		}
		rows, err := store.QueryUnder(ctx, tx, store.IndexOrderScans, foldSQL, batch)
		if err == nil {
			n, err = pgx.CollectExactlyOneRow(rows, pgx.RowTo[int64])
		}
		return err
	})
	if err != nil {
		return 0, false, fmt.Errorf("fold the failed forwards into their counts: %w", err)
	}
	return n, ok, nil
}
