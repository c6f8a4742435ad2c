package store

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/hookgate/hookgate/internal/events"
	"github.com/hookgate/hookgate/internal/idempotency"
)

// ErrNotFound means no such row is stored. A delivery was never accepted,
// or its key expired and was deleted. An event was never stored, or was
// deleted after its retention.
var ErrNotFound = errors.New("store: not found")

// Delivery is a stored delivery: the row that holds its key.
type Delivery struct {
	idempotency.Key
	// RequestSHA256 is the SHA-256 of the accepted request body.
	RequestSHA256 [32]byte
	// EventID is the event the delivery created.
	EventID uuid.UUID
	// Response is the stored response that every replay returns. Lists
	// leave its Body nil; [Queries.GetDelivery] fills it in.
	Response idempotency.Response
	// ReceivedAt is when the delivery was accepted. ExpiresAt is when its
	// key may be forgotten.
	ReceivedAt time.Time
	ExpiresAt  time.Time
	// EventType is the event's type: "" when it has none, or its event is
	// no longer stored.
	EventType string
	// RuleErrors are the rules that failed to evaluate on the event at
	// ingest: each of their targets got no forward. Only
	// [Queries.GetDelivery] reads them; nil for none.
	RuleErrors []events.RuleError
}

// DeliveryPage is one page of ListDeliveries.
type DeliveryPage struct {
	// Deliveries are the page's deliveries, newest first. It is empty, not
	// nil, when there are none.
	Deliveries []Delivery
	// Next is the cursor of the next page; nil on the last page.
	Next *Cursor
}

// The listing pages by keyset on (created_at DESC, delivery_id DESC), which
// an index serves. Each row's event type comes from its event, by a probe
// of the primary key in a LATERAL subquery ordered by it, as
// [EventTypeSQL] reads it. Every table is filtered on sender = $1 itself,
// not through a join, so Citus routes the statement to the sender's
// shard. Run under [IndexOrderScans]: when the statistics said the tables
// were small, PostgreSQL read all of the sender's keys and sorted them,
// or found each event through the index of types.
const (
	listColumns = `pm.delivery_id, pm.request_sha256, pm.event_id, pm.response_status, pm.response_content_type, pm.created_at, pm.expires_at`
	listFrom    = `SELECT ` + listColumns + `, coalesce(e.event_type, '') AS event_type
FROM processed_messages pm LEFT JOIN LATERAL (SELECT e.event_type FROM webhook_events e
  WHERE e.sender = $1 AND e.id >= pm.event_id AND e.id <= pm.event_id ORDER BY e.id LIMIT 1) e ON true
WHERE pm.sender = $1`
	listFirstSQL = listFrom + `
ORDER BY pm.created_at DESC, pm.delivery_id DESC
LIMIT $2`
	listAfterSQL = listFrom + ` AND (pm.created_at, pm.delivery_id) < ($2, $3)
ORDER BY pm.created_at DESC, pm.delivery_id DESC
LIMIT $4`
	// getSQL finds the key by its primary key, in that index's order, as
	// listFrom finds the event. With its delivery ID compared by equality,
	// the index by time served it too, the delivery ID checked on every
	// entry of the sender's: statistics that said the sender had few keys
	// made that the plan.
	getSQL = `SELECT pm.request_sha256, pm.event_id, pm.response_status, pm.response_content_type, pm.response_body, pm.created_at, pm.expires_at,
  coalesce(e.event_type, ''), e.rule_errors
FROM (SELECT * FROM processed_messages pm
  WHERE pm.sender = $1 AND pm.delivery_id >= $2 AND pm.delivery_id <= $2 ORDER BY pm.delivery_id LIMIT 1) pm
LEFT JOIN LATERAL (SELECT e.event_type, e.rule_errors FROM webhook_events e
  WHERE e.sender = $1 AND e.id >= pm.event_id AND e.id <= pm.event_id ORDER BY e.id LIMIT 1) e ON true`
)

