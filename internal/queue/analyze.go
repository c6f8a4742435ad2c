package queue

import (
	"context"
	"fmt"
)

// AnalyzeJobs vacuums and analyzes River's job table, as autovacuum does on
// a live one (VACUUM also moves the pending list of River's GIN index on
// args into the index proper). q must not be on a transaction.
func (q *Jobs) AnalyzeJobs(ctx context.Context) error {
	if _, err := q.db.Exec(ctx, `VACUUM ANALYZE river_job`); err != nil {
		return fmt.Errorf("analyze the jobs: %w", err)
	}
	return nil
}
