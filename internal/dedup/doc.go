// Package dedup applies an idempotency key to a state change.
//
// # The pattern
//
// Run sends ONE pipeline to PostgreSQL: one network write, one round trip,
// one explicit transaction, whatever the outcome:
//
//	BEGIN
//	SET LOCAL lock_timeout = '<in-flight wait>'                           -- the in-flight wait
//	SET LOCAL plan_cache_mode = force_generic_plan                        -- plan once per connection
//	INSERT INTO processed_messages (sender, delivery_id, …, response …)
//	  SELECT $1, d.* FROM unnest(<one array per column>)
//	  ON CONFLICT ON CONSTRAINT processed_messages_key DO NOTHING         -- the claim
//	<the caller's state change statements, each guarded by the claim>     -- same transaction
//	SELECT … FROM unnest(<delivery IDs, event IDs>) … processed_messages
//	  WHERE <key>                                                         -- the rows that hold the keys
//	Sync
//	COMMIT
//	Sync
//
// The statements take the sender as $1 and each delivery's values as
// arrays, one element per delivery, so that the same statements carry one
// delivery (the single path) or a batch of them (group commit, below).
// A state change adds rows to multi-row statements (Batch.Row: one
// execution for all the rows of a pipeline, guarded by ClaimedRow) or
// statements of its own delivery (Batch.Queue, guarded by Claimed). The
// statements that look a key up probe processed_messages_key once per
// delivery (OFFSET 0 keeps them from becoming joins that a plan made on a
// small table would turn into a scan of the sender's rows), and their
// generic plans are used, so nothing is planned per execution.
//
// On a database whose tables Citus distributes by sender (Config.Layout LayoutDistributed,
// found out by the first delivery otherwise), the claim is a multi-row
// INSERT … VALUES whose rows all name $1, and no generic plans are forced:
// Citus routes every statement of the pipeline to the sender's shard, and
// a batch commits on one worker without two-phase commit. A state change's
// statements are then written with ClaimedJoin (the sender taken from the
// key's row), which Citus pushes down to the shard; ClaimedRow and Claimed
// guards make Citus pull the rows to the coordinator. A batch of several
// deliveries has no read there: its claim returns the delivery ID and event
// ID of each key it inserted (the rows, not a count), and a delivery whose
// key it did not insert runs again on the single path after the batch's
// COMMIT, which reads what holds the key. Every statement costs Citus a
// plan on the coordinator and a round trip to the worker.
//
// The claim inserts the key under the constraint processed_messages_key,
// PRIMARY KEY (sender, delivery_id). Because the response of a first delivery
// is known before the transaction starts, it is stored by the claim itself.
// The delivery's EventID is fresh, so "this transaction's claim took the key"
// is "the key's row holds my event ID": every statement of the state change
// is written INSERT … SELECT … <ClaimedJoin(…)> (or WHERE ClaimedRow(…),
// Claimed(…)), and does nothing otherwise. The same holds for the read:
// the row it reads back for a key decides who claimed it, never the
// claim's row count (Citus reports INSERT 0 1 for a conflicting INSERT …
// SELECT … ON CONFLICT DO NOTHING).
//
//   - The claim inserts a row: the delivery is new; the state change runs,
//     the read returns the key's row with the delivery's own event ID,
//     COMMIT commits key, change and response
//     together. Run returns the response with Replayed false.
//   - The claim conflicts on processed_messages_key (and only a conflict on
//     that constraint is absorbed by ON CONFLICT): a committed delivery holds
//     the key. The guarded statements do nothing, the read returns the
//     stored row, and COMMIT commits nothing. Run returns the stored response
//     with Replayed true, or ErrPayloadMismatch when the stored request
//     SHA-256 differs from this one.
//   - A concurrent delivery of the same key waits on the unique index until
//     the first transaction ends: it then sees the committed row (a replay)
//     or, if the first rolled back, claims the key itself. The wait is
//     bounded by the in-flight wait (lock_timeout, set with SET LOCAL inside
//     the transaction); past it the claim fails with 55P03, Run returns
//     ErrInFlight and nothing is recorded.
//   - Any other error — another constraint's 23505, a failing state change,
//     a lost connection, a timeout — fails its statement; PostgreSQL skips
//     the rest up to the first Sync, and the COMMIT after that Sync ends the
//     aborted transaction with a rollback (so the connection is clean without
//     another round trip). Run returns the error. It is never reported as a
//     duplicate, so the sender's retry can succeed. A 23505 on the key itself
//     (from a database that does not honour the ON CONFLICT arbiter) is a
//     duplicate: Run reads the stored row in a second round trip.
//
// The expected outcomes (first delivery, duplicate) never fail a statement,
// and the statements are prepared once per connection by name and sent with
// pgconn's pipeline, so no connection ever prepares a statement again (pgx's
// own batches drop their cached statements after any failed statement).
//
// A pre-check never decides that a delivery is new: only the claim's INSERT,
// inside the transaction that applies the change, does.
//
// # Group commit
//
// With Config.Batching, the deliveries of one sender that arrive while that
// sender's batches are in flight (at most two by default) form the next
// batch (up to its maximum size): ONE pipeline, ONE transaction, in which
// the claim, each multi-row statement of the changes and the read run once
// for all of them, so that they share one COMMIT, one WAL flush and the
// statements' fixed costs. A delivery that finds a free slot starts a batch
// at once: a lone delivery does not wait. The batch's keys are claimed in
// delivery-ID order, so that two processes' batches that share keys wait
// for each other instead of deadlocking. Each delivery of a batch keeps its
// guarantee: its key, its state change and its response are committed in
// the batch's transaction before Run returns for it, and a crash before
// that COMMIT leaves none of the batch and acknowledges none of it. Two
// deliveries of one key in one batch: the first claims (ON CONFLICT skips
// the second's row), the second's read returns the first's row (visible in
// the same transaction): a replay, or a mismatch. A batch that fails for
// any reason (another constraint, a failing change, a key held by another
// process past the batch's short lock timeout, a lost connection) is
// retried delivery by delivery on the single path, so that only the
// delivery that fails by itself gets an error. A batch holds one sender's
// deliveries only, and every statement names that sender ($1): with the
// tables distributed by sender it stays on one shard. Concurrent deliveries
// of one key inside one process are collapsed before they reach the
// database: the later ones wait for the first and answer with its outcome.
//
// # The replay cache
//
// With Config.ReplayCache, a retry of a delivery this store has seen committed
// (its own first delivery after COMMIT, or a stored row it read) is answered
// from memory, without a round trip: the stored response, or
// ErrPayloadMismatch for another payload. An entry is used only before the
// key's expires_at (the retention job deletes only expired keys, so the key
// still holds) and for at most the cache's TTL (a key deleted by hand is
// replayed for at most that long). Every other delivery goes to the
// database; the cache never decides that a delivery is new.
//
// # The guarantee and its limits
//
// Each (sender, delivery_id) is accepted and its state change applied at most
// once while its key row exists, and at least once if the sender keeps
// retrying until it receives a 2xx. A crash before COMMIT leaves nothing; a
// crash after COMMIT but before the response reached the sender is answered
// by a replay on the sender's retry.
//
// A claim that conflicts with a key whose retention has passed (expires_at
// at or before the delivery's arrival, not yet deleted by the retention job)
// deletes that key and claims again, once: after its retention a delivery ID
// is new.
//
// This is not exactly-once processing end to end. Effects outside this
// database must not be performed in the state change: they are enqueued in it
// (a transactional outbox) and carried out afterwards, at least once, with a
// stable idempotency key so that their receivers can deduplicate in turn. Once
// a key row expires and is deleted, the same delivery ID is accepted as new.
package dedup
