// Package events stores accepted webhook deliveries (webhook_events).
package events

import (
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Event is an accepted delivery: the raw request body and its headers.
type Event struct {
	ID         uuid.UUID
	Sender     string
	DeliveryID string
	ReceivedAt time.Time
	// Headers are the request headers to store, as filtered by the sender's
	// HeaderFilter; QueueInsert applies StoredHeaders on top.
	Headers http.Header
	Body    []byte
}

const insertSQL = `INSERT INTO webhook_events (sender, id, delivery_id, received_at, headers, body)
VALUES ($1, $2, $3, $4, $5, $6)`

// QueueInsert queues the insert of e on b, for use as (part of) a
// dedup.Change. The headers stored are StoredHeaders(e.Headers): filter them
// with the sender's HeaderFilter first. A nil Body is stored as an empty
// body.
func QueueInsert(b *pgx.Batch, e Event) {
	body := e.Body
	if body == nil {
		body = []byte{}
	}
	b.Queue(insertSQL, e.Sender, [16]byte(e.ID), e.DeliveryID, e.ReceivedAt, StoredHeaders(e.Headers), body)
}

// StoredHeaders returns h as stored, as a map that encodes to a JSON object
// of string arrays (never nil): without Authorization, Proxy-Authorization,
// Cookie and blank names, and with at most MaxStoredHeaders values, whatever
// filter h went through before. It does not drop credential-like headers:
// that is HeaderFilter's decision, made per sender.
func StoredHeaders(h http.Header) map[string][]string {
	return map[string][]string(HeaderFilter{store: allNames(h)}.Filter(h))
}

// allNames returns the canonical names of h, as an allow-list of all of them.
func allNames(h http.Header) map[string]bool {
	m := make(map[string]bool, len(h))
	for k := range h {
		m[http.CanonicalHeaderKey(k)] = true
	}
	return m
}
