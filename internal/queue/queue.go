package queue

import "github.com/hookgate/hookgate/internal/store"

// Jobs reads and writes hookgate's forwards where River keeps them (its
// table river_job, and forward_delivered beside it) and in the outbox.
type Jobs struct{ db store.DB }

// NewJobs returns the forwards' statements on db (a pool, a connection or
// a transaction).
func NewJobs(db store.DB) *Jobs { return &Jobs{db: db} }
