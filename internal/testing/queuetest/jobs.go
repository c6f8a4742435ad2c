// Package queuetest puts River's table of jobs in the states that tests
// need, and reads it back. It inserts forward jobs as River stores them,
// sets a job's state after attempts, postpones waiting forwards, counts
// jobs and scans or locks the table. Tests use it instead of writing SQL on
// River's table, so a change of that table touches package queue and this
// package only.
//
// Only tests import it; a depguard rule keeps it out of production code.
// It imports neither queue nor store, so the tests of both can use it.
package queuetest

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/riverqueue/river/rivertype"
)

// ForwardKind is the River job kind of forwards. It is a copy of
// queue.ForwardKind, and a test of package queue checks that they match.
const ForwardKind = "hookgate_forward"

// SupersededKey is the metadata key with which package queue marks a
// forward job that a newer forward of its event to its target followed.
// A test of package queue checks that it matches queue's key.
const SupersededKey = "hookgate:superseded"

// markSupersededSQL marks jobs superseded, as package queue does when it
// adds a newer forward. It takes the unfinished forward jobs of the events
// and targets of the jobs $1 that a newer job or delivered first attempt
// followed. The fixtures run it after they insert jobs or change a job's
// state. markScans keeps it on key probes, even when a test made the
// statistics lie.
const markSupersededSQL = `UPDATE river_job j SET metadata = j.metadata || jsonb_build_object('` + SupersededKey + `', true)
WHERE j.id = ANY(ARRAY(SELECT c.id FROM unnest($1::bigint[]) AS i(id)
  JOIN river_job s ON s.id = i.id AND s.kind = '` + ForwardKind + `'
  CROSS JOIN LATERAL (SELECT c.id, c.args FROM river_job c WHERE c.kind = '` + ForwardKind + `' AND c.args->>'sender' = s.args->>'sender'
    AND c.args->>'target' = s.args->>'target' AND c.args->>'event_id' >= s.args->>'event_id' AND c.args->>'event_id' <= s.args->>'event_id'
    AND c.state <> $2::river_job_state AND NOT (c.metadata ? '` + SupersededKey + `')
    ORDER BY c.args->>'event_id', c.id) c
  WHERE ((SELECT n.id FROM river_job n WHERE n.kind = '` + ForwardKind + `' AND n.args->>'sender' = c.args->>'sender'
          AND n.args->>'target' = c.args->>'target' AND n.args->>'event_id' >= c.args->>'event_id' AND n.args->>'event_id' <= c.args->>'event_id'
          AND n.id > c.id ORDER BY n.args->>'event_id', n.id LIMIT 1) IS NOT NULL
      OR (SELECT n.id FROM forward_delivered n WHERE n.sender = c.args->>'sender' AND n.event_id >= c.args->>'event_id'
          AND n.event_id <= c.args->>'event_id' AND n.target = c.args->>'target' AND n.id > c.id ORDER BY n.event_id, n.id LIMIT 1) IS NOT NULL)))`

// markScans leaves markSupersededSQL only nested loops over index probes,
// ordered as the indexes are, so no sort is needed.
const markScans = `SELECT set_config('enable_seqscan', 'off', true), set_config('enable_hashjoin', 'off', true),
  set_config('enable_mergejoin', 'off', true), set_config('enable_sort', 'off', true), set_config('enable_bitmapscan', 'off', true),
  set_config('jit', 'off', true)`

// markSuperseded runs markSupersededSQL for the jobs ids on db, in a
// transaction or a savepoint.
func markSuperseded(ctx context.Context, db DB, ids []int64) error {
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, markScans); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, markSupersededSQL, ids, string(rivertype.JobStateCompleted))
		return err
	})
	if err != nil {
		return fmt.Errorf("mark superseded forward jobs: %w", err)
	}
	return nil
}

