package dedup

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Queries of the console (package console) over processed_messages, beside
// List and Get, which the JSON API uses too.

// listRangeFirstSQL and listRangeAfterSQL are List's queries bounded below
// by a time: the same index range scan of
// processed_messages_sender_created_idx (migration 4), stopped at since.
// An upper bound needs no query of its own: "received before until" is the
// cursor (until, "").
const (
	listRangeFirstSQL = listFrom + ` AND pm.created_at >= $2
ORDER BY pm.created_at DESC, pm.delivery_id DESC
LIMIT $3`
	listRangeAfterSQL = listFrom + ` AND pm.created_at >= $2 AND (pm.created_at, pm.delivery_id) < ($3, $4)
ORDER BY pm.created_at DESC, pm.delivery_id DESC
LIMIT $5`
)

// ListRange is List restricted to the deliveries received at or after
// since (no bound when since is zero). To list those received before a
// time until, pass after = &Cursor{ReceivedAt: until} (an empty delivery ID
// sorts before every other). Its pages and Next work like List's.
// Each record carries its event type, as List's do.
func (s *Store) ListRange(ctx context.Context, sender string, limit int, after *Cursor, since time.Time) (Page, error) {
	if since.IsZero() {
		return s.List(ctx, sender, limit, after)
	}
	if limit < 1 || limit > MaxListLimit {
		return Page{}, fmt.Errorf("list deliveries: limit %d is not from 1 to %d", limit, MaxListLimit)
	}
	if after == nil {
		return s.query(ctx, sender, limit, listRangeFirstSQL, sender, since, limit+1)
	}
	return s.query(ctx, sender, limit, listRangeAfterSQL, sender, since, after.ReceivedAt, after.DeliveryID, limit+1)
}

// query runs a listing query (columns listColumns and the event type, at
// most limit+1 rows)
// and returns its page.
func (s *Store) query(ctx context.Context, sender string, limit int, sql string, args ...any) (Page, error) {
	page := Page{Records: []Record{}}
	b := &pgx.Batch{}
	b.Queue(sql, args...).Query(func(rows pgx.Rows) error { return scanRecords(rows, sender, &page) })
	if err := s.db.SendBatch(ctx, b).Close(); err != nil {
		return Page{}, fmt.Errorf("list deliveries of %s: %w", sender, err)
	}
	page.trim(limit)
	return page, nil
}

// StatusCount is how many of a sender's deliveries got a stored response
// status: in the last hour and in the last day.
type StatusCount struct {
	Status   int
	LastHour int64
	LastDay  int64
}

// countSQL counts a sender's deliveries of the last day by stored status,
// with a range scan of processed_messages_sender_created_idx.
const countSQL = `SELECT response_status, count(*) FILTER (WHERE created_at >= $3), count(*)
FROM processed_messages WHERE sender = $1 AND created_at >= $2
GROUP BY response_status ORDER BY response_status`

// Counts returns sender's deliveries received in the hour and the day
// before now, by stored response status, by status ascending; empty, not
// nil, when there were none. Duplicates are not counted: a replay stores
// nothing.
func (s *Store) Counts(ctx context.Context, sender string, now time.Time) ([]StatusCount, error) {
	out := []StatusCount{}
	b := &pgx.Batch{}
	b.Queue(countSQL, sender, now.Add(-24*time.Hour), now.Add(-time.Hour)).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var (
				c      StatusCount
				status int16
			)
			if err := rows.Scan(&status, &c.LastHour, &c.LastDay); err != nil {
				return err
			}
			c.Status = int(status)
			out = append(out, c)
		}
		return rows.Err()
	})
	if err := s.db.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("count deliveries of %s: %w", sender, err)
	}
	return out, nil
}
