package consumer

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Execer is what [Migrate] and [DeleteProcessedBefore] need of the
// database. *pgxpool.Pool, *pgx.Conn and pgx.Tx satisfy it.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Migrate runs [Schema] on db. It creates the package's table and index when
// they are missing, and changes nothing otherwise. Users with a migration
// tool of their own can run schema.sql with it instead.
func Migrate(ctx context.Context, db Execer) error {
	if _, err := db.Exec(ctx, Schema); err != nil {
		return fmt.Errorf("consumer: migrate: %w", err)
	}
	return nil
}

// DeleteProcessedBefore deletes up to limit of consumerName's processed
// messages that were processed before before, oldest first. It returns how
// many it deleted; fewer than limit means no more are that old. Run it in a
// loop, periodically, to bound the table. A deleted message ID is new again,
// so keep each ID longer than anything can redeliver its message. A limit of
// 0 or less deletes nothing.
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
