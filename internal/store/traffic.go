package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// traffic_minutes: per-minute counts of deliveries and forwards, added by
// each process about once a minute (package traffic) and read by the
// console's charts. Ingest never writes the table.

// Traffic kinds: the kind column's values.
const (
	TrafficAccepted  = "accepted"
	TrafficReplayed  = "replayed"
	TrafficRefused   = "refused"
	TrafficDelivered = "delivered"
	TrafficFailed    = "failed"
)

// TrafficRetention is how long traffic_minutes keeps a minute.
const TrafficRetention = 48 * time.Hour

// TrafficDelta is one process's count of a kind in a minute, to be added
// to the stored one. Target is "" for ingest kinds. SumMS is the sum of
// the latencies (forwards only).
type TrafficDelta struct {
	Sender, Target, Kind string
	Minute               time.Time
	N, SumMS             int64
}

// AddTraffic adds deltas to their minutes' rows, and forgets the minutes
// older than TrafficRetention before now, in one transaction.
func (q *Queries) AddTraffic(ctx context.Context, deltas []TrafficDelta, now time.Time) error {
	b := &pgx.Batch{}
	for _, d := range deltas {
		b.Queue(`INSERT INTO traffic_minutes (sender, target, kind, minute, n, sum_ms) VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (sender, target, kind, minute) DO UPDATE SET n = traffic_minutes.n + EXCLUDED.n, sum_ms = traffic_minutes.sum_ms + EXCLUDED.sum_ms`,
			d.Sender, d.Target, d.Kind, d.Minute.UTC().Truncate(time.Minute), d.N, d.SumMS)
	}
	b.Queue(`DELETE FROM traffic_minutes WHERE minute < $1`, now.Add(-TrafficRetention))
	if err := q.db.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("add traffic counts: %w", err)
	}
	return nil
}

// TrafficBucket is the count of one kind in one bucket of a series.
type TrafficBucket struct {
	Target, Kind string
	Start        time.Time
	N, SumMS     int64
}

// Traffic returns sender's counts per kind (and per target) in buckets of
// width (a whole number of minutes) from since to until, oldest first.
// Only non-empty buckets are returned.
func (q *Queries) Traffic(ctx context.Context, sender string, since, until time.Time, width time.Duration) ([]TrafficBucket, error) {
	width = width.Truncate(time.Minute)
	if width < time.Minute {
		width = time.Minute
	}
	rows, err := q.db.Query(ctx, `SELECT target, kind, date_bin($4::interval, minute, TIMESTAMPTZ '2000-01-01 00:00:00+00') AS bucket, sum(n)::bigint, sum(sum_ms)::bigint
FROM traffic_minutes WHERE sender = $1 AND minute >= $2 AND minute < $3
GROUP BY target, kind, bucket ORDER BY bucket, target, kind`, sender, since, until, width)
	if err != nil {
		return nil, fmt.Errorf("read traffic of %s: %w", sender, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (TrafficBucket, error) {
		var b TrafficBucket
		err := r.Scan(&b.Target, &b.Kind, &b.Start, &b.N, &b.SumMS)
		return b, err
	})
	if err != nil {
		return nil, fmt.Errorf("read traffic of %s: %w", sender, err)
	}
	return out, nil
}
