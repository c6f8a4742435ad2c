// Package forward delivers accepted events to the services behind hookgate
// through a transactional outbox. The ingest transaction writes one narrow
// row per (event, target) into forward_outbox, only when its claim took the
// delivery's key (QueueOutbox); worker processes relay those rows into
// River's job table in batches (Relay), and River's workers send each event
// to its target, at least once, retrying with backoff (Worker). The fast
// path (Dispatcher) and River's workers send through one Transport, which
// sends a forward and classifies the outcome; HTTPTransport is the one of
// HTTP targets.
//
// Each forward POSTs the event's original body and Content-Type with
// Idempotency-Key and webhook-id set to the event ID (HTTPTransport), so a
// receiver can deduplicate: a forward may arrive more than once (a worker
// can die after the receiver answered and before the job was marked done).
package forward

import (
	"time"

	"github.com/google/uuid"
	"github.com/riverqueue/river"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/dedup"
	"github.com/hookgate/hookgate/internal/store"
)

// Queue is the River queue forwards run on.
const Queue = "forward"

// Args are a forward job's arguments: which event goes to which target
// (by name: a URL may hold credentials and must not reach metrics or logs).
// Sender, event and target make the job unique while it is not finished.
type Args struct {
	Sender     string    `json:"sender" river:"unique"`
	EventID    uuid.UUID `json:"event_id" river:"unique"`
	Target     string    `json:"target" river:"unique"`
	DeliveryID string    `json:"delivery_id"`
	// URL is set only in jobs of versions that named targets by URL;
	// workers find their target by it.
	URL string `json:"url,omitempty"`
	// After is set on a redelivery queued while the event's forward to the
	// target was running or retrying: the job of that forward (-1 when it
	// was the fast path's attempt, not yet a job). The worker holds the job
	// back, without using an attempt, until no earlier forward of the event
	// to the target is unfinished. Such a job has no unique key.
	After int64 `json:"after,omitempty"`
}

// Kind is the River job kind of forwards.
func (Args) Kind() string { return store.ForwardKind }

// uniqueStates are the job states in which a forward of the same event to
// the same target is not inserted again: while one is waiting, running or
// retrying. A delivered or failed forward can be redelivered.
var uniqueStates = store.UnfinishedJobStates()

// jobParams returns the insert parameters of the forward of an event of the
// sender named sender to its target named target. cfg is that sender's
// configuration, nil when this process does not know it; the job then gets
// River's default attempts, and workers retry it until one that knows the
// target works it (during a rolling deploy) or its attempts run out.
func jobParams(sender string, cfg *config.Sender, target string, eventID uuid.UUID, deliveryID string) river.InsertManyParams {
	opts := &river.InsertOpts{
		Queue:      Queue,
		UniqueOpts: river.UniqueOpts{ByArgs: true, ByState: uniqueStates},
	}
	if cfg != nil {
		if t, ok := cfg.Target(target); ok {
			opts.MaxAttempts = t.MaxAttempts
		}
	}
	return river.InsertManyParams{
		Args:       Args{Sender: sender, EventID: eventID, Target: target, DeliveryID: deliveryID},
		InsertOpts: opts,
	}
}

// afterParams returns jobParams for a redelivery queued after the forward
// under way, after (see Args.After): not unique, so that it is inserted
// beside the forward it follows.
func afterParams(sender string, cfg *config.Sender, target string, eventID uuid.UUID, deliveryID string, after int64) river.InsertManyParams {
	p := jobParams(sender, cfg, target, eventID, deliveryID)
	p.InsertOpts.UniqueOpts = river.UniqueOpts{}
	a := p.Args.(Args)
	a.After = after
	p.Args = a
	return p
}

// outboxInsertSQL writes the outbox rows of a pipeline's deliveries (a
// multi-row statement, dedup.Batch.Row: $1 the sender, then one array per
// column), one per forward, each only in the transaction whose claim took
// its delivery's key (dedup.ClaimedJoin). A row with a lease (milliseconds,
// NULL for none) is leased until that long after the statement started:
// the relay leaves it to the process's fast path until then.
var outboxInsertSQL = `INSERT INTO forward_outbox (sender, event_id, target, delivery_id, created_at, leased_until)
SELECT k.sender, o.event_id, o.target, o.delivery_id, o.created_at, statement_timestamp() + o.lease_ms * interval '1 millisecond'
FROM unnest($2::uuid[], $3::text[], $4::text[], $5::timestamptz[], $6::int8[])
  AS o(event_id, target, delivery_id, created_at, lease_ms)
` + dedup.ClaimedJoin("o.delivery_id", "o.event_id")

// QueueOutbox queues, as part of a delivery's state change, the outbox rows
// of the event's forwards to the targets named in targets: one row each,
// none when targets is empty. They are stored under the delivery's sender,
// the i-th leased for lease.For(i) when it is positive (see
// Dispatcher.Lease), not leased otherwise (the zero Lease leases none).
func QueueOutbox(b *dedup.Batch, eventID uuid.UUID, deliveryID string, receivedAt time.Time, targets []string, lease Lease) {
	for i, t := range targets {
		var ms any // NULL: no lease
		if d := lease.For(i); d > 0 {
			ms = d.Milliseconds()
		}
		b.Row(outboxInsertSQL, [16]byte(eventID), t, deliveryID, receivedAt, ms)
	}
}