// MarkSuperseded marks every unfinished forward job that a newer forward
// of its event to its target followed, as package queue does. It serves
// tests that write their jobs with SQL of their own.
func (q *Jobs) MarkSuperseded(ctx context.Context) error {
	var ids []int64
	if err := q.db.QueryRow(ctx, `SELECT coalesce(array_agg(id), '{}') FROM river_job WHERE kind = '`+ForwardKind+`' AND state <> $1::river_job_state`,
		string(rivertype.JobStateCompleted)).Scan(&ids); err != nil {
		return fmt.Errorf("mark superseded forward jobs: %w", err)
	}
	return markSuperseded(ctx, q.db, ids)
}

// deliveredOutput is the recorded output of forward_delivered's row d, as
// River's worker records it under metadata.output. Package queue reads it
// so for such a row.
const deliveredOutput = `jsonb_build_object('attempt', 1, 'status', d.status, 'delivered_at', d.delivered_at)`

// DB is what the fixtures run on: a *pgxpool.Pool, a *pgx.Conn or a
// pgx.Tx.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Jobs are the fixtures of River's jobs on one DB.
type Jobs struct {
	db DB
}

// New returns the fixtures on db.
func New(db DB) *Jobs { return &Jobs{db: db} }

// ForwardJob is a forward job's row as River stores it.
type ForwardJob struct {
	ID          int64
	Queue       string
	State       rivertype.JobState
	Attempt     int
	MaxAttempts int
	// The job's arguments. URL is set only in jobs that name their target
	// by URL.
	Sender, EventID, Target, DeliveryID, URL string
	// AttemptedBy are the clients that worked it, in order.
	AttemptedBy []string
	ScheduledAt time.Time
	// Errors are the errors of its failed attempts, in order.
	Errors []string
	// ErrorRecords are its failed attempts' records as River stores them,
	// in JSON, in order.
	ErrorRecords []string
	// Output is its recorded output in JSON, or "".
	Output string
}

// ForwardJobs returns every forward job, lowest ID first. It also returns
// every forward_delivered row as the job it stands for: completed after
// one attempt, on no queue.
func (q *Jobs) ForwardJobs(ctx context.Context) ([]ForwardJob, error) {
	rows, err := q.db.Query(ctx, `SELECT id, queue, state::text, attempt, max_attempts,
  coalesce(args->>'sender', ''), coalesce(args->>'event_id', ''), coalesce(args->>'target', ''), coalesce(args->>'delivery_id', ''), coalesce(args->>'url', ''),
  coalesce(attempted_by, '{}'), scheduled_at,
  coalesce((SELECT array_agg(e->>'error' ORDER BY ord) FROM unnest(errors) WITH ORDINALITY AS x(e, ord)), '{}'),
  coalesce(errors::text[], '{}'), coalesce(metadata->>'output', '')
FROM river_job WHERE kind = '`+ForwardKind+`'
UNION ALL
SELECT d.id, '', $1::text, 1, d.max_attempts, d.sender, d.event_id, d.target, d.delivery_id, '', '{}', d.attempted_at, '{}', '{}', (`+deliveredOutput+`)::text
FROM forward_delivered d ORDER BY 1`, string(rivertype.JobStateCompleted))
	if err != nil {
		return nil, fmt.Errorf("read forward jobs: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ForwardJob, error) {
		var (
			j     ForwardJob
			state string
		)
		err := row.Scan(&j.ID, &j.Queue, &state, &j.Attempt, &j.MaxAttempts, &j.Sender, &j.EventID, &j.Target, &j.DeliveryID, &j.URL,
			&j.AttemptedBy, &j.ScheduledAt, &j.Errors, &j.ErrorRecords, &j.Output)
		j.State = rivertype.JobState(state)
		return j, err
	})
	if err != nil {
		return nil, fmt.Errorf("read forward jobs: %w", err)
	}
	return out, nil
}

// JobTable is River's table of jobs, for tests that look for its name in
// PostgreSQL's views, such as pg_stat_activity.
const JobTable = "river_job"

// JobScans returns how many times q's transaction has scanned River's GIN
// index on the jobs' args, and River's job table sequentially.
func (q *Jobs) JobScans(ctx context.Context) (argIndex, seq int64, err error) {
	err = q.db.QueryRow(ctx, `SELECT pg_stat_get_xact_numscans('river_job_args_index'::regclass),
  (SELECT seq_scan FROM pg_stat_xact_user_tables WHERE relname = 'river_job')`).Scan(&argIndex, &seq)
	if err != nil {
		return 0, 0, fmt.Errorf("read the scans of the jobs: %w", err)
	}
	return argIndex, seq, nil
}

