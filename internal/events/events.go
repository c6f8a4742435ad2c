// Package events stores accepted webhook deliveries (webhook_events).
package events

import (
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/hookgate/hookgate/internal/dedup"
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

// InsertSQL inserts the event only in the transaction whose claim took its
// delivery's key (dedup.Claimed).
var InsertSQL = `INSERT INTO webhook_events (sender, id, delivery_id, received_at, headers, body)
SELECT $1::text, $2::uuid, $3::text, $4::timestamptz, $5::jsonb, $6::bytea WHERE ` + dedup.Claimed(1, 3, 2)

// QueueInsert queues the insert of e on b, for use as (part of) a
// dedup.Change: it inserts nothing unless the delivery's claim took its key
// for e.ID. Authorization, Cookie and Proxy-Authorization headers are not
// stored. A nil Body is stored as an empty body.
func QueueInsert(b *dedup.Batch, e Event) {
	body := e.Body
	if body == nil {
		body = []byte{}
	}
	b.Queue(InsertSQL, e.Sender, [16]byte(e.ID), e.DeliveryID, e.ReceivedAt, appendHeadersJSON(nil, StoredHeaders(e.Headers)), body)
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
