package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DB is what the queries run on: a *pgxpool.Pool, a *pgx.Conn or a pgx.Tx
// (whose Begin starts a savepoint).
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// Queries runs hookgate's statements outside the ingest pipeline on one DB.
// It holds no state besides it: make one per pool, or one per transaction
// with New(tx).
type Queries struct {
	db DB
	// timeout, when positive, is the statement timeout of the relay's
	// look (WithStatementTimeout).
	timeout time.Duration
}

// New returns the queries on db.
func New(db DB) *Queries { return &Queries{db: db} }

// DB returns the database q runs on.
func (q *Queries) DB() DB { return q.db }

// WithStatementTimeout returns the queries on q's DB with a statement
// timeout of d (whole milliseconds; none when 0) for the relay's look
// (OutboxWaiting), set transaction-locally in its batch: a look that runs
// longer fails instead of holding the relay. (The first parse of the
// statement on a connection precedes the batch, and is not bounded.)
func (q *Queries) WithStatementTimeout(d time.Duration) *Queries {
	c := *q
	c.timeout = d
	return &c
}

// MaxListLimit is the largest page a list returns: the operator API's one
// page limit, for deliveries and forwards alike.
const MaxListLimit = 500