// PostponeWaitingForwards moves the waiting forward jobs that are due
// between after and before from now, to to from now. It is as if each had
// been told to wait that long. It returns how many it moved. A job that
// another transaction holds is moved once it is let go.
func (q *Jobs) PostponeWaitingForwards(ctx context.Context, after, before, to time.Duration) (int64, error) {
	tag, err := q.db.Exec(ctx, `UPDATE river_job SET scheduled_at = now() + $4 * interval '1 millisecond'
WHERE kind = '`+ForwardKind+`' AND state = ANY($1::river_job_state[])
  AND scheduled_at > now() + $2 * interval '1 millisecond' AND scheduled_at < now() + $3 * interval '1 millisecond'`,
		[]string{string(rivertype.JobStateAvailable), string(rivertype.JobStateScheduled), string(rivertype.JobStateRetryable)},
		after.Milliseconds(), before.Milliseconds(), to.Milliseconds())
	if err != nil {
		return 0, fmt.Errorf("postpone the waiting forwards: %w", err)
	}
	return tag.RowsAffected(), nil
}

// LockJobInserts blocks every insert of a job until q's transaction ends.
// It locks River's table in SHARE ROW EXCLUSIVE mode.
func (q *Jobs) LockJobInserts(ctx context.Context) error {
	if _, err := q.db.Exec(ctx, `LOCK TABLE river_job IN SHARE ROW EXCLUSIVE MODE`); err != nil {
		return fmt.Errorf("lock the jobs: %w", err)
	}
	return nil
}

// CountJobs returns how many River jobs of kind there are in one of
// states. An empty kind, or no states, matches any.
func (q *Jobs) CountJobs(ctx context.Context, kind string, states ...rivertype.JobState) (int, error) {
	names := make([]string, 0, len(states))
	for _, s := range states {
		names = append(names, string(s))
	}
	var n int
	err := q.db.QueryRow(ctx, `SELECT count(*) FROM river_job
WHERE ($1 = '' OR kind = $1) AND (cardinality($2::text[]) = 0 OR state::text = ANY($2))`, kind, names).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count jobs: %w", err)
	}
	return n, nil
}

// JobFixture is a state to put a forward job in, as River records it after
// attempts.
type JobFixture struct {
	State rivertype.JobState
	// Attempt is how many attempts started. 0 means max_attempts.
	Attempt int
	// Errors are the errors of the attempts up to Attempt. They are
	// numbered so that the last one is Attempt's.
	Errors []string
	// Output is the recorded output, encoded as JSON like a queue.Output.
	// Nil leaves it as it is.
	Output any
	// At is when the last attempt started, and when a finished job
	// finished. Zero means now.
	At time.Time
	// ScheduledAt is when the next attempt is due. Zero leaves it.
	ScheduledAt time.Time
	// AttemptedBy are the River clients that worked it, in order. Nil
	// leaves them as they are.
	AttemptedBy []string
}

// SetForwardJob puts the forward job id in f's state. It is marked
// superseded when a newer forward of its event to its target exists.
func (q *Jobs) SetForwardJob(ctx context.Context, id int64, f JobFixture) error {
	args, err := f.args()
	if err != nil {
		return err
	}
	tag, err := q.db.Exec(ctx, `UPDATE river_job SET `+fixtureSet+` WHERE kind = '`+ForwardKind+`' AND id = $6`, withID(args, id)...)
	if err != nil {
		return fmt.Errorf("set forward job %d: %w", id, err)
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("set forward job %d: no such forward job", id)
	}
	return markSuperseded(ctx, q.db, []int64{id})
}

