package queue

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/hookgate/hookgate/internal/store"
)

// Jobs reads and writes hookgate's forwards in river_job, in
// forward_delivered and in the outbox.
type Jobs struct {
	db store.DB
	// split is set for an outbox distributed by Citus. See Distributed.
	split bool
}

// NewJobs returns the forwards' statements on db: a pool, a connection or
// a transaction.
func NewJobs(db store.DB) *Jobs { return &Jobs{db: db} }

// Distributed returns q's statements for an outbox distributed by Citus.
// River's table and forward_delivered stay local tables of the
// coordinator. So the fast path's recording writes the records in a
// transaction that marks their outbox rows, and deletes the rows in a
// second transaction.
func (q *Jobs) Distributed() *Jobs { return &Jobs{db: q.db, split: true} }

// execUnder runs the planner settings, then sql with args, on db in one
// round trip. It returns the rows that sql affected.
func execUnder(ctx context.Context, db store.DB, settings, sql string, args ...any) (int64, error) {
	var b pgx.Batch
	b.Queue(settings)
	b.Queue(sql, args...)
	br := db.SendBatch(ctx, &b)
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return 0, err
	}
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag.RowsAffected(), err
}
