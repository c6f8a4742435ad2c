package console_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/hookgate/hookgate/internal/console"
)

// The delivery page shows the targets whose filter failed to evaluate on
// the delivery, with CEL's message (escaped) and no value of the body; a
// delivery without rule errors shows no such section.
func TestConsoleDeliveryShowsRuleErrors(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, `
senders:
  - name: orders
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    forward:
      - name: orders-svc
        url: http://127.0.0.1:9/hooks/orders
      - name: analytics
        url: http://127.0.0.1:9/hooks/analytics
        filter: 'body.total > 100'
`, console.Config{AdminToken: token}, workOpts{})
	e.ingest("bad-1", "application/json", `{"customer":"<b>ada@example.com</b>"}`)
	e.ingest("good-1", "application/json", `{"total":500}`)
	c := e.client()
	e.signIn(c)

	p := e.do(c, http.MethodGet, "/console/senders/orders/deliveries/bad-1", nil, nil)
	if p.status != http.StatusOK {
		t.Fatalf("delivery bad-1: %d", p.status)
	}
	i := strings.Index(p.body, `id="rule-errors"`)
	if i < 0 {
		t.Fatalf("delivery bad-1 shows no rule errors: %.3000s", p.body)
	}
	section := p.body[i:]
	section = section[:strings.Index(section, "</table>")]
	if !strings.Contains(section, "analytics") || !strings.Contains(section, "filter") || !strings.Contains(section, "total") {
		t.Errorf("the rule errors do not name analytics's filter and the key total: %s", section)
	}
	if strings.Contains(section, "ada@example.com") {
		t.Errorf("the rule errors hold a value of the body: %s", section)
	}
	if strings.Count(p.body, "orders-svc") == 0 || strings.Contains(p.body[:i], ">analytics<") {
		t.Errorf("bad-1's forwards: want orders-svc's and none to analytics")
	}
	if g := e.do(c, http.MethodGet, "/console/senders/orders/deliveries/good-1", nil, nil); strings.Contains(g.body, `id="rule-errors"`) {
		t.Errorf("delivery good-1 shows rule errors")
	}
}