// The listing by event type starts from the events. An index holds a
// sender's events of one type in the list's order. An event's received_at
// is its delivery's created_at: ingest writes both from one clock reading.
// Each event finds its delivery by key and event ID. So an event whose key
// expired, or was claimed again, is not listed.
const (
	typeColumns = listColumns + `, e.event_type`
	// Each event's delivery is looked up in a LATERAL subquery with OFFSET
	// 0, which the planner cannot flatten into a join. It must walk the
	// events in the index's order and stop after the page. A hash join
	// would read all the sender's deliveries. The lookup compares the
	// delivery ID as a range in its order, as getSQL does: under
	// [IndexOrderScans] (the pages of one type) only the key's index then
	// serves it without a sort, and the events' order only the index of
	// types.
	typeFrom = `SELECT ` + typeColumns + `
FROM webhook_events e CROSS JOIN LATERAL (
  SELECT p.delivery_id, p.request_sha256, p.event_id, p.response_status, p.response_content_type, p.created_at, p.expires_at
  FROM processed_messages p WHERE p.sender = $1 AND p.delivery_id >= e.delivery_id AND p.delivery_id <= e.delivery_id AND p.event_id = e.id
  ORDER BY p.delivery_id OFFSET 0) pm
WHERE e.sender = $1 AND e.event_type = `
	typeOrder    = ` ORDER BY e.received_at DESC, e.delivery_id DESC`
	typeFirstSQL = typeFrom + `$2` + typeOrder + ` LIMIT $3`
	typeAfterSQL = typeFrom + `$2 AND (e.received_at, e.delivery_id) < ($4, $5)` + typeOrder + ` LIMIT $3`
	// A prefix first finds the sender's distinct types that start with it,
	// one index probe each. The column's collation is "C", so they are one
	// range of the index. Then it reads the keys of each type's newest events
	// from the index alone and merges them into the page's keys. Only then
	// does it read those events and their deliveries. Every key of the page
	// comes back, with found false when its delivery is gone, so the next
	// cursor is known without reading every type's deliveries.
	prefixTypes = `WITH RECURSIVE types(t) AS (
  (SELECT event_type FROM webhook_events WHERE sender = $1 AND event_type >= $2 ORDER BY event_type LIMIT 1)
  UNION ALL
  SELECT (SELECT w.event_type FROM webhook_events w WHERE w.sender = $1 AND w.event_type > types.t ORDER BY w.event_type LIMIT 1)
  FROM types WHERE starts_with(types.t, $2)
), top AS (
  SELECT types.t, k.received_at, k.delivery_id FROM types CROSS JOIN LATERAL (
    SELECT e.received_at, e.delivery_id FROM webhook_events e WHERE e.sender = $1 AND e.event_type = types.t`
	prefixEnd = typeOrder + ` LIMIT $3) k
  WHERE starts_with(types.t, $2)
  ORDER BY k.received_at DESC, k.delivery_id DESC LIMIT $3
)
SELECT top.received_at, top.delivery_id, x.delivery_id IS NOT NULL,
  coalesce(x.request_sha256, ''::bytea), coalesce(x.event_id, '00000000-0000-0000-0000-000000000000'::uuid),
  coalesce(x.response_status, 0::smallint), coalesce(x.response_content_type, ''), coalesce(x.expires_at, top.received_at), top.t
FROM top LEFT JOIN LATERAL (` + typeFrom + `top.t AND e.received_at = top.received_at AND e.delivery_id = top.delivery_id LIMIT 1) x ON true
ORDER BY top.received_at DESC, top.delivery_id DESC`
	prefixFirstSQL = prefixTypes + prefixEnd
	prefixAfterSQL = prefixTypes + ` AND (e.received_at, e.delivery_id) < ($4, $5)` + prefixEnd
)

// ListDeliveries returns up to limit of sender's stored deliveries, newest
// first, by time received and then delivery ID. limit is 1 to
// [MaxListLimit]. A nil after starts at the newest; otherwise the page
// starts right after after. Following Next visits every delivery committed
// before the walk began once. A delivery that commits during the walk with
// an older time is not visited. An unknown sender gets an empty page. The
// deliveries' Response.Body is nil.
func (q *Queries) ListDeliveries(ctx context.Context, sender string, limit int, after *Cursor) (DeliveryPage, error) {
	return q.ListDeliveriesByType(ctx, sender, "", limit, after)
}

