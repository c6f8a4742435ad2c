package queue

import (
	"github.com/google/uuid"
	"github.com/riverqueue/river"

	"github.com/hookgate/hookgate/internal/config"
)

// ForwardQueue is the River queue forwards run on.
const ForwardQueue = "forward"

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
func (Args) Kind() string { return ForwardKind }

// uniqueStates are the job states in which a forward of the same event to
// the same target is not inserted again: while one is waiting, running or
// retrying. A delivered or failed forward can be redelivered.
var uniqueStates = unfinishedJobStates()

// jobParams returns the insert parameters of the forward of an event of the
// sender named sender to its target named target. cfg is that sender's
// configuration, nil when this process does not know it; the job then gets
// River's default attempts, and workers hold it (without using attempts)
// until one that knows the target works it (a reload that configures the
// target again, or another worker during a rolling deploy).
func jobParams(sender string, cfg *config.Sender, target string, eventID uuid.UUID, deliveryID string) river.InsertManyParams {
	opts := &river.InsertOpts{
		Queue:      ForwardQueue,
		Priority:   forwardPriority,
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
// beside the forward it follows. Queued after the fast path's attempt
// (after -1), it is inserted marked superseded (failed.go): the attempt's
// record (a job, a delivered forward), or the relay's job, comes after
// it, with a larger ID.
func afterParams(sender string, cfg *config.Sender, target string, eventID uuid.UUID, deliveryID string, after int64) river.InsertManyParams {
	p := jobParams(sender, cfg, target, eventID, deliveryID)
	p.InsertOpts.UniqueOpts = river.UniqueOpts{}
	if after < 0 {
		p.InsertOpts.Metadata = supersededMetadata
	}
	a := p.Args.(Args)
	a.After = after
	p.Args = a
	return p
}
