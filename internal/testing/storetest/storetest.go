// Package storetest writes rows of hookgate's tables outside the ingest
// pipeline, for tests. It writes a key held in an open transaction, an
// event, an outbox row and many generated deliveries at once, and deletes
// keys. Ingest stays the one way a delivery is accepted. These functions
// only put the tables in the state a test needs, so the tables' columns are
// named here and nowhere in the tests.
package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/hookgate/hookgate/internal/events"
	"github.com/hookgate/hookgate/internal/idempotency"
)

// DB is what the fixtures write on: a pool, a connection or a transaction.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Outbox is a forward of Sender's event EventID to Target, waiting in the
// outbox.
type Outbox struct {
	Sender     string
	Target     string
	EventID    uuid.UUID
	DeliveryID string
}

// InsertKey stores d's key with its response, received at d.ReceivedAt,
// as the ingest pipeline's claim does. On a pgx.Tx left open, it holds the
// key, as a concurrent delivery still being processed does.
func InsertKey(ctx context.Context, db DB, d idempotency.Delivery) error {
	body := d.Response.Body
	if body == nil {
		body = []byte{}
	}
	_, err := db.Exec(ctx, `INSERT INTO processed_messages
  (sender, delivery_id, request_sha256, event_id, response_status, response_content_type, response_body, created_at, expires_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
		d.Sender, d.DeliveryID, d.RequestSHA256[:], d.EventID, d.Response.Status, d.Response.ContentType, body, d.ReceivedAt, d.ExpiresAt)
	if err != nil {
		return fmt.Errorf("insert key %s/%s: %w", d.Sender, d.DeliveryID, err)
	}
	return nil
}

// DeleteKey deletes k's key, as retention does after it expires, and
// reports whether there was one. Its event, if any, stays.
func DeleteKey(ctx context.Context, db DB, k idempotency.Key) (bool, error) {
	tag, err := db.Exec(ctx, `DELETE FROM processed_messages WHERE sender = $1 AND delivery_id = $2`, k.Sender, k.DeliveryID)
	if err != nil {
		return false, fmt.Errorf("delete key %s/%s: %w", k.Sender, k.DeliveryID, err)
	}
	return tag.RowsAffected() == 1, nil
}

// ForgetHourCounts forgets the counts of closed hours that
// CountDeliveries kept for sender, or for every sender when sender is "".
// The next count counts them again.
func ForgetHourCounts(ctx context.Context, db DB, sender string) error {
	if _, err := db.Exec(ctx, `DELETE FROM delivery_hour_counts WHERE $1 = '' OR sender = $1`, sender); err != nil {
		return fmt.Errorf("forget the kept hour counts: %w", err)
	}
	return nil
}

// Generated describes N deliveries that [InsertGenerated] writes with one
// statement per table. Delivery i, from 1 to N, has the ID Prefix followed
// by i. When Width is positive, i is left-padded with zeros to Width
// digits. It belongs to Sender, or with Senders positive to Sender
// followed by i mod Senders. It was received Step×i before Newest. Its
// request digest is the SHA-256 of i's decimal digits. Its event ID is a
// digest of its sender and ID, the same in both tables.
type Generated struct {
	Sender  string
	Senders int
	Prefix  string
	Width   int
	N       int
	Newest  time.Time
	Step    time.Duration
	// ExpiresAt is when every key expires.
	ExpiresAt time.Time
	// Status is every stored response's status. The body is {} in JSON.
	Status int
	// Keys and Events choose the tables written. Keys writes
	// processed_messages with the stored responses. Events writes
	// webhook_events with empty headers and body.
	Keys, Events bool
	// EventTypes, when positive, gives each event one of that many types,
	// from "type.0" on, by a hash of its delivery ID.
	EventTypes int
}

// generatedSQL is the rows of Generated $1 to $8: sender, delivery ID,
// request digest, event ID, received at and event type.
const generatedSQL = `SELECT sender, delivery_id, sha, md5(sender || '/' || delivery_id)::uuid AS event_id, received_at, event_type FROM (
  SELECT CASE WHEN $2::int > 0 THEN $1 || (i % $2::int) ELSE $1 END AS sender,
         $3 || CASE WHEN $4::int > 0 THEN lpad(i::text, $4::int, '0') ELSE i::text END AS delivery_id,
         sha256(i::text::bytea) AS sha,
         $6::timestamptz - i * $7::interval AS received_at,
         CASE WHEN $8::int > 0 THEN 'type.' || ((hashtext($3 || i) & 2147483647) % $8::int) ELSE '' END AS event_type
  FROM generate_series(1, $5::int8) AS i) g`

// InsertGenerated writes g's deliveries in one transaction, and returns
// how many it wrote. On Citus it writes one transaction per sender, each
// committed on the sender's worker alone. An INSERT … SELECT from
// generate_series into a distributed table would commit in two phases,
// which the Citus tests refuse.
func InsertGenerated(ctx context.Context, db DB, g Generated) (int64, error) {
	if !g.Keys && !g.Events {
		return 0, fmt.Errorf("insert generated deliveries: neither keys nor events chosen")
	}
	args := []any{g.Sender, g.Senders, g.Prefix, g.Width, g.N, g.Newest, g.Step, g.EventTypes}
	var distributed bool
	if err := db.QueryRow(ctx, `SELECT to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL`).Scan(&distributed); err != nil {
		return 0, fmt.Errorf("insert generated deliveries: %w", err)
	}
	if distributed {
		return insertGeneratedBySender(ctx, db, g, args)
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("insert generated deliveries: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var n int64
	if g.Keys {
		tag, err := tx.Exec(ctx, `INSERT INTO processed_messages
  (sender, delivery_id, request_sha256, event_id, response_status, response_content_type, response_body, created_at, expires_at)
SELECT g.sender, g.delivery_id, g.sha, g.event_id, $10, 'application/json', '{}', g.received_at, $9
FROM (`+generatedSQL+`) g`, append(args, g.ExpiresAt, g.Status)...)
		if err != nil {
			return 0, fmt.Errorf("insert generated keys: %w", err)
		}
		n = tag.RowsAffected()
	}
	if g.Events {
		tag, err := tx.Exec(ctx, `INSERT INTO webhook_events (sender, id, delivery_id, received_at, headers, body, event_type)
SELECT g.sender, g.event_id, g.delivery_id, g.received_at, '{}', '', g.event_type
FROM (`+generatedSQL+`) g`, args...)
		if err != nil {
			return 0, fmt.Errorf("insert generated events: %w", err)
		}
		n = tag.RowsAffected()
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("insert generated deliveries: %w", err)
	}
	return n, nil
}

// insertGeneratedBySender is InsertGenerated on Citus. The coordinator
// generates the rows, and a multi-row VALUES inserts them, one transaction
// per sender. Citus routes such an INSERT to the sender's shard, and
// commits one sender's rows on its worker alone. COPY, like INSERT …
// SELECT, commits in two phases on Citus even into one shard.
func insertGeneratedBySender(ctx context.Context, db DB, g Generated, args []any) (int64, error) {
	type row struct {
		sender, id, eventType string
		sha                   []byte
		event                 uuid.UUID
		at                    time.Time
	}
	bySender := map[string][]row{}
	var order []string
	rows, err := db.Query(ctx, generatedSQL, args...)
	if err != nil {
		return 0, fmt.Errorf("insert generated deliveries: %w", err)
	}
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.sender, &r.id, &r.sha, &r.event, &r.at, &r.eventType); err != nil {
			rows.Close()
			return 0, fmt.Errorf("insert generated deliveries: %w", err)
		}
		if _, ok := bySender[r.sender]; !ok {
			order = append(order, r.sender)
		}
		bySender[r.sender] = append(bySender[r.sender], r)
	}
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("insert generated deliveries: %w", err)
	}
	// values returns n rows of the template tmpl, whose each ? is the
	// next parameter after the sender $1.
	values := func(n int, tmpl string) string {
		var b strings.Builder
		p := 2
		for i := range n {
			if i > 0 {
				b.WriteString(", ")
			}
			for _, c := range tmpl {
				if c != '?' {
					b.WriteRune(c)
					continue
				}
				fmt.Fprintf(&b, "$%d", p)
				p++
			}
		}
		return b.String()
	}
	const chunk = 1000
	var n int64
	for _, sender := range order {
		rs := bySender[sender]
		err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
			for lo := 0; lo < len(rs); lo += chunk {
				part := rs[lo:min(lo+chunk, len(rs))]
				if g.Keys {
					a := []any{sender}
					for _, r := range part {
						a = append(a, r.id, r.sha, r.event, int16(g.Status), r.at, g.ExpiresAt)
					}
					if _, err := tx.Exec(ctx, `INSERT INTO processed_messages
  (sender, delivery_id, request_sha256, event_id, response_status, response_content_type, response_body, created_at, expires_at) VALUES `+
						values(len(part), `($1, ?, ?, ?, ?::int2, 'application/json', convert_to('{}', 'UTF8'), ?, ?)`), a...); err != nil {
						return fmt.Errorf("insert generated keys: %w", err)
					}
				}
				if g.Events {
					a := []any{sender}
					for _, r := range part {
						a = append(a, r.event, r.id, r.at, r.eventType)
					}
					if _, err := tx.Exec(ctx, `INSERT INTO webhook_events (sender, id, delivery_id, received_at, headers, body, event_type) VALUES `+
						values(len(part), `($1, ?, ?, ?, '{}', '', ?)`), a...); err != nil {
						return fmt.Errorf("insert generated events: %w", err)
					}
				}
			}
			return nil
		})
		if err != nil {
			return n, fmt.Errorf("insert generated deliveries of %s: %w", sender, err)
		}
		n += int64(len(rs))
	}
	return n, nil
}

// InsertEvent stores e outside the ingest pipeline. Its headers are kept
// as events.StoredHeaders keeps them, and a nil body is stored empty.
// Ingest stores an event in its delivery's transaction instead.
func InsertEvent(ctx context.Context, db DB, e events.Event) error {
	headers, err := json.Marshal(events.StoredHeaders(e.Headers))
	if err != nil {
		return fmt.Errorf("insert event %s: encode headers: %w", e.ID, err)
	}
	body := e.Body
	if body == nil {
		body = []byte{}
	}
	if _, err := db.Exec(ctx, `INSERT INTO webhook_events (sender, id, delivery_id, received_at, headers, body, event_type)
VALUES ($1, $2, $3, $4, $5, $6, $7)`, e.Sender, e.ID, e.DeliveryID, e.ReceivedAt, headers, body, e.EventType); err != nil {
		return fmt.Errorf("insert event %s: %w", e.ID, err)
	}
	return nil
}

// InsertOutbox stores a forward of sender's event to target outside the
// ingest pipeline, as received at at.
func InsertOutbox(ctx context.Context, db DB, r Outbox, at time.Time) error {
	if _, err := db.Exec(ctx, `INSERT INTO forward_outbox (sender, event_id, target, delivery_id, created_at) VALUES ($1, $2, $3, $4, $5)`,
		r.Sender, r.EventID, r.Target, r.DeliveryID, at); err != nil {
		return fmt.Errorf("insert outbox row of event %s: %w", r.EventID, err)
	}
	return nil
}

// DeleteOutboxOfEvent deletes the outbox rows of sender's event, so a test
// can put its forwards in a state of its own. It returns how many it
// deleted.
func DeleteOutboxOfEvent(ctx context.Context, db DB, sender string, eventID uuid.UUID) (int64, error) {
	tag, err := db.Exec(ctx, `DELETE FROM forward_outbox WHERE sender = $1 AND event_id = $2`, sender, eventID)
	if err != nil {
		return 0, fmt.Errorf("delete outbox rows of event %s: %w", eventID, err)
	}
	return tag.RowsAffected(), nil
}
