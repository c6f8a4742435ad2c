package store

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/hookgate/hookgate/internal/events"
	"github.com/hookgate/hookgate/internal/pgarray"
)

// webhook_events outside the ingest pipeline: one event, what a forward
// sends, the event types of a page of forwards, and retention. Package
// events stores an event in its delivery's transaction.

// getEventSQL finds an event by its ID alone, with the index on id: the
// primary key leads with sender.
const getEventSQL = `SELECT sender, delivery_id, received_at, headers, body, event_type, rule_errors FROM webhook_events WHERE id = $1 LIMIT 1`

// GetEvent returns the stored event with the given ID: its type, its stored
// headers, never nil, its body, empty when the request had none, and the
// rules that failed to evaluate on it at ingest (nil for none). Its
// error wraps [ErrNotFound] when no such event is stored. Event IDs are
// UUIDv7 that hookgate generates, so one sender at most has a given ID.
func (q *Queries) GetEvent(ctx context.Context, id uuid.UUID) (events.Event, error) {
	e := events.Event{ID: id}
	var headers map[string][]string
	err := q.db.QueryRow(ctx, getEventSQL, id).Scan(&e.Sender, &e.DeliveryID, &e.ReceivedAt, &headers, &e.Body, &e.EventType, &e.RuleErrors)
	if errors.Is(err, pgx.ErrNoRows) {
		return events.Event{}, fmt.Errorf("get event %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return events.Event{}, fmt.Errorf("get event %s: %w", id, err)
	}
	e.Headers = http.Header(headers)
	if e.Headers == nil {
		e.Headers = http.Header{}
	}
	if e.Body == nil {
		e.Body = []byte{}
	}
	return e, nil
}

// EventContentSQL reads what a forward of sender $1's event $2 sends. It
// probes the primary key or the index on id. It never walks the sender's
// events by type, which some statistics make look cheaper. Under
// [IndexOrderScans], its ORDER BY with the ID compared by a range leaves
// the indexes on id as the one path without a sort. Each forward job runs
// it.
const EventContentSQL = `SELECT headers, body, event_type FROM webhook_events WHERE sender = $1 AND id >= $2 AND id <= $2 ORDER BY id LIMIT 1`

// Content is what a forward of an event sends: its stored headers and body,
// and its type, "" when the sender gave none.
type Content struct {
	Headers map[string][]string
	Body    []byte
	Type    string
}

// EventContent returns what a forward of sender's event id sends. Its error
// wraps [ErrNotFound] when the event is no longer stored.
func (q *Queries) EventContent(ctx context.Context, sender string, id uuid.UUID) (Content, error) {
	var (
		c     Content
		found bool
	)
	err := q.probeEvents(ctx, sender, []uuid.UUID{id}, EventContentSQL, func(_ uuid.UUID, row pgx.Row) error {
		var err error
		c, err = scanContent(row)
		found = err == nil
		return err
	})
	switch {
	case err != nil:
		return Content{}, fmt.Errorf("read event %s: %w", id, err)
	case !found:
		return Content{}, fmt.Errorf("read event %s: %w", id, ErrNotFound)
	}
	return c, nil
}

// scanContent scans a row of [EventContentSQL].
func scanContent(row pgx.Row) (Content, error) {
	var c Content
	err := row.Scan(&c.Headers, &c.Body, &c.Type)
	return c, err
}

// EachEventContent calls fn with the content of each of sender's events
// ids still stored, in the order of ids, one row at a time: it holds one
// event's body, not all of them.
func (q *Queries) EachEventContent(ctx context.Context, sender string, ids []uuid.UUID, fn func(Content) error) error {
	err := q.probeEvents(ctx, sender, ids, EventContentSQL, func(_ uuid.UUID, row pgx.Row) error {
		c, err := scanContent(row)
		if err != nil {
			return err
		}
		return fn(c)
	})
	if err != nil {
		return fmt.Errorf("read events of %s: %w", sender, err)
	}
	return nil
}

// EventTypeSQL reads the type of sender $1's event $2, as
// [EventContentSQL] reads its content, under [IndexOrderScans].
const EventTypeSQL = `SELECT event_type FROM webhook_events WHERE sender = $1 AND id >= $2 AND id <= $2 ORDER BY id LIMIT 1`

// EventTypes returns the type of each of sender's events ids still stored,
// by ID.
func (q *Queries) EventTypes(ctx context.Context, sender string, ids []uuid.UUID) (map[uuid.UUID]string, error) {
	types := map[uuid.UUID]string{}
	err := q.probeEvents(ctx, sender, ids, EventTypeSQL, func(id uuid.UUID, row pgx.Row) error {
		var typ string
		if err := row.Scan(&typ); err != nil {
			return err
		}
		types[id] = typ
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("event types of %s: %w", sender, err)
	}
	return types, nil
}

// probeEvents runs sql, the probe of one event of sender ($1) by its ID
// ($2) under [IndexOrderScans], for each of ids, all in one round trip,
// and calls scan with the row of each, in the order of ids. An event not
// stored (scan returns [pgx.ErrNoRows]) is skipped. As one statement,
// "id = ANY(…)", PostgreSQL read every event of the sender when its
// statistics said the table was small (after a crash).
func (q *Queries) probeEvents(ctx context.Context, sender string, ids []uuid.UUID, sql string, scan func(uuid.UUID, pgx.Row) error) error {
	if len(ids) == 0 {
		return nil
	}
	var b pgx.Batch
	b.Queue(IndexOrderScans)
	for _, id := range ids {
		b.Queue(sql, sender, id)
	}
	br := q.db.SendBatch(ctx, &b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return err
	}
	for _, id := range ids {
		if err := scan(id, br.QueryRow()); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
	}
	return br.Close()
}

// DeleteEventsBeforeSQL deletes a batch of sender $1's events received
// before $2, at most $3, the oldest first. Its InitPlan reads them through
// the index of the sender's events by time, in its order; the DELETE takes
// them by ctid, under [TIDScans]. Before, the batch was an array of event
// IDs, and on statistics that said the sender's events were one row
// PostgreSQL read every event of the sender for the DELETE, which checked
// the array as a filter. (As a semi-join with the subquery, it once ran
// the subquery per event of the sender: 24.5 million rows visited for a
// batch of 1,000 among 25,000.) Citus routes it to the sender's shard,
// which takes a ctid.
const DeleteEventsBeforeSQL = `DELETE FROM webhook_events
WHERE sender = $1 AND received_at < $2 AND ctid = ANY(ARRAY(
  SELECT ctid FROM webhook_events WHERE sender = $1 AND received_at < $2 ORDER BY received_at LIMIT $3))
RETURNING id`

// DeleteEventAttemptsSQL deletes the attempts of sender $1's events $2.
// Each event's attempts are found by a probe of the primary key, the event
// compared as a range in its order, and deleted by ctid, under
// [TIDScans]. On Citus forward_attempts is a local table of the
// coordinator, and the events distributed: one statement may not delete
// from both.
const DeleteEventAttemptsSQL = `DELETE FROM forward_attempts
WHERE ctid = ANY(ARRAY(SELECT p.ctid FROM unnest($2::uuid[]) AS e(event_id)
    CROSS JOIN LATERAL (SELECT x.ctid FROM forward_attempts x
      WHERE x.sender = $1 AND x.event_id >= e.event_id AND x.event_id <= e.event_id
      ORDER BY x.event_id) p))
  AND sender = $1`

// ClearEventFoldedSQL clears the first attempts that the forward_delivered
// rows of sender $1's events $2 keep: a delivered forward outlives its
// event when the sender keeps its events for less than the longest
// retention, and its attempt goes with the event. Each event's rows are
// found by a probe of the primary key, the event compared as a range in
// its order, and updated by ctid, under [TIDScans], as [OutboxRowsByKey]
// finds outbox rows. By the events in an array, on statistics that said
// the sender's rows were one, PostgreSQL read every delivered forward of
// the sender through the index of targets, for each batch. Only the
// clearing of the same columns changes these rows: a row another
// transaction cleared meanwhile is skipped, or (depending on PostgreSQL's
// minor version) its newest version fails took_us IS NOT NULL.
const ClearEventFoldedSQL = `UPDATE forward_delivered SET took_us = NULL, headers = NULL, body = NULL
WHERE ctid = ANY(ARRAY(SELECT p.ctid FROM unnest($2::text[]) AS e(event_id)
    CROSS JOIN LATERAL (SELECT x.ctid FROM forward_delivered x
      WHERE x.sender = $1 AND x.event_id >= e.event_id AND x.event_id <= e.event_id AND x.took_us IS NOT NULL
      ORDER BY x.event_id) p))
  AND sender = $1 AND took_us IS NOT NULL`

// DeleteEventsBefore deletes up to limit of sender's events received
// before cutoff, oldest first ([DeleteEventsBeforeSQL]), and then their
// forwards' attempts (those kept in forward_delivered rows too), in one
// short transaction. It returns how many it deleted; fewer than limit
// means none are left.
func (q *Queries) DeleteEventsBefore(ctx context.Context, sender string, cutoff time.Time, limit int) (int64, error) {
	var n int64
	err := pgx.BeginFunc(ctx, q.db, func(tx pgx.Tx) error {
		rows, err := QueryUnder(ctx, tx, TIDScans, DeleteEventsBeforeSQL, sender, cutoff, limit)
		if err != nil {
			return err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[pgtype.UUID])
		if err != nil || len(ids) == 0 {
			return err
		}
		n = int64(len(ids))
		texts := make(pgarray.Texts, len(ids))
		for i, id := range ids {
			texts[i] = uuid.UUID(id.Bytes).String()
		}
		var b pgx.Batch
		b.Queue(TIDScans) // still the transaction's; the batch says what its statements run under
		b.Queue(DeleteEventAttemptsSQL, sender, ids)
		b.Queue(ClearEventFoldedSQL, sender, texts)
		return tx.SendBatch(ctx, &b).Close()
	})
	if err != nil {
		return 0, fmt.Errorf("delete old events of %s: %w", sender, err)
	}
	return n, nil
}

// The senders that have events are found by a loose scan of the primary
// key, which leads with sender: one index probe per sender. The scan is a
// loop of probes rather than a recursive CTE, which Citus plans only with a
// filter on the sender.
const (
	firstEventSenderSQL = `SELECT min(sender) FROM webhook_events`
	nextEventSenderSQL  = `SELECT min(sender) FROM webhook_events WHERE sender > $1`
)

// EventSenders returns the names of the senders that have events,
// configured or not, in order. It costs one round trip per sender, and one
// more.
func (q *Queries) EventSenders(ctx context.Context) ([]string, error) {
	var senders []string
	var next *string
	if err := q.db.QueryRow(ctx, firstEventSenderSQL).Scan(&next); err != nil {
		return nil, fmt.Errorf("list senders with events: %w", err)
	}
	for next != nil {
		senders = append(senders, *next)
		if err := q.db.QueryRow(ctx, nextEventSenderSQL, *next).Scan(&next); err != nil {
			return nil, fmt.Errorf("list senders with events: %w", err)
		}
	}
	return senders, nil
}
