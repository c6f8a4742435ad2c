package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// rulesTestConfig has a Stripe sender whose billing target filters and
// transforms, and a Shopify sender that turns orders into Slack messages.
const rulesTestConfig = `senders:
  - name: stripe
    preset: stripe
    secret: whsec_dGVzdHNlY3JldHRlc3RzZWNyZXQ=
    forward:
      - name: billing
        url: https://billing.example.com/hooks
        headers: { Authorization: "Basic c2VjcmV0LXZhbHVl" }
        event_types: ["charge.*"]
        filter: >-
          body.type == "charge.succeeded" && body.livemode == true
          && body.data.object.amount > 1000
        transform: '{"id": body.id, "amount": body.data.object.amount}'
        transform_headers: '{"X-Tenant": headers["x-tenant"]}'
  - name: shop
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    event_type: { header: X-Topic }
    forward:
      - name: slack
        url: https://hooks.slack.com/services/T000/B000/XXXX
        secret_path: true
        transform: '"order " + body.name'
      - name: plain
        url: https://plain.example.com/
        filter: string(raw).startsWith("{")
      - name: named
        url: https://named.example.com/
        filter: has(body.name)
`

// runRulesTest runs the real binary's rules test with args and stdin,
// and returns its standard output, standard error and exit status.
func runRulesTest(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "hookgate.yaml")
	if err := os.WriteFile(cfg, []byte(rulesTestConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(buildBinary(t), append([]string{"rules", "test", "--config", cfg}, args...)...)
	cmd.Dir = filepath.Join("..", "..", "internal", "rules", "testdata")
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return out.String(), errOut.String(), 0
	case errors.As(err, &ee):
		return out.String(), errOut.String(), ee.ExitCode()
	}
	t.Fatal(err)
	return "", "", -1
}

func TestRulesTestPasses(t *testing.T) {
	t.Parallel()
	out, errOut, code := runRulesTest(t, "", "--sender", "stripe", "--target", "billing",
		"--header", "X-Tenant: acme", "--header", "Content-Type: application/json", "stripe_charge_succeeded.json")
	want := `event_type: charge.succeeded
filter: passes
Authorization: (the target's headers: not shown)
Content-Type: application/json
X-Tenant: acme

{"amount":2500,"id":"evt_3PqWz2LkdIwHu7ix0Vb1cXyZ"}
`
	if code != 0 || out != want {
		t.Fatalf("exit %d, stdout:\n%s\nwant:\n%s\nstderr: %s", code, out, want, errOut)
	}
	if strings.Contains(out+errOut, "c2VjcmV0LXZhbHVl") {
		t.Error("the target's Authorization header was printed")
	}
}

func TestRulesTestFilteredOut(t *testing.T) {
	t.Parallel()
	// From standard input: a test-mode charge of 500.
	body, err := os.ReadFile(filepath.Join("..", "..", "internal", "rules", "testdata", "stripe_charge_small_test_mode.json"))
	if err != nil {
		t.Fatal(err)
	}
	out, errOut, code := runRulesTest(t, string(body), "--sender", "stripe", "--target", "billing")
	if code != 1 || out != "event_type: charge.succeeded\nfilter: filtered out\n" {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	// event_types leaves an invoice out before the filter runs.
	out, _, code = runRulesTest(t, "", "--sender", "stripe", "--target", "billing", "stripe_connect_invoice_paid.json")
	if code != 1 || !strings.Contains(out, "routes: filtered out (event_types or match)") {
		t.Errorf("invoice: exit %d, stdout %q", code, out)
	}
	out, _, code = runRulesTest(t, "a=1", "--sender", "shop", "--target", "plain", "--header", "X-Delivery-Id: 1")
	if code != 1 || !strings.Contains(out, "filter: filtered out") {
		t.Errorf("raw: exit %d, stdout %q", code, out)
	}
}

// A string result goes as it is, with the sender's Content-Type.
func TestRulesTestStringTransform(t *testing.T) {
	t.Parallel()
	out, errOut, code := runRulesTest(t, "", "--sender", "shop", "--target", "slack",
		"--header", "X-Delivery-Id: 42", "--header", "Content-Type: text/plain", "shopify_order_create.json")
	if want := "event_type: (none)\nfilter: none\nContent-Type: text/plain\n\norder #9999\n"; code != 0 || out != want {
		t.Errorf("exit %d, stdout %q, want %q; stderr %q", code, out, want, errOut)
	}
}

func TestRulesTestErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		stdin  string
		args   []string
		stderr string
	}{
		{"filter error", "not json", []string{"--sender", "shop", "--target", "named", "--header", "X-Delivery-Id: 1"},
			"hookgate: filter: no such attribute(s): body (the body is not JSON: read raw)"},
		{"transform error", `{"type":"charge.succeeded","livemode":true,"data":{"object":{"amount":2000}}}`,
			[]string{"--sender", "stripe", "--target", "billing"},
			"hookgate: transform: no such key: id"},
		{"no such target", "", []string{"--sender", "stripe", "--target", "nope"}, `sender "stripe" has no target "nope"`},
		{"no sender flag", "", []string{"--target", "billing"}, "--sender and --target are required"},
		{"no such file", "", []string{"--sender", "stripe", "--target", "billing", "missing.json"}, "missing.json"},
		{"bad header", "", []string{"--sender", "stripe", "--target", "billing", "--header", "nocolon"}, "want 'Name: value'"},
	} {
		out, errOut, code := runRulesTest(t, tc.stdin, tc.args...)
		if code != 2 || !strings.Contains(errOut, tc.stderr) {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want 2 and %q", tc.name, code, out, errOut, tc.stderr)
		}
	}
}
