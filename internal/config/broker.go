package config

import (
	"fmt"
	"regexp"
	"strings"
)

// The placeholders of a broker target's subject or routing key.
const (
	PlaceholderSender    = "{sender}"
	PlaceholderTarget    = "{target}"
	PlaceholderEventType = "{event_type}"
)

// NATSServers returns the servers of a NATS target's url, as nats.Connect
// reads it. The url is a comma-separated list. Each element is trimmed, and
// empty ones are dropped. An element without a scheme is checked as
// nats://, while nats.go gives it the connection's scheme.
func NATSServers(raw string) []string {
	var out []string
	for s := range strings.SplitSeq(raw, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if !strings.Contains(s, "://") {
			s = "nats://" + s
		}
		out = append(out, s)
	}
	return out
}

// Servers returns the URLs that t connects to: each server of a NATS
// target's list, or its one URL.
func (t *Target) Servers() []string {
	if t.Kind() == KindNATS {
		return NATSServers(t.URL)
	}
	return []string{t.URL}
}

// placeholder finds what looks like a placeholder in a template.
var placeholder = regexp.MustCompile(`\{[^{}]*\}`)

// checkTemplate refuses a template with a placeholder it does not know.
func checkTemplate(tmpl, field, where string) error {
	for _, p := range placeholder.FindAllString(tmpl, -1) {
		if p != PlaceholderSender && p != PlaceholderTarget && p != PlaceholderEventType {
			return fmt.Errorf("%s (%s): %s is not a placeholder: use {sender}, {target} or {event_type}", field, where, p)
		}
	}
	return nil
}

// FirstToken is the part of a subject, routing key or template before its
// first dot. That is NATS's first token, or a topic exchange's first word.
// Names hold no dot, and an event type goes in later tokens only. So a
// template's first token is also its expansion's.
func FirstToken(s string) string {
	first, _, _ := strings.Cut(s, ".")
	return first
}

// SenderChoosesFirstToken reports whether the first token of a subject or
// routing key template holds {event_type}. The sender chooses its event
// types, so it would choose where the message goes. A NATS subject can
// purge a stream, and a routing key on RabbitMQ's default exchange names a
// queue. Config refuses such a template, and so do the transports.
func SenderChoosesFirstToken(tmpl string) bool {
	return strings.Contains(FirstToken(tmpl), PlaceholderEventType)
}

// ReservedSubject reports whether subject's first token starts with $ or
// _INBOX. Subjects with $ are the NATS server's own, such as $JS.API,
// which drives JetStream. _INBOX is where replies go. No forward is
// published there.
func ReservedSubject(subject string) bool {
	first := FirstToken(subject)
	return strings.HasPrefix(first, "$") || strings.HasPrefix(first, "_INBOX")
}

// checkFirstToken refuses a template whose first token is not a literal,
// {sender} or {target}. It also refuses a subject whose first token is
// empty or reserved.
func checkFirstToken(tmpl, field, where string, subject bool) error {
	what := "routing key's first word"
	if subject {
		what = "subject's first token"
	}
	switch first := FirstToken(tmpl); {
	case SenderChoosesFirstToken(tmpl):
		return fmt.Errorf("%s (%s): the %s (before the first dot) holds {event_type}, which the sender chooses: it would choose where the message goes (a subject $JS.API.… is a JetStream API call; a routing key on the default exchange names any queue): start it with a literal, {sender} or {target}, as in hooks.{event_type} or {sender}.{event_type}", field, where, what)
	case subject && first == "":
		return fmt.Errorf("%s (%s): the %s (before the first dot) is empty: start it with a literal, {sender} or {target}", field, where, what)
	case subject && ReservedSubject(tmpl):
		return fmt.Errorf("%s (%s): the %s starts with $ or _INBOX, the NATS server's own subjects ($JS.API.… drives JetStream) and its replies': publish to a subject of your streams", field, where, what)
	}
	return nil
}

// natsSubjectLiteral is what a NATS subject template may hold outside its
// placeholders: tokens of printable characters without spaces and
// wildcards, separated by dots.
var natsSubjectLiteral = regexp.MustCompile(`^[^\s*>]*$`)

// checkBrokerTarget checks that a target's broker block matches its URL's
// kind, and checks the block's templates. An HTTP target has neither
// block.
func checkBrokerTarget(t *Target, field, where string) error {
	kind := t.Kind()
	switch {
	case t.NATS != nil && kind != KindNATS:
		return fmt.Errorf("%s.nats (%s): only for a NATS target, whose url is nats:// or tls://", field, where)
	case t.RabbitMQ != nil && kind != KindRabbitMQ:
		return fmt.Errorf("%s.rabbitmq (%s): only for a RabbitMQ target, whose url is amqp:// or amqps://", field, where)
	case kind == KindNATS && t.NATS == nil:
		return fmt.Errorf("%s.nats (%s): a NATS target needs nats: { subject: … }, the subject its events are published to", field, where)
	case kind == KindRabbitMQ && t.RabbitMQ == nil:
		return fmt.Errorf("%s.rabbitmq (%s): a RabbitMQ target needs rabbitmq: { exchange: …, routing_key: … }", field, where)
	}
	if n := t.NATS; n != nil {
		if err := checkTemplate(n.Subject, field+".nats.subject", where); err != nil {
			return err
		}
		if err := checkFirstToken(n.Subject, field+".nats.subject", where, true); err != nil {
			return err
		}
		if !natsSubjectLiteral.MatchString(placeholder.ReplaceAllString(n.Subject, "x")) {
			return fmt.Errorf("%s.nats.subject (%s): must not hold spaces or the wildcards * and > (a message is published to one subject)", field, where)
		}
		if n.Token != "" && (n.User != "" || n.Password != "") {
			return fmt.Errorf("%s.nats (%s): a token or a user and password, not both", field, where)
		}
		if (n.User == "") != (n.Password == "") {
			return fmt.Errorf("%s.nats (%s): user and password go together", field, where)
		}
	}
	if r := t.RabbitMQ; r != nil {
		if err := checkTemplate(r.RoutingKey, field+".rabbitmq.routing_key", where); err != nil {
			return err
		}
		if err := checkFirstToken(r.RoutingKey, field+".rabbitmq.routing_key", where, false); err != nil {
			return err
		}
		if r.Exchange == "" && r.RoutingKey == "" {
			return fmt.Errorf("%s.rabbitmq (%s): the default exchange (exchange left out) routes by queue name: give routing_key, the queue's name", field, where)
		}
		if (r.User == "") != (r.Password == "") {
			return fmt.Errorf("%s.rabbitmq (%s): user and password go together", field, where)
		}
	}
	return nil
}
