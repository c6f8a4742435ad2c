// Package dedup applies an idempotency key to a state change.
//
// # The pattern
//
// Run sends ONE pipeline to PostgreSQL (one network round trip, one implicit
// transaction that ends at the pipeline's Sync):
//
//	SELECT set_config('lock_timeout', …, true)                            -- the in-flight wait
//	INSERT INTO processed_messages (sender, delivery_id, …, response …)   -- the claim
//	<the caller's state change statements>                                 -- same transaction
//	COMMIT (implicit, at Sync)
//
// The claim is a plain INSERT under the constraint processed_messages_key,
// PRIMARY KEY (sender, delivery_id). Because the response of a first delivery
// is known before the transaction starts, it is stored by the claim itself.
//
//   - The claim succeeds and every statement succeeds: the delivery is new, its
//     key, state change and response are committed together. Run returns the
//     response with Replayed false.
//   - The claim fails with SQLSTATE 23505 on processed_messages_key: a
//     committed delivery holds the key. PostgreSQL has aborted the pipeline, so
//     none of the caller's statements ran. Run reads the stored row and
//     returns its response with Replayed true, or ErrPayloadMismatch when the
//     stored request SHA-256 differs from this one.
//   - A concurrent delivery of the same key waits on the unique index until the
//     first transaction ends: it then sees the committed row (a replay) or, if
//     the first rolled back, claims the key itself. The wait is bounded by the
//     in-flight wait (PostgreSQL's lock_timeout for this transaction); past it
//     Run returns ErrInFlight and nothing is recorded.
//   - Any other error — a different constraint's 23505, a failing state
//     change, a lost connection, a timeout — rolls the whole transaction back
//     and is returned as an error. It is never reported as a duplicate, so the
//     sender's retry can succeed.
//
// A pre-check never decides that a delivery is new: only the claim's INSERT,
// inside the transaction that applies the change, does.
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
