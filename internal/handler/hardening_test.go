package handler_test

import (
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/google/uuid"
)

// The request ID in the log is hookgate's own, never the client's
// X-Request-Id, which is logged apart, cut to 64 bytes.
func TestRequestIDIsGenerated(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	s, _ := newDBServer(t, options{log: &logs})
	spoof := "spoofed-" + strings.Repeat("a", 100)
	req := s.newRequest(http.MethodGet, "/healthz", nil)
	req.Header.Set("X-Request-Id", spoof)
	r := s.do(req)
	if r.status != http.StatusOK {
		t.Fatalf("GET /healthz: %s", r)
	}
	id := r.header.Get("X-Request-Id")
	if _, err := uuid.Parse(id); err != nil {
		t.Errorf("X-Request-Id of the response = %q, want a UUID of hookgate's", id)
	}
	line := regexp.MustCompile(`(?m)^.*msg=request.*path=/healthz.*$`).FindString(logs.String())
	if line == "" {
		t.Fatalf("no request log line in %q", logs.String())
	}
	if !strings.Contains(line, "request_id="+id+" ") {
		t.Errorf("log line %q: want request_id=%s", line, id)
	}
	if m := regexp.MustCompile(`client_request_id=(\S+)`).FindStringSubmatch(line); m == nil || m[1] != spoof[:64] {
		t.Errorf("log line %q: want client_request_id=%s (the client's, cut to 64 bytes)", line, spoof[:64])
	}
	// Two requests get two IDs.
	if id2 := s.get("/healthz").header.Get("X-Request-Id"); id2 == id || id2 == "" {
		t.Errorf("second request's ID %q, first %q", id2, id)
	}
}

// Every response, the API explorer's included, carries the same security
// headers; the explorer's CSP allows its own inline scripts by hash and
// nothing from another origin.
func TestSecurityHeaders(t *testing.T) {
	t.Parallel()
	s, _ := newDBServer(t, options{})
	for _, path := range []string{"/docs", "/docs/", "/docs/swagger-ui.css", "/docs/nope.js", "/healthz", "/openapi.yaml", "/v1/senders", "/webhooks/nope", "/nope"} {
		r := s.get(path)
		for h, want := range map[string]string{
			"X-Content-Type-Options": "nosniff",
			"X-Frame-Options":        "DENY",
			"Referrer-Policy":        "no-referrer",
		} {
			if got := r.header.Get(h); got != want {
				t.Errorf("GET %s (%d): %s = %q, want %q", path, r.status, h, got, want)
			}
		}
		csp := r.header.Get("Content-Security-Policy")
		if !strings.Contains(csp, "frame-ancestors 'none'") || !strings.HasPrefix(csp, "default-src 'none'") {
			t.Errorf("GET %s: Content-Security-Policy = %q, want default-src 'none' and frame-ancestors 'none'", path, csp)
		}
		if strings.Contains(csp, "unsafe-eval") || strings.Contains(csp, "http:") || strings.Contains(csp, "https:") || strings.Contains(csp, "*") {
			t.Errorf("GET %s: Content-Security-Policy = %q allows eval or another origin", path, csp)
		}
	}
	page := s.get("/docs")
	csp := page.header.Get("Content-Security-Policy")
	scripts := regexp.MustCompile(`(?s)<script>(.*?)</script>`).FindAllStringSubmatch(string(page.body), -1)
	if len(scripts) == 0 {
		t.Fatalf("the explorer's page has no inline script: %s", page.body)
	}
	for _, m := range scripts {
		sum := sha256.Sum256([]byte(m[1]))
		if h := "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"; !strings.Contains(csp, h) {
			t.Errorf("the explorer's CSP %q does not allow its inline script %s", csp, h)
		}
	}
	if !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "connect-src 'self'") {
		t.Errorf("the explorer's CSP %q must let it load its scripts and the spec from this origin", csp)
	}
}
