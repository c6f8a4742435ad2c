package queue

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/rivertype"
)

// TakenOver is a running job of a process that is gone. [Jobs.TakeOverJobs]
// made it available again, with State pending, or discarded it, with
// State failed, when its attempts were used up.
type TakenOver struct {
	JobID   int64
	Kind    string
	Process string // the River client ID of the process that was running it
	State   State
}

// takeOverSQL makes available again up to $3 running jobs of dead
// processes. A process is dead when its client ID starts with $1 and its
// forward_processes row was not seen within $2 milliseconds. As with
// River's rescuer, the attempt under way counts, and the job gets an error
// saying why. A job whose attempts are used up is discarded. A job of a
// client that writes no heartbeat is left to River's rescuer.
//
// The running jobs come from River's fetching index, which leads with the
// state. Each process is a probe of forward_processes' key. A second
// InitPlan locks the jobs, skipping locked ones. A job that its process
// finished meanwhile, or that another process took over, stays as it is.
var takeOverSQL = `WITH running AS MATERIALIZED (
  SELECT id, attempted_by[cardinality(attempted_by)] AS process FROM river_job WHERE state = $4::river_job_state
)
UPDATE river_job SET ` + takeOverSet("'the process running it (' || attempted_by[cardinality(attempted_by)] || ') is gone'", 5) + `
WHERE state = $4::river_job_state AND id = ANY(ARRAY(
  SELECT j.id FROM river_job j
  WHERE j.id = ANY(ARRAY(
      SELECT r.id FROM running r
      WHERE starts_with(r.process, $1)
        AND NOT EXISTS (SELECT 1 FROM forward_processes p WHERE p.id = r.process AND p.seen_at >= statement_timestamp() - $2 * interval '1 millisecond')
      ORDER BY r.id LIMIT $3))
    AND j.state = $4::river_job_state
  ORDER BY j.id FOR UPDATE SKIP LOCKED))
RETURNING id, kind, attempted_by[cardinality(attempted_by)], state::text`

// takeOverSet is the SET list of a job taken over, where why is an SQL
// text expression. The job is made available again at once, as River's
// rescuer does, or discarded when its attempts are used up. The parameter
// numbered states and the next one hold takeOverStates.
func takeOverSet(why string, states int) string {
	return fmt.Sprintf(`state = CASE WHEN attempt >= max_attempts THEN $%d ELSE $%d END::river_job_state,`, states, states+1) + `
  scheduled_at = CASE WHEN attempt >= max_attempts THEN scheduled_at ELSE statement_timestamp() END,
  finalized_at = CASE WHEN attempt >= max_attempts THEN statement_timestamp() END,
  errors = array_append(errors, jsonb_build_object('at', statement_timestamp(), 'attempt', greatest(attempt, 0),
    'error', 'taken over: ' || ` + why + `, 'trace', ''))`
}

// takeOverStates are the arguments of takeOverSet's states.
func takeOverStates() []any { return []any{jobDiscarded, jobAvailable} }

// runningOfSQL returns the running jobs whose last attempt was made by the
// process $1, and whether that attempt started more than $2 milliseconds
// ago. It reads them as takeOverSQL does.
const runningOfSQL = `WITH running AS MATERIALIZED (
  SELECT id, attempted_by[cardinality(attempted_by)] AS process, attempted_at FROM river_job WHERE state = $3::river_job_state
)
SELECT id, coalesce(attempted_at < statement_timestamp() - $2 * interval '1 millisecond', true) FROM running WHERE process = $1 ORDER BY id`

// releaseOrphansSQL makes available again the running jobs $2 of the
// process $1, which runs none of them. It finds them by key and locks
// them as takeOverSQL does, never waiting.
var releaseOrphansSQL = `UPDATE river_job SET ` + takeOverSet("'its process (' || $1 || ') was not running it (its fetch was cut off)'", 4) + `
WHERE state = $3::river_job_state AND id = ANY(ARRAY(
  SELECT id FROM river_job
  WHERE id = ANY($2::bigint[]) AND state = $3::river_job_state AND attempted_by[cardinality(attempted_by)] = $1
  ORDER BY id FOR UPDATE SKIP LOCKED))
RETURNING id, kind, attempted_by[cardinality(attempted_by)], state::text`

