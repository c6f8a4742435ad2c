package store

import (
	"context"
	"fmt"
)

// CountOutboxOf returns how many outbox rows of sender's deliveries whose
// ID starts with prefix wait for the relay (for tests: no code counts
// them so).
func (q *Queries) CountOutboxOf(ctx context.Context, sender, prefix string) (int64, error) {
	var n int64
	if err := q.db.QueryRow(ctx, `SELECT count(*) FROM forward_outbox WHERE sender = $1 AND starts_with(delivery_id, $2)`,
		sender, prefix).Scan(&n); err != nil {
		return 0, fmt.Errorf("count outbox rows of %s: %w", sender, err)
	}
	return n, nil
}
