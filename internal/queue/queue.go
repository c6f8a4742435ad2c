package queue

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/hookgate/hookgate/internal/store"
)

// Jobs reads and writes hookgate's forwards where River keeps them (its
// table river_job, and forward_delivered beside it) and in the outbox.
type Jobs struct {
	db store.DB
	// split: the outbox is distributed (Citus) and the records are local
	// tables of the coordinator: record first, delete the outbox rows after
	// (Distributed).
	split bool
}

// NewJobs returns the forwards' statements on db (a pool, a connection or
// a transaction).
func NewJobs(db store.DB) *Jobs { return &Jobs{db: db} }

// Distributed returns q's statements in the form for an outbox
// distributed by Citus while River's table and forward_delivered are local
// tables of the coordinator (ClientConfig.Distributed): the fast path's
// recording writes the records in a transaction that marks their outbox
// rows recorded, and deletes the rows in one of its own after it
// (RecordFirstAttempts).
func (q *Jobs) Distributed() *Jobs { return &Jobs{db: q.db, split: true} }

// execUnder runs sql with args on db after settings (planner settings, see
// plans.go), in one round trip, and returns the rows it affected.
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
