// Package ingestsql holds the texts of the statements the ingest pipeline
// sends in its one round trip: the claim of the keys (in both its forms),
// the settings of the transaction, the state change's inserts of the event
// and of the outbox rows, and the read of the rows that hold the keys.
//
// Each text has this one owner. Package dedup runs the pipeline with them,
// package events queues EventInsert and package forward OutboxInsert as a
// delivery's state change, and the load benchmark (internal/bench) replays
// the very same texts through pgbench, and recognises them in
// pg_stat_activity, to compare the gateway with plain SQL. They live here,
// below all four, so that none of dedup, events and forward exports a
// statement only for the benchmark, and so that a change to a statement
// changes what the benchmark measures with it.
//
// The package has no behaviour: it imports nothing of hookgate and runs
// nothing.
package ingestsql

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The statements of the pipeline. Each is prepared once per connection and
// never fails for an expected outcome (a first delivery, a duplicate), so
// that no connection ever prepares a statement twice. The claim and the
// read take the sender as $1 and the deliveries' values as arrays, one
// element per delivery: one execution serves a whole batch.
const (
	// Claim inserts the keys of a pipeline's deliveries; a key held
	// already is left as it is (the read tells who holds it).
	Claim = `INSERT INTO processed_messages
  (sender, delivery_id, request_sha256, event_id, response_status, response_content_type, response_body, created_at, expires_at)
SELECT $1::text, d.* FROM unnest($2::text[], $3::bytea[], $4::uuid[], $5::int2[], $6::text[], $7::bytea[], $8::timestamptz[], $9::timestamptz[]) AS d
ON CONFLICT ON CONSTRAINT processed_messages_key DO NOTHING`
	// Stored returns, for each delivery (numbered from 1 in the order of
	// the arrays), the row that holds its key after the claim: the
	// delivery's own (its event ID) when its claim took the key, another
	// delivery's when it did not, none when the key vanished in between.
	// What it reads back, not the claim's row count, decides who claimed
	// (Citus reports INSERT 0 1 for a conflicting INSERT … SELECT … ON
	// CONFLICT DO NOTHING). A row of its own comes back without its
	// response body, which the caller already holds.
	// (OFFSET 0 keeps the lookup a per-delivery probe of the key's index:
	// joined, a plan made while the table was small would read all of the
	// sender's rows for each pipeline.)
	Stored = `SELECT d.n, p.* FROM unnest($2::text[], $3::uuid[]) WITH ORDINALITY AS d(delivery_id, event_id, n)
CROSS JOIN LATERAL (
  SELECT request_sha256, event_id, response_status, response_content_type,
    CASE WHEN event_id = d.event_id THEN ''::bytea ELSE response_body END, expires_at FROM processed_messages
  WHERE sender = $1 AND delivery_id = d.delivery_id OFFSET 0) AS p`
	// GenericPlans makes the pipeline's prepared statements run their
	// generic plans: PostgreSQL would otherwise plan them again at every
	// execution, because a plan for the few deliveries of a pipeline looks
	// cheaper than one made for arrays of unknown length. Their generic
	// plans probe the key's index once per delivery. It is not sent on a
	// distributed database: Citus cannot plan an INSERT … SELECT with
	// unbound parameters, and plans every execution anyway.
	GenericPlans = "SET LOCAL plan_cache_mode = force_generic_plan"

	claimValuesHead = `INSERT INTO processed_messages
  (sender, delivery_id, request_sha256, event_id, response_status, response_content_type, response_body, created_at, expires_at)
VALUES `
	claimValuesTail = `
ON CONFLICT ON CONSTRAINT processed_messages_key DO NOTHING`
)

// BatchLockWait is how long a batch's claim waits for a key another
// transaction holds before the batch gives up and its deliveries go the
// single path, where each waits the whole in-flight wait by itself (package
// dedup's group commit). It is here because the statement that carries it,
// LockTimeout(BatchLockWait), is one of the pipeline's texts.
const BatchLockWait = 50 * time.Millisecond

// LockTimeout is the statement that sets a delivery transaction's in-flight
// wait to d, in whole milliseconds.
func LockTimeout(d time.Duration) string {
	return "SET LOCAL lock_timeout = '" + strconv.FormatInt(d.Milliseconds(), 10) + "ms'"
}

