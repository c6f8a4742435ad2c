package dedup

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/hookgate/hookgate/internal/idempotency"
)

// Result is the outcome of [Store.Run].
type Result struct {
	// Response is the response to send: the new one, or the stored one.
	Response idempotency.Response
	// EventID is the event of the delivery that holds the key.
	EventID uuid.UUID
	// Replayed is true when a committed delivery with the same fingerprint
	// held the key. Response is then that delivery's.
	Replayed bool
}

// Batch collects the statements of a state change.
type Batch struct {
	stmts []statement
	rows  []row
}

type statement struct {
	sql  string
	args []any
}

// row is one row of a multi-row statement.
type row struct {
	sql    string
	values []any
}

// Queue adds a statement of this delivery alone, with the usual parameters.
func (b *Batch) Queue(sql string, args ...any) {
	b.stmts = append(b.stmts, statement{sql: sql, args: args})
}

// Row adds a row to a multi-row statement. All the rows a pipeline adds with
// the same sql are written by one execution of sql, so a batch costs one
// statement. Its $1 is the sender; $2, $3 and on are arrays with one element
// per row: write unnest($2::uuid[], $3::text[], …). Guard it with
// [ClaimedRow], so it writes nothing for a delivery that did not claim its
// key. The values may be string, []byte, [16]byte for a uuid, int16, int64,
// bool, time.Time or nil.
func (b *Batch) Row(sql string, values ...any) {
	b.rows = append(b.rows, row{sql: sql, values: values})
}

// Len returns the number of statements and rows queued.
func (b *Batch) Len() int { return len(b.stmts) + len(b.rows) }

// Change queues the statements of a state change on b. They run after the
// claim, in the same transaction and round trip. The multi-row statements
// run first, in the order their sql was first used; then each delivery's
// own, in the order queued. They run whether or not the claim took the key,
// so each must be guarded: [Batch.Row] with [ClaimedRow], [Batch.Queue] with
// [Claimed]. A Change must not perform effects outside the database.
type Change func(b *Batch)

// Claimed returns an SQL condition that is true only in the transaction
// whose claim took the key for the event. Its operands are the parameters
// numbered sender, deliveryID and eventID. The event ID is fresh, so a key
// held by another delivery never satisfies it.
func Claimed(sender, deliveryID, eventID int) string {
	return fmt.Sprintf("EXISTS (SELECT FROM processed_messages WHERE sender = $%d AND delivery_id >= $%[2]d AND delivery_id <= $%[2]d AND event_id = $%d ORDER BY delivery_id OFFSET 0)",
		sender, deliveryID, eventID)
}

// ClaimedRow is [Claimed] for a row of a multi-row statement. deliveryID and
// eventID are the row's SQL expressions; the sender is $1. OFFSET 0 keeps it
// a probe of the key's index per row. As a semi-join, a plan made on a small
// table would read all the sender's rows.
func ClaimedRow(deliveryID, eventID string) string {
	return "EXISTS (SELECT FROM processed_messages k WHERE k.sender = $1 AND k.delivery_id >= " + deliveryID + " AND k.delivery_id <= " + deliveryID +
		" AND k.event_id = " + eventID + " ORDER BY k.delivery_id OFFSET 0)"
}

// Querier reads outside the pipeline: a stored response, or an expired key
// to forget. A *pgxpool.Pool or a *pgx.Conn is one.
type Querier interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}
