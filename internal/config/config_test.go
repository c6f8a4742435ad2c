package config_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/hookgate/hookgate/internal/config"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// env returns a lookup function over vars, as Parse takes (like os.LookupEnv).
func env(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := vars[k]
		return v, ok
	}
}

// noEnv is a lookup in which no variable is set.
var noEnv = env(nil)

// sender returns the YAML of one list item under senders:, with the given
// extra lines (already indented by four spaces) appended.
func sender(name string, extra ...string) string {
	s := "  - name: " + name + "\n    preset: generic\n"
	for _, e := range extra {
		s += "    " + e + "\n"
	}
	return s
}

func mustParse(t *testing.T, yaml string, lookup func(string) (string, bool)) *config.Config {
	t.Helper()
	c, err := config.Parse([]byte(yaml), lookup)
	if err != nil {
		t.Fatalf("Parse:\n%s\nerror: %v", yaml, err)
	}
	return c
}

func TestParseValidFileAppliesDefaults(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(filepath.Join("testdata", "hookgate.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	c := mustParse(t, string(data), noEnv)
	if len(c.Senders) != 2 {
		t.Fatalf("got %d senders, want 2", len(c.Senders))
	}

	billing, ok := c.Sender("billing")
	if !ok {
		t.Fatal(`Sender("billing") not found`)
	}
	if billing.Preset != "generic" || billing.DeliveryID.Header != "Idempotency-Key" || billing.DeliveryID.JSONPointer != "" {
		t.Errorf("billing = %+v", *billing)
	}
	if got, want := time.Duration(billing.Retention), 168*time.Hour; got != want {
		t.Errorf("default retention = %v, want %v", got, want)
	}
	if got := time.Duration(billing.Retention); got != config.DefaultRetention {
		t.Errorf("default retention = %v, want config.DefaultRetention %v", got, config.DefaultRetention)
	}
	if got, want := billing.MaxBodyBytes, int64(1<<20); got != want {
		t.Errorf("default max_body_bytes = %d, want %d (1 MiB)", got, want)
	}

	orders, ok := c.Sender("orders_v2")
	if !ok {
		t.Fatal(`Sender("orders_v2") not found`)
	}
	if orders.DeliveryID.JSONPointer != "/data/object/id" || orders.DeliveryID.Header != "" {
		t.Errorf("orders_v2 delivery_id = %+v", orders.DeliveryID)
	}
	if got, want := time.Duration(orders.Retention), 30*time.Minute; got != want {
		t.Errorf("explicit retention = %v, want %v", got, want)
	}
	if got, want := orders.MaxBodyBytes, int64(4096); got != want {
		t.Errorf("explicit max_body_bytes = %d, want %d", got, want)
	}

	if s, ok := c.Sender("nobody"); ok || s != nil {
		t.Errorf(`Sender("nobody") = %v, %v; want nil, false`, s, ok)
	}
}

func TestParseBoundaryValuesAreValid(t *testing.T) {
	t.Parallel()
	yaml := "senders:\n" +
		sender(strings.Repeat("a", 63), "delivery_id: { header: X-Id }", "max_body_bytes: 67108864", "retention: 1s") +
		sender("0", "delivery_id: { header: X-Id }", "max_body_bytes: 1") +
		sender("a-_9", "delivery_id: { json_pointer: /a~1b/0/~0c }")
	c := mustParse(t, yaml, noEnv)
	if got := c.Senders[0].MaxBodyBytes; got != 64<<20 {
		t.Errorf("max_body_bytes = %d, want 64 MiB", got)
	}
	if got := time.Duration(c.Senders[0].Retention); got != time.Second {
		t.Errorf("retention = %v, want 1s", got)
	}
	if got := c.Senders[1].MaxBodyBytes; got != 1 {
		t.Errorf("max_body_bytes = %d, want 1", got)
	}
}

func TestLoad(t *testing.T) {
	t.Parallel()
	c, err := config.Load(filepath.Join("testdata", "hookgate.yaml"))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if len(c.Senders) != 2 || c.Senders[0].Name != "billing" {
		t.Errorf("Load returned %+v", c.Senders)
	}

	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("senders: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = config.Load(bad)
	if err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "senders") {
		t.Errorf("Load(invalid file) error = %v; want it to name the file and the field", err)
	}

	missing := filepath.Join(dir, "missing.yaml")
	if _, err := config.Load(missing); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("Load(missing file) error = %v; want an error naming the file", err)
	}
}

func TestParseExpandsEnvironmentVariables(t *testing.T) {
	t.Parallel()
	yaml := "senders:\n" +
		sender("${NAME}", "delivery_id: { header: \"${HDR}\" }", "retention: ${RET}") +
		sender("x-${SUFFIX}-y", "delivery_id: { json_pointer: \"/${A}/${B}\" }")
	c := mustParse(t, yaml, env(map[string]string{
		"NAME": "billing", "HDR": "X-Delivery-Id", "RET": "2h", "SUFFIX": "mid", "A": "data", "B": "id",
	}))
	s := c.Senders[0]
	if s.Name != "billing" || s.DeliveryID.Header != "X-Delivery-Id" || time.Duration(s.Retention) != 2*time.Hour {
		t.Errorf("sender 0 = %+v", s)
	}
	if s := c.Senders[1]; s.Name != "x-mid-y" || s.DeliveryID.JSONPointer != "/data/id" {
		t.Errorf("sender 1 = %+v; want name x-mid-y, json_pointer /data/id", s)
	}
}

func TestParseUnsetVariableIsAnError(t *testing.T) {
	t.Parallel()
	yaml := "senders:\n" + // line 1
		sender("billing", // lines 2, 3
			"delivery_id: { header: X-Id }",               // line 4
			"retention: ${HOOKGATE_TEST_UNSET_RETENTION}") // line 5
	_, err := config.Parse([]byte(yaml), env(map[string]string{"OTHER": "x"}))
	if err == nil {
		t.Fatal("Parse succeeded with an unset ${VAR}")
	}
	for _, want := range []string{"HOOKGATE_TEST_UNSET_RETENTION", "line 5", "not set"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}

	// Every unset variable is named, each with its line, in one error.
	yaml = "senders:\n" + // line 1
		sender("billing-${HOOKGATE_TEST_UNSET_A}", // lines 2, 3
			"delivery_id: { header: X-Id }",               // line 4
			"retention: ${HOOKGATE_TEST_UNSET_RETENTION}") // line 5
	_, err = config.Parse([]byte(yaml), env(map[string]string{"OTHER": "x"}))
	if err == nil || !strings.Contains(err.Error(), "environment variables HOOKGATE_TEST_UNSET_A (line 2), HOOKGATE_TEST_UNSET_RETENTION (line 5) are not set") {
		t.Errorf("two unset variables: err = %v, want both named with their lines", err)
	}

	// A variable set to the empty string is set: it expands to "".
	yaml = "senders:\n" + sender("billing${EMPTY}", "delivery_id: { header: X-Id }")
	c := mustParse(t, yaml, env(map[string]string{"EMPTY": ""}))
	if c.Senders[0].Name != "billing" {
		t.Errorf("name = %q, want billing", c.Senders[0].Name)
	}
}

// A value read from the environment is a literal string: YAML syntax in it
// (": ", " #", quotes, newlines, flow collections, anchors) is not parsed.
func TestParseEnvValueStaysLiteral(t *testing.T) {
	t.Parallel()
	for _, value := range []string{
		"/a: b #c",
		"/x\"\n  - name: injected\n    preset: generic",
		"/[1, 2]",
		"/{a: b}",
		"/&anchor *alias !!int 12",
		"/'single' \"double\"",
		"/ leading and trailing space ",
	} {
		for _, yaml := range []string{
			"senders:\n" + sender("json", "delivery_id: { json_pointer: \"${PTR}\" }"),
			"senders:\n" + sender("json", "delivery_id:", "  json_pointer: ${PTR}"),
		} {
			c := mustParse(t, yaml, env(map[string]string{"PTR": value}))
			if len(c.Senders) != 1 {
				t.Errorf("PTR=%q: got %d senders, want 1", value, len(c.Senders))
				continue
			}
			if got := c.Senders[0].DeliveryID.JSONPointer; got != value {
				t.Errorf("PTR=%q: json_pointer = %q, want the value unchanged", value, got)
			}
		}
	}

	// A value that looks like another type is still a string.
	yaml := "senders:\n" + sender("${N}", "delivery_id: { header: X-Id }")
	for _, value := range []string{"123", "007", "true", "null"} {
		c := mustParse(t, yaml, env(map[string]string{"N": value}))
		if got := c.Senders[0].Name; got != value {
			t.Errorf("N=%q: name = %q", value, got)
		}
	}

	// Expansion is not recursive: a value containing ${OTHER} stays as it is.
	yaml = "senders:\n" + sender("json", "delivery_id: { json_pointer: \"${PTR}\" }")
	c := mustParse(t, yaml, env(map[string]string{"PTR": "/${OTHER}", "OTHER": "x"}))
	if got := c.Senders[0].DeliveryID.JSONPointer; got != "/${OTHER}" {
		t.Errorf("json_pointer = %q, want /${OTHER} (no second expansion)", got)
	}
}

func TestParseUnknownFieldIsAnError(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, yaml, field string
	}{
		{"top level", "senders:\n" + sender("a", "delivery_id: { header: X-Id }") + "sendrs: []\n", "sendrs"},
		{"sender", "senders:\n" + sender("a", "delivery_id: { header: X-Id }", "max_body: 10"), "max_body"},
		{"delivery_id", "senders:\n" + sender("a", "delivery_id: { header: X-Id, jsonpointer: /id }"), "jsonpointer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := config.Parse([]byte(tc.yaml), noEnv)
			if err == nil {
				t.Fatalf("Parse accepted the unknown field %s", tc.field)
			}
			if !strings.Contains(err.Error(), tc.field) || !strings.Contains(err.Error(), "not found") {
				t.Errorf("error %q does not name the unknown field %q", err, tc.field)
			}
		})
	}
}

