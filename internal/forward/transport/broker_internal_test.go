package transport

import (
	"testing"

	"github.com/hookgate/hookgate/internal/config"
)

// TestExpandSubject: a broker target's subject or routing key template is
// filled with the sender, the target and the event type, the last made a
// valid part of a NATS subject (subjectToken): its spaces, wildcards and
// control characters _, an empty type or token _, its dots kept.
func TestExpandSubject(t *testing.T) {
	t.Parallel()
	tg := &config.Target{Name: "bus"}
	for _, c := range []struct{ tmpl, eventType, want string }{
		{"hooks.{sender}.{target}.{event_type}", "invoice.paid", "hooks.acme.bus.invoice.paid"},
		{"hooks.{event_type}", "", "hooks._"},
		{"hooks.{event_type}", "a b*c>d\x01", "hooks.a_b_c_d_"},
		{"hooks.{event_type}", ".x..y.", "hooks._.x._.y._"},
		{"fixed", "x", "fixed"},
		{"{sender}{sender}", "", "acmeacme"},
		{"a{b", "", "a{b"},
	} {
		m := Message{Sender: "acme", Target: tg, EventType: c.eventType}
		if got := expand(c.tmpl, m, subjectToken); got != c.want {
			t.Errorf("expand(%q, type %q) = %q, want %q", c.tmpl, c.eventType, got, c.want)
		}
	}
	if got := expand("{sender}.{event_type}", Message{Sender: "acme", Target: tg, EventType: "a b"}, func(s string) string { return s }); got != "acme.a b" {
		t.Errorf("a routing key keeps the type as it is: %q", got)
	}
}
