package forward

import (
	"fmt"
	"net/http"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/forward/transport"
	"github.com/hookgate/hookgate/internal/rules"
)

// transform returns m as t's transform makes it: the body it returns,
// with its Content-Type, and the headers it adds. It runs on the event as
// stored, with the rule of the configuration in force, so every attempt
// sends the same bytes and a redelivery after a fixed rule sends the fixed
// rule's. The body may be at most maxBytes. parsed, when not nil, is the
// body as a filter parsed it. Its error names the target and holds the
// rule's message, which holds no value of the event.
func transform(m transport.Message, t *config.Target, parsed *rules.Parsed, maxBytes int) (transport.Message, error) {
	h := http.Header(m.Headers)
	in := rules.Input{Sender: m.Sender, DeliveryID: m.DeliveryID, EventType: m.EventType, Headers: h, Body: m.Body, ContentType: h.Get("Content-Type"), Parsed: parsed}
	res, err := t.Transform.Apply(rules.NewActivation(in), maxBytes)
	if err != nil {
		return m, fmt.Errorf("target %q: %w", t.Name, err)
	}
	out := make(map[string][]string, 2)
	if res.ContentType != "" {
		out["Content-Type"] = []string{res.ContentType}
	}
	if res.Body != nil {
		m.Body = res.Body
	} else if ce := h.Get("Content-Encoding"); ce != "" { // the body as stored
		out["Content-Encoding"] = []string{ce}
	}
	m.Headers, m.AddHeaders = out, res.Headers
	return m, nil
}

// maxTransformed is the most bytes a transform of sender's events may
// return: the sender's body limit.
func (w *Worker) maxTransformed(sender string) int {
	if s, ok := w.senders.Current().Sender(sender); ok {
		return int(s.MaxBodyBytes)
	}
	return config.DefaultMaxBodyBytes
}
