package rules

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// payload reads a provider-shaped body from testdata.
func payload(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// delivery is a JSON delivery of sender with event type et.
func delivery(t testing.TB, sender, et, file string, h http.Header) *Activation {
	return NewActivation(Input{Sender: sender, DeliveryID: "d-1", EventType: et, Headers: h,
		Body: payload(t, file), ContentType: "application/json"})
}

func mustFilter(t testing.TB, expr string) *Filter {
	t.Helper()
	f, err := CompileFilter(expr, 0)
	if err != nil {
		t.Fatalf("compile %q: %v", expr, err)
	}
	return f
}

func mustTransform(t testing.TB, body, headers string) *Transform {
	t.Helper()
	tr, err := CompileTransform(body, headers, 0)
	if err != nil {
		t.Fatalf("compile %q, %q: %v", body, headers, err)
	}
	return tr
}

// decode decodes JSON for comparison.
func decode(t *testing.T, b []byte) any {
	t.Helper()
	var v any
	d := json.NewDecoder(strings.NewReader(string(b)))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		t.Fatalf("not JSON: %v: %s", err, b)
	}
	return v
}

// Job 1: only Stripe charge.succeeded events above 1,000 in live mode.
func TestJobStripeLiveChargesAbove1000(t *testing.T) {
	f := mustFilter(t, `body.type == "charge.succeeded" && body.livemode == true && body.data.object.amount > 1000`)
	for file, want := range map[string]bool{
		"stripe_charge_succeeded.json":        true,
		"stripe_charge_small_test_mode.json":  false,
		"stripe_connect_invoice_paid.json":    false, // short-circuits before data.object.amount
		"github_push_main.json":               false, // no such key: type
		"stripe_charge_succeeded.json#amount": false,
	} {
		a := delivery(t, "stripe", "charge.succeeded", strings.TrimSuffix(file, "#amount"), nil)
		if strings.HasSuffix(file, "#amount") { // live, but 1000 is not above 1000
			b := strings.Replace(string(payload(t, "stripe_charge_succeeded.json")), `"amount": 2500`, `"amount": 1000`, 1)
			a = NewActivation(Input{Body: []byte(b)})
		}
		got, err := f.Eval(a)
		if file == "github_push_main.json" {
			if err == nil {
				t.Errorf("%s: no error, want no such key", file)
			}
			continue
		}
		if err != nil || got != want {
			t.Errorf("%s: %v, %v; want %v", file, got, err, want)
		}
	}
}

// Job 2: GitHub pushes to main only.
func TestJobGitHubPushToMain(t *testing.T) {
	f := mustFilter(t, `event_type == "push" && body.ref == "refs/heads/main"`)
	for file, want := range map[string]bool{"github_push_main.json": true, "github_push_branch.json": false} {
		got, err := f.Eval(delivery(t, "github", "push", file, http.Header{"X-Github-Event": {"push"}}))
		if err != nil || got != want {
			t.Errorf("%s: %v, %v; want %v", file, got, err, want)
		}
	}
	// Another event type short-circuits: its body is not even parsed.
	a := delivery(t, "github", "issues", "github_push_main.json", nil)
	if got, err := f.Eval(a); err != nil || got {
		t.Errorf("issues: %v, %v; want false", got, err)
	}
	if a.parsed {
		t.Error("the body was parsed for a filter decided by event_type alone")
	}
}

