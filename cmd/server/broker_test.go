package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/hookgate/hookgate/internal/testing/brokertest"
	"github.com/hookgate/hookgate/internal/testing/pgtest"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// killMidLoad runs a load of senders (retrying until 2xx) against the
// binary, SIGKILLs the first process after killAfter 2xx answers, calls
// between (with the first process gone), starts a second one and waits for
// the load's end. It returns the accepted events (every delivery's, once).
func killMidLoad(t *testing.T, bin string, pool *pgxpool.Pool, dsn, cfg string, ids []string, killAfter int64, between func()) (events []string, second *proc) {
	t.Helper()
	addr := freeAddr(t)
	base := "http://" + addr
	c := newClient(t)
	first := startBinaryWith(t, bin, dsn, addr, cfg, fastForwardFlags...)
	waitHealthy(t, c, base, first)
	var (
		ok2xx    atomic.Int64
		killOnce sync.Once
		killErr  error
		killedCh = make(chan struct{})
	)
	l := &load{client: c, base: base, ids: ids, senders: 16, backoff: 20 * time.Millisecond,
		observe: func(r reply, err error) {
			if err == nil && r.status >= 200 && r.status < 300 && ok2xx.Add(1) == killAfter {
				killOnce.Do(func() {
					killErr = first.cmd.Process.Kill()
					close(killedCh)
				})
			}
		}}
	rl := l.start(t)
	select {
	case <-killedCh:
	case <-rl.done:
		t.Fatalf("the load ended after %d 2xx answers without reaching the kill at %d", ok2xx.Load(), killAfter)
	}
	if killErr != nil {
		t.Fatalf("SIGKILL: %v", killErr)
	}
	<-first.done
	var exitErr *exec.ExitError
	if !errors.As(first.err, &exitErr) || exitErr.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the first process ended with %v, want killed by SIGKILL", first.err)
	}
	if between != nil {
		between()
	}
	second = startBinaryWith(t, bin, dsn, addr, cfg, fastForwardFlags...)
	waitHealthy(t, c, base, second)
	select {
	case <-rl.done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the load did not end within two minutes")
	}
	reportLoad(t, rl.st)
	checkStored(t, pool, ids, rl.st)
	return acceptedEvents(t, pool), second
}

// TestNATSTargetSurvivesKillsAndRestarts: hookgate forwards a load of
// deliveries to a NATS JetStream target while it is SIGKILLed in the
// middle of the load and the NATS server is killed and restarted (the
// forwards of that outage retried with backoff): in the end the stream
// holds every accepted event exactly once (each published with
// Nats-Msg-Id = its event ID, so JetStream dropped the repeats of the
// forwards the kill cut short), with the forward's metadata, and every
// forward is delivered in hookgate's own records, none left to retry.
func TestNATSTargetSurvivesKillsAndRestarts(t *testing.T) {
	testkit.Slow(t, "kills hookgate and NATS under load")
	t.Parallel()
	srv := brokertest.StartNATS(t)
	ctx := t.Context()
	js := srv.JetStream(t)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "HOOKS", Subjects: []string{"hooks.>"}, Storage: jetstream.FileStorage, Duplicates: time.Hour}); err != nil {
		t.Fatal(err)
	}
	bin := buildBinary(t)
	pool, dsn := pgtest.NewDB(t)
	cfg := writeConfig(t, senderConfig+fmt.Sprintf(`    forward:
      - name: bus
        url: %s
        timeout: 2s
        max_attempts: 100
        nats: { subject: "hooks.{sender}.{target}" }
`, srv.URL()))
	ids := makeIDs("nats", 300)
	events, second := killMidLoad(t, bin, pool, dsn, cfg, ids, 100, func() {
		// The broker crashes too, while nothing forwards, and comes back
		// only after the restarted hookgate has tried (and failed) to
		// publish.
		srv.Stop()
		time.AfterFunc(3*time.Second, srv.Start)
	})
	defer func() { _ = second.cmd.Process.Signal(syscall.SIGTERM); <-second.done }()
	if len(events) != len(ids) {
		t.Fatalf("%d accepted events, want %d", len(events), len(ids))
	}
	testkit.Poll(t, 2*time.Minute, "every forward to be delivered", func() bool {
		return jobStates(t, pool)["completed"] == len(events)
	}, func() string { return fmt.Sprintf("jobs %v, outbox %d", jobStates(t, pool), outboxRows(t, pool)) })

	js2 := srv.JetStream(t)
	cons, err := js2.OrderedConsumer(ctx, "HOOKS", jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for len(seen) < len(events) {
		batch, err := cons.Fetch(100, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			id := m.Headers().Get("Nats-Msg-Id")
			seen[id]++
			if m.Headers().Get("Webhook-Id") != id || m.Headers().Get("X-Hookgate-Sender") != "acme" || m.Subject() != "hooks.acme.bus" {
				t.Errorf("message %s: subject %s, headers %v", id, m.Subject(), m.Headers())
			}
		}
		if n == 0 {
			break
		}
	}
	for _, ev := range events {
		if seen[ev] != 1 {
			t.Errorf("event %s is %d times in the stream, want once", ev, seen[ev])
		}
	}
	if len(seen) != len(events) {
		t.Errorf("the stream holds %d distinct messages, want %d (one per accepted event)", len(seen), len(events))
	}
}

