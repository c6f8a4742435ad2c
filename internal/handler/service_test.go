package handler_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/hookgate/hookgate/api"
	"github.com/hookgate/hookgate/internal/testing/pgtest"
)

func TestHealthz(t *testing.T) {
	t.Parallel()
	s, _ := newDBServer(t, options{
		ready: func(context.Context) error { return errors.New("not ready") }, // liveness ignores readiness
	})
	r := s.get("/healthz")
	if r.status != http.StatusOK {
		t.Fatalf("GET /healthz: %s", r)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	var got map[string]any
	if err := json.Unmarshal(r.body, &got); err != nil {
		t.Fatalf("body %q: %v", r.body, err)
	}
	if len(got) != 1 || got["status"] != "ok" {
		t.Errorf(`body = %s, want {"status":"ok"}`, r.body)
	}
}

func TestReadyz(t *testing.T) {
	t.Parallel()
	var failure atomic.Pointer[error]
	var calls atomic.Int64
	s, _ := newDBServer(t, options{ready: func(ctx context.Context) error {
		calls.Add(1)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if p := failure.Load(); p != nil {
			return *p
		}
		return nil
	}})

	r := s.get("/readyz")
	if r.status != http.StatusOK {
		t.Fatalf("GET /readyz when ready: %s", r)
	}
	var got map[string]any
	if err := json.Unmarshal(r.body, &got); err != nil || got["status"] != "ready" {
		t.Errorf(`body = %s (%v), want {"status":"ready"}`, r.body, err)
	}

	err := errors.New("ping database: dial tcp 10.9.8.7:5432: connect: connection refused")
	failure.Store(&err)
	r = s.get("/readyz")
	wantProblem(t, r, http.StatusServiceUnavailable, "unavailable")
	wantRetryAfter(t, r)
	if leak := containsAny(string(r.body), "10.9.8.7", "dial", "refused", "ping database"); leak != "" {
		t.Errorf("the response leaks the ready error (%q): %s", leak, r.body)
	}

	failure.Store(nil)
	if r = s.get("/readyz"); r.status != http.StatusOK {
		t.Errorf("GET /readyz after recovery: %s", r)
	}
	if n := calls.Load(); n != 3 {
		t.Errorf("the ready func was called %d times for 3 requests", n)
	}
}

func TestOpenAPISpecIsServedVerbatim(t *testing.T) {
	t.Parallel()
	s, _ := newDBServer(t, options{})
	r := s.get("/openapi.yaml")
	if r.status != http.StatusOK {
		t.Fatalf("GET /openapi.yaml: %d", r.status)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/yaml" {
		t.Errorf("Content-Type = %q, want application/yaml", ct)
	}
	if len(api.Spec) == 0 || !bytes.Equal(r.body, api.Spec) {
		t.Errorf("body (%d bytes) is not api.Spec (%d bytes)", len(r.body), len(api.Spec))
	}
}

var (
	// tagAttr finds the URL attributes of script, link and img tags.
	tagAttr = regexp.MustCompile(`(?is)<(script|link|img)\b[^>]*?\b(src|href)\s*=\s*["']([^"']+)["']`)
)

func TestDocsServeExplorerFromTheBinary(t *testing.T) {
	t.Parallel()
	s, _ := newDBServer(t, options{})
	r := s.get("/docs")
	if r.status != http.StatusOK {
		t.Fatalf("GET /docs: %s", r)
	}
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
		t.Errorf("Content-Type = %q, want text/html", ct)
	}
	html := string(r.body)
	if !strings.Contains(html, "/openapi.yaml") {
		t.Errorf("the page does not reference /openapi.yaml:\n%s", html)
	}

	base, err := url.Parse(s.url + "/docs")
	if err != nil {
		t.Fatal(err)
	}
	var assets []string
	for _, m := range tagAttr.FindAllStringSubmatch(html, -1) {
		ref, err := url.Parse(m[3])
		if err != nil {
			t.Errorf("<%s %s=%q>: %v", m[1], m[2], m[3], err)
			continue
		}
		abs := base.ResolveReference(ref)
		if abs.Host != base.Host || (ref.Scheme != "" && ref.Scheme != "http" && ref.Scheme != "https" && ref.Scheme != "data") {
			t.Errorf("<%s %s=%q> loads from another host: the explorer must not need a CDN", m[1], m[2], m[3])
			continue
		}
		if strings.HasPrefix(abs.Path, "/docs/") {
			assets = append(assets, abs.Path)
		}
	}
	if len(assets) == 0 {
		t.Fatalf("the page links no asset under /docs/:\n%s", html)
	}
	scripts := 0
	for _, a := range assets {
		r := s.get(a)
		if r.status != http.StatusOK || len(r.body) == 0 {
			t.Errorf("GET %s: %d, %d bytes", a, r.status, len(r.body))
		}
		if strings.HasSuffix(a, ".js") && r.status == http.StatusOK {
			scripts++
		}
	}
	if scripts == 0 {
		t.Errorf("no script among the page's assets %v is served", assets)
	}
}

