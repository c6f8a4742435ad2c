package handler_test

import (
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/hookgate/hookgate/internal/queue"
	"github.com/hookgate/hookgate/internal/store"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// withHeaders returns a request modifier that sets the headers kv (name,
// value, name, value, …).
func withHeaders(kv ...string) func(*http.Request) {
	return func(r *http.Request) {
		for i := 0; i+1 < len(kv); i += 2 {
			r.Header.Set(kv[i], kv[i+1])
		}
	}
}

// deliveryIDs returns the X-Hookgate-Delivery-Id of each request, sorted.
func deliveryIDs(reqs []testkit.Hit) []string {
	var out []string
	for _, r := range reqs {
		out = append(out, r.Header.Get("X-Hookgate-Delivery-Id"))
	}
	slices.Sort(out)
	return out
}

// Routing at ingest: each target receives only the events whose type its
// event_types name (exactly or by prefix) and for which its match
// conditions on headers and JSON values hold; an event that matches no
// target is accepted and stored, with no outbox row and no job. The event
// type is stored and shown in the delivery and event records.
func TestIngestRoutesByEventTypeAndConditions(t *testing.T) {
	t.Parallel()
	orders, customers, shopA, invoices := testkit.NewTarget(t, testkit.Sequence(http.StatusOK)), testkit.NewTarget(t, testkit.Sequence(http.StatusOK)), testkit.NewTarget(t, testkit.Sequence(http.StatusOK)), testkit.NewTarget(t, testkit.Sequence(http.StatusOK))
	s := newOpServer(t, opOptions{work: true, yaml: fmt.Sprintf(`
senders:
  - name: shop
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    event_type: { header: X-Event-Type }
    forward:
      - name: orders
        url: %s
        event_types: ["order.*"]
      - name: customers
        url: %s
        event_types: ["customer.created"]
      - name: shop-a
        url: %s
        match:
          - header: X-Shop
            in: [shop-a, shop-a2]
          - json_pointer: /live
            in: ["true"]
  - name: billing
    preset: generic
    delivery_id: { json_pointer: /id }
    event_type: { json_pointer: /type }
    forward:
      - name: invoices
        url: %s
        event_types: ["invoice.*"]
`, orders.Server(), customers.Server(), shopA.Server(), invoices.Server())})

	// First the events that match no target: when the matching ones have
	// been forwarded, the relay has long passed these.
	none := s.accept("shop", "none-1", []byte(`{"live":true}`), withHeaders("X-Event-Type", "refund.created", "X-Shop", "shop-b"))
	noneBilling := s.accept("billing", "inv-none", []byte(`{"id":"inv-none","type":"customer.created"}`))
	s.accept("shop", "o-1", []byte(`{"live":false}`), withHeaders("X-Event-Type", "order.created", "X-Shop", "shop-a"))
	s.accept("shop", "c-1", []byte(`{"live":true}`), withHeaders("X-Event-Type", "customer.created", "X-Shop", "shop-a2"))
	s.accept("shop", "o-2", []byte(`{"live":true}`), withHeaders("X-Event-Type", "order.paid", "X-Shop", "shop-b"))
	s.accept("shop", "x-1", []byte(`{"live":true}`), withHeaders("X-Shop", "shop-a")) // no event type: shop-a only
	s.accept("shop", "c-2", []byte(`not JSON`), withHeaders("X-Event-Type", "customer.created", "X-Shop", "shop-a"))
	inv := s.accept("billing", "inv-1", []byte(`{"id":"inv-1","type":"invoice.paid"}`))

	want := map[*testkit.Target][]string{
		orders:    {"o-1", "o-2"},
		customers: {"c-1", "c-2"},
		shopA:     {"c-1", "x-1"},
		invoices:  {"inv-1"},
	}
	testkit.Poll(t, pollTimeout, "the routed forwards", func() bool {
		for tg, ids := range want {
			if len(tg.Hits()) < len(ids) {
				return false
			}
		}
		return true
	})
	for tg, ids := range want {
		if got := deliveryIDs(tg.Hits()); !slices.Equal(got, ids) {
			t.Errorf("target %s received %v, want %v", tg.Server(), got, ids)
		}
	}
	q := store.New(s.pool)
	for sender, id := range map[string]string{"shop": none, "billing": noneBilling} {
		ev, err := q.GetEvent(t.Context(), uuid.MustParse(id))
		if err != nil || ev.Sender != sender {
			t.Errorf("event %s matching no target: %+v, %v; want it stored, of %s", id, ev, err, sender)
		}
		fw, err := queue.NewJobs(q.DB()).EventForwards(t.Context(), sender, uuid.MustParse(id))
		if err != nil {
			t.Fatal(err)
		}
		if len(fw) != 0 {
			t.Errorf("event %s matching no target: forwards (outbox rows and jobs) %+v; want none", id, fw)
		}
	}
	if d := s.delivery("shop", "none-1"); d.EventType != "refund.created" || len(d.Forwards) != 0 {
		t.Errorf("delivery none-1: event type %q, forwards %+v; want refund.created and none", d.EventType, d.Forwards)
	}
	if e := s.event(none); e.EventType != "refund.created" {
		t.Errorf("event %s: event type %q, want refund.created", none, e.EventType)
	}
	if d := s.delivery("billing", "inv-1"); d.EventType != "invoice.paid" || len(d.Forwards) != 1 || d.Forwards[0].Target != "invoices" {
		t.Errorf("delivery inv-1: event type %q, forwards %+v", d.EventType, d.Forwards)
	}
	if e := s.event(inv); e.EventType != "invoice.paid" {
		t.Errorf("event %s: event type %q, want invoice.paid", inv, e.EventType)
	}
	if e := s.event(s.delivery("shop", "x-1").EventID.String()); e.EventType != "" {
		t.Errorf("event without a type: %q", e.EventType)
	}
}

// listPage GETs one page of sender's deliveries with the query q.
func (s *opServer) listPage(sender string, q url.Values) deliveryPage {
	s.t.Helper()
	var p deliveryPage
	decode(s.t, s.call(http.MethodGet, "/v1/senders/"+sender+"/deliveries?"+q.Encode()), http.StatusOK, http.MethodGet, routeDeliveries, &p)
	return p
}

// GET /v1/senders/{sender}/deliveries?event_type= lists the deliveries of
// one type, or of a prefix, newest first, a page at a time.
func TestOperatorListDeliveriesByEventType(t *testing.T) {
	t.Parallel()
	s := newOpServer(t, opOptions{yaml: `
senders:
  - name: shop
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    event_type: { header: X-Event-Type }
`})
	types := []string{"order.created", "order.paid", "orders.archived", "customer.created", ""}
	var all []string // delivery IDs, oldest first
	for i := range 17 {
		id := fmt.Sprintf("d-%02d", i)
		et := types[i%len(types)]
		s.accept("shop", id, []byte(`{}`), withHeaders("X-Event-Type", et))
		all = append(all, id+"|"+et)
	}
	slices.Reverse(all) // newest first: each delivery is accepted after the one before
	for _, filter := range []string{"order.created", "order.*", "order*", "customer.created", "none.such", "*", ""} {
		var want []string
		for _, x := range all {
			id, et, _ := strings.Cut(x, "|")
			if p, ok := strings.CutSuffix(filter, "*"); filter == "" || et == filter || (ok && strings.HasPrefix(et, p)) {
				want = append(want, id+"|"+et)
			}
		}
		for _, limit := range []string{"1", "2", "5", "500"} {
			var got []string
			q := url.Values{"event_type": {filter}, "limit": {limit}}
			for {
				p := s.listPage("shop", q)
				for _, it := range p.Items {
					got = append(got, it.DeliveryID+"|"+it.EventType)
				}
				if p.NextCursor == nil {
					break
				}
				q.Set("cursor", *p.NextCursor)
			}
			if !slices.Equal(got, want) {
				t.Errorf("event_type=%q limit=%s: walked %v, want %v", filter, limit, got, want)
			}
		}
	}
	for _, bad := range []string{"order.*.paid", "**", strings.Repeat("a", 256), "a\x01"} {
		r := s.call(http.MethodGet, "/v1/senders/shop/deliveries?"+url.Values{"event_type": {bad}}.Encode())
		if p := wantOpProblem(t, r, http.StatusBadRequest, "invalid-parameter", http.MethodGet, routeDeliveries); !strings.Contains(p.Detail, "event_type") {
			t.Errorf("event_type=%q: detail %q does not name the parameter", bad, p.Detail)
		}
	}
}

// The event type is in the request's log line, and a label of
// hookgate_deliveries_total from a set the configuration bounds.
func TestEventTypeInLogAndMetrics(t *testing.T) {
	t.Parallel()
	var logs testkit.LogBuffer
	s, _ := newDBServer(t, options{log: &logs, yaml: `
senders:
  - name: shop
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    event_type: { header: X-Event-Type }
    forward:
      - name: orders
        url: http://127.0.0.1:1/
        event_types: ["order.*", "customer.created"]
`})
	for i, et := range []string{"order.created", "order.paid", "customer.created", "customer.deleted", "random-1", "random-2", ""} {
		wantAccepted(t, s.post("shop", fmt.Sprint("d-", i), []byte(`{}`), withHeaders("X-Event-Type", et)), "shop", fmt.Sprint("d-", i))
	}
	if !strings.Contains(logs.String(), "event_type=order.paid") || !strings.Contains(logs.String(), "event_type=random-2") {
		t.Errorf("the log lines do not carry the event types:\n%s", logs.String())
	}
	got := samples(t, s.get("/metrics").body, "hookgate_deliveries_total")
	want := map[string]float64{
		`{event_type="order.*",outcome="accepted",sender="shop"}`:          2,
		`{event_type="customer.created",outcome="accepted",sender="shop"}`: 1,
		`{event_type="other",outcome="accepted",sender="shop"}`:            3,
		`{event_type="none",outcome="accepted",sender="shop"}`:             1,
	}
	if !maps.Equal(got, want) {
		t.Errorf("hookgate_deliveries_total = %v, want %v", got, want)
	}
}
