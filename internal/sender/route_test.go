package sender_test

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/hookgate/hookgate/internal/jsonptr"
	"github.com/hookgate/hookgate/internal/sender"
)

// routeSender parses one sender with the given extra lines and returns it.
func routeSender(t *testing.T, preset string, extra ...string) *sender.Sender {
	t.Helper()
	c := mustParse(t, "senders:\n"+presetSender("s", preset, extra...), env(map[string]string{"K": whsec("k-0123456789abcdef")}))
	s, _ := c.Get("s")
	return s
}

// Each preset reads its event type where the sender puts it; generic has
// none unless configured, and a missing event type is empty, not an error.
func TestPresetEventTypes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, preset string
		extra        []string
		header       http.Header
		body         string
		want         string
	}{
		{"github", "github", []string{"secret: x-0123456789abcdef"}, http.Header{"X-Github-Event": {"push"}}, `{}`, "push"},
		{"github without the header", "github", []string{"secret: x-0123456789abcdef"}, http.Header{}, `{}`, ""},
		{"stripe", "stripe", []string{"secret: x-0123456789abcdef"}, nil, `{"id":"evt_1","type":"invoice.paid"}`, "invoice.paid"},
		{"stripe without type", "stripe", []string{"secret: x-0123456789abcdef"}, nil, `{"id":"evt_1"}`, ""},
		{"stripe type not a string", "stripe", []string{"secret: x-0123456789abcdef"}, nil, `{"id":"evt_1","type":{"a":1}}`, ""},
		{"shopify", "shopify", []string{"secret: x-0123456789abcdef"}, http.Header{"X-Shopify-Topic": {"orders/create"}}, `{}`, "orders/create"},
		{"slack event_callback", "slack", []string{"secret: x-0123456789abcdef"}, nil, `{"type":"event_callback","event_id":"Ev1","event":{"type":"app_mention"}}`, "app_mention"},
		{"slack other type", "slack", []string{"secret: x-0123456789abcdef"}, nil, `{"type":"app_rate_limited","event_id":"Ev1"}`, "app_rate_limited"},
		{"standard-webhooks", "standard-webhooks", []string{"secret: ${K}"}, nil, `{"type":"user.created"}`, "user.created"},
		{"standard-webhooks, body not JSON", "standard-webhooks", []string{"secret: ${K}"}, nil, `type=user.created`, ""},
		{"generic: none", "generic", []string{"delivery_id: { header: X-Id }"}, http.Header{"X-Event-Type": {"a"}}, `{"type":"b"}`, ""},
		{"generic header", "generic", []string{"delivery_id: { header: X-Id }", "event_type: { header: X-Event-Type }"}, http.Header{"X-Event-Type": {"order.created", "second"}}, `{}`, "order.created"},
		{"generic pointer", "generic", []string{"delivery_id: { json_pointer: /id }", "event_type: { json_pointer: /meta/kind }"}, nil, `{"id":"1","meta":{"kind":"order.paid"}}`, "order.paid"},
		{"generic pointer to a number", "generic", []string{"delivery_id: { json_pointer: /id }", "event_type: { json_pointer: /kind }"}, nil, `{"id":"1","kind":42}`, "42"},
		{"override a preset", "github", []string{"secret: x-0123456789abcdef", "event_type: { json_pointer: /action }"}, http.Header{"X-Github-Event": {"push"}}, `{"action":"opened"}`, "opened"},
		{"too long", "generic", []string{"delivery_id: { header: X-Id }", "event_type: { header: X-Event-Type }"}, http.Header{"X-Event-Type": {strings.Repeat("a", 256)}}, `{}`, ""},
		{"control character", "generic", []string{"delivery_id: { json_pointer: /id }", "event_type: { json_pointer: /t }"}, nil, `{"id":"1","t":"a\u0000b"}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := routeSender(t, tc.preset, tc.extra...)
			in := s.Inspect([]byte(tc.body))
			if got := s.EventTypeOf(tc.header, &in); got != tc.want {
				t.Errorf("event type = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestRoutes(t *testing.T) {
	t.Parallel()
	s := routeSender(t, "generic",
		"delivery_id: { json_pointer: /id }",
		"event_type: { json_pointer: /type }",
		"forward:",
		"  - name: all",
		"    url: http://a.internal/",
		"  - name: invoices",
		"    url: http://b.internal/",
		`    event_types: ["invoice.*", "customer.created"]`,
		"  - name: shop-a-live",
		"    url: http://c.internal/",
		"    match:",
		"      - header: X-Shop-Domain",
		`        in: ["shop-a.example", "shop-a2.example"]`,
		"      - json_pointer: /data/livemode",
		`        in: ["true"]`,
		"  - name: big",
		"    url: http://d.internal/",
		`    event_types: ["*"]`,
		"    match:",
		"      - json_pointer: /data/amount",
		`        in: ["100", "null"]`,
	)
	shopA := http.Header{"X-Shop-Domain": {"shop-a.example"}}
	for _, tc := range []struct {
		name   string
		header http.Header
		body   string
		want   []string
	}{
		{"exact type", nil, `{"id":"1","type":"customer.created"}`, []string{"all", "invoices"}},
		{"prefix", nil, `{"id":"1","type":"invoice.paid"}`, []string{"all", "invoices"}},
		{"the prefix alone", nil, `{"id":"1","type":"invoice."}`, []string{"all", "invoices"}},
		{"not the prefix", nil, `{"id":"1","type":"invoice"}`, []string{"all"}},
		{"other type", nil, `{"id":"1","type":"customer.deleted"}`, []string{"all"}},
		{"no type", nil, `{"id":"1"}`, []string{"all"}},
		{"header and pointer hold", shopA, `{"id":"1","data":{"livemode":true}}`, []string{"all", "shop-a-live"}},
		{"second alternative", http.Header{"X-Shop-Domain": {"shop-a2.example"}}, `{"id":"1","data":{"livemode":true}}`, []string{"all", "shop-a-live"}},
		{"only the header holds", shopA, `{"id":"1","data":{"livemode":false}}`, []string{"all"}},
		{"a string is not the boolean", shopA, `{"id":"1","data":{"livemode":"yes"}}`, []string{"all"}},
		{"string compared without quotes", shopA, `{"id":"1","data":{"livemode":"true"}}`, []string{"all", "shop-a-live"}},
		{"only the pointer holds", http.Header{"X-Shop-Domain": {"shop-b.example"}}, `{"id":"1","data":{"livemode":true}}`, []string{"all"}},
		{"number as its text", nil, `{"id":"1","data":{"amount":100}}`, []string{"all", "big"}},
		{"null", nil, `{"id":"1","data":{"amount":null}}`, []string{"all", "big"}},
		{"other number text", nil, `{"id":"1","data":{"amount":100.0}}`, []string{"all"}},
		{"object never matches", nil, `{"id":"1","data":{"amount":{"v":100}}}`, []string{"all"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in := s.Inspect([]byte(tc.body))
			if in.JSONErr != nil {
				t.Fatal(in.JSONErr)
			}
			got := s.Route(s.EventTypeOf(tc.header, &in), tc.header, &in)
			if !slices.Equal(got, tc.want) {
				t.Errorf("Route = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestRouteNoTargetMatches(t *testing.T) {
	t.Parallel()
	s := routeSender(t, "generic", "delivery_id: { header: X-Id }", "event_type: { header: X-Type }",
		"forward:", "  - name: a", "    url: http://a.internal/", `    event_types: [a.b]`)
	in := s.Inspect(nil)
	if got := s.Route("c", http.Header{}, &in); got != nil {
		t.Errorf("Route = %q, want nil", got)
	}
	if got := s.Route("a.b", http.Header{}, &in); !slices.Equal(got, []string{"a"}) {
		t.Errorf("Route = %q, want [a]", got)
	}
	if len(s.Pointers()) != 0 {
		t.Errorf("a sender of headers only reads pointers %v", s.Pointers())
	}
	if in.Values != nil {
		t.Errorf("a sender of headers only parsed its body: %v", in.Values)
	}
}

func TestEventTypeLabel(t *testing.T) {
	t.Parallel()
	s := routeSender(t, "generic", "delivery_id: { header: X-Id }", "event_type: { header: X-Type }",
		"forward:",
		"  - name: a", "    url: http://a.internal/", `    event_types: ["invoice.*", "customer.created"]`,
		"  - name: b", "    url: http://b.internal/", `    event_types: ["invoice.paid"]`)
	for et, want := range map[string]string{
		"customer.created": "customer.created",
		"invoice.paid":     "invoice.paid",
		"invoice.voided":   "invoice.*",
		"customer.deleted": "other",
		"":                 "none",
	} {
		if got := s.EventTypeLabel(et); got != want {
			t.Errorf("EventTypeLabel(%q) = %q, want %q", et, got, want)
		}
	}
}

func TestRouteConfigErrors(t *testing.T) {
	t.Parallel()
	target := func(lines ...string) string {
		out := "senders:\n" + senderYAML("x", "delivery_id: { header: X-Id }", "forward:", "  - name: a", "    url: http://a.internal/")
		for _, l := range lines {
			out += "        " + l + "\n"
		}
		return out
	}
	for _, tc := range []struct {
		name, yaml string
		want       []string
	}{
		{"star in the middle", target(`event_types: ["invoice.*.paid"]`), []string{"senders[0].forward[0].event_types[0]", `"*"`, "end"}},
		{"two stars", target(`event_types: ["a", "b**"]`), []string{"senders[0].forward[0].event_types[1]", `"*"`}},
		{"empty pattern", target(`event_types: [""]`), []string{"senders[0].forward[0].event_types[0]", "empty"}},
		{"empty list", target(`event_types: []`), []string{"senders[0].forward[0].event_types", "leave event_types out"}},
		{"pattern too long", target(`event_types: ["` + strings.Repeat("a", 256) + `"]`), []string{"event_types[0]", "255"}},
		{"match without in", target("match: [{ header: X-Shop }]"), []string{"senders[0].forward[0].match[0].in", "is required"}},
		{"match with empty in", target("match: [{ header: X-Shop, in: [] }]"), []string{"senders[0].forward[0].match[0].in", "at least 1"}},
		{"match without a place", target(`match: [{ in: ["a"] }]`), []string{"senders[0].forward[0].match[0].header", "is required", "json_pointer"}},
		{"match with both places", target(`match: [{ header: X-A, json_pointer: /a, in: ["a"] }]`), []string{"senders[0].forward[0].match[0].header", "cannot be set together"}},
		{"match bad pointer", target(`match: [{ json_pointer: a, in: ["a"] }]`), []string{"senders[0].forward[0].match[0].json_pointer", "JSON pointer"}},
		{"match bad header", target(`match: [{ header: "X A", in: ["a"] }]`), []string{"senders[0].forward[0].match[0].header", "header name"}},
		{"unknown field in match", target(`match: [{ headr: X-A, in: ["a"] }]`), []string{"headr", "not found"}},
		{"unknown field in target", target(`event_type: ["a"]`), []string{"event_type", "not found"}},
		{"event_type with both", "senders:\n" + senderYAML("x", "delivery_id: { header: X-Id }", "event_type: { header: X-T, json_pointer: /t }"),
			[]string{"senders[0].event_type.header", "cannot be set together with event_type.json_pointer"}},
		{"event_type bad pointer", "senders:\n" + senderYAML("x", "delivery_id: { header: X-Id }", "event_type: { json_pointer: t }"),
			[]string{"senders[0].event_type.json_pointer", "JSON pointer"}},
		{"unknown field in event_type", "senders:\n" + senderYAML("x", "delivery_id: { header: X-Id }", "event_type: { jsonpointer: /t }"),
			[]string{"jsonpointer", "not found"}},
		{"duplicate target names", "senders:\n" + senderYAML("x", "delivery_id: { header: X-Id }", "forward:",
			"  - name: a", "    url: http://a.internal/", "  - name: a", "    url: http://b.internal/"),
			[]string{"senders[0].forward", "unique"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := parse([]byte(tc.yaml), noEnv)
			if err == nil {
				t.Fatalf("Parse accepted:\n%s\nresult: %+v", tc.yaml, c)
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
		})
	}
}

// Too many distinct pointers for one Extract call is a start-up error, not
// a per-request one.
func TestRouteTooManyPointers(t *testing.T) {
	t.Parallel()
	lines := []string{"delivery_id: { json_pointer: /id }", "forward:", "  - name: a", "    url: http://a.internal/", "    match:"}
	for i := range jsonptr.MaxExtractPointers {
		lines = append(lines, "      - json_pointer: /p"+strconv.Itoa(i), `        in: ["x"]`)
	}
	_, err := parse([]byte("senders:\n"+senderYAML("x", lines...)), noEnv)
	if err == nil || !strings.Contains(err.Error(), "senders[0].forward") || !strings.Contains(err.Error(), "at most 64") {
		t.Fatalf("Parse error = %v", err)
	}
}

// The body is read once however many pointers the sender reads: Inspect's
// allocations on a 256 KiB body are a handful whatever its shape and the
// number of pointers, and the pointers shared by the delivery ID, the
// event type and the conditions are resolved once. Not parallel: it
// measures the process's allocations (few runs: -race makes each slow).
func TestInspectReadsTheBodyOnce(t *testing.T) {
	const size = 256 << 10
	lines := []string{"delivery_id: { json_pointer: /id }", "event_type: { json_pointer: /type }", "forward:",
		"  - name: a", "    url: http://a.internal/", `    event_types: ["order.*"]`, "    match:",
		"      - json_pointer: /id", `        in: ["evt_1"]`, // the delivery ID's pointer again
	}
	for i := range 20 {
		lines = append(lines, "      - json_pointer: /data/"+strconv.Itoa(i), `        in: ["0"]`)
	}
	s := mustParse(t, "senders:\n"+senderYAML("x", lines...), noEnv).Senders[0]
	if n := len(s.Pointers()); n != 22 {
		t.Fatalf("%d pointers, want 22 (the delivery ID's once)", n)
	}
	body := []byte(`{"id":"evt_1","type":"order.created","data":[` + strings.Repeat("0,", size/2) + `0]}`)
	h := http.Header{}
	var got []string
	allocs := testing.AllocsPerRun(2, func() {
		in := s.Inspect(body)
		got = s.Route(s.EventTypeOf(h, &in), h, &in)
	})
	if !slices.Equal(got, []string{"a"}) {
		t.Fatalf("Route = %q", got)
	}
	// The values (one slice), the strings found, nothing per byte or per
	// element of the body (131,073 of them). 3 without -race; the
	// race detector adds a varying few (5 to 7 here, 11 once in CI, when
	// the bound was 10).
	if allocs > 32 {
		t.Errorf("Inspect and Route allocate %.0f times per request on a 256 KiB body, want at most 32 (nothing per byte or element)", allocs)
	}
	bytes, _ := heapPerCall(func() { in := s.Inspect(body); _ = s.Route(s.EventTypeOf(h, &in), h, &in) })
	if bytes > 8<<10 {
		t.Errorf("Inspect and Route allocate %d bytes per request on a 256 KiB body, want a few KiB", bytes)
	}
}
