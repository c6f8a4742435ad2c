package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DB is what the queries run on: a *pgxpool.Pool, a *pgx.Conn or a pgx.Tx,
// whose Begin starts a savepoint.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// Queries runs hookgate's statements outside the ingest pipeline on one DB.
// Its one other state is the bound on the audit trail's refused rows
// ([Queries.RecordAudit]): make one per pool, and share it.
type Queries struct {
	db DB
	// timeout, when positive, bounds the relay's look.
	timeout time.Duration
	// refused bounds the audit rows of each token's refused requests.
	refused *auditThrottle
}

// New returns the queries on db.
func New(db DB) *Queries { return &Queries{db: db, refused: &auditThrottle{}} }

// DB returns the database q runs on.
func (q *Queries) DB() DB { return q.db }

// WithStatementTimeout returns the queries on q's DB with a statement
// timeout of d for the relay's look ([Queries.OutboxWaiting]). A look that
// runs longer fails instead of holding the relay. d is in whole
// milliseconds; 0 sets none. The first parse of the statement on a
// connection is not bounded.
func (q *Queries) WithStatementTimeout(d time.Duration) *Queries {
	c := *q
	c.timeout = d
	return &c
}

// MaxListLimit is the largest page a list returns, for deliveries and
// forwards alike.
const MaxListLimit = 500
