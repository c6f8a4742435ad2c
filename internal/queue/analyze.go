package queue

import (
	"context"
	"fmt"
)

// AnalyzeJobs vacuums and analyzes River's job table, as autovacuum does.
// VACUUM also flushes the pending list of River's GIN index on args. q must
// not be on a transaction.
func (q *Jobs) AnalyzeJobs(ctx context.Context) error {
	if _, err := q.db.Exec(ctx, `VACUUM ANALYZE river_job`); err != nil {
		return fmt.Errorf("analyze the jobs: %w", err)
	}
	return nil
}
