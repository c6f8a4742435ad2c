package queue

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/rivertype"
)

// The jobs of processes that are gone (forward_processes, processes.go).

// TakenOver is a running job of a process that is gone, which
// TakeOverJobs made available again (State pending) or discarded (State
// failed: its attempts were used up).
type TakenOver struct {
	JobID   int64
	Kind    string
	Process string // the River client ID of the process that was running it
	State   State
}

// takeOverSQL makes available again, at once, up to $3 jobs River shows as
// running whose last attempt was made by a process whose client ID starts
// with $1 and that has no row in forward_processes seen within the last $2
// milliseconds: it died while running them ($4 is River's state running,
// $5 and $6 those takeOverSet names). As River's rescuer does, the
// job keeps its attempt count (the attempt under way counts) and gets an
// error saying why; one whose attempts are used up is discarded. A job
// whose last attempt was made by another kind of client (a process of an
// earlier version, which writes no heartbeat) is left to River's rescuer.
//
// Its plan cannot depend on statistics: the running jobs are read in a CTE
// whose only condition is the state (River's fetching index leads with it:
// the running jobs, a few per worker, never the table), each of their
// processes is a probe of forward_processes' key, and the update finds the
// jobs by their key (id = ANY of an InitPlan's array: an index condition on
// the leading column, under the transaction's index scans,
// processIndexScans). The jobs are locked in a second InitPlan, FOR UPDATE
// SKIP LOCKED: a job another transaction holds (River's completer writing
// its outcome, River's rescuer) is left to it, and the statement never
// waits for a lock (see the lock order, doc.go). The conditions on the
// state (running) make a job that its process finished meanwhile (or that
// another process took over first) stay as it is. takeOverSet says what
// becomes of a job taken over.
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

// takeOverSet is the SET list of a job taken over because why (an SQL
// text expression): made available again at once, as River's rescuer does
// (its attempt count kept, the attempt under way counted, an error saying
// why), or discarded when its attempts are used up. The parameters
// $<states> and $<states+1> are River's states discarded and available
// (takeOverStates).
func takeOverSet(why string, states int) string {
	return fmt.Sprintf(`state = CASE WHEN attempt >= max_attempts THEN $%d ELSE $%d END::river_job_state,`, states, states+1) + `
  scheduled_at = CASE WHEN attempt >= max_attempts THEN scheduled_at ELSE statement_timestamp() END,
  finalized_at = CASE WHEN attempt >= max_attempts THEN statement_timestamp() END,
  errors = array_append(errors, jsonb_build_object('at', statement_timestamp(), 'attempt', greatest(attempt, 0),
    'error', 'taken over: ' || ` + why + `, 'trace', ''))`
}

// takeOverStates are the arguments of takeOverSet's states.
func takeOverStates() []any { return []any{jobDiscarded, jobAvailable} }

// runningOfSQL returns the jobs River shows as running (in River's state
// $3) whose last attempt was made by the process $1, and whether that
// attempt started more than $2 milliseconds ago. Read as takeOverSQL reads
// the running jobs.
const runningOfSQL = `WITH running AS MATERIALIZED (
  SELECT id, attempted_by[cardinality(attempted_by)] AS process, attempted_at FROM river_job WHERE state = $3::river_job_state
)
SELECT id, coalesce(attempted_at < statement_timestamp() - $2 * interval '1 millisecond', true) FROM running WHERE process = $1 ORDER BY id`

// releaseOrphansSQL makes available again the jobs $2 of the process $1
// that River shows as running (River's state $3) while the process runs
// none of them (see ReleaseOrphans). By their key, locked as takeOverSQL
// locks its jobs (SKIP LOCKED: never waiting).
var releaseOrphansSQL = `UPDATE river_job SET ` + takeOverSet("'its process (' || $1 || ') was not running it (its fetch was cut off)'", 4) + `
WHERE state = $3::river_job_state AND id = ANY(ARRAY(
  SELECT id FROM river_job
  WHERE id = ANY($2::bigint[]) AND state = $3::river_job_state AND attempted_by[cardinality(attempted_by)] = $1
  ORDER BY id FOR UPDATE SKIP LOCKED))
RETURNING id, kind, attempted_by[cardinality(attempted_by)], state::text`

// RunningJob is a job River shows as running on behalf of a process.
type RunningJob struct {
	ID int64
	// Old: its attempt started more than the age asked for ago.
	Old bool
}

// RunningJobsOf returns the jobs River shows as running whose last attempt
// was made by process, oldest ID first, each saying whether that attempt
// started more than age ago.
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

// ReleaseOrphans makes available again (as TakeOverJobs does) the jobs ids
// that River shows as running on behalf of process although the process
// runs none of them: River's fetch marks the jobs it takes running in the
// database, and a fetch whose answer was lost (the database crashed, the
// connection broke) leaves jobs that no worker runs, which River's rescuer
// would retry only after its horizon. Jobs no longer running, or now
// another process's, are left as they are. It returns those it released.
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

// processIndexScans keeps takeOverSQL on its plan whatever the statistics
// say (they are reset by a crash, when the takeover matters most): no
// sequential or bitmap scan of River's table, and no JIT compilation (the
// cost of a disabled path crosses jit_above_cost). Local to the batch's
// transaction.
const processIndexScans = `SELECT set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true), set_config('jit', 'off', true)`

// TakeOverJobs makes available again up to limit jobs that are running in
// River's table on behalf of a process whose client ID starts with prefix
// and that has not been seen for stale (see takeOverSQL), and returns
// them; none (nil) when there are none. The caller must itself have been
// seen continuously for longer than stale: right after a database crash,
// forward_processes (unlogged) is empty until each live process has
// written its row again.
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
