// Package forward delivers accepted events to the services behind hookgate
// through a transactional outbox. The ingest transaction writes one narrow
// row per (event, target) into forward_outbox, only when its claim took the
// delivery's key (QueueOutbox); worker processes relay those rows into
// the job queue in batches (Relay, through package queue's Queue, on
// River), and the queue's workers send each event to its target, at least
// once, retrying with backoff (Worker, a queue.ForwardWorker). This package
// does not know River: package queue is the seam. The fast path
// (Dispatcher) and the workers send through one Transport, which sends a
// forward and classifies the outcome; HTTPTransport is the one of HTTP
// targets.
//
// Each forward POSTs the event's original body and Content-Type with
// Idempotency-Key and webhook-id set to the event ID (HTTPTransport), so a
// receiver can deduplicate: a forward may arrive more than once (a worker
// can die after the receiver answered and before the job was marked done).
package forward

import (
	"time"

	"github.com/google/uuid"

	"github.com/hookgate/hookgate/internal/dedup"
)

// OutboxRow is QueueOutbox's multi-row statement with the number of values
// of its rows, for a function that performs it (dedup.Delegated; migration
// 20's ingest_deliveries takes its values in this order: event ID, target,
// delivery ID, created at, lease in milliseconds).
func OutboxRow() dedup.DelegatedRow { return dedup.DelegatedRow{SQL: outboxInsertSQL, Values: 5} }

// outboxInsertSQL writes the outbox rows of a pipeline's deliveries (a
// multi-row statement, dedup.Batch.Row: $1 the sender, then one array per
// column), one per forward, each only in the transaction whose claim took
// its delivery's key (dedup.ClaimedJoin). A row with a lease (milliseconds,
// NULL for none) is leased until that long after the statement started:
// the relay leaves it to the process's fast path until then.
var outboxInsertSQL = `INSERT INTO forward_outbox (sender, event_id, target, delivery_id, created_at, leased_until)
SELECT k.sender, o.event_id, o.target, o.delivery_id, o.created_at, statement_timestamp() + o.lease_ms * interval '1 millisecond'
FROM unnest($2::uuid[], $3::text[], $4::text[], $5::timestamptz[], $6::int8[])
  AS o(event_id, target, delivery_id, created_at, lease_ms)
` + dedup.ClaimedJoin("o.delivery_id", "o.event_id")

// QueueOutbox queues, as part of a delivery's state change, the outbox rows
// of the event's forwards to the targets named in targets: one row each,
// none when targets is empty. They are stored under the delivery's sender,
// the i-th leased for lease.For(i) when it is positive (see
// Dispatcher.Lease), not leased otherwise (the zero Lease leases none).
func QueueOutbox(b *dedup.Batch, eventID uuid.UUID, deliveryID string, receivedAt time.Time, targets []string, lease Lease) {
	for i, t := range targets {
		var ms any // NULL: no lease
		if d := lease.For(i); d > 0 {
			ms = d.Milliseconds()
		}
		b.Row(outboxInsertSQL, [16]byte(eventID), t, deliveryID, receivedAt, ms)
	}
}
