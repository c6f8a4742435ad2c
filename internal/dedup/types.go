package dedup

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/hookgate/hookgate/internal/idempotency"
)

// Result is the outcome of Run.
type Result struct {
	// Response is the response to send: the new one, or the stored one.
	Response idempotency.Response
	// EventID is the event created by the delivery that holds the key.
	EventID uuid.UUID
	// Replayed is true when the key was already held by a committed delivery
	// with the same fingerprint, and Response is that delivery's response.
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

// Queue adds a statement of this delivery alone. Its parameters are $1, $2,
// … as usual.
func (b *Batch) Queue(sql string, args ...any) {
	b.stmts = append(b.stmts, statement{sql: sql, args: args})
}

// Row adds a row to a multi-row statement: the rows that all the deliveries
// of a pipeline add with the same sql are written by ONE execution of sql,
// so that a batch of deliveries costs PostgreSQL one statement, not one per
// delivery. sql's parameter $1 is the sender (one pipeline carries the
// deliveries of one sender); $2, $3, … are arrays with one element per row,
// the row's values in order (write them unnest($2::uuid[], $3::text[], …)).
// A row's statement must write nothing for a row whose delivery did not
// claim its key: guard it with ClaimedRow. The values may be string, []byte
// (bytea, or encoded JSON for jsonb), [16]byte (uuid), int16, int64, bool,
// time.Time (timestamptz) or nil (NULL).
func (b *Batch) Row(sql string, values ...any) {
	b.rows = append(b.rows, row{sql: sql, values: values})
}

// Len returns the number of statements and rows queued.
func (b *Batch) Len() int { return len(b.stmts) + len(b.rows) }

// Change queues the statements of a state change on b. They run after the
// claim, in the same transaction and the same round trip: first the
// multi-row statements (Row), in the order their sql was first used in the
// pipeline, then the delivery's own statements (Queue), in the order
// queued. They run whether or not the claim took the key, so each one must
// do nothing unless it did: guard a Row statement with ClaimedRow and a
// Queue statement with Claimed (INSERT … SELECT … WHERE <guard>). A Change
// must not perform effects outside the database.
type Change func(b *Batch)

// Claimed returns an SQL condition that is true only in the transaction
// whose claim took the key for the event: its operands are the statement's
// parameters numbered sender, deliveryID and eventID. Because a Delivery's
// EventID is fresh, a key held by another delivery never satisfies it.
func Claimed(sender, deliveryID, eventID int) string {
	return fmt.Sprintf("EXISTS (SELECT FROM processed_messages WHERE sender = $%d AND delivery_id = $%d AND event_id = $%d)",
		sender, deliveryID, eventID)
}

// ClaimedRow is Claimed for a row of a multi-row statement (Row): true only
// when the row's delivery, whose delivery ID and event ID are the SQL
// expressions deliveryID and eventID, took the key of the sender $1.
// (OFFSET 0 keeps it a per-row probe of the key's index: as a semi-join,
// a plan made while the table was small would read all of the sender's
// rows for each pipeline.)
func ClaimedRow(deliveryID, eventID string) string {
	return "EXISTS (SELECT FROM processed_messages k WHERE k.sender = $1 AND k.delivery_id = " + deliveryID + " AND k.event_id = " + eventID + " OFFSET 0)"
}

// Querier is what a Store reads with outside its pipeline (a stored
// response, the forgetting of an expired key): a *pgxpool.Pool or *pgx.Conn.
type Querier interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}
