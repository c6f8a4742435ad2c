package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// hookgate config check loads the file as serve does: it prints what it
// holds and exits 0, or exits 1 naming every unset ${VAR} with its line.
func TestConfigCheck(t *testing.T) {
	t.Parallel()
	var stdout bytes.Buffer
	good := writeConfig(t, senderConfig)
	if err := run(t.Context(), []string{"config", "check", "--config", good}, envOf(), &stdout, &stdout); err != nil {
		t.Fatalf("a valid file: %v", err)
	}
	if !strings.Contains(stdout.String(), good+": loads: 1 senders") {
		t.Errorf("a valid file: printed %q", stdout.String())
	}
	bad := writeConfig(t, "senders:\n  - name: acme-${HOOKGATE_TEST_CHECK_UNSET_A}\n    preset: generic\n    delivery_id: { header: X-Delivery-Id }\n    retention: ${HOOKGATE_TEST_CHECK_UNSET_B}\n")
	stdout.Reset()
	err := run(t.Context(), []string{"config", "check"}, envOf("HOOKGATE_CONFIG", bad), &stdout, &stdout)
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != 1 || !strings.Contains(err.Error(), "HOOKGATE_TEST_CHECK_UNSET_A (line 2), HOOKGATE_TEST_CHECK_UNSET_B (line 5) are not set") || !strings.Contains(err.Error(), bad) {
		t.Errorf("unset variables: err = %v, want exit status 1 naming both with their lines and the file", err)
	}
	if err := run(t.Context(), []string{"config"}, envOf(), &stdout, &stdout); !errors.As(err, &ee) || ee.code != 2 {
		t.Errorf("config without check: %v, want a usage error", err)
	}
}