// ListDeliveriesByType is [Queries.ListDeliveries] for the deliveries whose
// event has the type eventType. A type ending in "*" matches every type
// with that prefix; "" and "*" match all. A delivery whose event is no
// longer stored has no type. The cursors are those of ListDeliveries.
func (q *Queries) ListDeliveriesByType(ctx context.Context, sender, eventType string, limit int, after *Cursor) (DeliveryPage, error) {
	if limit < 1 || limit > MaxListLimit {
		return DeliveryPage{}, fmt.Errorf("list deliveries: limit %d is not from 1 to %d", limit, MaxListLimit)
	}
	page := DeliveryPage{Deliveries: []Delivery{}}
	// Querier has no Query: a batch of one statement is one round trip too.
	b := &pgx.Batch{}
	var qq *pgx.QueuedQuery
	prefix, isPrefix := strings.CutSuffix(eventType, "*")
	switch {
	case eventType == "" || (isPrefix && prefix == ""):
		b.Queue(IndexOrderScans)
		if after == nil {
			qq = b.Queue(listFirstSQL, sender, limit+1)
		} else {
			qq = b.Queue(listAfterSQL, sender, after.ReceivedAt, after.DeliveryID, limit+1)
		}
	case isPrefix:
		if after == nil {
			qq = b.Queue(prefixFirstSQL, sender, prefix, limit+1)
		} else {
			qq = b.Queue(prefixAfterSQL, sender, prefix, limit+1, after.ReceivedAt, after.DeliveryID)
		}
	default:
		b.Queue(IndexOrderScans)
		if after == nil {
			qq = b.Queue(typeFirstSQL, sender, eventType, limit+1)
		} else {
			qq = b.Queue(typeAfterSQL, sender, eventType, limit+1, after.ReceivedAt, after.DeliveryID)
		}
	}
	qq.Query(func(rows pgx.Rows) error {
		if isPrefix && prefix != "" {
			return scanKeyed(rows, sender, limit, &page)
		}
		return scanRecords(rows, sender, &page)
	})
	if err := q.db.SendBatch(ctx, b).Close(); err != nil {
		return DeliveryPage{}, fmt.Errorf("list deliveries of %s: %w", sender, err)
	}
	page.trim(limit)
	return page, nil
}

// scanRecords appends the rows of a listing query (listColumns and the
// event type) to page.
func scanRecords(rows pgx.Rows, sender string, page *DeliveryPage) error {
	for rows.Next() {
		r := Delivery{Key: idempotency.Key{Sender: sender}}
		var (
			sum    []byte
			status int16
		)
		if err := rows.Scan(&r.DeliveryID, &sum, &r.EventID, &status, &r.Response.ContentType, &r.ReceivedAt, &r.ExpiresAt, &r.EventType); err != nil {
			return err
		}
		if err := setSum(&r, sum); err != nil {
			return err
		}
		r.Response.Status = int(status)
		page.Deliveries = append(page.Deliveries, r)
	}
	return rows.Err()
}

// trim cuts a page read with limit+1 rows to limit, and sets Next when a
// row was left over.
func (p *DeliveryPage) trim(limit int) {
	if len(p.Deliveries) > limit {
		p.Deliveries = p.Deliveries[:limit]
		last := p.Deliveries[limit-1]
		p.Next = &Cursor{ReceivedAt: last.ReceivedAt, DeliveryID: last.DeliveryID}
	}
}

// scanKeyed reads the rows of the prefix listing: one per key of the page
// (limit+1 at most), found false where the key's delivery is no longer
// stored. Such keys are left out of the page, which may then hold fewer
// than limit records and still have a next page; the cursor is the page's
// last key. It sets page.Next itself, and leaves at most limit records.
func scanKeyed(rows pgx.Rows, sender string, limit int, page *DeliveryPage) error {
	keys := 0
	for rows.Next() {
		var (
			at     time.Time
			id     string
			found  bool
			sum    []byte
			status int16
			r      = Delivery{Key: idempotency.Key{Sender: sender}}
		)
		if err := rows.Scan(&at, &id, &found, &sum, &r.EventID, &status, &r.Response.ContentType, &r.ExpiresAt, &r.EventType); err != nil {
			return err
		}
		keys++
		if keys > limit {
			continue // the next page's first key: it only says there is one
		}
		if keys == limit {
			page.Next = &Cursor{ReceivedAt: at, DeliveryID: id}
		}
		if !found {
			continue
		}
		r.DeliveryID, r.ReceivedAt, r.Response.Status = id, at, int(status)
		if err := setSum(&r, sum); err != nil {
			return err
		}
		page.Deliveries = append(page.Deliveries, r)
	}
	if keys <= limit {
		page.Next = nil
	}
	return rows.Err()
}