// claimValues and claimValuesReturning cache ClaimValues and
// ClaimValuesReturning by number of rows.
var claimValues, claimValuesReturning sync.Map // int → string

// ClaimValuesReturning is ClaimValues returning the delivery ID and event
// ID of each row the claim inserted, and nothing for a key held already:
// the rows themselves, never a count (package dedup's batches on a
// distributed database decide by them which deliveries claimed their keys,
// without a read of their own).
func ClaimValuesReturning(n int) string {
	if v, ok := claimValuesReturning.Load(n); ok {
		return v.(string)
	}
	v, _ := claimValuesReturning.LoadOrStore(n, ClaimValues(n)+"\nRETURNING delivery_id, event_id")
	return v.(string)
}

// ClaimValues is the claim of n deliveries on a distributed database: a
// multi-row INSERT … VALUES, $1 the sender, then the values of each
// delivery in Claim's column order, eight per row. Citus routes it to the
// sender's shard (it would pull Claim's INSERT … SELECT … FROM unnest(…)
// to the coordinator). Its text depends on n, so each connection prepares
// one per batch size it meets (at most the batch size).
func ClaimValues(n int) string {
	if v, ok := claimValues.Load(n); ok {
		return v.(string)
	}
	var b strings.Builder
	b.WriteString(claimValuesHead)
	for i := range n {
		if i > 0 {
			b.WriteString(",\n")
		}
		p := 2 + 8*i
		fmt.Fprintf(&b, "($1::text, $%d::text, $%d::bytea, $%d::uuid, $%d::int2, $%d::text, $%d::bytea, $%d::timestamptz, $%d::timestamptz)",
			p, p+1, p+2, p+3, p+4, p+5, p+6, p+7)
	}
	b.WriteString(claimValuesTail)
	v, _ := claimValues.LoadOrStore(n, b.String())
	return v.(string)
}

// ClaimedJoin is the guard of a multi-row statement of a state change in
// the form that Citus runs on the sender's shard alone: a join that yields
// one row, k, for each row of the statement whose delivery (delivery ID and
// event ID the SQL expressions deliveryID and eventID) took the key of the
// sender $1, and none otherwise (package dedup documents it as
// dedup.ClaimedJoin).
func ClaimedJoin(deliveryID, eventID string) string {
	return "CROSS JOIN LATERAL (SELECT k.sender FROM processed_messages k WHERE k.sender = $1 AND k.delivery_id = " +
		deliveryID + " AND k.event_id = " + eventID + " OFFSET 0) AS k"
}

// EventInsert inserts the events of a pipeline's deliveries (a multi-row
// statement, dedup.Batch.Row: $1 the sender, then one array per column),
// each only in the transaction whose claim took its delivery's key
// (ClaimedJoin, which Citus routes to the sender's shard). Package events
// queues it (events.QueueInsert).
var EventInsert = `INSERT INTO webhook_events (sender, id, delivery_id, received_at, headers, body, event_type)
SELECT k.sender, e.* FROM unnest($2::uuid[], $3::text[], $4::timestamptz[], $5::jsonb[], $6::bytea[], $7::text[])
  AS e(id, delivery_id, received_at, headers, body, event_type)
` + ClaimedJoin("e.delivery_id", "e.id")

// OutboxInsert writes the outbox rows of a pipeline's deliveries (a
// multi-row statement, dedup.Batch.Row: $1 the sender, then one array per
// column), one per forward, each only in the transaction whose claim took
// its delivery's key. A row with a lease (milliseconds, NULL for none) is
// leased until that long after the statement started: the relay leaves it
// to the process's fast path until then. Package forward queues it
// (forward.QueueOutbox).
var OutboxInsert = `INSERT INTO forward_outbox (sender, event_id, target, delivery_id, created_at, leased_until)
SELECT k.sender, o.event_id, o.target, o.delivery_id, o.created_at, statement_timestamp() + o.lease_ms * interval '1 millisecond'
FROM unnest($2::uuid[], $3::text[], $4::text[], $5::timestamptz[], $6::int8[])
  AS o(event_id, target, delivery_id, created_at, lease_ms)
` + ClaimedJoin("o.delivery_id", "o.event_id")
