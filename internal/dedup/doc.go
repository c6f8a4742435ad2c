// Package dedup applies an idempotency key to a state change.
//
// # The pattern
//
// [Store.Run] sends one pipeline to PostgreSQL: one network write, one
// round trip and one transaction, whatever the outcome:
//
//	BEGIN
//	SET LOCAL lock_timeout = '<in-flight wait>'                           -- the in-flight wait
//	SELECT set_config('plan_cache_mode', 'force_generic_plan', true),    -- plan once per connection
//	  set_config('enable_sort', 'off', true), set_config('jit', 'off', true) -- only the key's index probes
//	INSERT INTO processed_messages (sender, delivery_id, …, response …)
//	  SELECT $1, d.* FROM unnest(<one array per column>)
//	  ON CONFLICT ON CONSTRAINT processed_messages_key DO NOTHING         -- the claim
//	<the caller's state change statements, each guarded by the claim>     -- same transaction
//	SELECT … FROM unnest(<delivery IDs, event IDs>) … processed_messages
//	  WHERE <key> ORDER BY delivery_id                                    -- the rows that hold the keys
//	Sync
//	COMMIT
//	Sync
//
// The statements take the sender as $1 and one array per column, with one
// element per delivery. The same statements carry one delivery or a batch.
// A state change adds rows to multi-row statements with [Batch.Row], guarded
// by [ClaimedRow] or [ClaimedJoin], or statements of its own with
// [Batch.Queue], guarded by [Claimed]. A key's lookup probes
// processed_messages_key once per delivery, and generic plans are used, so
// nothing is planned per execution. A lookup compares the delivery ID as a
// range (>= and <=) and orders by it, and sorts are disabled: only the
// key's index then gives a plan without a disabled path. By equality, the
// index by time (sender, created_at, delivery_id) served it as well, the
// delivery ID checked on each of the sender's entries, and statistics
// that said the sender's keys were one row made PostgreSQL choose it. On PostgreSQL the multi-row statements
// marked [Foldable] run inside the claim's statement, as data-modifying
// CTEs that join the keys the claim returns, with no probe and no
// statement of their own:
//
//	WITH k AS (INSERT INTO processed_messages … ON CONFLICT … DO NOTHING
//	           RETURNING sender, delivery_id, event_id)                  -- the claim
//	  , f1 AS (INSERT INTO webhook_events … JOIN k ON …)                 -- the change's rows
//	  , f2 AS (INSERT INTO forward_outbox … JOIN k ON …)
//	SELECT delivery_id, event_id FROM k                                  -- the keys it took
//
// The claim stores the response of a first delivery, which is known before
// the transaction starts. The delivery's event ID is fresh, so "this claim
// took the key" means "the key's row holds my event ID". Every statement of
// the change is guarded that way and does nothing otherwise. What decides
// who claimed a key is the key itself, never the claim's row count (Citus
// reports INSERT 0 1 for a conflicting INSERT … ON CONFLICT DO NOTHING): a
// batch's claim returns the keys it inserted, each with its delivery's own
// event ID, and a single delivery's pipeline reads back the row that holds
// its key.
//
//   - The claim inserts a row: the delivery is new. The change runs and
//     COMMIT commits key, change and response together. Run returns the
//     response with Replayed false.
//   - The claim conflicts on processed_messages_key: a committed delivery
//     holds the key. The change does nothing, and the stored row is read:
//     after the COMMIT for a batch's deliveries, in one statement for all
//     of those it found held, and in the pipeline for a single delivery.
//     Run returns the stored response with Replayed true, or
//     [ErrPayloadMismatch] when the body's SHA-256 differs.
//   - A concurrent delivery of the same key waits on the unique index until
//     the first transaction ends. It then replays, or claims the key if the
//     first rolled back. lock_timeout bounds the wait; past it Run returns
//     [ErrInFlight] and nothing is recorded.
//   - Any other error fails its statement: another constraint, a failing
//     change, a lost connection, a timeout. PostgreSQL skips the rest up to
//     the first Sync, and the COMMIT after it rolls back. Run returns the
//     error, never a duplicate, so the sender's retry can succeed.
//
// The expected outcomes never fail a statement. The statements are prepared
// once per connection and sent with pgconn's pipeline, so no connection
// prepares one again. Only the claim's INSERT, inside the transaction of the
// change, decides that a delivery is new; no pre-check does.
//
// On Citus the tables are distributed by sender ([LayoutDistributed]). The
// claim is then a multi-row INSERT … VALUES whose rows all name $1, so every
// statement goes to the sender's shard and a batch commits on one worker.
// A change's statements use [ClaimedJoin], which Citus pushes down to the
// shard. A batch decides by the keys its claim returns there too; only the
// delegated function's batch (one call, see [Config.Delegated]) sends a
// delivery whose key it did not insert to run again by itself.
//
// # Group commit
//
// With [Config.Batching], the deliveries of one sender that arrive while its
// batches are in flight form the next batch. A batch is one pipeline and
// one transaction: the deliveries share one COMMIT, one WAL flush and the
// statements' fixed costs. A lone delivery does not wait. A further batch
// starts beside one in flight only once that one has run for
// [Batching.OverlapAfter], so one runs at a time while the database keeps
// up, and one held up does not hold up its sender. Keys are claimed
// in delivery-ID order, so two processes' batches wait for each other
// instead of deadlocking. Each delivery keeps its guarantee: its key, change
// and response commit before Run returns for it. A batch that fails is
// retried delivery by delivery, so only the delivery at fault gets an error.
// Concurrent deliveries of one key in one process are collapsed: the later
// ones wait for the first and answer with its outcome.
//
// # The replay cache
//
// With [Config.ReplayCache], a retry of a delivery this store saw committed
// is answered from memory, without a round trip. An entry is used only
// before the key's expiry and for at most the cache's TTL. The cache never
// decides that a delivery is new.
//
// # The guarantee and its limits
//
// Each (sender, delivery_id) is accepted and its change applied at most once
// while its key row exists. It is applied at least once if the sender
// retries until it receives a 2xx. A crash before COMMIT leaves nothing. A
// crash after COMMIT is answered by a replay on the sender's retry. A claim
// that meets a key past its retention deletes it and claims again, once.
//
// This is not exactly-once processing end to end. Effects outside this
// database must not run in the state change. They are queued in it, as a
// transactional outbox, and carried out afterwards, at least once, with a
// stable idempotency key. Once a key row is deleted, the same delivery ID
// is accepted as new.
package dedup
