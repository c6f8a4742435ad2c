package events

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// deleteBeforeSQL names rows by key within one sender (a distributed
// PostgreSQL refuses deletes by ctid).
const deleteBeforeSQL = `DELETE FROM webhook_events
WHERE sender = $1 AND id IN (
  SELECT id FROM webhook_events WHERE sender = $1 AND received_at < $2 LIMIT $3)`

// DeleteBefore deletes up to limit of sender's events received before
// cutoff, in one short statement, and returns how many it deleted: fewer
// than limit means none are left.
func DeleteBefore(ctx context.Context, db *pgxpool.Pool, sender string, cutoff time.Time, limit int) (int64, error) {
	tag, err := db.Exec(ctx, deleteBeforeSQL, sender, cutoff, limit)
	if err != nil {
		return 0, fmt.Errorf("delete old events of %s: %w", sender, err)
	}
	return tag.RowsAffected(), nil
}

// sendersSQL lists the senders that have events, one index probe per sender
// (a loose scan of webhook_events_pkey, which leads with sender), not a
// scan of every event.
const sendersSQL = `WITH RECURSIVE s(sender) AS (
  SELECT min(sender) FROM webhook_events
  UNION ALL
  SELECT (SELECT min(sender) FROM webhook_events WHERE sender > s.sender) FROM s WHERE s.sender IS NOT NULL)
SELECT sender FROM s WHERE sender IS NOT NULL`

// Senders returns the names of the senders that have events, configured or
// not, in order.
func Senders(ctx context.Context, db *pgxpool.Pool) ([]string, error) {
	rows, err := db.Query(ctx, sendersSQL)
	if err != nil {
		return nil, fmt.Errorf("list senders with events: %w", err)
	}
	senders, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list senders with events: %w", err)
	}
	return senders, nil
}
