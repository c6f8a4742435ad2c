// Package forward delivers accepted events to the services behind hookgate
// through a transactional outbox: River jobs, inserted on the ingest
// transaction (so a rolled-back delivery leaves none, a duplicate adds none)
// and worked afterwards, at least once, by any number of worker processes.
//
// Each forward POSTs the event's original body and Content-Type with
// Idempotency-Key and webhook-id set to the event ID, so a receiver can
// deduplicate: a forward may arrive more than once (a worker can die after the
// receiver answered and before the job was marked done).
package forward

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/hookgate/hookgate/internal/config"
)

// Queue is the River queue forwards run on.
const Queue = "forward"

// Args are a forward job's arguments: which event goes to which target.
type Args struct {
	Sender     string    `json:"sender"`
	EventID    uuid.UUID `json:"event_id"`
	DeliveryID string    `json:"delivery_id"`
	URL        string    `json:"url"`
}

// Kind is the River job kind of forwards.
func (Args) Kind() string { return "hookgate_forward" }

// Jobs returns the insert parameters of one forward job per target of
// sender for the event: nil when the sender has no targets.
func Jobs(sender *config.Sender, eventID uuid.UUID, deliveryID string) []river.InsertManyParams {
	if len(sender.Forward) == 0 {
		return nil
	}
	params := make([]river.InsertManyParams, 0, len(sender.Forward))
	for _, t := range sender.Forward {
		params = append(params, river.InsertManyParams{
			Args: Args{Sender: sender.Name, EventID: eventID, DeliveryID: deliveryID, URL: t.URL},
			InsertOpts: &river.InsertOpts{
				Queue:       Queue,
				MaxAttempts: t.MaxAttempts,
			},
		})
	}
	return params
}

// Enqueue inserts the forward jobs for the event on tx, the delivery's
// transaction. It does nothing when the sender has no targets.
func Enqueue(ctx context.Context, client *river.Client[pgx.Tx], tx pgx.Tx, sender *config.Sender, eventID uuid.UUID, deliveryID string) error {
	params := Jobs(sender, eventID, deliveryID)
	if len(params) == 0 {
		return nil
	}
	if _, err := client.InsertManyTx(ctx, tx, params); err != nil {
		return fmt.Errorf("enqueue forwards: %w", err)
	}
	return nil
}
