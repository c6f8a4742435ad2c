package dedup

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The deletes name rows by key and stay within one sender, so that they run
// on one shard when the tables are distributed by sender (a distributed
// PostgreSQL refuses deletes by ctid).
const (
	expiredSendersSQL = `SELECT DISTINCT sender FROM processed_messages WHERE expires_at <= $1`
	deleteExpiredSQL  = `DELETE FROM processed_messages
WHERE sender = $1 AND delivery_id IN (
  SELECT delivery_id FROM processed_messages WHERE sender = $1 AND expires_at <= $2 LIMIT $3)`
)

// ExpiredSenders returns the senders that have keys whose retention ended at
// or before now.
func ExpiredSenders(ctx context.Context, db *pgxpool.Pool, now time.Time) ([]string, error) {
	rows, err := db.Query(ctx, expiredSendersSQL, now)
	if err != nil {
		return nil, fmt.Errorf("find senders with expired keys: %w", err)
	}
	senders, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("find senders with expired keys: %w", err)
	}
	return senders, nil
}

// DeleteExpired deletes up to limit of sender's keys whose retention ended
// at or before now, in one short statement (so it holds its row locks only
// briefly), and returns how many it deleted: fewer than limit means none of
// the sender's are left. A deleted key's delivery ID is accepted as new by
// its next delivery.
func DeleteExpired(ctx context.Context, db *pgxpool.Pool, sender string, now time.Time, limit int) (int64, error) {
	tag, err := db.Exec(ctx, deleteExpiredSQL, sender, now, limit)
	if err != nil {
		return 0, fmt.Errorf("delete expired keys of %s: %w", sender, err)
	}
	return tag.RowsAffected(), nil
}
