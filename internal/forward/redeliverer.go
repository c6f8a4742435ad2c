package forward

import (
	"context"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/store"
)

// Redeliverer redelivers events (Redeliver) and a target's forwards in a
// state (BulkRedeliver) on one database with River's client: the one
// implementation of the small interfaces that package handler and package
// console declare for it, so that neither of them knows River.
type Redeliverer struct {
	q      *store.Queries
	client *river.Client[pgx.Tx]
}

// NewRedeliverer returns a Redeliverer that reads db and inserts with
// client (which need not work jobs).
func NewRedeliverer(db store.DB, client *river.Client[pgx.Tx]) *Redeliverer {
	return &Redeliverer{q: store.New(db), client: client}
}

// Redeliver is the package's Redeliver on r's database and client.
func (r *Redeliverer) Redeliver(ctx context.Context, sender *config.Sender, eventID uuid.UUID, deliveryID string) ([]Enqueued, error) {
	return Redeliver(ctx, r.q, r.client, sender, eventID, deliveryID)
}

// BulkRedeliver is the package's BulkRedeliver on r's database and client.
func (r *Redeliverer) BulkRedeliver(ctx context.Context, req BulkRequest) (Bulk, error) {
	return BulkRedeliver(ctx, r.q, r.client, req)
}
