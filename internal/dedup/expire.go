package dedup

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

const deleteExpiredSQL = `DELETE FROM processed_messages
WHERE ctid = ANY (ARRAY(
  SELECT ctid FROM processed_messages WHERE expires_at <= $1 LIMIT $2))`

// DeleteExpired deletes up to limit keys whose retention ended at or before
// now, in one short statement (so it holds its row locks only briefly), and
// returns how many it deleted: fewer than limit means none are left. A
// deleted key's delivery ID is accepted as new by its next delivery.
func DeleteExpired(ctx context.Context, db *pgxpool.Pool, now time.Time, limit int) (int64, error) {
	tag, err := db.Exec(ctx, deleteExpiredSQL, now, limit)
	if err != nil {
		return 0, fmt.Errorf("delete expired keys: %w", err)
	}
	return tag.RowsAffected(), nil
}
