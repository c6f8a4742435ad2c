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
// until the lease ends. On PostgreSQL it runs inside the claim's statement
// ([dedup.Foldable]).
var outboxInsertSQL = dedup.Foldable(`INSERT INTO forward_outbox (sender, event_id, target, delivery_id, created_at, leased_until)
SELECT k.sender, o.event_id, o.target, o.delivery_id, o.created_at, statement_timestamp() + o.lease_ms * interval '1 millisecond'
FROM unnest($2::uuid[], $3::text[], $4::text[], $5::timestamptz[], $6::int8[])
  AS o(event_id, target, delivery_id, created_at, lease_ms)
` + dedup.ClaimedJoin("o.delivery_id", "o.event_id"))

// orderedKeysSQL and orderedOutboxSQL write the outbox rows of ordered
// forwards, with their keys' next positions. Both take the same rows: $1
// is the sender, then one array per column: event ID, target, delivery
// ID, creation time, lease in milliseconds, ordering key. Only the rows
// whose delivery's claim took its key count. orderedKeysSQL runs first
// (the batch runs its multi-row statements in the order of first use):
// for each (target, key) of the rows, it adds their number to the key's
// last_seq, making the key's row on first use. The key rows are locked in
// (target, key) order, so that two transactions never wait for each other
// in a cycle, and stay locked until COMMIT: positions follow the order of
// the commits. orderedOutboxSQL then gives each row the next position of
// its key, in the rows' order, from the last_seq that its transaction
// holds locked (a probe of the key's primary key per row). The key's head
// gets its lease (NULL: the relay's); a row behind it waits with
// 'infinity' until the forward before it ends.
//
// They are two statements in the same round trip, each routed by Citus to
// the sender's shard (every table it reads names sender = $1). As one
// statement, with the keys' upsert a data-modifying CTE, Citus ran the CTE
// on its own and sent its result to every worker: the ingest committed in
// two phases. now is computed outside the CASE: Citus refuses a function
// that is not immutable in a CASE of a statement it routes.
var orderedKeysSQL = `INSERT INTO forward_keys AS f (sender, target, order_key, last_seq, head_seq, updated_at)
SELECT k.sender, o.target, o.order_key, count(*), 1, statement_timestamp()
FROM unnest($2::uuid[], $3::text[], $4::text[], $5::timestamptz[], $6::int8[], $7::text[])
  AS o(event_id, target, delivery_id, created_at, lease_ms, order_key)
` + dedup.ClaimedJoin("o.delivery_id", "o.event_id") + `
GROUP BY k.sender, o.target, o.order_key
ORDER BY o.target, o.order_key
ON CONFLICT (sender, target, order_key) DO UPDATE SET last_seq = f.last_seq + excluded.last_seq, updated_at = excluded.updated_at`

var orderedOutboxSQL = `INSERT INTO forward_outbox (sender, event_id, target, delivery_id, created_at, leased_until, order_key, seq)
SELECT s.sender, s.event_id, s.target, s.delivery_id, s.created_at,
  CASE WHEN s.seq = s.head_seq THEN s.now + s.lease_ms * interval '1 millisecond' ELSE 'infinity' END,
  s.order_key, s.seq
FROM (
  SELECT k.sender, o.event_id, o.target, o.delivery_id, o.created_at, o.lease_ms, o.order_key, f.head_seq, statement_timestamp() AS now,
    f.last_seq - count(*) OVER w + row_number() OVER (w ORDER BY o.n) AS seq
  FROM unnest($2::uuid[], $3::text[], $4::text[], $5::timestamptz[], $6::int8[], $7::text[]) WITH ORDINALITY
    AS o(event_id, target, delivery_id, created_at, lease_ms, order_key, n)
  ` + dedup.ClaimedJoin("o.delivery_id", "o.event_id") + `
  CROSS JOIN LATERAL (SELECT f.last_seq, f.head_seq FROM forward_keys f
    WHERE f.sender = $1 AND f.target = o.target AND f.order_key = o.order_key OFFSET 0) f
  WINDOW w AS (PARTITION BY o.target, o.order_key)
) s`

// QueueOutbox queues one outbox row per target in the delivery's batch. The
// i-th row is leased for lease.For(i) when that is positive; see
// [Dispatcher.Lease].
func QueueOutbox(b *dedup.Batch, eventID uuid.UUID, deliveryID string, receivedAt time.Time, targets []string, lease Lease) {
	QueueOrderedOutbox(b, eventID, deliveryID, receivedAt, targets, nil, lease)
}

// QueueOrderedOutbox is [QueueOutbox] with the targets' ordering keys
// (nil, or one per target, "" for an unordered forward). An ordered
// forward takes the next position of its (target, key) in the same
// transaction. Its row is leased only when it is the key's head; see
// [Dispatcher.Dispatch].
func QueueOrderedOutbox(b *dedup.Batch, eventID uuid.UUID, deliveryID string, receivedAt time.Time, targets, keys []string, lease Lease) {
	for i, t := range targets {
		var ms any // NULL: no lease
		if d := lease.For(i); d > 0 {
			ms = d.Milliseconds()
		}
		if i < len(keys) && keys[i] != "" {
			b.Row(orderedKeysSQL, [16]byte(eventID), t, deliveryID, receivedAt, ms, keys[i])
			b.Row(orderedOutboxSQL, [16]byte(eventID), t, deliveryID, receivedAt, ms, keys[i])
			continue
		}
		b.Row(outboxInsertSQL, [16]byte(eventID), t, deliveryID, receivedAt, ms)
	}
}