// GetDelivery returns the stored delivery with key k, its response body included.
// It returns an error wrapping ErrNotFound when no such delivery is stored.
func (q *Queries) GetDelivery(ctx context.Context, k idempotency.Key) (Delivery, error) {
	r := Delivery{Key: k}
	var (
		sum    []byte
		status int16
	)
	rows, err := QueryUnder(ctx, q.db, IndexOrderScans, getSQL, k.Sender, k.DeliveryID) //nolint:rowserrcheck // pgx.CollectOneRow checks rows.Err
	if err == nil {
		_, err = pgx.CollectOneRow(rows, func(row pgx.CollectableRow) (struct{}, error) {
			return struct{}{}, row.Scan(&sum, &r.EventID, &status, &r.Response.ContentType, &r.Response.Body, &r.ReceivedAt, &r.ExpiresAt, &r.EventType, &r.RuleErrors)
		})
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return Delivery{}, fmt.Errorf("get delivery %s/%s: %w", k.Sender, k.DeliveryID, ErrNotFound)
	}
	if err != nil {
		return Delivery{}, fmt.Errorf("get delivery %s/%s: %w", k.Sender, k.DeliveryID, err)
	}
	if err := setSum(&r, sum); err != nil {
		return Delivery{}, fmt.Errorf("get delivery %s/%s: %w", k.Sender, k.DeliveryID, err)
	}
	if r.Response.Body == nil {
		r.Response.Body = []byte{}
	}
	r.Response.Status = int(status)
	return r, nil
}

func setSum(r *Delivery, sum []byte) error {
	if len(sum) != len(r.RequestSHA256) {
		return fmt.Errorf("stored request_sha256 of %s/%s has %d bytes, want %d", r.Sender, r.DeliveryID, len(sum), len(r.RequestSHA256))
	}
	copy(r.RequestSHA256[:], sum)
	return nil
}

// listRangeFirstSQL and listRangeAfterSQL are the listing's queries bounded
// below by a time: the same index range scan, stopped at since. An upper
// bound needs no query of its own: "received before until" is the cursor
// (until, "").
const (
	listRangeFirstSQL = listFrom + ` AND pm.created_at >= $2
ORDER BY pm.created_at DESC, pm.delivery_id DESC
LIMIT $3`
	listRangeAfterSQL = listFrom + ` AND pm.created_at >= $2 AND (pm.created_at, pm.delivery_id) < ($3, $4)
ORDER BY pm.created_at DESC, pm.delivery_id DESC
LIMIT $5`
)

// ListDeliveriesSince is ListDeliveries restricted to the deliveries received at or after
// since (no bound when since is zero). To list those received before a
// time until, pass after = &Cursor{ReceivedAt: until} (an empty delivery ID
// sorts before every other). Its pages and Next work like ListDeliveries'.
// Each record carries its event type, as ListDeliveries' do.
func (q *Queries) ListDeliveriesSince(ctx context.Context, sender string, limit int, after *Cursor, since time.Time) (DeliveryPage, error) {
	if since.IsZero() {
		return q.ListDeliveries(ctx, sender, limit, after)
	}
	if limit < 1 || limit > MaxListLimit {
		return DeliveryPage{}, fmt.Errorf("list deliveries: limit %d is not from 1 to %d", limit, MaxListLimit)
	}
	if after == nil {
		return q.query(ctx, sender, limit, listRangeFirstSQL, sender, since, limit+1)
	}
	return q.query(ctx, sender, limit, listRangeAfterSQL, sender, since, after.ReceivedAt, after.DeliveryID, limit+1)
}