// fixtureSet sets a job's state from a JobFixture's arguments. River's
// finished states are the parameter $9, not literals, as in package
// queue's statements.
const fixtureSet = `state = $1::river_job_state,
  attempt = CASE WHEN $2::int = 0 THEN max_attempts ELSE $2::int END,
  attempted_at = coalesce($3::timestamptz, now()),
  finalized_at = CASE WHEN $1::text = ANY($9::text[]) THEN coalesce($3::timestamptz, now()) END,
  errors = (SELECT array_agg(jsonb_build_object('at', coalesce($3::timestamptz, now()),
      'attempt', (CASE WHEN $2::int = 0 THEN max_attempts ELSE $2::int END) - cardinality($4::text[]) + ord::int, 'error', e, 'trace', '') ORDER BY ord)
    FROM unnest($4::text[]) WITH ORDINALITY AS x(e, ord)),
  metadata = CASE WHEN $5::jsonb IS NULL THEN metadata ELSE metadata || jsonb_build_object('output', $5::jsonb) END,
  scheduled_at = coalesce($7::timestamptz, scheduled_at),
  attempted_by = coalesce($8::text[], attempted_by)`

// args returns f's arguments of fixtureSet: $1 to $5, the scheduled time
// as $7 and the clients as $8. withID puts the job's ID in $6.
func (f JobFixture) args() ([]any, error) {
	var at, scheduled *time.Time
	if !f.At.IsZero() {
		at = &f.At
	}
	if !f.ScheduledAt.IsZero() {
		scheduled = &f.ScheduledAt
	}
	var output []byte
	if f.Output != nil {
		var err error
		if output, err = json.Marshal(f.Output); err != nil {
			return nil, fmt.Errorf("encode output: %w", err)
		}
		if string(output) == "null" { // a nil *queue.Output
			output = nil
		}
	}
	errs := f.Errors
	if errs == nil {
		errs = []string{}
	}
	return []any{string(f.State), f.Attempt, at, errs, output, scheduled, f.AttemptedBy}, nil
}

// withID returns the arguments of fixtureSet with the job's ID as $6, and
// finished as $9.
func withID(args []any, id int64) []any {
	return []any{args[0], args[1], args[2], args[3], args[4], id, args[5], args[6], finished}
}

// finished are River's states of a finished job, fixtureSet's $9.
var finished = []string{string(rivertype.JobStateCompleted), string(rivertype.JobStateCancelled), string(rivertype.JobStateDiscarded)}

// NewForwardJob is a forward job that [Jobs.InsertForwardJobs] writes as
// it is, without River's insert or its uniqueness. It may name its target
// by URL, or be in a given state already.
type NewForwardJob struct {
	Sender, Target, DeliveryID, URL string
	// EventID is the event's ID, or a new random one when zero.
	EventID     uuid.UUID
	MaxAttempts int
}

// InsertForwardJobs writes jobs on queue in f's state, in one
// transaction, and returns their IDs in order. A zero State is available,
// due now. The older forwards of their events to their targets are marked
// superseded, as package queue does.
func (q *Jobs) InsertForwardJobs(ctx context.Context, queue string, f JobFixture, jobs ...NewForwardJob) ([]int64, error) {
	if f.State == "" {
		f.State = rivertype.JobStateAvailable
	}
	encoded := make([][]byte, 0, len(jobs))
	maxAttempts := make([]int, 0, len(jobs))
	for _, j := range jobs {
		if j.EventID == uuid.Nil {
			id, err := uuid.NewV7()
			if err != nil {
				return nil, err
			}
			j.EventID = id
		}
		a := map[string]string{"sender": j.Sender, "event_id": j.EventID.String(), "delivery_id": j.DeliveryID}
		if j.Target != "" {
			a["target"] = j.Target
		}
		if j.URL != "" {
			a["url"] = j.URL
		}
		b, err := json.Marshal(a)
		if err != nil {
			return nil, fmt.Errorf("encode args: %w", err)
		}
		encoded = append(encoded, b)
		maxAttempts = append(maxAttempts, max(j.MaxAttempts, 1))
	}
	args, err := f.args()
	if err != nil {
		return nil, err
	}
	var ids []int64
	err = pgx.BeginFunc(ctx, q.db, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `INSERT INTO river_job (kind, args, max_attempts, queue, state, priority)
SELECT '`+ForwardKind+`', x.a, x.m, $3, $4::river_job_state, 1 FROM unnest($1::jsonb[], $2::int[]) WITH ORDINALITY AS x(a, m, ord) ORDER BY x.ord
RETURNING id`, encoded, maxAttempts, queue, string(rivertype.JobStateAvailable))
		if err != nil {
			return err
		}
		if ids, err = pgx.CollectRows(rows, pgx.RowTo[int64]); err != nil {
			return err
		}
		if f.State != rivertype.JobStateAvailable || f.Attempt != 0 || len(f.Errors) != 0 || f.Output != nil || !f.ScheduledAt.IsZero() || f.AttemptedBy != nil {
			// Not new jobs as River inserts them, but in f's state.
			if _, err := tx.Exec(ctx, `UPDATE river_job SET `+fixtureSet+` WHERE id = ANY($6::bigint[])`,
				args[0], args[1], args[2], args[3], args[4], ids, args[5], args[6], finished); err != nil {
				return err
			}
		}
		return markSuperseded(ctx, tx, ids)
	})
	if err != nil {
		return nil, fmt.Errorf("insert forward jobs: %w", err)
	}
	return ids, nil
}

