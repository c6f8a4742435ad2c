// Regression tests for bugs found in review; each was failing before its fix.
package handler_test

import (
	"net/http"
	"testing"
)

// Was a bug: server.go Router installs its own MethodNotAllowed handler, and chi
// then no longer sets the Allow header its default handler sets; RFC 9110
// §15.5.6 says a 405 MUST carry Allow.
func TestMethodNotAllowedSetsAllow(t *testing.T) {
	t.Parallel()
	s, _ := newDBServer(t, options{})
	// (GET /webhooks/{sender} answers a Meta subscription check; for the
	// other presets it is a 405 whose Allow is POST: TestHandshakesLeaveNoTrace.)
	for path, want := range map[string]string{"/webhooks/hdr": "GET, POST", "/healthz": "GET", "/metrics": "GET"} {
		r := s.do(s.newRequest(http.MethodPut, path, nil))
		if r.status != http.StatusMethodNotAllowed {
			t.Fatalf("PUT %s: %s", path, r)
		}
		if got := r.header.Get("Allow"); got != want {
			t.Errorf("PUT %s: Allow = %q, want %q", path, got, want)
		}
	}
}

// Was a bug: config/pointer.go Pointer.String decodes only the first JSON value of
// the body, so a body that is not JSON — a JSON object followed by anything
// — is accepted for a json_pointer sender instead of answered 400.
func TestJSONPointerSenderRejectsTrailingData(t *testing.T) {
	t.Parallel()
	s, pool := newDBServer(t, options{})
	for i, body := range []string{`{"id":"a"} trailing`, `{"id":"b"}{"id":"c"}`, `{"id":"d"}]`} {
		r := s.post("ptr", "", []byte(body))
		if r.status != http.StatusBadRequest {
			t.Errorf("body %d %q: %s; want 400 (not valid JSON)", i, body, r)
		}
	}
	wantCounts(t, pool, 0, 0)
}

// Was a bug: server.go Router mounts the explorer's static file server on
// "/docs/*" for every method, and that server answers its own errors in
// text/plain: GET of a missing asset is a text/plain 404 and POST of an
// asset a text/plain 405, against design.md §2 ("All error responses are
// application/problem+json").
func TestDocsAssetErrorsAreProblems(t *testing.T) {
	t.Parallel()
	s, _ := newDBServer(t, options{})
	wantProblem(t, s.get("/docs/no-such-asset.js"), http.StatusNotFound, "not-found")
	r := s.do(s.newRequest(http.MethodPost, "/docs/swagger-ui.css", nil))
	wantProblem(t, r, http.StatusMethodNotAllowed, "method-not-allowed")
}
