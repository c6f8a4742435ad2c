package forward

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/hookgate/hookgate/internal/config"
)

// Transport sends one forward to its target and classifies the outcome.
// The River worker and the fast path (Dispatcher) send every forward
// through their Worker's transport, and count, record and schedule what it
// returns (Worker.post): HTTPTransport is the transport of HTTP targets.
//
// Send bounds the send itself: by the target's timeout (Target.Timeout),
// by Message.Limit when that is shorter, and by ctx. It must be safe for
// concurrent use, and must not modify the message's headers or body (one
// event's are shared by its forwards to every target).
type Transport interface {
	Send(ctx context.Context, m Message) Sent
}

// Message is one forward as a transport sends it: one event of a sender,
// to one of the sender's targets.
type Message struct {
	// Sender is the name of the sender the event came from.
	Sender string
	// Target is where the forward goes, as configured (its URL, timeout,
	// extra headers, signing key). Its Name, never its URL (which may hold
	// credentials), names it in errors.
	Target *config.Target
	// EventID is the event's ID: the forward's idempotency key, the same
	// on every attempt (over HTTP, Idempotency-Key and webhook-id).
	EventID uuid.UUID
	// DeliveryID is the sender's delivery ID of the event.
	DeliveryID string
	// EventType is the event's type ("" when the sender gave none): a
	// broker message carries it, and its subject or routing key may name
	// it.
	EventType string
	// Headers are the event's headers as stored (those the sender's
	// stored-header filter kept), read only.
	Headers map[string][]string
	// Body is the event's body as stored, read only.
	Body []byte
	// Limit, when positive, is how long the caller can let the send run
	// (the fast path's lease): a send cut short by it, like one cut short
	// by Send's context, has no verdict (VerdictNone). Zero: the target's
	// timeout alone bounds it.
	Limit time.Duration
}

// Verdict is how a transport judges one send of a forward.
type Verdict int

// The verdicts of a send. The zero Verdict is VerdictNone.
const (
	// VerdictNone: the send was cut short by Send's context or by
	// Message.Limit (the process is stopping, the fast path's lease is
	// running out) before the target answered. It says nothing of the
	// target: the forward is neither delivered nor failed, the target's
	// breaker does not count it, and the forward is attempted again.
	VerdictNone Verdict = iota
	// VerdictDelivered: the target took the forward (HTTP: a 2xx).
	VerdictDelivered
	// VerdictRetry: not delivered, and a later attempt may succeed (HTTP:
	// 408, 429, 5xx, a timeout, a connection error); Sent.RetryAfter is
	// how long the target asked the forward to wait first.
	VerdictRetry
	// VerdictFailed: no attempt can succeed (HTTP: another 4xx, a URL
	// that does not parse); the forward fails without a retry.
	VerdictFailed
)

// String names the verdict.
func (v Verdict) String() string {
	switch v {
	case VerdictDelivered:
		return "delivered"
	case VerdictRetry:
		return "retry"
	case VerdictFailed:
		return "failed"
	default:
		return "none"
	}
}

// Sent is how one send of a forward went, as its transport classified it.
type Sent struct {
	// Verdict is the outcome.
	Verdict Verdict
	// Status is the target's answer (an HTTP status code); 0 when it did
	// not answer. A send that failed (VerdictFailed) with status 0 never
	// reached the target: the forward could not be sent at all.
	Status int
	// RetryAfter is how long the target asked the forward to wait before
	// it is attempted again (HTTP's Retry-After, parseRetryAfter); 0 when
	// it did not ask. Used with VerdictRetry only.
	RetryAfter time.Duration
	// PausesTarget reports that RetryAfter holds for the whole target, not
	// only this forward (HTTP: a 429 or a 503): every forward to it waits
	// that long, at most WorkerConfig.RetryAfterMax.
	PausesTarget bool
	// Err is why the forward was not delivered; nil when it was. It names
	// the target by its name and never holds its credentials (a URL's
	// user, password or query).
	Err error
	// At is when the forward was delivered (UTC), with VerdictDelivered.
	At time.Time
	// Took is how long the target took: from the send to its answer, or
	// to the failure without one.
	Took time.Duration
}

// answered reports whether the target answered the send (its latency is
// then observed).
func (s Sent) answered() bool {
	return s.Status != 0 || s.Verdict == VerdictDelivered
}

// sendBound is the time one send of a message has: its target's timeout,
// or the message's Limit when shorter, within the caller's context.
type sendBound struct {
	ctx     context.Context // the caller's
	timeout time.Duration
	limited bool // Limit is shorter than the target's timeout
}

// bound returns m's send bound and the context of the send, which the
// caller cancels once the send is done.
func bound(ctx context.Context, m Message) (sendBound, context.Context, context.CancelFunc) {
	b := sendBound{ctx: ctx, timeout: time.Duration(m.Target.Timeout)}
	if m.Limit > 0 && m.Limit < b.timeout {
		b.timeout, b.limited = m.Limit, true
	}
	sctx, cancel := context.WithTimeout(ctx, b.timeout)
	return b, sctx, cancel
}

// cut reports whether a send that failed in sctx was cut short by the
// caller (the process is stopping, the fast path's lease is running out)
// rather than by the target: the send then has no verdict.
func (b sendBound) cut(sctx context.Context) bool {
	return b.ctx.Err() != nil || b.limited && sctx.Err() != nil
}
