package sender_test

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/rules"
	"github.com/hookgate/hookgate/internal/sender"
)

// compileWithFilters parses yaml and compiles it with the filters given
// by target name, on the first sender.
func compileWithFilters(t *testing.T, yaml string, filters map[string]string) *sender.Sender {
	t.Helper()
	c, err := config.Parse([]byte(yaml), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	for i := range c.Senders[0].Forward {
		tg := &c.Senders[0].Forward[i]
		if src, ok := filters[tg.Name]; ok {
			if tg.Filter, err = rules.CompileFilter(src, 0); err != nil {
				t.Fatalf("filter of %s: %v", tg.Name, err)
			}
		}
	}
	set, err := sender.Compile(c)
	if err != nil {
		t.Fatal(err)
	}
	return &set.Senders[0]
}

// Prepare keeps the routed targets whose filter passes. A filter that
// fails to evaluate drops its target and is returned, with CEL's message,
// for the event to record; a has()-guarded read of a missing key is no
// error. A target the routes do not pick is not filtered at all, and a
// non-JSON body is no error for a filter that reads raw. Filters read the
// headers as received, as the routes do, not only those stored.
func TestPrepareFilters(t *testing.T) {
	t.Parallel()
	s := compileWithFilters(t, "senders:\n"+senderYAML("s",
		"delivery_id: { header: X-Id }",
		"event_type: { header: X-Type }",
		"forward:",
		"  - { name: big, url: 'https://example.com/a' }",
		"  - { name: broken, url: 'https://example.com/b' }",
		"  - { name: plain, url: 'https://example.com/c' }",
		"  - { name: other, url: 'https://example.com/d', event_types: [other.*] }",
		"  - { name: rawtext, url: 'https://example.com/e' }",
	), map[string]string{
		"big":     `has(body.amount) && body.amount > 1000`,
		"broken":  `body.livemode == true`,
		"other":   `body.nothing == 1`,
		"rawtext": `raw.size() > 0 && headers['content-type'] == 'text/plain' && headers['x-signature'] == 'sig'`,
	})
	prepare := func(id, contentType, body string) sender.Prepared {
		t.Helper()
		r := httptest.NewRequest(http.MethodPost, "/webhooks/s", nil)
		r.Header.Set("X-Id", id)
		r.Header.Set("X-Type", "charge.succeeded")
		r.Header.Set("Content-Type", contentType)
		r.Header.Set("X-Signature", "sig") // not stored, read by the filters
		p, err := s.Prepare(r, []byte(body), nil, time.Now())
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		return p
	}
	broken := func(p sender.Prepared) bool {
		return len(p.RuleErrors) == 1 && p.RuleErrors[0].Target == "broken" && p.RuleErrors[0].Rule == "filter" &&
			strings.Contains(p.RuleErrors[0].Error, "livemode")
	}

	p := prepare("d1", "application/json", `{"amount":5000,"card":"4242424242424242"}`)
	if !slices.Equal(p.Targets, []string{"big", "plain"}) || !broken(p) {
		t.Errorf("amount 5000: targets %q, rule errors %+v; want big and plain, and broken's error", p.Targets, p.RuleErrors)
	}
	for _, e := range p.RuleErrors {
		if strings.Contains(e.Error, "4242") || strings.Contains(e.Error, "5000") {
			t.Errorf("rule error %q holds a value of the body", e.Error)
		}
	}
	p = prepare("d2", "application/json", `{"amount":10,"livemode":true}`)
	if !slices.Equal(p.Targets, []string{"broken", "plain"}) || p.RuleErrors != nil {
		t.Errorf("amount 10 in live mode: targets %q, rule errors %+v; want broken and plain, no error", p.Targets, p.RuleErrors)
	}
	p = prepare("d3", "application/json", `{"livemode":false}`) // no amount: has() guards it
	if !slices.Equal(p.Targets, []string{"plain"}) || p.RuleErrors != nil {
		t.Errorf("no amount: targets %q, rule errors %+v; want plain only, no error", p.Targets, p.RuleErrors)
	}
	p = prepare("d4", "text/plain", `amount=5000`)
	if !slices.Equal(p.Targets, []string{"plain", "rawtext"}) || len(p.RuleErrors) != 2 ||
		p.RuleErrors[0].Target != "big" || p.RuleErrors[1].Target != "broken" {
		t.Errorf("a text body: targets %q, rule errors %+v; want plain and rawtext, and the errors of big and broken (body is not JSON)", p.Targets, p.RuleErrors)
	}
}

// A sender whose targets have no filter gets the routes' own slice,
// shared: its rules cost it nothing. So does a delivery whose filters all
// pass.
func TestPrepareWithoutFiltersSharesTargets(t *testing.T) {
	t.Parallel()
	yaml := "senders:\n" + senderYAML("s", "delivery_id: { header: X-Id }", "forward:",
		"  - { name: a, url: 'https://example.com/a' }", "  - { name: b, url: 'https://example.com/b' }")
	r := httptest.NewRequest(http.MethodPost, "/webhooks/s", nil)
	r.Header.Set("X-Id", "d1")
	body := []byte(`{"amount":5000}`)
	for name, filters := range map[string]map[string]string{"no filter": nil, "a passing filter": {"b": `body.amount > 1000`}} {
		s := compileWithFilters(t, yaml, filters)
		p, err := s.Prepare(r, body, nil, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(p.Targets, []string{"a", "b"}) || p.RuleErrors != nil || &p.Targets[0] != &s.TargetNames()[0] {
			t.Errorf("%s: targets %q (shared: %v), rule errors %+v; want the configuration's shared slice and no error",
				name, p.Targets, &p.Targets[0] == &s.TargetNames()[0], p.RuleErrors)
		}
	}
}
