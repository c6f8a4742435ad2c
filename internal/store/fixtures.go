package store

import (
	"context"
	"fmt"
	"time"

	"github.com/hookgate/hookgate/internal/dedup"
)

// Fixtures: rows of deliveries (processed_messages) and their events
// (webhook_events) written outside the ingest pipeline, for tests and
// tools: a key held in an open transaction, a key deleted by hand, and many
// generated deliveries at once for the plan tests and the benchmarks. The
// ingest pipeline (dedup.Store.Run) stays the way a delivery is accepted;
// these only put the tables in a state a test needs, so that their columns
// are named here and nowhere in the tests. The forward jobs' fixtures are
// in package storetest (SetForwardJob, InsertForwardJobs), for tests only,
// the outbox's in outbox.go (InsertOutbox), an event's in events.go
// (InsertEvent).

// InsertKey stores d's key, as the ingest pipeline's claim stores it with
// its response: received (created_at) at d.ReceivedAt. On a pgx.Tx left
// open it holds the key, as a concurrent delivery still being processed
// does.
func (q *Queries) InsertKey(ctx context.Context, d dedup.Delivery) error {
	body := d.Response.Body
	if body == nil {
		body = []byte{}
	}
	_, err := q.db.Exec(ctx, `INSERT INTO processed_messages
  (sender, delivery_id, request_sha256, event_id, response_status, response_content_type, response_body, created_at, expires_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
		d.Sender, d.DeliveryID, d.RequestSHA256[:], d.EventID, d.Response.Status, d.Response.ContentType, body, d.ReceivedAt, d.ExpiresAt)
	if err != nil {
		return fmt.Errorf("insert key %s/%s: %w", d.Sender, d.DeliveryID, err)
	}
	return nil
}

// DeleteKey deletes k's key (as if it had expired and retention had
// deleted it), and reports whether there was one. Its event, if any, stays.
func (q *Queries) DeleteKey(ctx context.Context, k dedup.Key) (bool, error) {
	tag, err := q.db.Exec(ctx, `DELETE FROM processed_messages WHERE sender = $1 AND delivery_id = $2`, k.Sender, k.DeliveryID)
	if err != nil {
		return false, fmt.Errorf("delete key %s/%s: %w", k.Sender, k.DeliveryID, err)
	}
	return tag.RowsAffected() == 1, nil
}

// ForgetHourCounts forgets the counts of closed hours CountDeliveries kept
// for sender (every sender's when sender is ""): the next count counts
// them again.
func (q *Queries) ForgetHourCounts(ctx context.Context, sender string) error {
	if _, err := q.db.Exec(ctx, `DELETE FROM delivery_hour_counts WHERE $1 = '' OR sender = $1`, sender); err != nil {
		return fmt.Errorf("forget the kept hour counts: %w", err)
	}
	return nil
}

// Generated describes N deliveries InsertGenerated writes in one statement
// each table (generate_series): delivery i, from 1 to N, has the ID
// Prefix followed by i (left-padded with zeros to Width digits when Width
// is positive), belongs to Sender (to Sender followed by i mod Senders
// when Senders is positive) and was received Step×i before Newest. Its
// request digest is the SHA-256 of i's decimal digits, its event ID a
// digest of its sender and ID (the same in both tables).
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
	// Status is every stored response's status (its body is {}, its
	// Content-Type application/json).
	Status int
	// Keys and Events choose the tables written: keys (processed_messages,
	// the stored responses) and events (webhook_events, empty headers and
	// body).
	Keys, Events bool
	// EventTypes, when positive, gives each event one of that many types,
	// "type.0" to "type.<EventTypes-1>", by a hash of its delivery ID; no
	// type when 0.
	EventTypes int
}

// generatedSQL is the rows of Generated $1 to $8, as (sender, delivery ID,
// request digest, event ID, received at, event type).
const generatedSQL = `SELECT sender, delivery_id, sha, md5(sender || '/' || delivery_id)::uuid AS event_id, received_at, event_type FROM (
  SELECT CASE WHEN $2::int > 0 THEN $1 || (i % $2::int) ELSE $1 END AS sender,
         $3 || CASE WHEN $4::int > 0 THEN lpad(i::text, $4::int, '0') ELSE i::text END AS delivery_id,
         sha256(i::text::bytea) AS sha,
         $6::timestamptz - i * $7::interval AS received_at,
         CASE WHEN $8::int > 0 THEN 'type.' || ((hashtext($3 || i) & 2147483647) % $8::int) ELSE '' END AS event_type
  FROM generate_series(1, $5::int8) AS i) g`

// InsertGenerated writes g's deliveries, in one transaction, and returns
// how many deliveries it wrote.
func (q *Queries) InsertGenerated(ctx context.Context, g Generated) (int64, error) {
	if !g.Keys && !g.Events {
		return 0, fmt.Errorf("insert generated deliveries: neither keys nor events chosen")
	}
	args := []any{g.Sender, g.Senders, g.Prefix, g.Width, g.N, g.Newest, g.Step, g.EventTypes}
	tx, err := q.db.Begin(ctx)
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
