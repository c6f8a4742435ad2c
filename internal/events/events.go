// Package events stores accepted webhook deliveries (webhook_events).
package events

import (
	"net/http"
	"strings"
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
	// Headers are the request headers; QueueInsert leaves out credentials.
	Headers http.Header
	Body    []byte
}

const insertSQL = `INSERT INTO webhook_events (sender, id, delivery_id, received_at, headers, body)
VALUES ($1, $2, $3, $4, $5, $6)`

// QueueInsert queues the insert of e on b, for use as (part of) a
// dedup.Change. Authorization, Cookie and Proxy-Authorization headers are not
// stored. A nil Body is stored as an empty body.
func QueueInsert(b *pgx.Batch, e Event) {
	body := e.Body
	if body == nil {
		body = []byte{}
	}
	b.Queue(insertSQL, e.Sender, [16]byte(e.ID), e.DeliveryID, e.ReceivedAt, StoredHeaders(e.Headers), body)
}

// redacted lists the request headers that carry credentials and are never
// stored.
var redacted = map[string]bool{"Authorization": true, "Cookie": true, "Proxy-Authorization": true}

// StoredHeaders returns h without the headers that carry credentials, as a
// map that encodes to a JSON object of string arrays. It never returns nil.
func StoredHeaders(h http.Header) map[string][]string {
	out := make(map[string][]string, len(h))
	for k, v := range h {
		if redacted[http.CanonicalHeaderKey(k)] || strings.TrimSpace(k) == "" {
			continue
		}
		out[k] = v
	}
	return out
}