// query runs a listing query (columns listColumns and the event type, at
// most limit+1 rows)
// and returns its page.
func (q *Queries) query(ctx context.Context, sender string, limit int, sql string, args ...any) (DeliveryPage, error) {
	page := DeliveryPage{Deliveries: []Delivery{}}
	b := &pgx.Batch{}
	b.Queue(IndexOrderScans)
	b.Queue(sql, args...).Query(func(rows pgx.Rows) error { return scanRecords(rows, sender, &page) })
	if err := q.db.SendBatch(ctx, b).Close(); err != nil {
		return DeliveryPage{}, fmt.Errorf("list deliveries of %s: %w", sender, err)
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

// The overview's counts of deliveries by stored status, in the hour and the
// day before now. The day's closed hours are counted once from
// processed_messages and kept in delivery_hour_counts. Its two open ends
// are counted at each call, by range scans of the key's time index. So a
// view reads at most three hours of deliveries, not a day's.
//
// An hour is closed once it ended an hour ago. A delivery's created_at is
// set before its transaction, and no ingest transaction lasts an hour.
const (
	// countOpenSQL counts the open ends: [$2, $3) and [$4, ∞); the second
	// holds the last hour ($5).
	countOpenSQL = `SELECT response_status, sum(h)::bigint, sum(d)::bigint FROM (
  SELECT response_status, 0 AS h, count(*) AS d FROM processed_messages
  WHERE sender = $1 AND created_at >= $2 AND created_at < $3 GROUP BY response_status
  UNION ALL
  SELECT response_status, count(*) FILTER (WHERE created_at >= $5), count(*) FROM processed_messages
  WHERE sender = $1 AND created_at >= $4 GROUP BY response_status
) AS o GROUP BY response_status`
	// countClosedSQL reads the counted closed hours in [$2, $3); status 0
	// marks an hour as counted.
	countClosedSQL = `SELECT hour, status, n FROM delivery_hour_counts WHERE sender = $1 AND hour >= $2 AND hour < $3`
	// countHoursSQL counts the hours of [$2, $3) from processed_messages.
	countHoursSQL = `SELECT date_bin('1 hour', created_at, TIMESTAMPTZ '2000-01-01 00:00:00+00') AS hour, response_status, count(*)
FROM processed_messages WHERE sender = $1 AND created_at >= $2 AND created_at < $3 GROUP BY hour, response_status`
	forgetHoursSQL = `DELETE FROM delivery_hour_counts WHERE sender = $1 AND hour < $2`
)

// HourCountRetention is how long delivery_hour_counts keeps an hour's
// counts (the overview reads the last day).
const HourCountRetention = 48 * time.Hour

// CountDeliveries returns the counts of sender's deliveries in the hour and
// the day before now, by stored status, ascending. It is empty, not nil,
// when there were none. Replays store nothing and are not counted. A key
// deleted after its hour was counted stays counted. Every statement reads
// through an index ([IndexScans]).
func (q *Queries) CountDeliveries(ctx context.Context, sender string, now time.Time) ([]StatusCount, error) {
	now = now.UTC()
	dayAgo, hourAgo := now.Add(-24*time.Hour), now.Add(-time.Hour)
	// The closed hours: [first, last).
	first := dayAgo.Truncate(time.Hour)
	if first.Before(dayAgo) {
		first = first.Add(time.Hour)
	}
	last := hourAgo.Truncate(time.Hour)
	byStatus := map[int16]*StatusCount{}
	add := func(status int16, hour, day int64) {
		c := byStatus[status]
		if c == nil {
			c = &StatusCount{Status: int(status)}
			byStatus[status] = c
		}
		c.LastHour += hour
		c.LastDay += day
	}
	closed := map[time.Time]map[int16]int64{}
	b := &pgx.Batch{}
	b.Queue(IndexScans)
	b.Queue(countOpenSQL, sender, dayAgo, first, last, hourAgo).Query(func(rows pgx.Rows) error {
		var (
			status    int16
			hour, day int64
		)
		_, err := pgx.ForEachRow(rows, []any{&status, &hour, &day}, func() error {
			add(status, hour, day)
			return nil
		})
		return err
	})
	b.Queue(countClosedSQL, sender, first, last).Query(func(rows pgx.Rows) error {
		var (
			hour   time.Time
			status int16
			n      int64
		)
		_, err := pgx.ForEachRow(rows, []any{&hour, &status, &n}, func() error {
			h := hour.UTC()
			if closed[h] == nil {
				closed[h] = map[int16]int64{}
			}
			closed[h][status] = n
			return nil
		})
		return err
	})
	if err := q.db.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("count deliveries of %s: %w", sender, err)
	}
	// Hours not counted yet (usually the one that has just closed; all of
	// them the first time): count them, and keep their counts.
	var missing []time.Time
	for h := first; h.Before(last); h = h.Add(time.Hour) {
		if _, ok := closed[h][0]; !ok {
			missing = append(missing, h)
		}
	}
	if len(missing) > 0 {
		counted, err := q.countHours(ctx, sender, missing, now)
		if err != nil {
			return nil, err
		}
		for h, c := range counted {
			closed[h] = c
		}
	}
	for h, c := range closed {
		if h.Before(first) || !h.Before(last) {
			continue
		}
		for status, n := range c {
			if status != 0 {
				add(status, 0, n)
			}
		}
	}
	out := make([]StatusCount, 0, len(byStatus))
	for _, c := range byStatus {
		out = append(out, *c)
	}
	slices.SortFunc(out, func(a, b StatusCount) int { return a.Status - b.Status })
	return out, nil
}

// storeHoursSQL returns the statement that keeps rows counts of the sender
// $1. Concurrent viewers may count the same hour; they find the same
// numbers, and the first stays. Every row of its VALUES names $1, so Citus
// commits it on the sender's shard alone. Citus would pull an INSERT …
// SELECT … FROM unnest to the coordinator and commit it in two phases.
func storeHoursSQL(rows int) string {
	var b strings.Builder
	b.WriteString(`INSERT INTO delivery_hour_counts (sender, hour, status, n) VALUES `)
	for i := range rows {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "($1, $%d::timestamptz, $%d::int2, $%d::int8)", 3*i+2, 3*i+3, 3*i+4)
	}
	b.WriteString(` ON CONFLICT ON CONSTRAINT delivery_hour_counts_pkey DO NOTHING`)
	return b.String()
}

