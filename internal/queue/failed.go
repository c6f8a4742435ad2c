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

// A target's failed forwards are its cancelled or discarded jobs that no
// newer forward of the same event to the same target followed. Once an
// event is redelivered, its old failure is no longer counted, listed or
// matched. So redelivering the failures twice sends each event once. The
// JSON API and the console use this definition. Checking each failed job
// for a newer forward would cost two index probes per failure. So the
// marks and counts are kept as forwards change:
//
//   - Whatever adds a newer forward marks the older jobs of that event and
//     target superseded, in its own transaction. A redelivery marks the
//     jobs it follows whatever their state. The relay, the fast path's
//     records and a queued redelivery that goes ahead mark only the failed
//     jobs. A redelivery queued after a fast-path attempt is inserted
//     marked, because the attempt's record comes after it.
//   - Every foldEvery, each working process folds the unmarked failed
//     jobs into forward_failed_counts by sender, target and hour, and marks
//     them counted. Marking a counted job superseded takes it out of its
//     hour's count in the same statement.
//   - A sender's failed forwards are the sum of its hourly counts and its
//     unfolded failed jobs, read in one statement.
//
// The marks use FOR UPDATE SKIP LOCKED, so they never wait for a job.
// River holds a job while it moves it, and the fold while it counts it. So
// that a marking does not skip a job that the fold holds, they share the
// advisory lock countsLock. The fold takes it exclusively and skips its
// turn when it cannot. A marking takes it in share mode, just before it
// marks. So the fold never waits for a marking, and a marking waits only
// for a fold's few milliseconds. A job that River held is left unmarked;
// the redelivery marks it when it goes ahead, with
// [Jobs.MarkSupersededFailures].
//
// A failure stops counting with its hour, an hour after River's retention.

// The metadata keys that hookgate sets on River's forward jobs.
// supersededKey marks a job that a newer forward of its event to its
// target followed. countedKey marks a failed job counted in
// forward_failed_counts.
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

// failedLiteral is the condition that job j is in a failed state: the
// predicate of hookgate's indexes on failed forwards. A test checks it
// against the mapping of states.
const failedLiteral = `j.state IN ('cancelled', 'discarded')`

// notMarkedSuperseded is the condition that job alias is not marked
// superseded.
func notMarkedSuperseded(alias string) string {
	return fmt.Sprintf("NOT (%s.metadata ? '%s')", alias, supersededKey)
}

// failedForwards is the condition that job alias is a failed forward not
// marked superseded. It is the predicate of an index on failed forwards.
func failedForwards(alias string) string {
	return strings.ReplaceAll(jobSQL(`j.kind = {forward_kind} AND `+failedLiteral), "j.", alias+".") + " AND " + notMarkedSuperseded(alias)
}

// uncountedFailures adds "not counted yet" to failedForwards. It is the
// predicate of an index on them by sender and ID.
func uncountedFailures(alias string) string {
	return failedForwards(alias) + fmt.Sprintf(" AND NOT (%s.metadata ? '%s')", alias, countedKey)
}

// failedHour is the UTC hour of job alias's failure, whatever the
// session's time zone. It is the hour of its count.
func failedHour(alias string) string {
	return fmt.Sprintf(`date_bin('1 hour', coalesce(%[1]s.finalized_at, %[1]s.created_at), TIMESTAMPTZ '2000-01-01 00:00:00+00')`, alias)
}

// countsLock is the first key of the advisory lock that keeps the fold
// and the markings apart. It is the bytes "hkfc".
const countsLock int32 = 0x686b6663

// markSQL returns the statement that marks the jobs of candidates
// superseded. It takes the counted ones out of sender $1's hourly counts.
// It locks the counts' rows in key order, so two markings never wait for
// each other in a cycle. The jobs are updated by ID, not by ctid, so a job
// that River changed meanwhile is updated in its new version.
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

// lockIfSQL returns the statement that takes countsLock in share mode
// when candidates selects any job. It runs before the marking, so the
// marking sees what a fold that it waited for committed.
func lockIfSQL(candidates string) string {
	return fmt.Sprintf(`SELECT pg_advisory_xact_lock_shared(%d, 0) FROM (%s LIMIT 1) f`, countsLock, candidates)
}

