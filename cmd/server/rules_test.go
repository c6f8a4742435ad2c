package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/hookgate/hookgate/internal/testing/brokertest"
	"github.com/hookgate/hookgate/internal/testing/pgtest"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// rulesToken is the admin token of the rules tests.
const rulesToken = "rules-test-token-3f9a0c7e51b2d84e6a17"

// rulesSigningSecret signs the forwards of the rules tests.
const rulesSigningSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// rulesConfig is acme with targets that have rules: big (a filter on the
// amount, has()-guarded), strict (a filter that fails without livemode),
// chat (a transform into a chat message with a header from the body,
// signed) and shaper (a transform reading customer.email without has(),
// shaperFixed when fixed); bus, on NATS, and queue, on RabbitMQ, get chat's
// transform too, queue with its header.
func rulesConfig(big, strict, chat, shaper, natsURL, rabbitURL, shaperTransform string) string {
	return genericSender("acme", "forward:",
		"  - name: big",
		"    url: "+big,
		"    filter: 'has(body.amount) && body.amount > 1000'",
		"  - name: strict",
		"    url: "+strict,
		"    filter: 'body.livemode == true'",
		"  - name: chat",
		"    url: "+chat,
		"    signing_secret: "+rulesSigningSecret,
		`    transform: '{"text": "Order " + body.id + " of " + string(body.amount) + " cents", "channel": "#sales"}'`,
		`    transform_headers: '{"X-Tenant": body.tenant}'`,
		"  - name: shaper",
		"    url: "+shaper,
		"    max_attempts: 5",
		"    transform: '"+shaperTransform+"'",
		"  - name: bus",
		"    url: "+natsURL,
		`    nats: { subject: "hooks.{sender}.{target}" }`,
		`    transform: '{"text": "Order " + body.id + " of " + string(body.amount) + " cents", "channel": "#sales"}'`,
		"  - name: queue",
		"    url: "+rabbitURL,
		`    rabbitmq: { exchange: hooks, routing_key: "{sender}.{target}" }`,
		`    transform: '{"text": "Order " + body.id + " of " + string(body.amount) + " cents", "channel": "#sales"}'`,
		`    transform_headers: '{"X-Tenant": body.tenant}'`,
	)
}

const (
	shaperBroken = `{"email": body.customer.email}`
	shaperFixed  = `{"email": has(body.customer.email) ? body.customer.email : "none"}`
)

// rulesDelivery is one delivery of the rules test, as the API shows it.
type rulesDelivery struct {
	Forwards []struct {
		Target    string  `json:"target"`
		State     string  `json:"state"`
		Attempts  int     `json:"attempts"`
		LastError *string `json:"last_error"`
	} `json:"forwards"`
	RuleErrors []struct {
		Target string `json:"target"`
		Rule   string `json:"rule"`
		Error  string `json:"error"`
	} `json:"rule_errors"`
}

