package forward

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/signature"
)

// The destinations that are not HTTP: a target whose URL is a broker's
// (config.Target.Kind) publishes each forward as one message, with the
// event's body and, as the message's headers, what an HTTP forward sends
// as request headers: the event ID (Webhook-Id, and the broker's own
// deduplication key: Nats-Msg-Id on JetStream, message_id on RabbitMQ),
// the Webhook-Timestamp and, with a signing secret, the Standard Webhooks
// Webhook-Signature over the body, the sender, the delivery ID, the event
// type, the Content-Type and Content-Encoding the sender gave, and the
// target's extra headers. A forward is delivered only once the broker
// acknowledges it (a JetStream publish acknowledgement, a RabbitMQ
// publisher confirm); a broker that is down, refuses or does not answer
// within the target's timeout leaves it to retry with backoff. A repeat
// (a retry after an acknowledgement that was lost, a process killed
// between the broker's acknowledgement and the forward's record) carries
// the same key, so a broker that deduplicates drops it: JetStream within
// its stream's duplicate window, RabbitMQ's consumers by message_id.

// Transports sends each forward through the transport of its target's kind
// (config.Target.Kind): HTTP, NATS JetStream or RabbitMQ. A kind left nil
// fails its forwards at once (a target of that kind cannot be sent to).
type Transports struct {
	HTTP     Transport
	NATS     *NATSTransport
	RabbitMQ *RabbitMQTransport
}

// NewTransports returns the transports of a process: HTTP over client,
// and the brokers' connecting through dial (AllowedHosts.DialContext), all
// reading the time from now.
func NewTransports(client *http.Client, dial DialFunc, now func() time.Time) *Transports {
	return &Transports{
		HTTP:     NewHTTPTransport(client, now),
		NATS:     NewNATSTransport(dial, now),
		RabbitMQ: NewRabbitMQTransport(dial, now),
	}
}

// DialFunc dials a broker's address (AllowedHosts.DialContext).
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// Send sends m through the transport of its target's kind.
func (ts *Transports) Send(ctx context.Context, m Message) Sent {
	switch m.Target.Kind() {
	case config.KindNATS:
		if ts.NATS != nil {
			return ts.NATS.Send(ctx, m)
		}
	case config.KindRabbitMQ:
		if ts.RabbitMQ != nil {
			return ts.RabbitMQ.Send(ctx, m)
		}
	default:
		if ts.HTTP != nil {
			return ts.HTTP.Send(ctx, m)
		}
	}
	return Sent{Verdict: VerdictFailed, Err: errNoTransport(m.Target)}
}

// Close closes the brokers' connections (after the last forward).
func (ts *Transports) Close() {
	if ts.NATS != nil {
		ts.NATS.Close()
	}
	if ts.RabbitMQ != nil {
		ts.RabbitMQ.Close()
	}
}

// brokerHeaders are a forward's metadata as a broker message carries
// them, in the order they are set (the target's extra headers first, so
// that hookgate's own win).
func brokerHeaders(m Message, now time.Time) [][2]string {
	t := m.Target
	hs := make([][2]string, 0, 10+len(t.Headers))
	for k, v := range t.Headers {
		hs = append(hs, [2]string{k, v})
	}
	for _, k := range [...]string{"Content-Type", "Content-Encoding"} {
		if v := headerValue(m.Headers, k); v != "" {
			hs = append(hs, [2]string{k, v})
		}
	}
	id := m.EventID.String()
	hs = append(hs, [2]string{"Webhook-Id", id}, [2]string{"Webhook-Timestamp", strconv.FormatInt(now.Unix(), 10)})
	if t.SigningKey != nil {
		hs = append(hs, [2]string{"Webhook-Signature", signature.SignStandard(t.SigningKey, id, now, m.Body)})
	}
	hs = append(hs, [2]string{"X-Hookgate-Sender", m.Sender}, [2]string{"X-Hookgate-Delivery-Id", m.DeliveryID})
	if m.EventType != "" {
		hs = append(hs, [2]string{"X-Hookgate-Event-Type", m.EventType})
	}
	return hs
}

