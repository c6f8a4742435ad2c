package config_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/rules"
)

// ruleSender is a sender with one target and the given target lines
// (indented by eight spaces).
func ruleSender(target ...string) string {
	s := "senders:\n" + sender("shop", "delivery_id: { header: X-Id }", "forward:",
		"  - name: other", "    url: http://other.test/", "  - name: slack", "    url: http://slack.test/")
	for _, l := range target {
		s += "        " + l + "\n"
	}
	return s
}

func TestParseCompilesRules(t *testing.T) {
	t.Parallel()
	c := mustParse(t, ruleSender(
		`filter: 'body.total > 10 && headers["x-shop"] == "a"'`,
		`transform: '{"text": "order " + body.name}'`,
		`transform_headers: '{"X-Shop": headers["x-shop"]}'`,
		`rule_cost_limit: 5000`,
	), noEnv)
	tg, _ := c.Target("shop", "slack")
	if tg.Filter == nil || tg.Transform == nil || tg.RuleCostLimit != 5000 {
		t.Fatalf("filter %v, transform %v, cost limit %d", tg.Filter, tg.Transform, tg.RuleCostLimit)
	}
	a := rules.NewActivation(rules.Input{Body: []byte(`{"total":12,"name":"#1"}`), Headers: http.Header{"X-Shop": {"a"}}})
	if ok, err := tg.Filter.Eval(a); err != nil || !ok {
		t.Errorf("filter: %v, %v", ok, err)
	}
	r, err := tg.Transform.Apply(a, 100)
	if err != nil || string(r.Body) != `{"text":"order #1"}` || r.Headers["X-Shop"] != "a" {
		t.Errorf("transform: %s %v %v", r.Body, r.Headers, err)
	}
	// A target without rules has none, and the default cost limit.
	other, _ := c.Target("shop", "other")
	if other.Filter != nil || other.Transform != nil || other.RuleCostLimit != rules.DefaultCostLimit {
		t.Errorf("other: %v %v %d", other.Filter, other.Transform, other.RuleCostLimit)
	}
	// Headers alone, or the body alone, make a transform.
	c = mustParse(t, ruleSender(`transform_headers: '{"X-A": "1"}'`), noEnv)
	if tg, _ := c.Target("shop", "slack"); tg.Transform == nil {
		t.Error("transform_headers alone compiled no transform")
	}
}

func TestParseRefusesInvalidRules(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		line string
		want []string
	}{
		{"syntax", `filter: 'body.a =='`,
			[]string{"senders[0].forward[1].filter (shop, target slack): ", "ERROR: 1:10: Syntax error"}},
		{"undeclared", `filter: 'body.a == 1 && amount > 2'`,
			[]string{"senders[0].forward[1].filter (shop, target slack): ", "1:16: undeclared reference to 'amount'"}},
		{"not a bool", `filter: 'body.livemode'`,
			[]string{"senders[0].forward[1].filter (shop, target slack): ", "must return a bool, not dyn"}},
		{"transform of an int", `transform: '1 + 2'`,
			[]string{"senders[0].forward[1].transform (shop, target slack): ", "must return a map, a list, a string or bytes, not int"}},
		{"headers not a map", `transform_headers: '"X-A: 1"'`,
			[]string{"senders[0].forward[1].transform_headers (shop, target slack): ", "must return a map of strings to strings, not string"}},
		{"headers with a type error", `transform_headers: '{"X-A": 1 + "a"}'`,
			[]string{"senders[0].forward[1].transform_headers (shop, target slack): ", "1:11: found no matching overload for '_+_'"}},
		{"cost limit over the maximum", `rule_cost_limit: 1000001`,
			[]string{"senders[0].forward[1].rule_cost_limit (shop, target slack): ", "above the maximum of 1000000"}},
		{"negative cost limit", `rule_cost_limit: -1`, []string{"rule_cost_limit"}},
	} {
		_, err := config.Parse([]byte(ruleSender(tc.line)), noEnv)
		if err == nil {
			t.Errorf("%s: no error", tc.name)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v\nwant %q", tc.name, err, w)
			}
		}
	}
}

// A reload compiles the new rules; an invalid one is refused.
func TestReloadCompilesRules(t *testing.T) {
	t.Parallel()
	from := mustParse(t, ruleSender(`filter: 'body.a == 1'`), noEnv)
	to := mustParse(t, ruleSender(`filter: 'body.a == 2'`, `transform: 'body'`), noEnv)
	ch := config.Diff(from, to)
	if len(ch.TargetsChanged) != 1 || strings.Join(ch.TargetsChanged[0].Fields, ",") != "filter,transform" {
		t.Errorf("changes: %+v", ch)
	}
	tg, _ := to.Target("shop", "slack")
	a := rules.NewActivation(rules.Input{Body: []byte(`{"a":2}`)})
	if ok, err := tg.Filter.Eval(a); err != nil || !ok {
		t.Errorf("the reloaded filter: %v, %v", ok, err)
	}
}

// A rule's compile error shows its expression, but not a value that
// ${VAR} put in it.
func TestRuleErrorHidesEnvironmentValues(t *testing.T) {
	t.Parallel()
	const token = "tok-9f8e7d6c5b4a"
	_, err := config.Parse([]byte(ruleSender(`filter: 'headers["x-token"] == "${TOKEN}" &&'`)), env(map[string]string{"TOKEN": token}))
	if err == nil || strings.Contains(err.Error(), token) || !strings.Contains(err.Error(), "(value from the environment)") {
		t.Fatalf("err = %v", err)
	}
}