// TestRabbitMQTargetSurvivesKillsAndRestarts: hookgate forwards a load of
// deliveries to a RabbitMQ target while it is SIGKILLed in the middle of
// the load and the broker is killed and restarted: in the end the durable
// queue holds every accepted event, persistent, each with message_id =
// its event ID (RabbitMQ does not drop repeats: a repeat, from a forward
// the kill cut short after the broker's confirm, carries the same
// message_id for the consumer to drop), and every forward is delivered in
// hookgate's own records.
func TestRabbitMQTargetSurvivesKillsAndRestarts(t *testing.T) {
	testkit.Slow(t, "kills hookgate and RabbitMQ under load")
	t.Parallel()
	b := brokertest.StartRabbitMQ(t)
	// The consumer's topology, declared again (idempotent) after the
	// broker's restart, as a consumer does when it reconnects: a broker
	// killed under load once came back without the binding, and the
	// forwards waited behind the breaker ("no queue is bound") until the
	// test's end.
	declare := func() { b.Bind(t, "hooks", "acme", "acme.#") }
	declare()
	bin := buildBinary(t)
	pool, dsn := pgtest.NewDB(t)
	cfg := writeConfig(t, senderConfig+fmt.Sprintf(`    forward:
      - name: rabbit
        url: %s
        timeout: 5s
        max_attempts: 100
        rabbitmq: { exchange: hooks, routing_key: "{sender}.{target}" }
`, b.URL()))
	ids := makeIDs("amqp", 200)
	events, second := killMidLoad(t, bin, pool, dsn, cfg, ids, 70, func() {
		b.Stop()
		b.Start()
		declare()
	})
	defer func() { _ = second.cmd.Process.Signal(syscall.SIGTERM); <-second.done }()
	if len(events) != len(ids) {
		t.Fatalf("%d accepted events, want %d", len(events), len(ids))
	}
	testkit.Poll(t, 2*time.Minute, "every forward to be delivered", func() bool {
		return jobStates(t, pool)["completed"] == len(events)
	}, func() string { return fmt.Sprintf("jobs %v, outbox %d", jobStates(t, pool), outboxRows(t, pool)) })

	conn2 := b.Dial(t)
	ch2, err := conn2.Channel()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for {
		d, ok, err := ch2.Get("acme", true)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		seen[d.MessageId]++
		if d.DeliveryMode != amqp.Persistent || d.RoutingKey != "acme.rabbit" {
			t.Errorf("message %s: delivery mode %d, routing key %s", d.MessageId, d.DeliveryMode, d.RoutingKey)
		}
	}
	repeats := 0
	for _, ev := range events {
		switch n := seen[ev]; {
		case n == 0:
			t.Errorf("event %s is not on the queue", ev)
		case n > 1:
			repeats += n - 1
		}
	}
	if len(seen) != len(events) {
		t.Errorf("the queue holds %d distinct message IDs, want %d (one per accepted event)", len(seen), len(events))
	}
	t.Logf("%d events on the queue, %d repeats (each with its event's message_id)", len(seen), repeats)
}

// TestNATSTargetOrderedByKey: a NATS JetStream target with ordering
// publishes each key's events one at a time, in the order hookgate
// accepted them: in the stream, the first message of each event of a key
// comes after those of the events accepted before it. Keys are sent at
// once, each key's events in sequence, while NATS is down.
func TestNATSTargetOrderedByKey(t *testing.T) {
	t.Parallel()
	srv := brokertest.StartNATS(t)
	ctx := t.Context()
	js := srv.JetStream(t)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ORDERED", Subjects: []string{"ordered.>"}, Storage: jetstream.FileStorage, Duplicates: time.Hour}); err != nil {
		t.Fatal(err)
	}
	pool, dsn := pgtest.NewDB(t)
	cfg := senderConfig + fmt.Sprintf(`    forward:
      - name: bus
        url: %s
        nats: { subject: "ordered.{sender}.{target}" }
        ordering: { json_pointer: /key }
`, srv.URL())
	s := startRunWith(t, dsn, cfg)
	c := newClient(t)
	// NATS is down while the events are accepted: their first attempts
	// fail, and the forwards are retried once it is back, as an outage's
	// backlog is. Unordered, they would go in any order.
	srv.Stop()
	const keys, events = 4, 25
	var wg sync.WaitGroup
	errs := make(chan error, keys)
	for k := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("k%d", k)
			for n := 1; n <= events; n++ {
				r, err := deliver(ctx, c, s.base, fmt.Sprintf("%s-%d", key, n), orderedBody(key, n))
				if err == nil && r.status != 202 {
					err = fmt.Errorf("status %d", r.status)
				}
				if err != nil {
					errs <- fmt.Errorf("deliver %s %d: %w", key, n, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	srv.Start()
	testkit.Poll(t, 2*time.Minute, "every forward to be delivered", func() bool {
		return jobStates(t, pool)["completed"] == keys*events
	}, func() string { return fmt.Sprintf("jobs %v, outbox %d", jobStates(t, pool), outboxRows(t, pool)) })
	cons, err := srv.JetStream(t).OrderedConsumer(ctx, "ORDERED", jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	next := map[string]int{} // by key: the next event expected first
	seen := 0
	for seen < keys*events {
		batch, err := cons.Fetch(100, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for m := range batch.Messages() {
			got++
			var ev struct {
				Key string `json:"key"`
				N   int    `json:"n"`
			}
			if err := json.Unmarshal(m.Data(), &ev); err != nil {
				t.Fatalf("message %q: %v", m.Data(), err)
			}
			switch want := next[ev.Key] + 1; {
			case ev.N < want: // a repeat of an event published already
			case ev.N == want:
				next[ev.Key], seen = ev.N, seen+1
			default:
				t.Fatalf("key %s: event %d published before event %d", ev.Key, ev.N, want)
			}
		}
		if got == 0 {
			t.Fatalf("the stream ran out after %d events in order, want %d", seen, keys*events)
		}
	}
}
