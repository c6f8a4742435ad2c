package forward_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// transformTargets are two targets of acme with transforms: ok reshapes
// the body and adds a header from it; broken reads a member the body does
// not have, without has().
func transformTargets(ok, broken string) string {
	return fmt.Sprintf(`      - name: ok
        url: %s
        max_attempts: 5
        transform: '{"order": body.id, "total": body.amount}'
        transform_headers: '{"X-Tenant": body.tenant}'
      - name: broken
        url: %s
        max_attempts: 5
        transform: '{"email": body.customer.email}'
`, ok, broken)
}

// A transform's result is what the target receives, with its Content-Type
// and header; a transform that fails to evaluate fails its forward at
// once: the job cancelled at attempt 1 with the rule's message as its
// error (no value of the body), the target never called, the failure
// counted in hookgate_rule_errors_total{rule="transform"} and as a failed
// attempt. The same from River's worker and from the fast path.
func TestTransformAppliedOrFailsAtOnce(t *testing.T) {
	t.Parallel()
	for _, fast := range []bool{false, true} {
		t.Run(fmt.Sprintf("fast=%v", fast), func(t *testing.T) {
			t.Parallel()
			ok := testkit.NewTarget(t, testkit.Always(http.StatusOK))
			broken := testkit.NewTarget(t, testkit.Always(http.StatusOK))
			e := newEnvOrFast(t, transformTargets(ok.URL, broken.URL), fast)
			d := e.deliver("t-1", []byte(`{"id":"o-1","amount":1250,"tenant":"t-7","customer":{"name":"Ada","card":"4242424242424242"}}`), "application/json")
			js := e.waitJobs(2)
			for _, j := range js {
				switch j.Target {
				case "ok":
					if j.State != "completed" {
						t.Errorf("ok's job: %+v, want completed", j)
					}
				case "broken":
					if j.State != "cancelled" || j.Attempt != 1 || len(j.Errors) != 1 || !strings.Contains(j.Errors[0], "email") ||
						strings.Contains(j.Errors[0], "Ada") || strings.Contains(j.Errors[0], "4242") {
						t.Errorf("broken's job: %+v; want cancelled at attempt 1 with one error naming email and no value of the body", j)
					}
				}
			}
			hits := ok.HitsFor(d.eventID)
			if len(hits) != 1 || string(hits[0].Body) != `{"order":"o-1","total":1250}` ||
				hits[0].Header.Get("Content-Type") != "application/json" || hits[0].Header.Get("X-Tenant") != "t-7" {
				t.Errorf("ok received %d requests, the first %+v; want the transformed body as JSON with X-Tenant t-7", len(hits), hits)
			}
			if n := len(broken.Hits()); n != 0 {
				t.Errorf("broken received %d requests, want none", n)
			}
			if v := e.counter("hookgate_rule_errors_total", map[string]string{"target": "broken", "rule": "transform"}); v != 1 {
				t.Errorf(`hookgate_rule_errors_total{target="broken",rule="transform"} = %v, want 1`, v)
			}
			if v := e.counter("hookgate_forward_attempts_total", map[string]string{"target": "broken", "outcome": "failed"}); v != 1 {
				t.Errorf(`failed attempts of broken = %v, want 1`, v)
			}
		})
	}
}

// newEnvOrFast is newEnv working its forwards, with a fast path when fast.
func newEnvOrFast(t *testing.T, forwardYAML string, fast bool) *env {
	t.Helper()
	if fast {
		return newFastEnv(t, forwardYAML, envOpts{Work: true}, fastOptions{})
	}
	return newEnv(t, forwardYAML, envOpts{Work: true})
}
