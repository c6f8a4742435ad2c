package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/rivertype"
)

// What, in production code, only the load benchmark (internal/bench)
// uses: its tally of a phase, and the ANALYZE of River's table between
// phases.

// The load benchmark's tally of a phase (internal/bench): the forward jobs
// of the deliveries whose ID starts with a phase's prefix.

// phaseStatesSQL counts the forward jobs of the deliveries whose ID starts
// with $1 by River job state, and the fast path's delivered forwards of
// those deliveries (forward_delivered) as River's state $2 (completed).
var phaseStatesSQL = jobSQL(`SELECT state::text, count(*) FROM river_job
WHERE kind = {forward_kind} AND starts_with(args->>'delivery_id', $1) GROUP BY 1
UNION ALL
SELECT $2::text, count(*) FROM forward_delivered WHERE starts_with(delivery_id, $1) HAVING count(*) > 0`)

// ForwardJobStates counts, by River job state, the forward jobs of the
// deliveries whose ID starts with prefix, the fast path's delivered
// forwards (forward_delivered) counted as completed.
func (q *Queries) ForwardJobStates(ctx context.Context, prefix string) (map[rivertype.JobState]int64, error) {
	rows, err := q.db.Query(ctx, phaseStatesSQL, prefix, jobCompleted) //nolint:rowserrcheck // pgx.ForEachRow checks rows.Err
	if err != nil {
		return nil, fmt.Errorf("count forward jobs by state: %w", err)
	}
	out := map[rivertype.JobState]int64{}
	var (
		state string
		n     int64
	)
	_, err = pgx.ForEachRow(rows, []any{&state, &n}, func() error {
		out[rivertype.JobState(state)] += n
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("count forward jobs by state: %w", err)
	}
	return out, nil
}

// deleteAvailableSQL deletes the forward jobs in River's state $2
// (available) of the deliveries whose ID starts with $1.
var deleteAvailableSQL = jobSQL(`DELETE FROM river_job
WHERE kind = {forward_kind} AND state = $2::river_job_state AND starts_with(args->>'delivery_id', $1)`)

// DeleteAvailableForwardJobs deletes the available forward jobs (not yet
// attempted, or waiting for their retry) of the deliveries whose ID starts
// with prefix, and returns how many it deleted.
func (q *Queries) DeleteAvailableForwardJobs(ctx context.Context, prefix string) (int64, error) {
	tag, err := q.db.Exec(ctx, deleteAvailableSQL, prefix, jobAvailable)
	if err != nil {
		return 0, fmt.Errorf("delete available forward jobs: %w", err)
	}
	return tag.RowsAffected(), nil
}

// AnalyzeJobs vacuums and analyzes River's job table, as autovacuum does on
// a live one (VACUUM also moves the pending list of River's GIN index on
// args into the index proper). q must not be on a transaction.
func (q *Queries) AnalyzeJobs(ctx context.Context) error {
	if _, err := q.db.Exec(ctx, `VACUUM ANALYZE river_job`); err != nil {
		return fmt.Errorf("analyze the jobs: %w", err)
	}
	return nil
}
