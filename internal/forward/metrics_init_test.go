package forward_test

import (
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/forward"
)

// Every target's forward series exist at zero before the first event,
// with the labels docs/operations.md shows (sender and target); so do the
// rule errors of the rules a target has, and only those.
func TestMetricsPresentBeforeTheFirstEvent(t *testing.T) {
	t.Parallel()
	cfg, err := config.Parse([]byte(`
senders:
  - name: shop
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    forward:
      - name: orders
        url: http://127.0.0.1:9/hooks
      - name: chat
        url: http://127.0.0.1:9/chat
        filter: 'has(body.total)'
        transform: '{"text": "order"}'
`), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	forward.NewMetrics(reg).Init(cfg)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			sort.Strings(labels)
			got[mf.GetName()+"{"+strings.Join(labels, ",")+"}"] = true
		}
	}
	for _, want := range []string{
		"hookgate_forward_attempts_total{outcome=delivered,sender=shop,target=orders}",
		"hookgate_forward_attempts_total{outcome=retry,sender=shop,target=orders}",
		"hookgate_forward_attempts_total{outcome=failed,sender=shop,target=orders}",
		"hookgate_forward_duration_seconds{sender=shop,target=orders}",
		"hookgate_forward_breaker_open{sender=shop,target=orders}",
		"hookgate_forward_waits_total{reason=breaker,sender=shop,target=orders}",
		"hookgate_forward_waits_total{reason=paused,sender=shop,target=orders}",
		"hookgate_forward_waits_total{reason=busy,sender=shop,target=orders}",
		"hookgate_forward_waits_total{reason=after,sender=shop,target=orders}",
		"hookgate_rule_errors_total{rule=filter,sender=shop,target=chat}",
		"hookgate_rule_errors_total{rule=transform,sender=shop,target=chat}",
	} {
		if !got[want] {
			t.Errorf("%s is missing before the first event; have %v", want, got)
		}
	}
	for k := range got {
		if strings.HasPrefix(k, "hookgate_rule_errors_total") && strings.Contains(k, "target=orders") {
			t.Errorf("%s: orders has no rules", k)
		}
	}
}
