package transport

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/signature"
)

// brokerHeaders are a forward's metadata as broker message headers. The
// transform's headers come first, then the target's extra headers, then
// the body's Content-Type and Content-Encoding, so that each wins over
// those before it and hookgate's own win over all.
func brokerHeaders(m Message, now time.Time) [][2]string {
	t := m.Target
	hs := make([][2]string, 0, 10+len(t.Headers)+len(m.AddHeaders))
	for k, v := range m.AddHeaders {
		hs = append(hs, [2]string{k, v})
	}
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

// headerValue is the first value of the canonical header k, or "".
func headerValue(h map[string][]string, k string) string {
	if v := h[k]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// expand fills a subject or routing key template. The event type goes
// through clean, since a subject's tokens cannot hold every character.
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
		default: // a lone { stays
			b.WriteByte('{')
			rest = rest[1:]
		}
	}
	return b.String()
}

// refusedDestination returns why a forward may not go to dest, the
// expansion of tmpl, or nil. A sender may not choose the first token, and
// a subject may not be one of the NATS server's own. Config refuses such
// templates too; this check also covers what an expansion gives.
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

// subjectToken makes an event type part of a NATS subject. Whitespace,
// wildcards, control characters and empty tokens become _. The type's dots
// stay: they make the subject's hierarchy.
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

// conns is a set of broker connections by key, a URL with credentials.
// Each is made once, shared by every forward to it, and made again after
// it is lost.
type conns[C any] struct {
	mu     sync.Mutex
	by     map[string]*connSlot[C]
	closed bool
}

// connSlot is one connection of a conns. Its mu is held while the
// connection is made, so that concurrent forwards make one.
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

// close closes every connection with closeFn and refuses new ones.
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

// connectWithin runs connect, or returns ctx's error when ctx ends first.
// The broker clients' dials take no context, so a late connection is
// closed with closeFn in the background.
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

// forget drops c, the connection of key, if it is still the one kept,
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
