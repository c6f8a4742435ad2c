// Package consumer applies the Idempotent Consumer pattern in the services
// behind hookgate: the other half of the pattern hookgate applies at the
// edge.
//
// hookgate forwards each accepted event at least once. A forward can arrive
// twice: after a crash between the target's 2xx and hookgate recording it,
// after an operator redelivers it, or after its key has expired. Whatever a
// service does with an event must itself tolerate being told twice. This
// package makes that the default: Process applies a state change at most
// once per (consumer name, message ID), and Middleware does it for an HTTP
// handler receiving hookgate's forwards.
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
//	  - The claim inserts a row: the message is new; the change runs, and
//	    COMMIT commits the key, the change and the response together. Process
//	    returns the change's response with Duplicate false.
//	  - The claim conflicts on consumer_processed_messages_key (and only a
//	    conflict on that constraint is absorbed by ON CONFLICT): a committed
//	    transaction holds the key. The change does not run; Process reads the
//	    stored response, rolls back, and returns it with Duplicate true.
//	  - A concurrent delivery of the same message waits on the unique index
//	    until the first transaction ends: it then sees the committed row (a
//	    duplicate) or, if the first rolled back, claims the key itself. The
//	    wait is bounded by the in-flight wait (Config.InFlightWait); past it
//	    Process returns ErrInFlight and nothing is recorded. The in-flight
//	    wait is the transaction's lock_timeout, so it bounds the change's
//	    own lock waits too: a statement of the change that waits longer for
//	    a row another transaction holds fails with SQLSTATE 55P03
//	    (lock_not_available), an ordinary error of the change (below).
//	  - Any other error — another constraint's 23505 in the change, an error
//	    the change returns, a lost connection, a timeout — rolls the whole
//	    transaction back, and Process returns it. It is never reported as a
//	    duplicate, so the sender's retry can succeed.
//
// A pre-check never decides that a message is new: only the claim's INSERT,
// inside the transaction that applies the change, does.
//
// # The guarantee and its limits
//
// Each (consumer_name, message_id) is accepted and its state change applied
// at most once while its key row exists, and at least once if the sender
// keeps retrying until it receives a 2xx. A crash before COMMIT leaves
// nothing; a crash after COMMIT but before the response reached the sender
// is answered by a replay on the sender's retry.
//
// This is not exactly-once processing end to end. Effects outside this
// database must not be performed in the state change: enqueue them in it (a
// transactional outbox) and carry them out afterwards, at least once, with a
// stable idempotency key so that their receivers can deduplicate in turn.
// Once a key row is deleted (DeleteProcessedBefore), the same message ID is
// accepted as new: keep the rows longer than anything can redeliver the
// message. hookgate redelivers an event with the same message ID (its event
// ID) for as long as it keeps the event (its sender's event_retention, which
// defaults to its retention, 7 days by default) — an operator can redeliver
// it that long — so keep them at least that long.
//
// # The table
//
// Schema (also the file schema.sql) creates consumer_processed_messages;
// run it with your migration tool, or call Migrate. The table holds one row
// per processed message: its key, when it was processed, and the stored
// response (bounded by MaxResponseBytes).
package consumer
