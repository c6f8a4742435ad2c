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
	// EventType is the type package sender read from the request; "" when
	// it had none.
	EventType string
	// Headers are the request headers the sender's [HeaderFilter] keeps.
	// [QueueInsert] applies [StoredHeaders] on top.
	Headers http.Header
	Body    []byte
	// RuleErrors are the targets' rules that failed to evaluate on the
	// delivery at ingest (a target's filter): each such target got no
	// forward. It is nil when none failed, as for nearly every event.
	RuleErrors []RuleError
}

// RuleError is a target's rule that failed to evaluate on an event.
type RuleError struct {
	Target string `json:"target"`
	// Rule is the rule that failed: "filter" at ingest.
	Rule string `json:"rule"`
	// Error is CEL's message, which names what failed in the expression,
	// never a value of the body.
	Error string `json:"error"`
}

// MaxRuleErrorBytes is the most bytes of a rule's error message stored.
const MaxRuleErrorBytes = 1024

// QueueInsert queues the insert of e on b, as part of a [dedup.Change]. It
// inserts nothing unless the delivery's claim took its key for e.ID. The
// event is stored under the pipeline's sender, which must be e.Sender. The
// headers stored are [StoredHeaders] of e.Headers. A nil Body is stored
// empty. An event with RuleErrors is inserted by a statement of its own,
// which the ingest function does not perform ([InsertRow]): on Citus its
// delivery runs in the statement forms.
func QueueInsert(b *dedup.Batch, e Event) {
	body := e.Body
	if body == nil {
		body = []byte{}
	}
	headers := appendHeadersJSON(nil, StoredHeaders(e.Headers))
	if len(e.RuleErrors) > 0 {
		b.Row(insertRuleErrorsSQL, [16]byte(e.ID), e.DeliveryID, e.ReceivedAt, headers, body, e.EventType, appendRuleErrorsJSON(nil, e.RuleErrors))
		return
	}
	b.Row(insertSQL, [16]byte(e.ID), e.DeliveryID, e.ReceivedAt, headers, body, e.EventType)
}

// InsertRow is the statement of [QueueInsert] and the number of values of
// its rows, for a [dedup.Delegated] function. The database function
// ingest_deliveries takes the values in this order: id, delivery ID,
// received at, headers, body, event type.
func InsertRow() dedup.DelegatedRow { return dedup.DelegatedRow{SQL: insertSQL, Values: 6} }

// insertSQL inserts the events of a pipeline's deliveries, one array per
// column after the sender $1 ([dedup.Batch.Row]). Each event is inserted
// only by the claim that took its key ([dedup.ClaimedJoin]). On PostgreSQL
// it runs inside the claim's statement ([dedup.Foldable]).
var insertSQL = dedup.Foldable(`INSERT INTO webhook_events (sender, id, delivery_id, received_at, headers, body, event_type)
SELECT k.sender, e.* FROM unnest($2::uuid[], $3::text[], $4::timestamptz[], $5::jsonb[], $6::bytea[], $7::text[])
  AS e(id, delivery_id, received_at, headers, body, event_type)
` + dedup.ClaimedJoin("e.delivery_id", "e.id"))

// insertRuleErrorsSQL is insertSQL for the events with rule errors.
var insertRuleErrorsSQL = dedup.Foldable(`INSERT INTO webhook_events (sender, id, delivery_id, received_at, headers, body, event_type, rule_errors)
SELECT k.sender, e.* FROM unnest($2::uuid[], $3::text[], $4::timestamptz[], $5::jsonb[], $6::bytea[], $7::text[], $8::jsonb[])
  AS e(id, delivery_id, received_at, headers, body, event_type, rule_errors)
` + dedup.ClaimedJoin("e.delivery_id", "e.id"))

// StoredHeaders returns h as stored, as a map that encodes to a JSON object
// of string arrays (never nil): without Authorization, Proxy-Authorization,
// Cookie and blank names, and with at most MaxStoredHeaders values, whatever
// filter h went through before. It does not drop credential-like headers:
// that is HeaderFilter's decision, made per sender.
func StoredHeaders(h http.Header) map[string][]string {
	total := 0
	for k, v := range h {
		total += len(v)
		if neverStored[http.CanonicalHeaderKey(k)] || strings.TrimSpace(k) == "" {
			total = MaxStoredHeaders + 1 // needs filtering
			break
		}
	}
	if total <= MaxStoredHeaders && h != nil {
		return h // as ingest's HeaderFilter left it: nothing to drop
	}
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