// storeHoursMaxRows is how many counts one statement of storeHoursSQL keeps.
// PostgreSQL takes up to 65535 parameters.
const storeHoursMaxRows = 5000

// countHours counts sender's deliveries in each closed hour, oldest first,
// and keeps the counts in delivery_hour_counts. Status 0 holds the hour's
// total and marks it counted. The same transaction forgets hours older
// than [HourCountRetention].
func (q *Queries) countHours(ctx context.Context, sender string, hours []time.Time, now time.Time) (map[time.Time]map[int16]int64, error) {
	out := map[time.Time]map[int16]int64{}
	for _, h := range hours {
		out[h] = map[int16]int64{0: 0}
	}
	err := pgx.BeginFunc(ctx, q.db, func(tx pgx.Tx) error {
		rows, err := QueryUnder(ctx, tx, IndexScans, countHoursSQL, sender, hours[0], hours[len(hours)-1].Add(time.Hour)) //nolint:rowserrcheck // pgx.ForEachRow checks rows.Err
		if err != nil {
			return err
		}
		var (
			hour   time.Time
			status int16
			n      int64
		)
		_, err = pgx.ForEachRow(rows, []any{&hour, &status, &n}, func() error {
			if c, ok := out[hour.UTC()]; ok {
				c[status] += n
				c[0] += n
			}
			return nil
		})
		if err != nil {
			return err
		}
		// The settings are the transaction's already (QueryUnder above):
		// sent again, they are the batch's own, for whoever reads it (the
		// plan tests explain each statement under its batch's settings).
		// Without them the trailing DELETE may be a sequential scan of
		// every sender's hours.
		b := &pgx.Batch{}
		b.Queue(IndexScans)
		args := []any{sender}
		flush := func() {
			if len(args) > 1 {
				b.Queue(storeHoursSQL((len(args)-1)/3), args...)
				args = []any{sender}
			}
		}
		// The rows go in one order, the hours' and their statuses', for
		// every viewer: two viewers keeping the same hour at once then
		// wait for one another's row in turn. In a map's order, each holds
		// a row the other needs, and PostgreSQL aborts one as a deadlock.
		for _, h := range hours {
			for _, s := range slices.Sorted(maps.Keys(out[h])) {
				args = append(args, h, s, out[h][s])
				if len(args) > storeHoursMaxRows*3 {
					flush()
				}
			}
		}
		flush()
		b.Queue(forgetHoursSQL, sender, now.Add(-HourCountRetention))
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return nil, fmt.Errorf("count the closed hours of %s: %w", sender, err)
	}
	return out, nil
}

// ExpiredSendersSQL asks which senders have expired keys (ExpiredSenders).
// DeleteExpiredSQL deletes a batch of sender $1's keys expired at $2, at
// most $3 (DeleteExpiredKeys): its InitPlan selects them, and the DELETE
// takes them by ctid, under [TIDScans]. Before, the batch was an array of
// delivery IDs, and on statistics that said the sender's keys were one
// row the DELETE read every key of the sender, checking the array as a
// filter, after the InitPlan had read them too: 1.9 s per batch of 1,000
// among a million keys. (As a semi-join with the subquery, it once ran
// the subquery per key of the sender.) The InitPlan's index stays the
// planner's choice, as every index scan is disabled alike: the index of
// expiry times when the statistics hold, or the sender's keys in another
// index's order, read until the batch is found. No order serves every
// case: a key's expiry is fixed when it is claimed, so after a sender's
// retention is shortened its expired keys are its newest, and the oldest
// first would read every older key. An index on (sender, expires_at)
// would. Citus routes the statement to the sender's shard, which takes a
// ctid; it refuses one only in a modification that it plans in parts.
const (
	ExpiredSendersSQL = `SELECT DISTINCT sender FROM (
  SELECT sender FROM processed_messages WHERE expires_at <= $1 ORDER BY expires_at) expired`
	DeleteExpiredSQL = `DELETE FROM processed_messages
WHERE sender = $1 AND expires_at <= $2 AND ctid = ANY(ARRAY(
  SELECT ctid FROM processed_messages WHERE sender = $1 AND expires_at <= $2 LIMIT $3))`
)

// ExpiredSenders returns the senders that have keys whose retention ended at
// or before now. It reads the expired keys through their index, in its
// order, under [IndexOrderScans]. Under plain [IndexScans], a scan of every
// key in the sender's order (the primary key's, or the pages'), with the
// expiry as a filter, stayed possible, and statistics that say most keys
// have expired can make it the cheapest. The ORDER BY in the subquery
// leaves the expiry's index the one path without a sort.
func (q *Queries) ExpiredSenders(ctx context.Context, now time.Time) ([]string, error) {
	rows, err := QueryUnder(ctx, q.db, IndexOrderScans, ExpiredSendersSQL, now)
	if err != nil {
		return nil, fmt.Errorf("find senders with expired keys: %w", err)
	}
	senders, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("find senders with expired keys: %w", err)
	}
	return senders, nil
}

