package rules_test

import (
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/rules"
)

// docPage is the page whose "Rules" section shows the rules tested here.
var docPage = filepath.Join("..", "..", "docs", "forwarding.md")

// section returns the text of the "## " section named heading of file.
func section(t *testing.T, file, heading string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	i := strings.Index(text, "\n## "+heading+"\n")
	if i < 0 {
		t.Fatalf("%s has no section %q", file, heading)
	}
	text = text[i+1:]
	if j := strings.Index(text[3:], "\n## "); j >= 0 {
		text = text[:j+3]
	}
	return text
}

var yamlBlock = regexp.MustCompile("(?s)```yaml\n(.*?)```")

// docCase is what a documented target must do with a payload.
type docCase struct {
	file, eventType string
	header          http.Header
	pass            bool              // the filter's decision (true without one)
	body            string            // the forwarded body; "" unchanged
	contentType     string            // the forward's Content-Type
	headers         map[string]string // the headers added
}

// docCases are, by target name, the payloads each documented target is
// run on. Every documented target with a rule must have some.
var docCases = map[string][]docCase{
	"billing": {
		{file: "stripe_charge_succeeded.json", pass: true},
		{file: "stripe_charge_small_test_mode.json"},
	},
	"deploy": {
		{file: "github_push_main.json", eventType: "push", pass: true},
		{file: "github_push_branch.json", eventType: "push"},
		{file: "github_push_main.json", eventType: "create"},
	},
	"slack": {
		{file: "shopify_order_create.json", eventType: "orders/create", pass: true,
			body: `{"text":"New order #9999: 403.00 USD from John"}`, contentType: "application/json"},
	},
	"analytics": {
		{file: "stripe_charge_succeeded.json", pass: true,
			body: "stripe_charge_succeeded.analytics.json", contentType: "application/json"},
		{file: "stripe_charge_small_test_mode.json", pass: true,
			body: "stripe_charge_small_test_mode.analytics.json", contentType: "application/json"},
	},
	"tenants": {
		{file: "stripe_connect_invoice_paid.json", pass: true, contentType: "application/json",
			headers: map[string]string{"X-Tenant": "acct_1Nv0FGQ9RKHgCVdK"}},
		{file: "stripe_charge_succeeded.json", pass: true, contentType: "application/json", headers: map[string]string{}},
	},
}

// The Rules section's examples are valid configuration, and do what the
// page says on providers' payloads.
func TestDocExamples(t *testing.T) {
	t.Parallel()
	blocks := yamlBlock.FindAllStringSubmatch(section(t, docPage, "Rules"), -1)
	tested := map[string]bool{}
	for i, b := range blocks {
		items := strings.TrimPrefix(b[1], "forward:\n")
		var lines []string
		for _, l := range strings.Split(strings.TrimRight(items, "\n"), "\n") {
			lines = append(lines, "      "+strings.TrimPrefix(l, "  ")+"\n")
		}
		if b[1] == items { // a list of targets, not under forward:
			lines = lines[:0]
			for _, l := range strings.Split(strings.TrimRight(items, "\n"), "\n") {
				lines = append(lines, "      "+l+"\n")
			}
		}
		cfg, err := config.Parse([]byte("senders:\n  - name: docs\n    preset: generic\n    delivery_id: { header: X-Id }\n    forward:\n"+strings.Join(lines, "")), nil)
		if err != nil {
			t.Fatalf("block %d of the Rules section:\n%s\nis not a valid forward list: %v", i, b[1], err)
		}
		for _, tg := range cfg.Senders[0].Forward {
			cases, ok := docCases[tg.Name]
			if !ok {
				t.Errorf("target %q of the docs has no test case", tg.Name)
				continue
			}
			tested[tg.Name] = true
			for _, c := range cases {
				runDocCase(t, &tg, c)
			}
		}
	}
	for name := range docCases {
		if !tested[name] {
			t.Errorf("no target %q in the docs' Rules section", name)
		}
	}
}

func runDocCase(t *testing.T, tg *config.Target, c docCase) {
	t.Helper()
	body, err := os.ReadFile(filepath.Join("testdata", c.file))
	if err != nil {
		t.Fatal(err)
	}
	a := rules.NewActivation(rules.Input{Sender: "docs", DeliveryID: "1", EventType: c.eventType, Headers: c.header,
		Body: body, ContentType: "application/json"})
	pass := true
	if tg.Filter != nil {
		if pass, err = tg.Filter.Eval(a); err != nil {
			t.Errorf("%s on %s: %v", tg.Name, c.file, err)
			return
		}
	}
	if pass != c.pass {
		t.Errorf("%s on %s: filter %v, want %v", tg.Name, c.file, pass, c.pass)
	}
	if tg.Transform == nil || !pass {
		return
	}
	r, err := tg.Transform.Apply(a, 1<<20)
	if err != nil {
		t.Errorf("%s on %s: %v", tg.Name, c.file, err)
		return
	}
	want := c.body
	if strings.HasSuffix(want, ".json") {
		b, err := os.ReadFile(filepath.Join("testdata", want))
		if err != nil {
			t.Fatal(err)
		}
		want = strings.TrimSuffix(string(b), "\n")
	}
	if (want == "") != (r.Body == nil) || string(r.Body) != want {
		t.Errorf("%s on %s: body\n%s\nwant\n%s", tg.Name, c.file, r.Body, want)
	}
	if r.ContentType != c.contentType {
		t.Errorf("%s on %s: Content-Type %q, want %q", tg.Name, c.file, r.ContentType, c.contentType)
	}
	if c.headers != nil && !reflect.DeepEqual(r.Headers, c.headers) {
		t.Errorf("%s on %s: headers %v, want %v", tg.Name, c.file, r.Headers, c.headers)
	}
}