// metricLine matches one sample of the Prometheus text format.
var metricLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$`)

// samples returns the samples of the metric name in a /metrics body, keyed
// by their label set as written (e.g. `{outcome="accepted",sender="hdr"}`).
func samples(t *testing.T, body []byte, name string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		m := metricLine.FindStringSubmatch(line)
		if m == nil || m[1] != name {
			continue
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		out[m[2]] = v
	}
	return out
}

func TestMetricsCountDeliveryOutcomes(t *testing.T) {
	t.Parallel()
	s, _ := newDBServer(t, options{})
	wantAccepted(t, s.post("hdr", "m-1", []byte(`{"v":1}`)), "hdr", "m-1")
	if r := s.post("hdr", "m-1", []byte(`{"v":1}`)); !r.replayed() {
		t.Fatalf("replay: %s", r)
	}
	wantProblem(t, s.post("hdr", "m-1", []byte(`{"v":2}`)), http.StatusUnprocessableEntity, "payload-mismatch")
	wantProblem(t, s.post("ptr", "", []byte(`{}`)), http.StatusBadRequest, "invalid-delivery-id")
	wantProblem(t, s.post("no-such-sender", "m-1", []byte(`{}`)), http.StatusNotFound, "unknown-sender")

	r := s.get("/metrics")
	if r.status != http.StatusOK {
		t.Fatalf("GET /metrics: %s", r)
	}
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("Content-Type = %q, want the Prometheus text format", ct)
	}
	got := samples(t, r.body, "hookgate_deliveries_total")
	want := map[string]float64{
		// The sender has no event type: "none". A delivery refused before
		// its event type was read has an empty event_type.
		`{event_type="none",outcome="accepted",sender="hdr"}`: 1,
		`{event_type="none",outcome="replayed",sender="hdr"}`: 1,
		`{event_type="none",outcome="mismatch",sender="hdr"}`: 1,
		`{event_type="",outcome="invalid",sender="ptr"}`:      1,
		// An unknown sender's name is not a label value (unbounded cardinality).
		`{event_type="",outcome="invalid",sender=""}`: 1,
	}
	for labels, v := range want {
		if got[labels] != v {
			t.Errorf("hookgate_deliveries_total%s = %v, want %v", labels, got[labels], v)
		}
	}
	for labels, v := range got {
		if _, ok := want[labels]; !ok && v != 0 {
			t.Errorf("unexpected hookgate_deliveries_total%s = %v", labels, v)
		}
	}
	if strings.Contains(string(r.body), "no-such-sender") {
		t.Error("/metrics contains the unknown sender's name")
	}
	counts := samples(t, r.body, "hookgate_ingest_duration_seconds_count")
	for outcome, n := range map[string]float64{"accepted": 1, "replayed": 1, "mismatch": 1, "invalid": 2} {
		if got := counts[`{outcome="`+outcome+`"}`]; got != n {
			t.Errorf("hookgate_ingest_duration_seconds_count{outcome=%q} = %v, want %v", outcome, got, n)
		}
	}
}

// Each server has its own registry: metrics of one do not show in another.
func TestMetricsArePerServer(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDB(t)
	a := newServer(t, pool, options{})
	b := newServer(t, pool, options{})
	wantAccepted(t, a.post("hdr", "only-a", []byte(`{}`)), "hdr", "only-a")
	if got := samples(t, b.get("/metrics").body, "hookgate_deliveries_total"); len(got) != 0 {
		t.Errorf("server b reports %v", got)
	}
	if got := samples(t, a.get("/metrics").body, "hookgate_deliveries_total"); got[`{event_type="none",outcome="accepted",sender="hdr"}`] != 1 {
		t.Errorf("server a reports %v", got)
	}
}

func TestUnknownRouteIs404Problem(t *testing.T) {
	t.Parallel()
	s, pool := newDBServer(t, options{})
	for _, tc := range []struct{ method, path string }{
		{http.MethodGet, "/"},
		{http.MethodGet, "/nope"},
		{http.MethodGet, "/webhooks"},
		{http.MethodPost, "/webhooks/"},
		{http.MethodPost, "/webhooks/hdr/extra"},
		{http.MethodGet, "/v2/healthz"},
	} {
		r := s.do(s.newRequest(tc.method, tc.path, nil))
		p := wantProblem(t, r, http.StatusNotFound, "not-found")
		if !strings.Contains(p.Detail, tc.path) {
			t.Errorf("%s %s: detail %q does not name the path", tc.method, tc.path, p.Detail)
		}
	}
	wantCounts(t, pool, 0, 0)
}

func TestWrongMethodIs405Problem(t *testing.T) {
	t.Parallel()
	s, pool := newDBServer(t, options{})
	for _, tc := range []struct{ method, path string }{
		{http.MethodGet, "/webhooks/hdr"},
		{http.MethodPut, "/webhooks/hdr"},
		{http.MethodDelete, "/webhooks/hdr"},
		{http.MethodPost, "/healthz"},
		{http.MethodPost, "/readyz"},
		{http.MethodPost, "/metrics"},
		{http.MethodDelete, "/openapi.yaml"},
		{http.MethodPost, "/docs"},
	} {
		r := s.do(s.newRequest(tc.method, tc.path, []byte(`{}`)))
		p := wantProblem(t, r, http.StatusMethodNotAllowed, "method-not-allowed")
		if !strings.Contains(p.Detail, tc.method) {
			t.Errorf("%s %s: detail %q does not name the method", tc.method, tc.path, p.Detail)
		}
	}
	wantCounts(t, pool, 0, 0)
}
