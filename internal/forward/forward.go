// Package forward delivers accepted events to the services behind hookgate
// through a transactional outbox.
//
// The ingest transaction writes one outbox row per event and target, with
// [QueueOutbox]. A [Relay] moves those rows into the job queue in batches.
// The queue's [Worker] sends each forward at least once and retries with
// backoff. The [Dispatcher] is the fast path: it attempts a forward right
// after the ingest commits. Both send through one [transport.Transport].
//
// A [Gate] admits every attempt. It gives each target a fair share of the
// process's capacity, and holds back a target whose breaker is open, that
// asked for a pause, or that an operator paused. A [Takeover] takes over
// the jobs of processes that are gone.
//
// A forward may arrive more than once: a worker can die after the target
// answered and before the job was marked done. Every attempt carries the
// event ID as its idempotency key, so the target can drop a repeat. This
// package does not know River: package queue is the seam.
package forward

import (
	"time"

	"github.com/google/uuid"

	"github.com/hookgate/hookgate/internal/dedup"
)

// OutboxRow is the statement of [QueueOutbox] with the number of values per
// row, for [dedup.Delegated]. The database function ingest_deliveries takes
// the values in this order: event ID, target, delivery ID, created at, and
// lease in milliseconds.
func OutboxRow() dedup.DelegatedRow { return dedup.DelegatedRow{SQL: outboxInsertSQL, Values: 5} }

// outboxInsertSQL writes one outbox row per forward. $1 is the sender, then
// one array per column. A row is written only by the transaction whose
// claim took its delivery's key. A leased row is left to the fast path
// until the lease ends.
var outboxInsertSQL = `INSERT INTO forward_outbox (sender, event_id, target, delivery_id, created_at, leased_until)
SELECT k.sender, o.event_id, o.target, o.delivery_id, o.created_at, statement_timestamp() + o.lease_ms * interval '1 millisecond'
FROM unnest($2::uuid[], $3::text[], $4::text[], $5::timestamptz[], $6::int8[])
  AS o(event_id, target, delivery_id, created_at, lease_ms)
` + dedup.ClaimedJoin("o.delivery_id", "o.event_id")

// QueueOutbox queues one outbox row per target in the delivery's batch. The
// i-th row is leased for lease.For(i) when that is positive; see
// [Dispatcher.Lease].
func QueueOutbox(b *dedup.Batch, eventID uuid.UUID, deliveryID string, receivedAt time.Time, targets []string, lease Lease) {
	for i, t := range targets {
		var ms any // NULL: no lease
		if d := lease.For(i); d > 0 {
			ms = d.Milliseconds()
		}
		b.Row(outboxInsertSQL, [16]byte(eventID), t, deliveryID, receivedAt, ms)
	}
}
