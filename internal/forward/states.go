package forward

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/hookgate/hookgate/internal/config"
)

// Enqueued is a forward job Redeliver inserted, or found waiting.
type Enqueued struct {
	JobID  int64
	Target string
	// AlreadyPending is true when a forward of the event to the target was
	// still waiting, running or retrying: no second one was inserted.
	AlreadyPending bool
}

// Redeliver inserts, outside any transaction, one new forward job of the
// event for each target sender has now, with the same idempotency key (the
// event ID) as its first forwards; a target whose forward of the event is
// still waiting, running or retrying gets no second one. It returns the
// jobs, or nil and no error when sender has no targets.
func Redeliver(ctx context.Context, client *river.Client[pgx.Tx], sender *config.Sender, eventID uuid.UUID, deliveryID string) ([]Enqueued, error) {
	if len(sender.Forward) == 0 {
		return nil, nil
	}
	params := make([]river.InsertManyParams, 0, len(sender.Forward))
	for _, t := range sender.Forward {
		params = append(params, jobParams(sender.Name, sender, t.Name, eventID, deliveryID))
	}
	res, err := client.InsertMany(ctx, params)
	if err != nil {
		return nil, fmt.Errorf("redeliver event %s: %w", eventID, err)
	}
	out := make([]Enqueued, 0, len(res))
	for _, r := range res {
		var a Args
		if err := json.Unmarshal(r.Job.EncodedArgs, &a); err != nil {
			return nil, fmt.Errorf("redeliver event %s: decode args of job %d: %w", eventID, r.Job.ID, err)
		}
		out = append(out, Enqueued{JobID: r.Job.ID, Target: a.Target, AlreadyPending: r.UniqueSkippedAsDuplicate})
	}
	return out, nil
}
