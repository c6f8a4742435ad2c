package dedup

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The statements of the pipeline besides BEGIN and COMMIT: the claim in
// its forms, the transaction's settings, and the read of the rows that
// hold the keys. A change's multi-row inserts belong to their packages and
// guard their rows with [ClaimedJoin].

// Each statement is prepared once per connection and never fails for an
// expected outcome, so no connection prepares one twice. The claim and the
// read take the sender as $1 and one array per column: one execution
// serves a whole batch.
const (
	// claimSQL inserts the keys of a pipeline's deliveries. A key held
	// already is left as it is; storedSQL tells who holds it.
	claimSQL = `INSERT INTO processed_messages
  (sender, delivery_id, request_sha256, event_id, response_status, response_content_type, response_body, created_at, expires_at)
SELECT $1::text, d.* FROM unnest($2::text[], $3::bytea[], $4::uuid[], $5::int2[], $6::text[], $7::bytea[], $8::timestamptz[], $9::timestamptz[]) AS d
ON CONFLICT ON CONSTRAINT processed_messages_key DO NOTHING`
	// claimReturningSQL is claimSQL returning the keys it inserted: a
	// batch's claim on PostgreSQL. The rows it returns are the deliveries
	// this claim took; a key held already returns nothing.
	claimReturningSQL = claimSQL + "\nRETURNING delivery_id, event_id"
	// storedSQL returns, for each delivery numbered from 1, the row that
	// holds its key after the claim. It is the delivery's own when its claim
	// took the key, another's when not, and none when the key vanished. That
	// row, not the claim's row count, decides who claimed. A row of its own
	// comes back without the response body, which the caller holds. OFFSET 0
	// keeps the lookup a probe of the key's index per delivery; the key is
	// compared and ordered as [probeSettingsSQL] says.
	storedSQL = `SELECT d.n, p.* FROM unnest($2::text[], $3::uuid[]) WITH ORDINALITY AS d(delivery_id, event_id, n)
CROSS JOIN LATERAL (
  SELECT request_sha256, event_id, response_status, response_content_type,
    CASE WHEN event_id = d.event_id THEN ''::bytea ELSE response_body END, expires_at FROM processed_messages
  WHERE sender = $1 AND delivery_id >= d.delivery_id AND delivery_id <= d.delivery_id ORDER BY delivery_id OFFSET 0) AS p`
	// pipelineSettingsSQL is the pipeline's settings, for the rest of its
	// transaction: generic plans for the prepared statements, which probe
	// the key's index once per delivery (otherwise PostgreSQL would plan
	// them at every execution), and [probeSettingsSQL]'s. It is not sent to
	// Citus, which cannot plan an INSERT … SELECT with unbound parameters.
	pipelineSettingsSQL = `SELECT set_config('plan_cache_mode', 'force_generic_plan', true), ` + probeSettings
	// probeSettingsSQL disables sorts and JIT for the rest of the
	// transaction. A probe of a key (storedSQL, [ClaimedJoin]) compares the
	// delivery ID as a range and reads in its order, which only the key's
	// index gives without a sort. Compared by equality, an index whose
	// first column is the sender served it as well, checking the delivery
	// ID on each of the sender's entries; on statistics that said the
	// sender's keys were one row (a table analyzed near empty, a sender
	// added since the last ANALYZE), PostgreSQL chose it. JIT is off
	// because a disabled path's cost passes jit_above_cost.
	probeSettingsSQL = `SELECT ` + probeSettings
	probeSettings    = `set_config('enable_sort', 'off', true), set_config('jit', 'off', true)`

	claimValuesHead = `INSERT INTO processed_messages
  (sender, delivery_id, request_sha256, event_id, response_status, response_content_type, response_body, created_at, expires_at)
VALUES `
	claimValuesTail = `
ON CONFLICT ON CONSTRAINT processed_messages_key DO NOTHING`
)

// batchLockWait is how long a batch's claim waits for a key another
// transaction holds. Past it, the batch's deliveries run by themselves, each
// with the whole in-flight wait.
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

// claimValuesReturningSQL is claimValuesSQL returning the delivery ID and
// event ID of each row the claim inserted. Batches on Citus decide by those
// rows which deliveries claimed their keys, without a read.
func claimValuesReturningSQL(n int) string {
	if v, ok := claimValuesReturningCache.Load(n); ok {
		return v.(string)
	}
	v, _ := claimValuesReturningCache.LoadOrStore(n, claimValuesSQL(n)+"\nRETURNING delivery_id, event_id")
	return v.(string)
}

// claimValuesSQL is the claim of n deliveries on Citus: a multi-row INSERT
// … VALUES with the sender $1, then eight values per delivery in claimSQL's
// column order. Citus routes it to the sender's shard. Its text depends on
// n, so a connection prepares one per batch size it meets.
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
