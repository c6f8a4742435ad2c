package dedup

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// connTx is a pgx.Tx over a connection whose transaction was opened by a
// BEGIN pipelined with the claim (pgx's own Tx would spend a round trip on
// BEGIN). Nested transactions are not supported.
type connTx struct {
	conn *pgx.Conn
	done bool
}

var _ pgx.Tx = (*connTx)(nil)

var errNested = errors.New("dedup: nested transactions are not supported in a delivery's transaction")

// Begin returns an error: a delivery's state change runs in one transaction.
func (t *connTx) Begin(ctx context.Context) (pgx.Tx, error) { return nil, errNested }

// Commit commits. Like pgx's Tx, it reports pgx.ErrTxCommitRollback when
// PostgreSQL rolled back instead (the transaction had failed).
func (t *connTx) Commit(ctx context.Context) error {
	if t.done {
		return pgx.ErrTxClosed
	}
	tag, err := t.conn.Exec(ctx, "COMMIT")
	t.done = true
	if err != nil {
		return err
	}
	if tag.String() == "ROLLBACK" {
		return pgx.ErrTxCommitRollback
	}
	return nil
}

// Rollback rolls back; after Commit or Rollback it returns pgx.ErrTxClosed.
func (t *connTx) Rollback(ctx context.Context) error {
	if t.done {
		return pgx.ErrTxClosed
	}
	t.done = true
	_, err := t.conn.Exec(ctx, "ROLLBACK")
	return err
}

// CopyFrom runs COPY FROM on the transaction's connection.
func (t *connTx) CopyFrom(ctx context.Context, table pgx.Identifier, cols []string, src pgx.CopyFromSource) (int64, error) {
	return t.conn.CopyFrom(ctx, table, cols, src)
}

// SendBatch sends b on the transaction's connection.
func (t *connTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	return t.conn.SendBatch(ctx, b)
}

// LargeObjects is not supported: it returns a zero value whose methods fail.
func (t *connTx) LargeObjects() pgx.LargeObjects { return pgx.LargeObjects{} }

// Prepare prepares a statement on the transaction's connection.
func (t *connTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	return t.conn.Prepare(ctx, name, sql)
}

// Exec runs sql on the transaction's connection.
func (t *connTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return t.conn.Exec(ctx, sql, args...)
}

// Query runs sql on the transaction's connection.
func (t *connTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return t.conn.Query(ctx, sql, args...)
}

// QueryRow runs sql on the transaction's connection.
func (t *connTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return t.conn.QueryRow(ctx, sql, args...)
}

// Conn returns the underlying connection.
func (t *connTx) Conn() *pgx.Conn { return t.conn }