// TestRulesFilterAndTransformEndToEnd: the real binary with targets that
// have CEL rules, real HTTP targets and a real NATS server.
//   - A target whose filter is false gets nothing: no forward, no request.
//   - A filter that fails to evaluate (a key read without has()) gives its
//     target no forward; the delivery is still accepted (202), the error is
//     recorded on the event, shown by the delivery and event views without
//     any value of the body, and counted in
//     hookgate_rule_errors_total{rule="filter"}, once (not again for a
//     replay).
//   - A transformed body arrives at the target with the transform's
//     Content-Type and header, and a Standard Webhooks signature that the
//     reference library verifies over the transformed bytes; a retry sends
//     the same bytes. NATS and RabbitMQ targets get the transformed body
//     too.
//   - A transform that fails to evaluate fails its forward at once (one
//     attempt of five, the target never called), with the error as its
//     last error, counted with rule="transform".
//   - After a reload fixing the rule, a redelivery of the failed forward
//     sends the fixed rule's body.
func TestRulesFilterAndTransformEndToEnd(t *testing.T) {
	testkit.Slow(t, "starts the gateway binary and a NATS server")
	t.Parallel()
	srv := brokertest.StartNATS(t)
	rabbit := brokertest.StartRabbitMQ(t)
	rabbit.Bind(t, "hooks", "acme", "acme.#")
	ctx := t.Context()
	if _, err := srv.JetStream(t).CreateStream(ctx, jetstream.StreamConfig{Name: "HOOKS", Subjects: []string{"hooks.>"}}); err != nil {
		t.Fatal(err)
	}
	big := testkit.NewTarget(t, testkit.Always(http.StatusOK))
	strict := testkit.NewTarget(t, testkit.Always(http.StatusOK))
	chat := testkit.NewTarget(t, testkit.FailFirst(1, http.StatusServiceUnavailable)) // every forward's first attempt fails
	shaper := testkit.NewTarget(t, testkit.Always(http.StatusOK))
	bin := buildBinary(t)
	_, dsn := pgtest.NewDB(t)
	path := writeConfig(t, "senders:\n"+rulesConfig(big.URL, strict.URL, chat.URL, shaper.URL, srv.URL(), rabbit.URL(), shaperBroken))
	addr := freeAddr(t)
	base := "http://" + addr
	c := newClient(t)
	p := startBinaryWith(t, bin, dsn, addr, path, append([]string{"--admin-token", rulesToken}, fastForwardFlags...)...)
	waitHealthy(t, c, base, p)

	// o1 passes big's and strict's filters; shaper's transform fails on it
	// (no customer.email). o2 fails big's filter (amount 10) and strict's
	// (no livemode: an error); shaper's transform reads its e-mail.
	o1 := `{"id":"o1","amount":5000,"livemode":true,"tenant":"t-7","customer":{"name":"Ada Lovelace","card":"4242424242424242"}}`
	o2 := `{"id":"o2","amount":10,"tenant":"t-8","customer":{"email":"ada@example.com"}}`
	var ev [2]string
	for i, b := range []string{o1, o2} {
		id := fmt.Sprintf("o%d", i+1)
		r, err := deliver(ctx, c, base, id, []byte(b))
		if err != nil {
			t.Fatal(err)
		}
		a, err := parseAccepted(r, id)
		if err != nil {
			t.Fatalf("delivery %s: %v", id, err)
		}
		ev[i] = a.EventID
	}
	// A replay of o2 evaluates strict's filter again, and fails again: the
	// error was counted with the event that records it, not again.
	if r, err := deliver(ctx, c, base, "o2", []byte(o2)); err != nil || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay of o2: %v %v", r, err)
	}

	read := func(id string) rulesDelivery {
		t.Helper()
		r := operator(t, c, http.MethodGet, base, "/v1/senders/acme/deliveries/"+id, rulesToken)
		var d rulesDelivery
		if r.status != http.StatusOK || json.Unmarshal(r.body, &d) != nil {
			t.Fatalf("GET delivery %s: %s", id, r)
		}
		return d
	}
	states := func(d rulesDelivery) map[string]string {
		out := map[string]string{}
		for _, f := range d.Forwards {
			out[f.Target] = f.State
		}
		return out
	}
	settled := func(id string, want map[string]string) rulesDelivery {
		t.Helper()
		var d rulesDelivery
		testkit.Poll(t, stallTimeout, "the forwards of "+id+" to settle", func() bool {
			d = read(id)
			got := states(d)
			if len(got) != len(want) {
				return false
			}
			for k, v := range want {
				if got[k] != v {
					return false
				}
			}
			return true
		}, func() string { return fmt.Sprintf("%s: forwards %v", id, states(d)) })
		return d
	}
	d1 := settled("o1", map[string]string{"big": "delivered", "strict": "delivered", "chat": "delivered", "shaper": "failed", "bus": "delivered", "queue": "delivered"})
	d2 := settled("o2", map[string]string{"chat": "delivered", "shaper": "delivered", "bus": "delivered", "queue": "delivered"})

	// The filters: big and strict got o1 only; strict's error is recorded
	// on o2, with CEL's message and no value of the body.
	for name, tg := range map[string]*testkit.Target{"big": big, "strict": strict} {
		if got := tg.Delivered(); len(got) != 1 || got[ev[0]] != 1 || len(tg.Hits()) != 1 {
			t.Errorf("%s received %v (%d requests), want o1's event once", name, got, len(tg.Hits()))
		}
	}
	if string(big.Hits()[0].Body) != o1 {
		t.Errorf("big (no transform) received %q, want the body as sent", big.Hits()[0].Body)
	}
	if len(d1.RuleErrors) != 0 {
		t.Errorf("o1's rule errors: %+v, want none", d1.RuleErrors)
	}
	if len(d2.RuleErrors) != 1 || d2.RuleErrors[0].Target != "strict" || d2.RuleErrors[0].Rule != "filter" || !strings.Contains(d2.RuleErrors[0].Error, "livemode") {
		t.Errorf("o2's rule errors: %+v, want strict's filter, naming livemode", d2.RuleErrors)
	}
	ebody := operator(t, c, http.MethodGet, base, "/v1/events/"+ev[1], rulesToken)
	var e struct {
		RuleErrors []struct{ Target, Rule, Error string } `json:"rule_errors"`
	}
	if err := json.Unmarshal(ebody.body, &e); err != nil || len(e.RuleErrors) != 1 || e.RuleErrors[0].Target != "strict" {
		t.Errorf("GET /v1/events/%s: rule_errors %+v (%v), want strict's", ev[1], e.RuleErrors, err)
	}

	// The transforms: chat got the chat message of each event, twice (the
	// 503, then the 200), the same bytes each time, each signed over them.
	wh, err := standardwebhooks.NewWebhook(rulesSigningSecret)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{`{"channel":"#sales","text":"Order o1 of 5000 cents"}`, `{"channel":"#sales","text":"Order o2 of 10 cents"}`} {
		hits := chat.HitsFor(ev[i])
		if len(hits) != 2 {
			t.Errorf("chat received event %d %d times, want 2 (a 503, then a 200)", i+1, len(hits))
			continue
		}
		for _, h := range hits {
			if string(h.Body) != want || h.Header.Get("Content-Type") != "application/json" || h.Header.Get("X-Tenant") != fmt.Sprintf("t-%d", 7+i) {
				t.Errorf("chat received %q, Content-Type %q, X-Tenant %q; want %s as application/json for tenant t-%d",
					h.Body, h.Header.Get("Content-Type"), h.Header.Get("X-Tenant"), want, 7+i)
			}
			if err := wh.Verify(h.Body, h.Header); err != nil {
				t.Errorf("chat's forward of event %d: the Standard Webhooks signature does not verify over the body it carries: %v", i+1, err)
			}
		}
	}
	// shaper: o2 transformed; o1's transform failed at once, without a
	// request, with CEL's message as the last error and nothing of the body.
	if got := shaper.Delivered(); len(got) != 1 || got[ev[1]] != 1 || len(shaper.Hits()) != 1 {
		t.Errorf("shaper received %v (%d requests), want o2's event once", got, len(shaper.Hits()))
	} else if b := string(shaper.Hits()[0].Body); b != `{"email":"ada@example.com"}` {
		t.Errorf("shaper received %q for o2", b)
	}
	for _, f := range d1.Forwards {
		if f.Target != "shaper" {
			continue
		}
		if f.Attempts != 1 || f.LastError == nil || !strings.Contains(*f.LastError, "email") ||
			strings.Contains(*f.LastError, "Ada") || strings.Contains(*f.LastError, "4242") {
			t.Errorf("o1's shaper forward: %d attempts, last error %v; want 1 attempt, CEL's message naming email, no value of the body",
				f.Attempts, deref(f.LastError))
		}
	}
	m := metricsBody(t, c, base)
	for series, want := range map[string]float64{
		`hookgate_rule_errors_total{rule="filter",sender="acme",target="strict"}`:    1,
		`hookgate_rule_errors_total{rule="filter",sender="acme",target="big"}`:       0,
		`hookgate_rule_errors_total{rule="transform",sender="acme",target="shaper"}`: 1,
		`hookgate_rule_errors_total{rule="transform",sender="acme",target="chat"}`:   0,
	} {
		if v := seriesValue(m, series); v != want {
			t.Errorf("%s = %v, want %v", series, v, want)
		}
	}

	// NATS: the bus got both events' chat messages, as JSON.
	cons, err := srv.JetStream(t).OrderedConsumer(ctx, "HOOKS", jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(2, jetstream.FetchMaxWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var msgs []string
	for msg := range batch.Messages() {
		msgs = append(msgs, string(msg.Data()))
		if ct := msg.Headers().Get("Content-Type"); ct != "application/json" {
			t.Errorf("bus message Content-Type %q, want application/json", ct)
		}
	}
	if len(msgs) != 2 || !strings.HasPrefix(msgs[0], `{"channel":"#sales","text":"Order o`) || !strings.HasPrefix(msgs[1], `{"channel":"#sales","text":"Order o`) {
		t.Errorf("bus messages %q, want the two chat messages", msgs)
	}

	// RabbitMQ: the queue got them too, with the transform's Content-Type
	// and header.
	ch, err := rabbit.Dial(t).Channel()
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		d, ok, err := ch.Get("acme", true)
		if err != nil || !ok {
			t.Fatalf("get from the queue acme: %v, %v; want two messages", ok, err)
		}
		tenant, _ := d.Headers["X-Tenant"].(string)
		if !strings.HasPrefix(string(d.Body), `{"channel":"#sales","text":"Order o`) || d.ContentType != "application/json" || !strings.HasPrefix(tenant, "t-") {
			t.Errorf("queue message %d: body %q, content type %q, X-Tenant %q; want a chat message as application/json with its tenant", i+1, d.Body, d.ContentType, tenant)
		}
	}

	// The fix: reload the rule, redeliver the failed forward.
	writeFile(t, path, "senders:\n"+rulesConfig(big.URL, strict.URL, chat.URL, shaper.URL, srv.URL(), rabbit.URL(), shaperFixed))
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testkit.Poll(t, time.Minute, "the fixed configuration to be in force", func() bool {
		r := operator(t, c, http.MethodGet, base, "/v1/config", rulesToken)
		return bytes.Contains(r.body, []byte(sha256Hex("senders:\n"+rulesConfig(big.URL, strict.URL, chat.URL, shaper.URL, srv.URL(), rabbit.URL(), shaperFixed))))
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/senders/acme/targets/shaper/redeliver", strings.NewReader(`{"state":"failed"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+rulesToken)
	req.Header.Set("Content-Type", "application/json")
	if r, err := do(c, req); err != nil || r.status != http.StatusAccepted {
		t.Fatalf("redeliver shaper's failed forwards: %v %v", r, err)
	}
	testkit.Poll(t, stallTimeout, "the redelivery of o1 to reach shaper", func() bool { return shaper.Delivered()[ev[0]] == 1 })
	if h := shaper.HitsFor(ev[0]); string(h[0].Body) != `{"email":"none"}` {
		t.Errorf("the redelivery after the fix sent %q, want the fixed rule's body", h[0].Body)
	}
}

// deref is *s, or "<nil>".
func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}
