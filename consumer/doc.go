// Package consumer applies the Idempotent Consumer pattern in the services
// behind hookgate. It is the other half of the pattern that hookgate applies
// at the edge.
//
// hookgate forwards each accepted event at least once, so a forward can
// arrive twice. That happens after a crash between the target's 2xx and
// hookgate's record of it, after an operator redelivers the event, or after
// its key has expired. Whatever a service does with an event must tolerate
// being told twice. This package makes that the default. [Process] applies a
// state change at most once per consumer name and message ID. [Middleware]
// does the same for an HTTP handler that receives hookgate's forwards.
//
// # The pattern
//
// Process runs one transaction on the caller's database:
//
//		BEGIN
//		SET LOCAL lock_timeout = '<in-flight wait>'
//		INSERT INTO consumer_processed_messages (consumer_name, message_id)
//		  VALUES ($1, $2)
//		  ON CONFLICT ON CONSTRAINT consumer_processed_messages_key DO NOTHING  -- the claim
//		<the caller's change, on the same transaction>
//		UPDATE consumer_processed_messages SET response_… = …                  -- the response
//		COMMIT
//
//	  - When the claim inserts a row, the message is new. The change runs,
//	    and COMMIT commits the key, the change and the response together.
//	    Process returns the change's response with Duplicate false.
//	  - When the claim conflicts on consumer_processed_messages_key, a
//	    committed transaction holds the key. ON CONFLICT absorbs only a
//	    conflict on that constraint. The change does not run. Process reads
//	    the stored response, rolls back, and returns it with Duplicate true.
//	  - A concurrent delivery of the same message waits on the unique index
//	    until the first transaction ends. It then sees the committed row, or
//	    claims the key itself if the first rolled back. [Config.InFlightWait]
//	    bounds the wait; past it Process returns [ErrInFlight] and records
//	    nothing. The wait is the transaction's lock_timeout, so it also bounds
//	    the change's own lock waits. A statement of the change that waits
//	    longer fails with SQLSTATE 55P03, an ordinary error of the change.
//	  - Any other error rolls the whole transaction back, and Process
//	    returns it. That includes another constraint's 23505, an error the
//	    change returns, a lost connection and a timeout. It is never reported
//	    as a duplicate, so the sender's retry can succeed.
//
// A pre-check never decides that a message is new. Only the claim's INSERT
// does, inside the transaction that applies the change.
//
// # The guarantee and its limits
//
// Each consumer name and message ID has its state change applied at most
// once while its key row exists. It is applied at least once if the sender
// retries until it receives a 2xx. A crash before COMMIT leaves nothing. A
// crash after COMMIT, before the response reached the sender, is answered by
// a replay on the sender's retry.
//
// This is not exactly-once processing end to end. Do not perform effects
// outside this database in the state change. Enqueue them in it, as a
// transactional outbox, and carry them out afterwards, at least once. Give
// them a stable idempotency key so that their receivers can deduplicate in
// turn.
//
// Once a key row is deleted with [DeleteProcessedBefore], the same message
// ID is accepted as new. So keep the rows longer than anything can redeliver
// the message. hookgate redelivers an event with its event ID as the message
// ID for as long as it keeps the event. That is the sender's
// event_retention, which defaults to its retention of 7 days. Keep the rows
// at least that long.
//
// # The table
//
// [Schema], also the file schema.sql, creates consumer_processed_messages.
// Run it with your migration tool, or call [Migrate]. The table holds one row
// per processed message: its key, when it was processed, and the stored
// response, bounded by [MaxResponseBytes].
package consumer