// headerValue is the first value of the stored header k (canonical), or "".
func headerValue(h map[string][]string, k string) string {
	if v := h[k]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// expand fills a subject or routing key template: {sender}, {target} and
// {event_type}, the last through clean (a subject's tokens cannot hold
// every character).
func expand(tmpl string, m Message, clean func(string) string) string {
	if !strings.Contains(tmpl, "{") {
		return tmpl
	}
	var b strings.Builder
	b.Grow(len(tmpl) + len(m.Sender) + len(m.EventType))
	for rest := tmpl; rest != ""; {
		i := strings.IndexByte(rest, '{')
		if i < 0 {
			b.WriteString(rest)
			break
		}
		b.WriteString(rest[:i])
		rest = rest[i:]
		switch {
		case strings.HasPrefix(rest, config.PlaceholderSender):
			b.WriteString(m.Sender)
			rest = rest[len(config.PlaceholderSender):]
		case strings.HasPrefix(rest, config.PlaceholderTarget):
			b.WriteString(m.Target.Name)
			rest = rest[len(config.PlaceholderTarget):]
		case strings.HasPrefix(rest, config.PlaceholderEventType):
			b.WriteString(clean(m.EventType))
			rest = rest[len(config.PlaceholderEventType):]
		default: // config refuses other placeholders; a lone { stays
			b.WriteByte('{')
			rest = rest[1:]
		}
	}
	return b.String()
}

// refusedDestination returns why a forward is not published to dest, the
// expansion of the template tmpl (a NATS subject when subject, else a
// RabbitMQ routing key), or nil: a template whose first token holds
// {event_type} (the sender would choose the destination), a subject whose
// first token starts with $ or _INBOX (the NATS server's own subjects,
// replies). Config refuses such templates at start-up; this holds for a
// target made otherwise, and for whatever an expansion gives. No attempt
// can succeed: the forward fails (VerdictFailed) without reaching the
// broker.
func refusedDestination(tmpl, dest string, subject bool) error {
	what := "routing key's first word"
	if subject {
		what = "subject's first token"
	}
	switch {
	case config.SenderChoosesFirstToken(tmpl):
		return fmt.Errorf("refused: the %s holds {event_type}, which the sender chooses: it would choose where the message goes", what)
	case subject && config.ReservedSubject(dest):
		return fmt.Errorf("refused subject %q: its first token starts with $ or _INBOX (the NATS server's own subjects, replies)", dest)
	}
	return nil
}

// subjectToken makes an event type part of a NATS subject: a character a
// subject's token cannot hold (whitespace, the wildcards * and >, a
// control character) becomes _, and so does an empty token (an empty
// type, two dots in a row, a dot at either end). The dots of a type
// ("invoice.paid") stay: they make the subject's hierarchy.
func subjectToken(s string) string {
	if s == "" {
		return "_"
	}
	b := []byte(s)
	for i, c := range b {
		if c <= ' ' || c == '*' || c == '>' || c == 0x7f {
			b[i] = '_'
		}
	}
	parts := strings.Split(string(b), ".")
	for i, p := range parts {
		if p == "" {
			parts[i] = "_"
		}
	}
	return strings.Join(parts, ".")
}

// conns is a set of broker connections by key (a URL with its
// credentials), each made once and shared by every forward to it, made
// again after it is lost.
type conns[C any] struct {
	mu     sync.Mutex
	by     map[string]*connSlot[C]
	closed bool
}

// connSlot is one connection of a conns: mu is held while it is made, so
// that concurrent forwards make one.
type connSlot[C any] struct {
	mu sync.Mutex
	c  *C
}

// slot returns the slot of key, nil once the set is closed.
func (cs *conns[C]) slot(key string) *connSlot[C] {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.closed {
		return nil
	}
	if cs.by == nil {
		cs.by = map[string]*connSlot[C]{}
	}
	s := cs.by[key]
	if s == nil {
		s = &connSlot[C]{}
		cs.by[key] = s
	}
	return s
}

// close closes every connection with closeFn, and refuses new ones.
func (cs *conns[C]) close(closeFn func(*C)) {
	cs.mu.Lock()
	cs.closed = true
	slots := cs.by
	cs.by = nil
	cs.mu.Unlock()
	for _, s := range slots {
		s.mu.Lock()
		if s.c != nil {
			closeFn(s.c)
			s.c = nil
		}
		s.mu.Unlock()
	}
}

// errNoTransport is the error of a forward whose target's kind this
// process has no transport for.
func errNoTransport(t *config.Target) error {
	return &noTransportError{target: t.Name, kind: t.Kind()}
}

type noTransportError struct {
	target string
	kind   config.TargetKind
}

func (e *noTransportError) Error() string {
	return "target " + strconv.Quote(e.target) + ": no transport for " + string(e.kind) + " targets in this process"
}

// connectWithin runs connect, returning what it made, or ctx's error once
// ctx ends first: the connect then goes on in the background, and what it
// makes is closed with closeFn (the broker clients' dials take no
// context).
func connectWithin[C any](ctx context.Context, connect func() (*C, error), closeFn func(*C)) (*C, error) {
	type made struct {
		c   *C
		err error
	}
	ch := make(chan made, 1)
	go func() {
		c, err := connect()
		ch <- made{c, err}
	}()
	select {
	case m := <-ch:
		return m.c, m.err
	case <-ctx.Done():
		go func() {
			if m := <-ch; m.c != nil {
				closeFn(m.c)
			}
		}()
		return nil, ctx.Err()
	}
}

// forget forgets c, the connection of key, when it is still the one kept,
// and closes it with closeFn.
func (cs *conns[C]) forget(key string, c *C, closeFn func(*C)) {
	if s := cs.slot(key); s != nil {
		s.mu.Lock()
		if s.c == c {
			s.c = nil
		}
		s.mu.Unlock()
	}
	closeFn(c)
}
