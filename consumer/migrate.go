package consumer

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Execer is what Migrate and DeleteProcessedBefore need of the database:
// *pgxpool.Pool, *pgx.Conn and pgx.Tx satisfy it.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Migrate runs Schema on db: it creates the package's table and index when
// they are missing, and changes nothing otherwise. Users with a migration
// tool of their own run Schema (schema.sql) with it instead.
func Migrate(ctx context.Context, db Execer) error {
	if _, err := db.Exec(ctx, Schema); err != nil {
		return fmt.Errorf("consumer: migrate: %w", err)
	}
	return nil
}

// DeleteProcessedBefore deletes up to limit of consumerName's processed
// messages whose processed_at is before before, oldest first, and returns
// how many it deleted (fewer than limit when no more are that old). Run it
// periodically (in a loop until it returns less than limit) to bound the
// table. A deleted message ID is new again: keep each ID for longer than
// anything can redeliver its message (see the package documentation).
// limit <= 0 deletes nothing.
func DeleteProcessedBefore(ctx context.Context, db Execer, consumerName string, before time.Time, limit int) (int64, error) {
	if limit <= 0 {
		return 0, nil
	}
	tag, err := db.Exec(ctx, `DELETE FROM consumer_processed_messages
WHERE consumer_name = $1 AND message_id IN (
  SELECT message_id FROM consumer_processed_messages
  WHERE consumer_name = $1 AND processed_at < $2
  ORDER BY processed_at LIMIT $3)`, consumerName, before, limit)
	if err != nil {
		return 0, fmt.Errorf("consumer: delete processed messages: %w", err)
	}
	return tag.RowsAffected(), nil
}