// Job 3: a Shopify order as a Slack message.
func TestJobShopifyOrderToSlack(t *testing.T) {
	tr := mustTransform(t, `{"text": "New order " + body.name + ": " + body.total_price + " " + body.currency + " from " + body.customer.first_name + " " + body.customer.last_name}`, "")
	r, err := tr.Apply(delivery(t, "shopify", "orders/create", "shopify_order_create.json", nil), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"text":"New order #9999: 403.00 USD from John Smith"}`; string(r.Body) != want {
		t.Errorf("body %s, want %s", r.Body, want)
	}
	if r.ContentType != "application/json" || r.Headers != nil {
		t.Errorf("content type %q, headers %v", r.ContentType, r.Headers)
	}
}

// dropFields is job 4's transform.
const dropFields = `body.without(["/data/object/billing_details/email", "/data/object/billing_details/address"])`

// dropFieldsMap is job 4's transform written with transformMap.
const dropFieldsMap = `body.transformMap(k, v, k == "data"
  ? v.transformMap(k2, v2, k2 == "object"
      ? v2.transformMap(k3, v3, k3 == "billing_details"
          ? v3.transformMap(k4, v4, !(k4 in ["email", "address"]), v4)
          : v3)
      : v2)
  : v)`

// Job 4: drop the card-holder's e-mail and address, keep the rest as is.
func TestJobDropEmailAndAddress(t *testing.T) {
	for _, expr := range []string{dropFields, dropFieldsMap} {
		testDropEmailAndAddress(t, mustTransform(t, expr, ""))
	}
}

func testDropEmailAndAddress(t *testing.T, tr *Transform) {
	in := payload(t, "stripe_charge_succeeded.json")
	r, err := tr.Apply(NewActivation(Input{Body: in, ContentType: "application/json"}), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"jenny.rosen@example.com", "Friedrichstraße", "Berlin", `"email"`, `"address"`} {
		if strings.Contains(string(r.Body), secret) {
			t.Errorf("the body still has %s: %s", secret, r.Body)
		}
	}
	// Everything else is kept, numbers as written.
	want := decode(t, in).(map[string]any)
	bd := want["data"].(map[string]any)["object"].(map[string]any)["billing_details"].(map[string]any)
	delete(bd, "email")
	delete(bd, "address")
	if got := decode(t, r.Body); !reflect.DeepEqual(got, any(want)) {
		t.Errorf("got %s\nwant %v", r.Body, want)
	}
}

// Job 5: a tenant header taken from the body.
func TestJobTenantHeaderFromBody(t *testing.T) {
	tr := mustTransform(t, "", `has(body.account) ? {"X-Tenant": body.account} : {}`)
	r, err := tr.Apply(delivery(t, "stripe", "invoice.paid", "stripe_connect_invoice_paid.json", nil), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if r.Body != nil || r.ContentType != "application/json" || !reflect.DeepEqual(r.Headers, map[string]string{"X-Tenant": "acct_1Nv0FGQ9RKHgCVdK"}) {
		t.Errorf("got body %q, content type %q, headers %v", r.Body, r.ContentType, r.Headers)
	}
	// Without an account, no header and no error.
	r, err = tr.Apply(delivery(t, "stripe", "charge.succeeded", "stripe_charge_succeeded.json", nil), 1<<20)
	if err != nil || len(r.Headers) != 0 {
		t.Errorf("no account: headers %v, %v", r.Headers, err)
	}
}

// Shopify's IDs are above 2^53: a transform keeps them exact.
func TestTransformKeepsLargeIntegers(t *testing.T) {
	tr := mustTransform(t, `{"id": body.id, "items": body.line_items.map(i, i.id)}`, "")
	r, err := tr.Apply(delivery(t, "shopify", "", "shopify_order_create.json", nil), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"id":820982911946154508,"items":[866550311766439020,141249953214522974]}`; string(r.Body) != want {
		t.Errorf("got %s, want %s", r.Body, want)
	}
}

// BenchmarkTransformDropFields is what a forward with job 4's transform and
// job 5's header pays: the parse of the stored body, the transform that
// rebuilds three maps member by member, its JSON, and the header.
func BenchmarkTransformDropFields(b *testing.B) {
	b.Run("without", func(b *testing.B) { benchmarkDropFields(b, dropFields) })
	b.Run("transformMap", func(b *testing.B) { benchmarkDropFields(b, dropFieldsMap) })
}

func benchmarkDropFields(b *testing.B, expr string) {
	tr := mustTransform(b, expr, `has(body.account) ? {"X-Tenant": body.account} : {}`)
	body := payload(b, "stripe_charge_succeeded.json")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tr.Apply(NewActivation(Input{Body: body, ContentType: "application/json"}), 1<<20); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRulesPerDelivery is what the bench's rules phase pays per
// delivery: job 1's filter at ingest, which parses the body, then job 4's
// transform and job 5's header at the forward, which read that parse.
func BenchmarkRulesPerDelivery(b *testing.B) {
	f := mustFilter(b, `body.type == "charge.succeeded" && body.livemode == true && body.data.object.amount > 1000`)
	tr := mustTransform(b, dropFields, `has(body.account) ? {"X-Tenant": body.account} : {}`)
	body := payload(b, "stripe_charge_succeeded.json")
	b.ReportAllocs()
	for b.Loop() {
		a := NewActivation(Input{Body: body, ContentType: "application/json"})
		if ok, err := f.Eval(a); !ok || err != nil {
			b.Fatal(ok, err)
		}
		if _, err := tr.Apply(NewActivation(Input{Body: body, ContentType: "application/json", Parsed: a.Parsed()}), 1<<20); err != nil {
			b.Fatal(err)
		}
	}
}
