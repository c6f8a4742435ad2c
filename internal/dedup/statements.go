package dedup

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The texts of the statements the pipeline sends in its one round trip
// besides BEGIN and COMMIT (dedup.go): the claim of the keys (in both its
// forms), the settings of the transaction and the read of the rows that
// hold the keys. A state change's multi-row inserts (events.QueueInsert,
// forward.QueueOutbox) are their packages' and guard their rows with
// ClaimedJoin.

// The statements of the pipeline. Each is prepared once per connection and
// never fails for an expected outcome (a first delivery, a duplicate), so
// that no connection ever prepares a statement twice. The claim and the
// read take the sender as $1 and the deliveries' values as arrays, one
// element per delivery: one execution serves a whole batch.
const (
	// claimSQL inserts the keys of a pipeline's deliveries; a key held
	// already is left as it is (the read tells who holds it).
	claimSQL = `INSERT INTO processed_messages
  (sender, delivery_id, request_sha256, event_id, response_status, response_content_type, response_body, created_at, expires_at)
SELECT $1::text, d.* FROM unnest($2::text[], $3::bytea[], $4::uuid[], $5::int2[], $6::text[], $7::bytea[], $8::timestamptz[], $9::timestamptz[]) AS d
ON CONFLICT ON CONSTRAINT processed_messages_key DO NOTHING`
	// storedSQL returns, for each delivery (numbered from 1 in the order of
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
	storedSQL = `SELECT d.n, p.* FROM unnest($2::text[], $3::uuid[]) WITH ORDINALITY AS d(delivery_id, event_id, n)
CROSS JOIN LATERAL (
  SELECT request_sha256, event_id, response_status, response_content_type,
    CASE WHEN event_id = d.event_id THEN ''::bytea ELSE response_body END, expires_at FROM processed_messages
  WHERE sender = $1 AND delivery_id = d.delivery_id OFFSET 0) AS p`
	// genericPlansSQL makes the pipeline's prepared statements run their
	// generic plans: PostgreSQL would otherwise plan them again at every
	// execution, because a plan for the few deliveries of a pipeline looks
	// cheaper than one made for arrays of unknown length. Their generic
	// plans probe the key's index once per delivery. It is not sent on a
	// distributed database: Citus cannot plan an INSERT … SELECT with
	// unbound parameters, and plans every execution anyway.
	genericPlansSQL = "SET LOCAL plan_cache_mode = force_generic_plan"

	claimValuesHead = `INSERT INTO processed_messages
  (sender, delivery_id, request_sha256, event_id, response_status, response_content_type, response_body, created_at, expires_at)
VALUES `
	claimValuesTail = `
ON CONFLICT ON CONSTRAINT processed_messages_key DO NOTHING`
)

// batchLockWait is how long a batch's claim waits for a key another
// transaction holds before the batch gives up and its deliveries go the
// single path, where each waits the whole in-flight wait by itself (group
// commit, batch.go).
const batchLockWait = 50 * time.Millisecond

// lockTimeoutSQL is the statement that sets a delivery transaction's in-flight
// wait to d, in whole milliseconds.
func lockTimeoutSQL(d time.Duration) string {
	return "SET LOCAL lock_timeout = '" + lockTimeoutValue(d) + "'"
}

// lockTimeoutValue is d as a value of lock_timeout, in whole milliseconds.
func lockTimeoutValue(d time.Duration) string {
	return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
}

// claimValuesCache and claimValuesReturningCache hold claimValuesSQL and
// claimValuesReturningSQL by number of rows.
var claimValuesCache, claimValuesReturningCache sync.Map // int → string

// claimValuesReturningSQL is claimValuesSQL returning the delivery ID and event
// ID of each row the claim inserted, and nothing for a key held already:
// the rows themselves, never a count (batches on a distributed database
// decide by them which deliveries claimed their keys,
// without a read of their own).
func claimValuesReturningSQL(n int) string {
	if v, ok := claimValuesReturningCache.Load(n); ok {
		return v.(string)
	}
	v, _ := claimValuesReturningCache.LoadOrStore(n, claimValuesSQL(n)+"\nRETURNING delivery_id, event_id")
	return v.(string)
}

// claimValuesSQL is the claim of n deliveries on a distributed database: a
// multi-row INSERT … VALUES, $1 the sender, then the values of each
// delivery in claimSQL's column order, eight per row. Citus routes it to the
// sender's shard (it would pull claimSQL's INSERT … SELECT … FROM unnest(…)
// to the coordinator). Its text depends on n, so each connection prepares
// one per batch size it meets (at most the batch size).
func claimValuesSQL(n int) string {
	if v, ok := claimValuesCache.Load(n); ok {
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
	v, _ := claimValuesCache.LoadOrStore(n, b.String())
	return v.(string)
}
