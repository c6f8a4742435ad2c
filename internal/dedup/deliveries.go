package dedup

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// ErrNotFound means no delivery with the key is stored: it was never
// accepted, or its key has expired and been deleted.
var ErrNotFound = errors.New("dedup: no such delivery")

// MaxListLimit is the largest page List returns.
const MaxListLimit = 500

// Record is a stored delivery: the row that holds its key.
type Record struct {
	Key
	// RequestSHA256 is the SHA-256 of the accepted request body.
	RequestSHA256 [32]byte
	// EventID is the event the delivery created.
	EventID uuid.UUID
	// Response is the stored response that every replay returns. List
	// leaves its Body nil; Get fills it in (empty, not nil, when the stored
	// body is empty).
	Response Response
	// ReceivedAt is when the delivery was accepted (created_at), ExpiresAt
	// when its key may be forgotten.
	ReceivedAt time.Time
	ExpiresAt  time.Time
	// EventType is the event's type (webhook_events.event_type): "" when
	// it has none, or its event is no longer stored.
	EventType string
}

// Cursor is a position in a sender's deliveries in List's order: the
// (received at, delivery ID) of the last delivery of a page. The next page
// starts with the delivery right after it.
type Cursor struct {
	ReceivedAt time.Time
	DeliveryID string
}

// cursorJSON is a Cursor's encoded form: the time in Unix microseconds
// (PostgreSQL's precision) and the delivery ID.
type cursorJSON struct {
	T int64  `json:"t"`
	D string `json:"d"`
}

