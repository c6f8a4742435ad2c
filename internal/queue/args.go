package queue

import (
	"context"

	"github.com/google/uuid"
	"github.com/riverqueue/river"

	"github.com/hookgate/hookgate/internal/access"
	"github.com/hookgate/hookgate/internal/config"
)

// ForwardQueue is the River queue forwards run on.
const ForwardQueue = "forward"

// Args are a forward job's arguments: which event goes to which target.
// Targets are named, not given by URL, because a URL may hold credentials.
// Sender, event and target make the job unique while it is unfinished.
type Args struct {
	Sender     string    `json:"sender" river:"unique"`
	EventID    uuid.UUID `json:"event_id" river:"unique"`
	Target     string    `json:"target" river:"unique"`
	DeliveryID string    `json:"delivery_id"`
	// URL is set only in jobs that name their target by URL. Workers find
	// the target by it.
	URL string `json:"url,omitempty"`
	// After is set on a redelivery queued while the event's forward to the
	// target was running or retrying. It is that forward's job ID, or -1
	// for a fast-path attempt that is not a job yet. The worker holds the
	// job back, without using an attempt, until no earlier forward of the
	// event to the target is unfinished. Such a job has no unique key.
	After int64 `json:"after,omitempty"`
	// By is set on a redelivery: who asked for it, the operator token's
	// name, "admin" when none was named, or "hookgate redeliver". Its
	// attempts record it.
	By string `json:"by,omitempty"`
	// OrderKey and Seq are an ordered forward's key and position in it
	// (store.OrderedEnd). The worker attempts it only while it is its
	// key's head, and its end moves the head on.
	OrderKey string `json:"order_key,omitempty"`
	Seq      int64  `json:"seq,omitempty"`
}

// RedeliveredBy is who asks for a redelivery in ctx: the caller's token
// name ([access.Name]), or "admin" when the request named none.
func RedeliveredBy(ctx context.Context) string {
	if n := access.Name(ctx); n != "" {
		return n
	}
	return "admin"
}

// redeliveredBy returns p with by as its job's [Args.By].
func redeliveredBy(p river.InsertManyParams, by string) river.InsertManyParams {
	a := p.Args.(Args)
	a.By = by
	p.Args = a
	return p
}

// Kind is the River job kind of forwards.
func (Args) Kind() string { return ForwardKind }

// uniqueStates are the job states in which a forward blocks another of the
// same event to the same target. A delivered or failed one does not.
var uniqueStates = unfinishedJobStates()

// jobParams returns the insert parameters of the forward of an event to a
// target. cfg is the sender's configuration, nil when this process does not
// know it. The job then gets River's default attempts. Workers hold it,
// without using attempts, until one that knows the target works it.
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

// OrderedReserve is how many runs beyond its target's max attempts an
// ordered forward's job keeps in reserve ([OrderedMaxAttempts]).
const OrderedReserve = 10

// OrderedMaxAttempts is the River attempts of an ordered forward whose
// target makes max attempts: [OrderedReserve] more, kept in reserve. The
// worker ends the forward after max, holding or skipping its key. Only a
// crash that cut the last attempt short, or an end that could not be
// written, lets River run it again; without the reserve, River would
// discard the job and its key would wait for an end that never comes.
func OrderedMaxAttempts(max int) int { return max + OrderedReserve }

// orderedParams returns p with the ordering key and position of an ordered
// forward, or p as it is for key "". Its attempts keep one in reserve
// ([OrderedMaxAttempts]).
func orderedParams(p river.InsertManyParams, key string, seq int64) river.InsertManyParams {
	if key == "" {
		return p
	}
	if p.InsertOpts.MaxAttempts > 0 {
		p.InsertOpts.MaxAttempts = OrderedMaxAttempts(p.InsertOpts.MaxAttempts)
	}
	a := p.Args.(Args)
	a.OrderKey, a.Seq = key, seq
	p.Args = a
	return p
}

// afterParams returns jobParams for a redelivery queued after the forward
// under way; see [Args.After]. The job is not unique, so it is inserted
// beside the forward it follows. After the fast path's attempt (after -1)
// it is inserted already marked superseded. The attempt's record, or the
// relay's job, comes after it with a larger ID.
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
