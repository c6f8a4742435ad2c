package console_test

import (
	"net/http"
	"strings"
	"testing"
)

// TestConsoleForwardsHeldByARate: the unfinished forwards of a target with
// a rate say they wait for its turns, on the delivery's page and, counted,
// on the target's page; a target without a rate says nothing of it.
func TestConsoleForwardsHeldByARate(t *testing.T) {
	t.Parallel()
	yaml := strings.Replace(sendersYAML, "        max_attempts: 3\n", "        max_attempts: 3\n        rate: 50/s\n", 1)
	e := newEnvWith(t, yaml, newOptions(), workOpts{})
	e.ingest("r-1", "application/json", `{}`) // its forward waits in the outbox: pending
	c := e.client()
	e.signIn(c)
	if p := e.do(c, http.MethodGet, "/console/senders/orders/deliveries/r-1", nil, nil); !strings.Contains(p.body, `<span class="held">held: rate 50/s</span>`) {
		t.Errorf("the delivery's page does not say the forward waits for the rate: %.3000s", p.body)
	}
	target := e.do(c, http.MethodGet, "/console/senders/orders/targets/orders-svc/failed", nil, nil)
	if !strings.Contains(target.body, `data-held="1"><span class="held">1 forwards held: rate 50/s</span>`) {
		t.Errorf("the target's page does not count the forward waiting for the rate: %.4000s", target.body)
	}

	plain := newEnv(t, newOptions())
	plain.ingest("r-1", "application/json", `{}`)
	pc := plain.client()
	plain.signIn(pc)
	if p := plain.do(pc, http.MethodGet, "/console/senders/orders/deliveries/r-1", nil, nil); strings.Contains(p.body, "held:") {
		t.Errorf("a forward to a target without a rate says it is held: %.3000s", p.body)
	}
}