func TestParseInvalidConfigs(t *testing.T) {
	t.Parallel()
	ok := "delivery_id: { header: X-Id }"
	valid := sender("first", ok)
	for _, tc := range []struct {
		name string
		yaml string
		// want are substrings of the error: the field path and the rule.
		want []string
	}{
		{"uppercase name", "senders:\n" + valid + sender("Billing", ok),
			[]string{"senders[1].name", "must match ^[a-z0-9][a-z0-9_-]{0,62}$"}},
		{"name of 64 characters", "senders:\n" + valid + sender(strings.Repeat("a", 64), ok),
			[]string{"senders[1].name", "must match"}},
		{"name with a leading -", "senders:\n" + valid + sender("-billing", ok),
			[]string{"senders[1].name", "must match"}},
		{"name with a leading _", "senders:\n" + sender("_billing", ok),
			[]string{"senders[0].name", "must match"}},
		{"name with a dot", "senders:\n" + sender("a.b", ok),
			[]string{"senders[0].name", "must match"}},
		{"empty name", "senders:\n" + sender(`""`, ok),
			[]string{"senders[0].name", "is required"}},
		{"missing name", "senders:\n  - preset: generic\n    " + ok + "\n",
			[]string{"senders[0].name", "is required"}},
		{"duplicate names", "senders:\n" + valid + sender("second", ok) + sender("first", ok),
			[]string{"senders", "unique"}},
		{"unknown preset", "senders:\n" + valid + "  - name: x\n    preset: gitlub\n    " + ok + "\n",
			[]string{"senders[1].preset", "must be one of:", "generic"}},
		{"missing preset", "senders:\n  - name: x\n    " + ok + "\n",
			[]string{"senders[0].preset", "is required"}},
		{"generic without delivery_id", "senders:\n" + valid + sender("x"),
			[]string{"senders[1].delivery_id.header", "is required", "json_pointer"}},
		{"both header and json_pointer", "senders:\n" + sender("x", "delivery_id: { header: X-Id, json_pointer: /id }"),
			[]string{"senders[0].delivery_id.header", "cannot be set together with delivery_id.json_pointer"}},
		{"body_sha256 and header", "senders:\n" + sender("x", "delivery_id: { header: X-Id, body_sha256: true }"),
			[]string{"senders[0].delivery_id.body_sha256", "cannot be set together with delivery_id.header or delivery_id.json_pointer"}},
		{"body_sha256 and json_pointer", "senders:\n" + sender("x", "delivery_id: { json_pointer: /id, body_sha256: true }"),
			[]string{"senders[0].delivery_id.body_sha256", "cannot be set together"}},
		{"body_sha256 false", "senders:\n" + sender("x", "delivery_id: { body_sha256: false }"),
			[]string{"senders[0].delivery_id.header", "is required", "body_sha256"}},
		{"header name with a space", "senders:\n" + sender("x", `delivery_id: { header: "X Delivery" }`),
			[]string{"senders[0].delivery_id.header", "HTTP header name"}},
		{"header name with a colon", "senders:\n" + sender("x", `delivery_id: { header: "X-Id:" }`),
			[]string{"senders[0].delivery_id.header", "HTTP header name"}},
		{"json pointer without a leading /", "senders:\n" + valid + sender("x", "delivery_id: { json_pointer: id }"),
			[]string{"senders[1].delivery_id.json_pointer", "JSON pointer"}},
		{"json pointer with ~2", "senders:\n" + sender("x", "delivery_id: { json_pointer: /a~2 }"),
			[]string{"senders[0].delivery_id.json_pointer", "JSON pointer"}},
		{"json pointer ending in ~", "senders:\n" + sender("x", "delivery_id: { json_pointer: /a~ }"),
			[]string{"senders[0].delivery_id.json_pointer", "JSON pointer"}},
		{"negative max_body_bytes", "senders:\n" + sender("x", ok, "max_body_bytes: -1"),
			[]string{"senders[0].max_body_bytes", "must be at least 1"}},
		{"max_body_bytes over 64 MiB", "senders:\n" + valid + sender("x", ok, "max_body_bytes: 67108865"),
			[]string{"senders[1].max_body_bytes", "must be at most 67108864"}},
		{"retention 1ms", "senders:\n" + valid + sender("x", ok, "retention: 1ms"),
			[]string{"senders[1].retention", "at least 1s"}},
		{"negative retention", "senders:\n" + sender("x", ok, "retention: -1h"),
			[]string{"senders[0].retention", "at least 1s"}},
		// Errors raised while decoding (before validation) name the line and
		// the offending value; regression_test.go checks that they name the field path.
		{"retention abc", "senders:\n" + sender("x", ok, "retention: abc"),
			[]string{"line 5", "not a duration"}},
		{"max_body_bytes not a number", "senders:\n" + sender("x", ok, "max_body_bytes: lots"),
			[]string{"line 5", "int64"}},
		{"empty file", "", []string{"senders", "empty"}},
		{"whitespace only", " \n\n  \n", []string{"senders", "empty"}},
		{"comments only", "# hookgate.yaml\n# nothing here\n", []string{"senders", "empty"}},
		{"no senders (empty list)", "senders: []\n", []string{"senders", "must list at least 1"}},
		{"no senders (null)", "senders:\n", []string{"senders", "is required"}},
		{"not a mapping", "- name: x\n", []string{"parse YAML"}},
		{"malformed YAML", "senders: [\n", []string{"parse YAML"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := config.Parse([]byte(tc.yaml), noEnv)
			if err == nil {
				t.Fatalf("Parse accepted:\n%s\nresult: %+v", tc.yaml, c)
			}
			if c != nil {
				t.Errorf("Parse returned a config with its error: %+v", c)
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
		})
	}
}

// Validation errors never contain a field's value: it may have come from a
// secret in the environment.
func TestParseValidationErrorsDoNotContainSecrets(t *testing.T) {
	t.Parallel()
	const secret = "s3cr3t-value"
	lookup := env(map[string]string{"SECRET": secret})
	ok := "delivery_id: { header: X-Id }"
	for _, tc := range []struct {
		name, yaml, field string
	}{
		{"preset", "senders:\n  - name: x\n    preset: ${SECRET}\n    " + ok + "\n", "senders[0].preset"},
		{"header", "senders:\n" + sender("x", `delivery_id: { header: "${SECRET} x" }`), "senders[0].delivery_id.header"},
		{"json_pointer", "senders:\n" + sender("x", "delivery_id: { json_pointer: \"${SECRET}\" }"), "senders[0].delivery_id.json_pointer"},
		{"name", "senders:\n" + sender("${SECRET}-UPPER", ok), "senders[0].name"},
		{"duplicate name", "senders:\n" + sender("${SECRET}", ok) + sender("${SECRET}", ok), "senders"},
		{"secret without a signature", "senders:\n" + sender("x", ok, "secret: ${SECRET}"), "senders[0].secret"},
		{"malformed Standard Webhooks secret", "senders:\n  - name: x\n    preset: standard-webhooks\n    secrets: [\"${SECRET}\"]\n", "senders[0].secret"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := config.Parse([]byte(tc.yaml), lookup)
			if err == nil {
				t.Fatal("Parse succeeded")
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Errorf("error %q does not name %s", err, tc.field)
			}
			if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "s3cr3t") {
				t.Errorf("error %q contains the secret value", err)
			}
		})
	}
}