// olderCandidates selects, for each key of sender $1, the unmarked jobs
// of that event to that target that are older than the newer job and not
// completed.
var olderCandidates = jobSQL(`SELECT f.id FROM unnest($2::text[], $3::text[], $4::bigint[]) AS k(target, event_id, newer)
  CROSS JOIN LATERAL (SELECT f.id FROM river_job f WHERE f.kind = {forward_kind}
    AND f.args->>'sender' = $1 AND f.args->>'target' = k.target
    AND f.args->>'event_id' >= k.event_id AND f.args->>'event_id' <= k.event_id AND f.id < k.newer
    AND f.state <> $5::river_job_state AND ` + notMarkedSuperseded("f") + `
    ORDER BY f.args->>'event_id', f.id) f`)

// failedCandidates selects, for each key of sender $1, the unmarked
// failed jobs that a newer forward followed. It probes the small index on
// failures first, then checks those few for a newer forward.
var failedCandidates = `SELECT f.id FROM unnest($2::text[], $3::text[]) AS k(target, event_id)
  CROSS JOIN LATERAL (SELECT f.id FROM river_job f WHERE ` + failedForwards("f") + `
    AND f.args->>'sender' = $1 AND f.args->>'target' = k.target
    AND f.args->>'event_id' >= k.event_id AND f.args->>'event_id' <= k.event_id
    AND NOT (` + notSupersededOf("f", "k.target") + `)
    ORDER BY f.args->>'target', f.args->>'event_id', f.id) f`

// The marking statements and the statements that take countsLock before
// them.
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

// queueMarks queues on b the marking of sender's forwards of keys. With
// older, it marks each key's unfinished jobs older than Newer, as a
// redelivery does. Otherwise it marks the failed jobs that a newer forward
// followed. It queues the planner settings, countsLock and the marking.
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

// markSuperseded runs queueMarks' statements on q in one round trip. q
// should be the transaction that added the newer forwards, or a pool.
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
// target that a newer forward followed. A redelivery queued after a
// forward under way calls it when it goes ahead.
func (q *Jobs) MarkSupersededFailures(ctx context.Context, sender, target string, eventID uuid.UUID) error {
	return q.markSuperseded(ctx, sender, []ForwardKey{{Target: target, EventID: eventID}}, false)
}

// foldSQL folds up to $1 failed jobs, neither superseded nor counted, into
// forward_failed_counts, marks them counted and returns how many. It reads
// them in index order with SKIP LOCKED, and writes the counts in key
// order. A job that names its target by URL is marked but counted nowhere.
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

// failedCountsSQL counts sender $1's failed forwards by target, in rows
// like countsSQL's. It adds the kept hourly counts and the failed jobs
// not folded yet. It is one statement, so both come from one snapshot, as
// a fold commits its counts and marks together. The failures not folded
// are read in the order of their index, the sender compared as a range,
// under [store.IndexOrderScans]: compared by equality, River's primary key
// gave the same order (by id, for one sender) without a sort, reading
// every job of every sender.
var failedCountsSQL = `SELECT target, $2::text, false, sum(n)::bigint FROM (
  SELECT c.target, c.n FROM forward_failed_counts c WHERE c.sender = $1
  UNION ALL
  (SELECT j.args->>'target', 1 FROM river_job j WHERE ` + uncountedFailures("j") + `
     AND j.args->>'sender' >= $1 AND j.args->>'sender' <= $1
   ORDER BY j.args->>'sender', j.id)) f
GROUP BY 1 HAVING sum(n) <> 0`

// Settings of the fold of failed forwards into their counts.
const (
	// foldEvery is how often a working process folds the failures.
	foldEvery = time.Second
	// foldBatch is the most failures that one statement folds.
	foldBatch = 5000
	// expireEvery is how often a fold also deletes the counts of hours
	// that River no longer keeps.
	expireEvery = time.Minute
)

// FoldFailedForwards folds the failed jobs, neither superseded nor
// counted, into their counts. Each batch runs in its own transaction under
// countsLock. When expireBefore is not zero, the first batch also deletes
// the counts of the hours before it. It returns how many it folded. It
// returns false, without waiting, when another transaction held countsLock
// at the first batch.
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