// CountOutboxOf returns how many outbox rows of sender's deliveries whose
// ID starts with prefix wait for the relay.
func (q *Jobs) CountOutboxOf(ctx context.Context, sender, prefix string) (int64, error) {
	var n int64
	if err := q.db.QueryRow(ctx, `SELECT count(*) FROM forward_outbox WHERE sender = $1 AND starts_with(delivery_id, $2)`,
		sender, prefix).Scan(&n); err != nil {
		return 0, fmt.Errorf("count outbox rows of %s: %w", sender, err)
	}
	return n, nil
}

// InsertFinishedForwardJobs writes, in one statement, n forward jobs of
// sender's target on queue that completed over the last week. That is the
// history that a table holds in production. Their events do not exist.
func (q *Jobs) InsertFinishedForwardJobs(ctx context.Context, queue, sender, target string, n int) error {
	_, err := q.db.Exec(ctx, `INSERT INTO river_job (state, attempt, max_attempts, attempted_at, created_at, finalized_at, scheduled_at, args, kind, metadata, queue, priority)
SELECT $1::river_job_state, 1, 5, t, t, t + interval '80 ms', t,
  jsonb_build_object('sender', $2::text, 'target', $3::text, 'event_id', gen_random_uuid()::text, 'delivery_id', 'finished-' || g),
  '`+ForwardKind+`', jsonb_build_object('output', jsonb_build_object('attempt', 1, 'status', 204)), $4, 1
FROM generate_series(1, $5::int) g, LATERAL (SELECT now() - interval '7 days' + g * (interval '7 days' / $5::int) AS t) x`,
		string(rivertype.JobStateCompleted), sender, target, queue, n)
	if err != nil {
		return fmt.Errorf("insert finished forward jobs: %w", err)
	}
	return nil
}

// ResetStatistics makes PostgreSQL forget its activity statistics, as a
// crash does. Autovacuum then counts changes from zero again, and will not
// analyze River's table while a test runs. The planner's statistics stay
// as the last ANALYZE left them. The session's own counts are flushed
// first, so they do not arrive after the reset. Run it on the connection
// that changed the tables.
func (q *Jobs) ResetStatistics(ctx context.Context) error {
	for _, sql := range []string{`SELECT pg_stat_force_next_flush()`, `SELECT 1`, `SELECT pg_stat_reset()`} {
		if _, err := q.db.Exec(ctx, sql); err != nil {
			return fmt.Errorf("reset the statistics: %w", err)
		}
	}
	return nil
}

// HoldLeadership makes the River client leaderID River's elected leader
// for d. No River client of the test is elected meanwhile, so River's job
// scheduler does not run.
func (q *Jobs) HoldLeadership(ctx context.Context, leaderID string, d time.Duration) error {
	if _, err := q.db.Exec(ctx, `INSERT INTO river_leader (leader_id, elected_at, expires_at) VALUES ($1, now(), now() + $2 * interval '1 millisecond')`,
		leaderID, d.Milliseconds()); err != nil {
		return fmt.Errorf("hold River's leadership: %w", err)
	}
	return nil
}
