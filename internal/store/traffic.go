package store

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// traffic_minutes and traffic_hours hold per-minute and per-hour counts of
// deliveries and forwards. Each process adds to them about once a minute,
// and the console's charts read them. Ingest never writes them.

// Traffic kinds: the kind column's values.
const (
	TrafficAccepted  = "accepted"
	TrafficReplayed  = "replayed"
	TrafficRefused   = "refused"
	TrafficDelivered = "delivered"
	TrafficFailed    = "failed"
)

// TrafficRetention is how long traffic_minutes keeps a minute, and
// traffic_hours an hour.
const TrafficRetention = 48 * time.Hour

// LatencyBoundsMS are the upper bounds, in milliseconds, of the buckets of a
// target's latency histogram. Bucket i counts the attempts above bound i-1
// and at most bound i. One more bucket counts those above the largest
// bound. Each bound is at most 2.5 times the one before. Stored histograms
// depend on these bounds: changing them needs a migration.
var LatencyBoundsMS = [...]float64{1, 2, 5, 10, 20, 35, 50, 75, 100, 150, 250, 400, 600, 1000, 1500, 2500, 4000, 6000, 10000, 20000, 30000, 60000}

// LatencyBuckets is the length of a latency histogram.
const LatencyBuckets = len(LatencyBoundsMS) + 1

// LatencyBucket returns the bucket of the histogram that counts an
// attempt that took d.
func LatencyBucket(d time.Duration) int {
	ms := float64(d) / float64(time.Millisecond)
	i, _ := slices.BinarySearch(LatencyBoundsMS[:], ms) // the first bound ≥ ms
	return i
}

// LatencyQuantile estimates the q-quantile of the latencies counted in hist,
// in milliseconds, for 0 < q ≤ 1. It finds the bucket that holds the rank
// q·total and interpolates inside it, so it is off by at most the bucket's
// width. In the last bucket it returns the largest bound, and over is true.
// ok is false when hist counts nothing.
func LatencyQuantile(hist []int64, q float64) (ms float64, over, ok bool) {
	var total int64
	for _, n := range hist {
		total += n
	}
	if total == 0 || len(hist) != LatencyBuckets {
		return 0, false, false
	}
	rank := q * float64(total)
	var below int64
	for i, n := range hist {
		if n == 0 || float64(below+n) < rank {
			below += n
			continue
		}
		if i == len(LatencyBoundsMS) {
			return LatencyBoundsMS[i-1], true, true
		}
		lo := 0.0
		if i > 0 {
			lo = LatencyBoundsMS[i-1]
		}
		return lo + (LatencyBoundsMS[i]-lo)*(rank-float64(below))/float64(n), false, true
	}
	return LatencyBoundsMS[len(LatencyBoundsMS)-1], true, true
}

// TrafficDelta is one process's count of a kind in a minute, to be added to
// the stored one. Target is "" for ingest kinds. SumMS is the sum of the
// latencies. Hist is their histogram, for forwards only.
type TrafficDelta struct {
	Sender, Target, Kind string
	Minute               time.Time
	N, SumMS             int64
	Hist                 []int64
}

// addTrafficSQL adds a delta to its row in table, whose time column is col.
// Histograms add up bucket by bucket.
func addTrafficSQL(table, col string) string {
	return `INSERT INTO ` + table + ` (sender, target, kind, ` + col + `, n, sum_ms, latency_hist) VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (sender, target, kind, ` + col + `) DO UPDATE SET n = ` + table + `.n + EXCLUDED.n, sum_ms = ` + table + `.sum_ms + EXCLUDED.sum_ms,
  latency_hist = CASE WHEN ` + table + `.latency_hist IS NULL THEN EXCLUDED.latency_hist
    WHEN EXCLUDED.latency_hist IS NULL THEN ` + table + `.latency_hist
    ELSE ARRAY(SELECT coalesce(a, 0) + coalesce(b, 0) FROM unnest(` + table + `.latency_hist, EXCLUDED.latency_hist) WITH ORDINALITY AS u(a, b, i) ORDER BY i) END`
}

var (
	addMinuteSQL = addTrafficSQL("traffic_minutes", "minute")
	addHourSQL   = addTrafficSQL("traffic_hours", "hour")
)

