package config_test

import (
	"strings"
	"testing"

	"github.com/hookgate/hookgate/internal/config"
)

// brokerYAML is a sender with the one target given.
func brokerYAML(target string) string {
	return `senders:
  - name: acme
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    forward:
` + target
}

// TestBrokerTargets: a target whose url is nats:// or tls:// is a NATS
// JetStream target with its nats block, one whose url is amqp:// or
// amqps:// a RabbitMQ target with its rabbitmq block (credentials from the
// environment), and a NATS url may list servers as nats.go splits it
// (discovered_servers false unless set);
// start-up refuses a broker target without its block, a block on a target
// of another kind, credentials in the URL or in any server of a NATS list
// (pointing to the block, never quoting them), another scheme in a NATS
// list, a list in any other URL, an unknown placeholder, a subject with a
// space or a wildcard, a token beside a user, half of a user and
// password, and the default exchange without a routing key.
func TestBrokerTargets(t *testing.T) {
	t.Parallel()
	lookup := func(k string) (string, bool) { return map[string]string{"PW": "s3cret-pass"}[k], k == "PW" }
	c, err := config.Parse([]byte(brokerYAML(`      - name: bus
        url: nats://nats.internal:4222
        nats: { subject: "hooks.{sender}.{event_type}", user: hg, password: "${PW}" }
      - name: rabbit
        url: amqps://rabbit.internal:5671/prod
        rabbitmq: { exchange: hooks, routing_key: "{sender}.{target}", user: hg, password: "${PW}" }
      - name: web
        url: https://orders.internal/hooks
      - name: cluster
        url: "nats://nats-1.internal:4222, nats-2.internal:4222,tls://nats-3.internal:4222"
        nats: { subject: "hooks.{sender}", token: "${PW}", discovered_servers: true }
`)), lookup)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := c.Sender("acme")
	for name, want := range map[string]config.TargetKind{"bus": config.KindNATS, "rabbit": config.KindRabbitMQ, "web": config.KindHTTP, "cluster": config.KindNATS} {
		if tg, _ := s.Target(name); tg.Kind() != want {
			t.Errorf("target %s is %s, want %s", name, tg.Kind(), want)
		}
	}
	if tg, _ := s.Target("rabbit"); tg.RabbitMQ.Password != "s3cret-pass" || tg.RabbitMQ.Exchange != "hooks" {
		t.Errorf("rabbitmq block %+v", tg.RabbitMQ)
	}
	bus, _ := s.Target("bus")
	cluster, _ := s.Target("cluster")
	if bus.NATS.DiscoveredServers || !cluster.NATS.DiscoveredServers {
		t.Errorf("discovered_servers: bus %v (want false, the default), cluster %v (want true)", bus.NATS.DiscoveredServers, cluster.NATS.DiscoveredServers)
	}
	for _, tc := range []struct{ name, target, want string }{
		{"nats without its block", "      - { name: bus, url: \"nats://n:4222\" }\n", "needs nats: { subject"},
		{"rabbitmq without its block", "      - { name: bus, url: \"amqp://r:5672/\" }\n", "needs rabbitmq:"},
		{"a nats block on HTTP", "      - { name: bus, url: \"http://x/\", nats: { subject: a } }\n", "only for a NATS target"},
		{"a rabbitmq block on NATS", "      - { name: bus, url: \"nats://n:4222\", nats: { subject: a }, rabbitmq: { routing_key: a } }\n", "only for a RabbitMQ target"},
		{"credentials in a nats URL", "      - { name: bus, url: \"nats://hg:s3cret-pass@n:4222\", nats: { subject: a } }\n", "nats: { user: …"},
		{"credentials in a later server of a nats list", "      - { name: bus, url: \"nats://n:4222,nats://hg:s3cret-pass@n2:4223\", nats: { subject: a } }\n", "nats: { user: …"},
		{"credentials in a later bare server of a nats list", "      - { name: bus, url: \"nats://n:4222, hg:s3cret-pass@n2:4223\", nats: { subject: a } }\n", "nats: { user: …"},
		{"a token in a later server of a tls list", "      - { name: bus, url: \"tls://n:4222,tls://s3cret-pass@n2:4223\", nats: { subject: a } }\n", "nats: { user: …"},
		{"another scheme in a nats list", "      - { name: bus, url: \"nats://n:4222,amqp://r:5672\", nats: { subject: a } }\n", "nats:// or tls://"},
		{"a list in an amqp URL", "      - { name: bus, url: \"amqp://r:5672,amqp://hg:s3cret-pass@r2:5672/\", rabbitmq: { routing_key: a } }\n", "only a NATS target (nats://, tls://) takes a list of servers"},
		{"a list in an https URL", "      - { name: bus, url: \"https://a,https://hg:s3cret-pass@b/\" }\n", "only a NATS target"},
		{"credentials in an amqp URL", "      - { name: bus, url: \"amqp://hg:s3cret-pass@r:5672/\", rabbitmq: { routing_key: a } }\n", "rabbitmq: { user: …"},
		{"an unknown placeholder", "      - { name: bus, url: \"nats://n:4222\", nats: { subject: \"a.{delivery_id}\" } }\n", "{delivery_id} is not a placeholder"},
		{"a wildcard subject", "      - { name: bus, url: \"nats://n:4222\", nats: { subject: \"a.>\" } }\n", "wildcards"},
		{"a subject with a space", "      - { name: bus, url: \"nats://n:4222\", nats: { subject: \"a b\" } }\n", "wildcards"},
		{"a token and a user", "      - { name: bus, url: \"nats://n:4222\", nats: { subject: a, token: t, user: u, password: p } }\n", "not both"},
		{"a user without a password", "      - { name: bus, url: \"amqp://r/\", rabbitmq: { routing_key: a, user: u } }\n", "go together"},
		{"the default exchange without a routing key", "      - { name: bus, url: \"amqp://r/\", rabbitmq: { exchange: \"\" } }\n", "give routing_key"},
		{"another scheme", "      - { name: bus, url: \"kafka://k:9092\" }\n", "nats:// or tls://"},
	} {
		_, err := config.Parse([]byte(brokerYAML(tc.target)), lookup)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret-pass") {
			t.Errorf("%s: the error quotes the password: %v", tc.name, err)
		}
	}
}