// Parse works out once the secrets that a target's answers may echo: its
// URL's, its credential-like headers' values and its signing secret. A
// target that Parse did not make has them worked out at each call.
func TestTargetAnswerSecrets(t *testing.T) {
	t.Parallel()
	c := mustParse(t, "senders:\n"+sender("acme", "delivery_id: { header: X-Id }", "forward:",
		"  - name: slack",
		"    url: https://hooks.example.com/services/T0/B0/XyZsecret123?key=qkey4567",
		"    secret_path: true",
		"    headers: { X-Api-Key: hdrkey-7774411, X-Team: platform }"), noEnv)
	s, _ := c.Sender("acme")
	tg := &s.Forward[0]
	got := tg.AnswerSecrets()
	for _, want := range []string{"XyZsecret123", "qkey4567", "hdrkey-7774411"} {
		if !slices.Contains(got, want) {
			t.Errorf("AnswerSecrets() = %q, want %s in it", got, want)
		}
	}
	if slices.Contains(got, "platform") {
		t.Errorf("AnswerSecrets() = %q: X-Team is no credential", got)
	}
	if again := tg.AnswerSecrets(); len(again) == 0 || &again[0] != &got[0] {
		t.Error("AnswerSecrets() worked the secrets out again")
	}
	made := config.Target{Name: "x", URL: "https://example.com/in?token=tok3n-9981"}
	if got := made.AnswerSecrets(); !slices.Equal(got, []string{"tok3n-9981"}) {
		t.Errorf("AnswerSecrets() of a target Parse did not make = %q, want its query's token", got)
	}
	if got := (&config.Target{Name: "y", URL: "https://example.com/in"}).AnswerSecrets(); got == nil || len(got) != 0 {
		t.Errorf("AnswerSecrets() of a target without secrets = %#v, want empty and not nil", got)
	}
}