// AddTraffic adds deltas to their minutes' and hours' rows, in one
// transaction. It also forgets the rows older than [TrafficRetention].
//
// Every process adds to the same rows, each about once a second. So every
// transaction takes the rows in one order: the minutes' rows by key, then
// the hours' rows by key. Two processes adding to the same rows then wait
// for one another in turn; in the order of each one's counters, each
// would hold a row the other waits for, and PostgreSQL would abort one as
// a deadlock.
func (q *Queries) AddTraffic(ctx context.Context, deltas []TrafficDelta, now time.Time) error {
	deltas = slices.Clone(deltas)
	slices.SortFunc(deltas, func(a, b TrafficDelta) int {
		return cmp.Or(cmp.Compare(a.Sender, b.Sender), cmp.Compare(a.Target, b.Target), cmp.Compare(a.Kind, b.Kind), a.Minute.Compare(b.Minute))
	})
	b := &pgx.Batch{}
	// The deletes read the expired rows through the time indexes: on
	// statistics that say the tables are small (after a crash), PostgreSQL
	// read two days of minutes every second in every process.
	b.Queue(IndexScans)
	for _, d := range deltas {
		b.Queue(addMinuteSQL, d.Sender, d.Target, d.Kind, d.Minute.UTC().Truncate(time.Minute), d.N, d.SumMS, d.Hist)
	}
	for _, d := range deltas {
		b.Queue(addHourSQL, d.Sender, d.Target, d.Kind, d.Minute.UTC().Truncate(time.Hour), d.N, d.SumMS, d.Hist)
	}
	b.Queue(`DELETE FROM traffic_minutes WHERE minute < $1`, now.Add(-TrafficRetention))
	b.Queue(`DELETE FROM traffic_hours WHERE hour < $1`, now.Add(-TrafficRetention).Truncate(time.Hour))
	if err := q.db.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("add traffic counts: %w", err)
	}
	return nil
}

// TrafficBucket is the count of one kind in one bucket of a series, with the
// latency histogram of its forward attempts. Ingest kinds have no
// latencies.
type TrafficBucket struct {
	Target, Kind string
	Start        time.Time
	N, SumMS     int64
	Hist         []int64
}

// Traffic returns sender's counts per kind and target in buckets of width,
// from since to until, oldest first. width is a whole number of minutes.
// Only non-empty buckets are returned. Whole hours read traffic_hours;
// other widths read traffic_minutes. It reads through an index
// ([IndexScans]): the span's rows, never the two days the tables keep.
func (q *Queries) Traffic(ctx context.Context, sender string, since, until time.Time, width time.Duration) ([]TrafficBucket, error) {
	width = width.Truncate(time.Minute)
	if width < time.Minute {
		width = time.Minute
	}
	sql := trafficMinutesSQL
	switch {
	case width == time.Minute: // the rows as they are
		sql = minutesSQL
	case width == time.Hour:
		sql = hoursSQL
	case width%time.Hour == 0:
		sql = trafficHoursSQL
	}
	if width%time.Hour == 0 {
		since, until = since.Truncate(time.Hour), until.Truncate(time.Hour)
	}
	rows, err := QueryUnder(ctx, q.db, IndexScans, sql, sender, since, until, width)
	if err != nil {
		return nil, fmt.Errorf("read traffic of %s: %w", sender, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (TrafficBucket, error) {
		var b TrafficBucket
		err := r.Scan(&b.Target, &b.Kind, &b.Start, &b.N, &b.SumMS, &b.Hist)
		return b, err
	})
	if err != nil {
		return nil, fmt.Errorf("read traffic of %s: %w", sender, err)
	}
	return out, nil
}

// trafficSQL reads a sender's buckets from table, whose time column is col.
// Its histograms add up bucket by bucket.
func trafficSQL(table, col string) string {
	sums := make([]string, LatencyBuckets)
	for i := range sums {
		sums[i] = fmt.Sprintf("coalesce(sum(latency_hist[%d]), 0)", i+1)
	}
	return `SELECT target, kind, date_bin($4::interval, ` + col + `, TIMESTAMPTZ '2000-01-01 00:00:00+00') AS bucket, sum(n)::bigint, sum(sum_ms)::bigint,
  ARRAY[` + strings.Join(sums, ", ") + `]::bigint[]
FROM ` + table + ` WHERE sender = $1 AND ` + col + ` >= $2 AND ` + col + ` < $3
GROUP BY target, kind, bucket ORDER BY bucket, target, kind`
}

// rowsSQL reads a sender's rows of table as they are, for buckets of the
// table's own width.
func rowsSQL(table, col string) string {
	return `SELECT target, kind, ` + col + `, n, sum_ms, coalesce(latency_hist, '{}') FROM ` + table + `
WHERE sender = $1 AND ` + col + ` >= $2 AND ` + col + ` < $3 AND $4::interval IS NOT NULL ORDER BY ` + col + `, target, kind`
}

var (
	trafficMinutesSQL = trafficSQL("traffic_minutes", "minute")
	trafficHoursSQL   = trafficSQL("traffic_hours", "hour")
	minutesSQL        = rowsSQL("traffic_minutes", "minute")
	hoursSQL          = rowsSQL("traffic_hours", "hour")
)
