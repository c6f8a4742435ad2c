package api

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// kin-openapi checks only a few string formats by default. Check the two
	// more this document uses, so that the examples are held to them too.
	// This runs before any test, so the global registry is not raced.
	openapi3.DefineStringFormatValidator("uuid", openapi3.NewRegexpFormatValidator(
		`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[1-8][0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12}$`))
	openapi3.DefineStringFormatValidator("uri-reference", openapi3.NewCallbackValidator(func(s string) error {
		_, err := url.Parse(s)
		return err
	}))
	goleak.VerifyTestMain(m)
}

// loadSpec loads Spec into a fresh document, which the caller may modify.
func loadSpec(t *testing.T) *openapi3.T {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(Spec)
	if err != nil {
		t.Fatalf("load openapi.yaml: %v", err)
	}
	return doc
}

func TestSpecIsRepositoryOpenAPIYAML(t *testing.T) {
	t.Parallel()
	repo, err := os.ReadFile("../openapi.yaml")
	if err != nil {
		t.Fatalf("read ../openapi.yaml: %v", err)
	}
	if !bytes.Equal(Spec, repo) {
		t.Fatal("api/openapi.yaml differs from the repository's openapi.yaml: run go generate ./api/...")
	}
}

func TestSpecValidates(t *testing.T) {
	t.Parallel()
	doc := loadSpec(t)
	if doc.OpenAPI != "3.0.3" {
		t.Errorf("openapi = %q, want 3.0.3", doc.OpenAPI)
	}
	// Default options: this validates every example against its schema too
	// (see TestValidateChecksExamplesByDefault).
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("validate: %v", err)
	}
}

// TestValidateChecksExamplesByDefault confirms that Validate with default
// options rejects an example that does not match its schema, so that
// TestSpecValidates covers the examples.
func TestValidateChecksExamplesByDefault(t *testing.T) {
	t.Parallel()
	doc := loadSpec(t)
	mt := doc.Paths.Find("/webhooks/{sender}").Post.Responses.Status(202).Value.Content.Get("application/json")
	example, ok := mt.Example.(map[string]any)
	if !ok {
		t.Fatalf("202 example is %T, want an object", mt.Example)
	}
	bad := maps.Clone(example)
	delete(bad, "sender") // a required property
	mt.Example = bad

	if err := doc.Validate(context.Background()); err == nil {
		t.Fatal("validate accepted an example without a required property")
	}
	if err := doc.Validate(context.Background(), openapi3.DisableExamplesValidation()); err != nil {
		t.Fatalf("validate without examples validation: %v", err)
	}
}

func TestSpecPathsAndOperations(t *testing.T) {
	t.Parallel()
	doc := loadSpec(t)
	want := map[string]string{ // "METHOD path" → operationId
		"POST /webhooks/{sender}": "ingestWebhook",
		"GET /webhooks/{sender}":  "checkWebhookSubscription",
		"GET /healthz":            "getHealthz",
		"GET /readyz":             "getReadyz",
		"GET /metrics":            "getMetrics",
		"GET /openapi.yaml":       "getOpenAPISpec",
		"GET /docs":               "getDocs",

		"GET /v1/senders":                                      "listSenders",
		"GET /v1/senders/{sender}/deliveries":                  "listDeliveries",
		"GET /v1/senders/{sender}/deliveries/{delivery_id}":    "getDelivery",
		"GET /v1/events/{event_id}":                            "getEvent",
		"POST /v1/events/{event_id}/redeliver":                 "redeliverEvent",
		"GET /v1/senders/{sender}/targets":                     "listTargets",
		"GET /v1/senders/{sender}/targets/{target}/forwards":   "listTargetForwards",
		"POST /v1/senders/{sender}/targets/{target}/redeliver": "redeliverTarget",
		"POST /v1/senders/{sender}/targets/{target}/pause":     "pauseTarget",
		"POST /v1/senders/{sender}/targets/{target}/resume":    "resumeTarget",
		"GET /v1/config":                                       "getConfig",
		"POST /v1/config/reload":                               "reloadConfig",
		"GET /v1/audit":                                        "listAudit",
		"GET /v1/events/{event_id}/attempts":                   "getEventAttempts",
		"GET /v1/senders/{sender}/targets/{target}/blocked":    "listBlockedKeys",

		"POST /v1/senders/{sender}/targets/{target}/forwards/{event_id}/skip": "skipForward",
	}
	wantPaths := make(map[string]bool)
	for k := range want {
		wantPaths[strings.SplitN(k, " ", 2)[1]] = true
	}
	if got, w := doc.Paths.InMatchingOrder(), slices.Sorted(maps.Keys(wantPaths)); !sameSet(got, w) {
		t.Errorf("paths = %v, want exactly %v", slices.Sorted(slices.Values(got)), w)
	}
	got := make(map[string]string)
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			got[method+" "+path] = op.OperationID
		}
	}
	if !maps.Equal(got, want) {
		t.Errorf("operations = %v, want %v", got, want)
	}
}

func sameSet(a, b []string) bool {
	return slices.Equal(slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b)))
}