// String returns the cursor's opaque form, URL-safe base64 (no padding) of
// a small JSON document. ParseCursor reads it back.
func (c Cursor) String() string {
	b, err := json.Marshal(cursorJSON{T: c.ReceivedAt.UnixMicro(), D: c.DeliveryID})
	if err != nil { // a struct of an int and a string always encodes
		panic(err)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// MaxDeliveryIDBytes is the longest delivery ID ingest accepts.
const MaxDeliveryIDBytes = 255

// CheckDeliveryID returns why id cannot be a delivery ID (empty, over
// MaxDeliveryIDBytes, a byte outside visible ASCII: what ingest refuses),
// or "". A value it refuses names no stored delivery, so callers answer
// 400 or 404 without asking the database (which refuses a NUL or invalid
// UTF-8 with an error, not with "no such row").
func CheckDeliveryID(id string) string {
	if id == "" {
		return "is empty"
	}
	if len(id) > MaxDeliveryIDBytes {
		return fmt.Sprintf("is %d bytes long; at most %d are allowed", len(id), MaxDeliveryIDBytes)
	}
	for i := 0; i < len(id); i++ {
		if id[i] < 0x21 || id[i] > 0x7e {
			return fmt.Sprintf("has a byte outside visible ASCII at position %d (spaces and control characters are not allowed)", i)
		}
	}
	return ""
}

// errBadCursor is what ParseCursor wraps for every malformed cursor.
var errBadCursor = errors.New("malformed cursor")

// ParseCursor returns the Cursor whose String is s. It returns an error for
// anything String cannot have produced: bad base64, padding, other JSON,
// unknown or missing fields, an empty delivery ID, or any other spelling of
// a valid cursor.
func ParseCursor(s string) (Cursor, error) {
	raw, err := base64.RawURLEncoding.Strict().DecodeString(s)
	if err != nil {
		return Cursor{}, fmt.Errorf("%w: %w", errBadCursor, err)
	}
	var cj cursorJSON
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cj); err != nil {
		return Cursor{}, fmt.Errorf("%w: %w", errBadCursor, err)
	}
	if why := CheckDeliveryID(cj.D); why != "" {
		return Cursor{}, fmt.Errorf("%w: its delivery ID %s", errBadCursor, why)
	}
	c := Cursor{ReceivedAt: time.UnixMicro(cj.T).UTC(), DeliveryID: cj.D}
	if c.String() != s { // trailing data, reordered or missing fields, …
		return Cursor{}, fmt.Errorf("%w: not in canonical form", errBadCursor)
	}
	return c, nil
}

// Page is one page of List.
type Page struct {
	// Records are the page's deliveries, newest first; empty, not nil, when
	// there are none.
	Records []Record
	// Next is the cursor of the next page; nil on the last page.
	Next *Cursor
}

// The listing is keyset pagination on (created_at DESC, delivery_id DESC),
// served by the index processed_messages_sender_created_idx (migration 4).
// Each row's event type comes from its event, found by its primary key
// (sender, id).
const (
	listColumns = `pm.delivery_id, pm.request_sha256, pm.event_id, pm.response_status, pm.response_content_type, pm.created_at, pm.expires_at`
	listFrom    = `SELECT ` + listColumns + `, coalesce(e.event_type, '') AS event_type
FROM processed_messages pm LEFT JOIN webhook_events e ON e.sender = pm.sender AND e.id = pm.event_id
WHERE pm.sender = $1`
	listFirstSQL = listFrom + `
ORDER BY pm.created_at DESC, pm.delivery_id DESC
LIMIT $2`
	listAfterSQL = listFrom + ` AND (pm.created_at, pm.delivery_id) < ($2, $3)
ORDER BY pm.created_at DESC, pm.delivery_id DESC
LIMIT $4`
	getSQL = `SELECT pm.request_sha256, pm.event_id, pm.response_status, pm.response_content_type, pm.response_body, pm.created_at, pm.expires_at,
  coalesce((SELECT e.event_type FROM webhook_events e WHERE e.sender = pm.sender AND e.id = pm.event_id), '')
FROM processed_messages pm WHERE pm.sender = $1 AND pm.delivery_id = $2`
)

// The listing by event type starts from the events: the index
// webhook_events_sender_type_received_idx (migration 8) holds a sender's
// events of one type in the list's order, (received_at DESC, delivery_id
// DESC), and an event's received_at is its delivery's created_at (ingest
// writes both from one clock reading). Each event finds its delivery by the
// key (sender, delivery_id) and the event ID, so an event whose key expired
// (or was claimed again by a newer event) is not listed.
const (
	typeColumns = listColumns + `, e.event_type`
	// The delivery of each event is looked up in a LATERAL subquery with
	// OFFSET 0, which the planner cannot flatten into a join: it must walk
	// the events in the index's order and stop after the page, whatever it
	// estimates of the join (a hash join of all the sender's deliveries
	// would read them all).
	typeFrom = `SELECT ` + typeColumns + `
FROM webhook_events e CROSS JOIN LATERAL (
  SELECT p.delivery_id, p.request_sha256, p.event_id, p.response_status, p.response_content_type, p.created_at, p.expires_at
  FROM processed_messages p WHERE p.sender = e.sender AND p.delivery_id = e.delivery_id AND p.event_id = e.id OFFSET 0) pm
WHERE e.sender = $1 AND e.event_type = `
	typeOrder    = ` ORDER BY e.received_at DESC, e.delivery_id DESC`
	typeFirstSQL = typeFrom + `$2` + typeOrder + ` LIMIT $3`
	typeAfterSQL = typeFrom + `$2 AND (e.received_at, e.delivery_id) < ($4, $5)` + typeOrder + ` LIMIT $3`
	// A prefix: the sender's distinct event types that start with it, found
	// one index probe each (a loose index scan: the column's collation is
	// "C", so they are one contiguous range of the index); then the keys
	// (received_at, delivery_id) of each type's newest events after the
	// cursor, read from the index alone, merged into the page's keys; then
	// only those events and their deliveries. Every key of the page comes
	// back, with found false when its delivery is no longer stored, so that
	// the page's end (and the next cursor) is known without reading the
	// deliveries of every type.
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

// List returns up to limit (1 to MaxListLimit) of sender's stored
// deliveries, newest first: by received at, then by delivery ID, both
// descending. With a nil after it starts at the newest; otherwise right
// after the delivery after names. Pages are stable while deliveries are
// added: following Next from the first page to the last visits every
// delivery committed before the walk began exactly once. (A delivery whose
// transaction commits during the walk with an older time than the walk's
// position is not visited.) An unknown sender has no deliveries: an empty
// page. Records' Response.Body is nil.
func (s *Store) List(ctx context.Context, sender string, limit int, after *Cursor) (Page, error) {
	return s.ListByEventType(ctx, sender, "", limit, after)
}

// ListByEventType is List of the deliveries whose event has the event type
// eventType: exactly, or, when eventType ends in "*", any type that starts
// with what comes before it. "" and "*" list every delivery, as List. Only
// deliveries whose event is still stored have a type and are listed by
// type. Its cursors are List's: a position in the same order.
func (s *Store) ListByEventType(ctx context.Context, sender, eventType string, limit int, after *Cursor) (Page, error) {
	if limit < 1 || limit > MaxListLimit {
		return Page{}, fmt.Errorf("list deliveries: limit %d is not from 1 to %d", limit, MaxListLimit)
	}
	page := Page{Records: []Record{}}
	// Querier has no Query: a batch of one statement is one round trip too.
	b := &pgx.Batch{}
	var q *pgx.QueuedQuery
	prefix, isPrefix := strings.CutSuffix(eventType, "*")
	switch {
	case eventType == "" || (isPrefix && prefix == ""):
		if after == nil {
			q = b.Queue(listFirstSQL, sender, limit+1)
		} else {
			q = b.Queue(listAfterSQL, sender, after.ReceivedAt, after.DeliveryID, limit+1)
		}
	case isPrefix:
		if after == nil {
			q = b.Queue(prefixFirstSQL, sender, prefix, limit+1)
		} else {
			q = b.Queue(prefixAfterSQL, sender, prefix, limit+1, after.ReceivedAt, after.DeliveryID)
		}
	default:
		if after == nil {
			q = b.Queue(typeFirstSQL, sender, eventType, limit+1)
		} else {
			q = b.Queue(typeAfterSQL, sender, eventType, limit+1, after.ReceivedAt, after.DeliveryID)
		}
	}
	q.Query(func(rows pgx.Rows) error {
		if isPrefix && prefix != "" {
			return scanKeyed(rows, sender, limit, &page)
		}
		return scanRecords(rows, sender, &page)
	})
	if err := s.db.SendBatch(ctx, b).Close(); err != nil {
		return Page{}, fmt.Errorf("list deliveries of %s: %w", sender, err)
	}
	page.trim(limit)
	return page, nil
}

// scanRecords appends the rows of a listing query (listColumns and the
// event type) to page.
func scanRecords(rows pgx.Rows, sender string, page *Page) error {
	for rows.Next() {
		r := Record{Key: Key{Sender: sender}}
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
		page.Records = append(page.Records, r)
	}
	return rows.Err()
}

// trim cuts a page read with limit+1 rows to limit, and sets Next when a
// row was left over.
func (p *Page) trim(limit int) {
	if len(p.Records) > limit {
		p.Records = p.Records[:limit]
		last := p.Records[limit-1]
		p.Next = &Cursor{ReceivedAt: last.ReceivedAt, DeliveryID: last.DeliveryID}
	}
}

// scanKeyed reads the rows of the prefix listing: one per key of the page
// (limit+1 at most), found false where the key's delivery is no longer
// stored. Such keys are left out of the page, which may then hold fewer
// than limit records and still have a next page; the cursor is the page's
// last key. It sets page.Next itself, and leaves at most limit records.
func scanKeyed(rows pgx.Rows, sender string, limit int, page *Page) error {
	keys := 0
	for rows.Next() {
		var (
			at     time.Time
			id     string
			found  bool
			sum    []byte
			status int16
			r      = Record{Key: Key{Sender: sender}}
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
		page.Records = append(page.Records, r)
	}
	if keys <= limit {
		page.Next = nil
	}
	return rows.Err()
}

// Get returns the stored delivery with key k, its response body included.
// It returns an error wrapping ErrNotFound when no such delivery is stored.
func (s *Store) Get(ctx context.Context, k Key) (Record, error) {
	r := Record{Key: k}
	var (
		sum    []byte
		status int16
	)
	err := s.db.QueryRow(ctx, getSQL, k.Sender, k.DeliveryID).
		Scan(&sum, &r.EventID, &status, &r.Response.ContentType, &r.Response.Body, &r.ReceivedAt, &r.ExpiresAt, &r.EventType)
	if errors.Is(err, pgx.ErrNoRows) {
		return Record{}, fmt.Errorf("get delivery %s/%s: %w", k.Sender, k.DeliveryID, ErrNotFound)
	}
	if err != nil {
		return Record{}, fmt.Errorf("get delivery %s/%s: %w", k.Sender, k.DeliveryID, err)
	}
	if err := setSum(&r, sum); err != nil {
		return Record{}, fmt.Errorf("get delivery %s/%s: %w", k.Sender, k.DeliveryID, err)
	}
	if r.Response.Body == nil {
		r.Response.Body = []byte{}
	}
	r.Response.Status = int(status)
	return r, nil
}

func setSum(r *Record, sum []byte) error {
	if len(sum) != len(r.RequestSHA256) {
		return fmt.Errorf("stored request_sha256 of %s/%s has %d bytes, want %d", r.Sender, r.DeliveryID, len(sum), len(r.RequestSHA256))
	}
	copy(r.RequestSHA256[:], sum)
	return nil
}