// DeleteExpiredKeys deletes up to limit of sender's keys whose retention
// ended at or before now ([DeleteExpiredSQL]), in one short statement that
// holds its locks briefly. It returns how many it deleted; fewer than limit means none are
// left. A deleted key's delivery ID is new to its next delivery.
func (q *Queries) DeleteExpiredKeys(ctx context.Context, sender string, now time.Time, limit int) (int64, error) {
	tag, err := ExecOnlyUnder(ctx, q.db, TIDScans, DeleteExpiredSQL, sender, now, limit)
	if err != nil {
		return 0, fmt.Errorf("delete expired keys of %s: %w", sender, err)
	}
	return tag.RowsAffected(), nil
}

// FindSQL probes one sender's key for a delivery ID (FindDelivery), in the
// key's order under [IndexOrderScans], as getSQL does: by equality, the
// index by time served it too, and an absent ID read all the sender's
// entries.
const FindSQL = `SELECT EXISTS (SELECT FROM processed_messages WHERE sender = $1 AND delivery_id >= $2 AND delivery_id <= $2 ORDER BY delivery_id OFFSET 0)`

// FindDelivery returns those of senders, in order, that hold a delivery with
// the ID id. It probes each sender's key, all in one round trip and one
// implicit transaction. It returns none for no senders.
func (q *Queries) FindDelivery(ctx context.Context, senders []string, id string) ([]string, error) {
	if len(senders) == 0 {
		return nil, nil
	}
	var b pgx.Batch
	b.Queue(IndexOrderScans)
	for _, s := range senders {
		b.Queue(FindSQL, s, id)
	}
	res := q.db.SendBatch(ctx, &b)
	if _, err := res.Exec(); err != nil {
		_ = res.Close()
		return nil, fmt.Errorf("find delivery %s: %w", id, err)
	}
	var found []string
	for _, s := range senders {
		var ok bool
		if err := res.QueryRow().Scan(&ok); err != nil {
			_ = res.Close()
			return nil, fmt.Errorf("find delivery %s in %s: %w", id, s, err)
		}
		if ok {
			found = append(found, s)
		}
	}
	if err := res.Close(); err != nil {
		return nil, fmt.Errorf("find delivery %s: %w", id, err)
	}
	return found, nil
}