var problemSlugs = []string{
	"invalid-delivery-id", "invalid-signature", "unknown-sender", "in-flight", "payload-too-large", "request-timeout",
	"payload-mismatch", "unavailable", "internal",
	"unauthorized", "operator-disabled", "invalid-parameter", "not-found", "no-targets",
	"too-many-attempts",
	"unsupported-encoding",
	"invalid-verify-token", "method-not-allowed",
	"overloaded",
	"config-refused",
	"scope-missing",
	"not-blocked",
}

// TestSpecExamples checks, independently of Validate, that every request
// body and every response has an example for each of its media types, that
// every example (and every header example) matches its schema, and that
// every problem example has a hookgate problem type and the status of its
// response.
func TestSpecExamples(t *testing.T) {
	t.Parallel()
	doc := loadSpec(t)
	problemType := regexp.MustCompile(`^urn:hookgate:problem:(` + strings.Join(problemSlugs, "|") + `)$`)

	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			if rb := op.RequestBody; rb != nil {
				checkContent(t, fmt.Sprintf("%s %s request", method, path), rb.Value.Content, openapi3.VisitAsRequest())
			}
			if op.Responses.Len() == 0 {
				t.Errorf("%s %s: no responses", method, path)
			}
			for code, ref := range op.Responses.Map() {
				where := fmt.Sprintf("%s %s %s", method, path, code)
				resp := ref.Value
				if len(resp.Content) == 0 {
					t.Errorf("%s: no content", where)
				}
				examples := checkContent(t, where, resp.Content, openapi3.VisitAsResponse())
				for name, h := range resp.Headers {
					checkExample(t, where+" header "+name, h.Value.Schema.Value, h.Value.Example)
				}
				status, err := strconv.Atoi(code)
				if err != nil {
					t.Errorf("%s: response code is not a status: %v", where, err)
					continue
				}
				if status < 400 {
					continue
				}
				for _, ex := range examples["application/problem+json"] {
					p, ok := ex.(map[string]any)
					if !ok {
						t.Errorf("%s: problem example is %T, want an object", where, ex)
						continue
					}
					if typ, _ := p["type"].(string); !problemType.MatchString(typ) {
						t.Errorf("%s: problem type %q is not urn:hookgate:problem:<known slug>", where, typ)
					}
					if s, _ := p["status"].(float64); int(s) != status {
						t.Errorf("%s: problem status %v, want %d", where, p["status"], status)
					}
				}
				if _, ok := resp.Content["application/problem+json"]; !ok {
					t.Errorf("%s: error response without application/problem+json", where)
				}
			}
		}
	}
}

// checkContent requires an example for each media type of content, checks
// each against its schema, and returns the examples by media type.
func checkContent(t *testing.T, where string, content openapi3.Content, opts ...openapi3.SchemaValidationOption) map[string][]any {
	t.Helper()
	all := make(map[string][]any)
	for name, mt := range content {
		var examples []any
		if mt.Example != nil {
			examples = append(examples, mt.Example)
		}
		for _, ex := range mt.Examples {
			examples = append(examples, ex.Value.Value)
		}
		if len(examples) == 0 {
			t.Errorf("%s %s: no example", where, name)
		}
		if mt.Schema == nil {
			t.Errorf("%s %s: no schema", where, name)
			continue
		}
		for _, ex := range examples {
			checkExample(t, where+" "+name, mt.Schema.Value, ex, opts...)
		}
		all[name] = examples
	}
	return all
}

func checkExample(t *testing.T, where string, schema *openapi3.Schema, example any, opts ...openapi3.SchemaValidationOption) {
	t.Helper()
	if example == nil {
		t.Errorf("%s: no example", where)
		return
	}
	if err := schema.VisitJSON(example, append(opts, openapi3.MultiErrors())...); err != nil {
		var me openapi3.MultiError
		if errors.As(err, &me) {
			err = errors.Join(me...)
		}
		t.Errorf("%s: example does not match its schema: %v", where, err)
	}
}

// TestSpecOperatorSecurity checks that exactly the operations under /v1 (the
// operator API) require the bearerAuth scheme, an HTTP bearer scheme, and
// that each documents the 401 and 403 the token check answers with.
func TestSpecOperatorSecurity(t *testing.T) {
	t.Parallel()
	doc := loadSpec(t)
	scheme := doc.Components.SecuritySchemes["bearerAuth"]
	if scheme == nil || scheme.Value.Type != "http" || scheme.Value.Scheme != "bearer" {
		t.Fatalf("components.securitySchemes.bearerAuth = %+v, want an http bearer scheme", scheme)
	}
	if doc.Security != nil {
		t.Errorf("the document has a global security requirement %v; only /v1 operations need the token", doc.Security)
	}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			operator := strings.HasPrefix(path, "/v1/")
			bearer := op.Security != nil && len(*op.Security) == 1 && len((*op.Security)[0]) == 1 && (*op.Security)[0]["bearerAuth"] != nil
			if operator != bearer {
				t.Errorf("%s %s: security %v; want bearerAuth exactly when the path is under /v1/", method, path, op.Security)
			}
			if !operator {
				continue
			}
			for _, code := range []int{401, 403} {
				if op.Responses.Status(code) == nil {
					t.Errorf("%s %s: no %d response", method, path, code)
				}
			}
		}
	}
}
