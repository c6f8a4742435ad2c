package console_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/forward"
	"github.com/hookgate/hookgate/internal/sender"
)

// A target removed by a reload while it has forwards waiting stays in
// sight: the overview lists it under its sender as held (with its counts)
// and the delivery page shows its forward held; configured again, it is a
// target like the others.
func TestRemovedTargetShownHeld(t *testing.T) {
	t.Parallel()
	e := newEnv(t, newOptions())
	c := e.client()
	e.signIn(c)
	e.ingest("d-1", "application/json", `{"n":1}`) // a forward to orders-svc, pending
	removed, err := config.Parse([]byte(strings.Replace(sendersYAML, `    forward:
      - name: orders-svc
        url: http://127.0.0.1:9/hooks/orders
        max_attempts: 3
`, "", 1)), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	e.live.Swap(sender.MustCompile(removed).Snapshot())

	p := e.do(c, http.MethodGet, "/console/", nil, nil)
	if p.status != http.StatusOK || !strings.Contains(p.body, `<tr class="removed-target">`) ||
		!strings.Contains(p.body, `<span class="name">orders-svc</span> <span class="held">held: `+forward.HeldTargetRemoved+`</span>`) {
		t.Errorf("the overview does not show orders-svc held (%d):\n%.3000s", p.status, p.body)
	}
	p = e.do(c, http.MethodGet, "/console/senders/orders/deliveries/d-1", nil, nil)
	if p.status != http.StatusOK || !strings.Contains(p.body, `<span class="held">held: `+forward.HeldTargetRemoved+`</span>`) {
		t.Errorf("the delivery page does not show its forward held (%d):\n%.3000s", p.status, p.body)
	}

	e.live.Swap(sender.MustCompile(e.cfg).Snapshot())
	p = e.do(c, http.MethodGet, "/console/", nil, nil)
	if strings.Contains(p.body, "removed-target") || strings.Contains(p.body, forward.HeldTargetRemoved) {
		t.Errorf("orders-svc is configured again but still shown removed:\n%.3000s", p.body)
	}
}
