// Package transport sends one forward to its target and classifies the
// outcome. A [Transport] exists per kind of target: [HTTP] posts the
// event, [NATS] publishes it on JetStream and [RabbitMQ] publishes it to
// an exchange. A [Router] picks the transport of each target's kind.
//
// A broker message carries what an HTTP forward sends as request headers.
// Those are the event ID (Webhook-Id), the Webhook-Timestamp, the
// Standard Webhooks Webhook-Signature when the target has a signing
// secret, the sender, the delivery ID, the event type, the sender's
// Content-Type and Content-Encoding (the transform's Content-Type when
// the target has one), the target's extra headers and the transform's.
// The event ID is also the broker's deduplication key: Nats-Msg-Id on
// JetStream, message_id on RabbitMQ.
//
// A broker forward is delivered only once the broker acknowledges it.
// A broker that is down, refuses, or does not answer within the target's
// timeout leaves the forward to retry with backoff. A repeat carries the
// same key, so a broker that deduplicates drops it. JetStream does so
// within its stream's duplicate window; RabbitMQ's consumers do so by
// message_id.
//
// [AllowedHosts] limits where forwards connect: its DialContext checks
// every address after name resolution.
package transport

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/hookgate/hookgate/internal/config"
)

// Transport sends one forward to its target and classifies the outcome.
// The forward worker and the fast path send every forward through one,
// then count, record and schedule what it returns.
//
// Send bounds the send by the target's timeout, by [Message.Limit] when
// shorter, and by ctx. It must be safe for concurrent use. It must not
// modify the message's headers or body: one event's are shared by its
// forwards to every target.
type Transport interface {
	Send(ctx context.Context, m Message) Sent
}

// Message is one forward: one event of a sender, to one of its targets.
type Message struct {
	// Sender is the name of the sender the event came from.
	Sender string
	// Target is where the forward goes, as configured. Errors name it by
	// its Name, never by its URL, which may hold credentials.
	Target *config.Target
	// EventID is the forward's idempotency key, the same on every attempt.
	EventID uuid.UUID
	// DeliveryID is the sender's delivery ID of the event.
	DeliveryID string
	// EventType is the event's type, or "" when the sender gave none.
	// A broker message carries it, and its subject or routing key may
	// name it.
	EventType string
	// Headers are the event's stored headers, read only.
	Headers map[string][]string
	// Body is the event's stored body, read only. With the target's
	// transform, Headers and Body are what it made of them: the body it
	// returned and its Content-Type.
	Body []byte
	// AddHeaders are the headers the target's transform adds, by
	// canonical name, or nil. The target's own headers and hookgate's win
	// over them.
	AddHeaders map[string]string
	// Limit, when positive, is how long the caller lets the send run.
	// The fast path sets it to what is left of its lease. A send cut short
	// by it has no verdict, like one cut short by Send's context.
	// Zero leaves the target's timeout alone to bound the send.
	Limit time.Duration
}

// Verdict is how a transport judges one send of a forward.
type Verdict int

// The verdicts of a send. The zero Verdict is [VerdictNone].
const (
	// VerdictNone means the send was cut short by Send's context or by
	// [Message.Limit] before the target answered. It says nothing of the
	// target: the breaker does not count it, and the forward is attempted
	// again.
	VerdictNone Verdict = iota
	// VerdictDelivered means the target took the forward. Over HTTP, it
	// answered 2xx.
	VerdictDelivered
	// VerdictRetry means a later attempt may succeed. Over HTTP, the
	// target answered 408, 429 or 5xx, timed out, or could not be reached.
	VerdictRetry
	// VerdictFailed means no attempt can succeed, and the forward fails
	// without a retry. Over HTTP, the target answered another 4xx, or its
	// URL does not parse.
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

// Sent is how one send of a forward went.
type Sent struct {
	// Verdict is the outcome.
	Verdict Verdict
	// Status is the target's HTTP status code, or 0 when it did not
	// answer. A failed send with status 0 never reached the target.
	Status int
	// RetryAfter is how long the target asked the forward to wait, as
	// HTTP's Retry-After. It is 0 when it did not ask, and is used with
	// [VerdictRetry] only.
	RetryAfter time.Duration
	// PausesTarget reports that RetryAfter holds for the whole target, as
	// a 429 or a 503 asks. Every forward to it then waits that long, up to
	// the worker's maximum.
	PausesTarget bool
	// Err is why the forward was not delivered, or nil. It names the
	// target by its name and never holds its credentials.
	Err error
	// At is when the forward was delivered, in UTC.
	At time.Time
	// Took is how long the target took to answer, or to fail without one.
	Took time.Duration
	// Header is an HTTP target's response headers, as received, or nil.
	// They may hold credentials: redact them before they leave the
	// process (redact.Headers).
	Header map[string][]string
	// Body is the first [MaxKeptBody] bytes of an HTTP target's response
	// body, as received, or nil.
	Body []byte
	// Ack is a broker's acknowledgement of a delivered forward: the
	// JetStream stream and sequence, or RabbitMQ's confirm. It is "" over
	// HTTP and when the broker did not acknowledge.
	Ack string
}

// MaxKeptBody is how much of an HTTP target's response body a send keeps
// in [Sent.Body]. The rest is read and discarded, up to a bound, so that
// the connection can be reused.
const MaxKeptBody = 4 << 10

// Answered reports whether the target answered the send. Only then is
// its latency observed.
func (s Sent) Answered() bool {
	return s.Status != 0 || s.Verdict == VerdictDelivered
}

// sendBound is the time one send of a message has.
type sendBound struct {
	ctx     context.Context // the caller's
	timeout time.Duration
	limited bool // Limit is shorter than the target's timeout
}

// bound returns m's send bound and the context of the send. The caller
// cancels that context once the send is done.
func bound(ctx context.Context, m Message) (sendBound, context.Context, context.CancelFunc) {
	b := boundOf(ctx, m)
	sctx, cancel := context.WithTimeout(ctx, b.timeout)
	return b, sctx, cancel
}

// boundOf returns m's send bound, for a send that keeps to it without a
// context of its own.
func boundOf(ctx context.Context, m Message) sendBound {
	b := sendBound{ctx: ctx, timeout: time.Duration(m.Target.Timeout)}
	if m.Limit > 0 && m.Limit < b.timeout {
		b.timeout, b.limited = m.Limit, true
	}
	return b
}

// cut reports whether a send that failed in sctx was cut short by the
// caller rather than by the target. Such a send has no verdict.
func (b sendBound) cut(sctx context.Context) bool {
	return b.cutAt(sctx.Err() != nil)
}

// cutAt is cut for a send that ended with its deadline past, or not.
func (b sendBound) cutAt(expired bool) bool {
	return b.ctx.Err() != nil || b.limited && expired
}
