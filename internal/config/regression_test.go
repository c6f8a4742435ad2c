// Regression tests for bugs found in review; each was failing before its fix.
package config_test

import (
	"strings"
	"testing"

	"github.com/hookgate/hookgate/internal/config"
)

// Was a bug: config.go Duration.UnmarshalYAML formats the offending value into its
// error ("line %d: %q is not a duration"), and yaml.v3's type errors quote
// the value too ("cannot unmarshal !!str `s3cr3t-...` into int64"). A value
// expanded from ${VAR} therefore reaches the error (and the process's stderr),
// against Parse's promise that the error "never contains the value of a
// secret".
func TestDecodeErrorsHideEnvValues(t *testing.T) {
	t.Parallel()
	const secret = "s3cr3t-value"
	lookup := env(map[string]string{"SECRET": secret})
	for _, field := range []string{"retention", "max_body_bytes"} {
		yaml := "senders:\n" + sender("x", "delivery_id: { header: X-Id }", field+": ${SECRET}")
		_, err := config.Parse([]byte(yaml), lookup)
		if err == nil {
			t.Fatalf("%s: Parse succeeded", field)
		}
		if strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("%s: error %q contains (part of) the value of ${SECRET}", field, err)
		}
	}
}

// Was a bug: errors raised while decoding name the line but not the field path, so
// "retention: abc" in the third sender gives `parse YAML: line 13: "abc" is
// not a duration…` instead of "senders[2].retention: …" as validation errors
// (and design.md §3: "a message that names the field and the reason") do.
func TestDecodeErrorsNameFieldPath(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ line, path string }{
		{"retention: abc", "senders[1].retention"},
		{"max_body_bytes: lots", "senders[1].max_body_bytes"},
	} {
		yaml := "senders:\n" + sender("a", "delivery_id: { header: X-Id }") +
			sender("b", "delivery_id: { header: X-Id }", tc.line)
		_, err := config.Parse([]byte(yaml), noEnv)
		if err == nil || !strings.Contains(err.Error(), tc.path) {
			t.Errorf("%s: error %v does not name %s", tc.line, err, tc.path)
		}
	}
}

// Bug (or at least a surprise): expand forces the !!str tag on every
// expanded scalar, so a number from the environment cannot fill a numeric
// field: "max_body_bytes: ${MAX}" with MAX=16 fails with
// "cannot unmarshal !!str `16` into int64".
func TestEnvValueInNumericField(t *testing.T) {
	t.Parallel()
	yaml := "senders:\n" + sender("x", "delivery_id: { header: X-Id }", "max_body_bytes: ${MAX}")
	c, err := config.Parse([]byte(yaml), env(map[string]string{"MAX": "16"}))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if c.Senders[0].MaxBodyBytes != 16 {
		t.Errorf("max_body_bytes = %d, want 16", c.Senders[0].MaxBodyBytes)
	}
}