// TestBrokerTemplateFirstToken: start-up refuses a subject or routing key
// template whose first token (before the first dot) holds {event_type},
// which the sender chooses (with subject "{event_type}" an event type
// $JS.API.STREAM.PURGE.X purged a stream; with routing key "{event_type}"
// on the default exchange it named any queue), naming the sender, the
// target and the field, and a subject whose first token is empty or
// starts with $ or _INBOX; a first token that is a literal, {sender} or
// {target} is taken.
func TestBrokerTemplateFirstToken(t *testing.T) {
	t.Parallel()
	nats := func(subject string) string {
		return "      - { name: bus, url: \"nats://n:4222\", nats: { subject: \"" + subject + "\" } }\n"
	}
	rabbit := func(exchange, key string) string {
		return "      - { name: bus, url: \"amqp://r:5672/\", rabbitmq: { exchange: \"" + exchange + "\", routing_key: \"" + key + "\" } }\n"
	}
	for _, tc := range []struct{ target, want string }{
		{nats("{event_type}"), "forward[0].nats.subject (acme, target bus): the subject's first token (before the first dot) holds {event_type}, which the sender chooses"},
		{nats("{event_type}.hooks"), "holds {event_type}"},
		{nats("hooks{event_type}.x"), "holds {event_type}"},
		{nats("{sender}{event_type}"), "holds {event_type}"},
		{nats(".{event_type}"), "first token (before the first dot) is empty"},
		{nats("$JS.API.STREAM.PURGE.{sender}"), "starts with $ or _INBOX"},
		{nats("_INBOX.{sender}.{event_type}"), "starts with $ or _INBOX"},
		{rabbit("", "{event_type}"), "forward[0].rabbitmq.routing_key (acme, target bus): the routing key's first word (before the first dot) holds {event_type}, which the sender chooses"},
		{rabbit("hooks", "{event_type}.x"), "holds {event_type}"},
		{rabbit("", "q{event_type}"), "holds {event_type}"},
	} {
		_, err := config.Parse([]byte(brokerYAML(tc.target)), nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", strings.TrimSpace(tc.target), err, tc.want)
		}
	}
	for _, target := range []string{
		nats("hooks.{event_type}"), nats("{sender}.{event_type}"), nats("{target}.{sender}.{event_type}"), nats("hooks"),
		nats("hooks-{sender}.{event_type}"), nats("a$b.{event_type}"),
		rabbit("", "{sender}.{event_type}"), rabbit("hooks", "hooks.{event_type}"), rabbit("fan", ""), rabbit("hooks", "{target}"),
	} {
		if _, err := config.Parse([]byte(brokerYAML(target)), nil); err != nil {
			t.Errorf("%s: %v, want it taken", strings.TrimSpace(target), err)
		}
	}
}