// RunningJob is a job River shows as running on behalf of a process.
type RunningJob struct {
	ID int64
	// Old reports that its attempt started more than the given age ago.
	Old bool
}

// RunningJobsOf returns the running jobs whose last attempt was made by
// process, oldest ID first. Each says whether that attempt started more
// than age ago.
func (q *Jobs) RunningJobsOf(ctx context.Context, process string, age time.Duration) ([]RunningJob, error) {
	var b pgx.Batch
	b.Queue(processIndexScans)
	b.Queue(runningOfSQL, runningOfArgs(process, age)...)
	br := q.db.SendBatch(ctx, &b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, fmt.Errorf("list the running jobs of %s: %w", process, err)
	}
	rows, err := br.Query()
	if err != nil {
		return nil, fmt.Errorf("list the running jobs of %s: %w", process, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (RunningJob, error) {
		var j RunningJob
		return j, row.Scan(&j.ID, &j.Old)
	})
	if err != nil {
		return nil, fmt.Errorf("list the running jobs of %s: %w", process, err)
	}
	return out, nil
}

// ReleaseOrphans makes available again the jobs ids that River shows as
// running for process, although the process runs none of them. River's
// fetch marks jobs running in the database. When the fetch's answer is
// lost, as in a crash, no worker runs those jobs, and River's rescuer
// would retry them only after its horizon. Jobs that are no longer running,
// or that another process runs now, are left alone. It returns those it
// released.
func (q *Jobs) ReleaseOrphans(ctx context.Context, process string, ids []int64) ([]TakenOver, error) {
	var b pgx.Batch
	b.Queue(processIndexScans)
	b.Queue(releaseOrphansSQL, releaseOrphansArgs(process, ids)...)
	br := q.db.SendBatch(ctx, &b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, fmt.Errorf("release the lost jobs of %s: %w", process, err)
	}
	rows, err := br.Query()
	if err != nil {
		return nil, fmt.Errorf("release the lost jobs of %s: %w", process, err)
	}
	return collectTakenOver(rows, process)
}

// collectTakenOver collects the rows of takeOverSQL or releaseOrphansSQL.
func collectTakenOver(rows pgx.Rows, what string) ([]TakenOver, error) {
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (TakenOver, error) {
		var t TakenOver
		var state string
		err := row.Scan(&t.JobID, &t.Kind, &t.Process, &state)
		t.State = stateOf(rivertype.JobState(state), false)
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("take over jobs (%s): %w", what, err)
	}
	return out, nil
}

// processIndexScans keeps takeOverSQL on its plan whatever the
// statistics say. A crash resets them just when the takeover matters most.
// It turns off sequential and bitmap scans, and JIT, since a disabled
// path's cost crosses jit_above_cost. It lasts for the batch's transaction.
const processIndexScans = `SELECT set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true), set_config('jit', 'off', true)`

// TakeOverJobs makes available again up to limit running jobs of
// processes whose client ID starts with prefix and that were not seen for
// stale. It returns them, or nil. The caller must itself have been seen for
// longer than stale. After a database crash, the unlogged
// forward_processes is empty until each live process writes its row again.
func (q *Jobs) TakeOverJobs(ctx context.Context, prefix string, stale time.Duration, limit int) ([]TakenOver, error) {
	var b pgx.Batch
	b.Queue(processIndexScans)
	b.Queue(takeOverSQL, takeOverArgs(prefix, stale, limit)...)
	br := q.db.SendBatch(ctx, &b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, fmt.Errorf("take over the jobs of processes that are gone: %w", err)
	}
	rows, err := br.Query()
	if err != nil {
		return nil, fmt.Errorf("take over the jobs of processes that are gone: %w", err)
	}
	return collectTakenOver(rows, "processes that are gone")
}

// takeOverArgs, runningOfArgs and releaseOrphansArgs are the arguments of
// takeOverSQL, runningOfSQL and releaseOrphansSQL.
func takeOverArgs(prefix string, stale time.Duration, limit int) []any {
	return append([]any{prefix, stale.Milliseconds(), limit, jobRunning}, takeOverStates()...)
}

func runningOfArgs(process string, age time.Duration) []any {
	return []any{process, age.Milliseconds(), jobRunning}
}

func releaseOrphansArgs(process string, ids []int64) []any {
	return append([]any{process, ids, jobRunning}, takeOverStates()...)
}
