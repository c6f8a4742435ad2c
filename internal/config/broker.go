package config

import (
	"fmt"
	"regexp"
)

// The placeholders of a broker target's subject or routing key.
const (
	PlaceholderSender    = "{sender}"
	PlaceholderTarget    = "{target}"
	PlaceholderEventType = "{event_type}"
)

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

// natsSubjectLiteral is what a NATS subject template may hold outside its
// placeholders: tokens of printable characters without spaces and
// wildcards, separated by dots.
var natsSubjectLiteral = regexp.MustCompile(`^[^\s*>]*$`)

// checkBrokerTarget checks that a target's broker block matches its URL's
// kind (nats: with a nats:// URL, rabbitmq: with an amqp:// one, neither
// with HTTP), and the block's templates.
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
		if r.Exchange == "" && r.RoutingKey == "" {
			return fmt.Errorf("%s.rabbitmq (%s): the default exchange (exchange left out) routes by queue name: give routing_key, the queue's name", field, where)
		}
		if (r.User == "") != (r.Password == "") {
			return fmt.Errorf("%s.rabbitmq (%s): user and password go together", field, where)
		}
	}
	return nil
}
