package handler

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
)

// apiCSP is the Content-Security-Policy of every response but the API
// explorer's page: the API serves no content a browser should run, load or
// frame.
const apiCSP = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"

// securityHeaders sets the same security headers on every response:
// X-Content-Type-Options nosniff, X-Frame-Options DENY, Referrer-Policy
// no-referrer, and a Content-Security-Policy, which is docsCSP under /docs
// and apiCSP everywhere else.
func securityHeaders(docsCSP string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h := w.Header()
			h.Set("X-Content-Type-Options", "nosniff")
			h.Set("X-Frame-Options", "DENY")
			h.Set("Referrer-Policy", "no-referrer")
			csp := apiCSP
			if r.URL.Path == "/docs" || strings.HasPrefix(r.URL.Path, "/docs/") {
				csp = docsCSP
			}
			h.Set("Content-Security-Policy", csp)
			next.ServeHTTP(w, r)
		})
	}
}

var inlineScript = regexp.MustCompile(`(?s)<script>(.*?)</script>`)

// docsPolicy returns the Content-Security-Policy of the API explorer served
// by docs: everything from this origin only, its page's inline scripts
// allowed by their SHA-256 (computed here from the page docs renders, so an
// upgrade of the explorer cannot silently break it), inline styles (Swagger
// UI sets style attributes) and data: images (its CSS icons). No eval, no
// other origin, no framing.
func docsPolicy(docs http.Handler) string {
	rec := httptest.NewRecorder()
	docs.ServeHTTP(rec, httptest.NewRequestWithContext(context.Background(), http.MethodGet, "/docs", nil))
	src := []string{"'self'"}
	for _, m := range inlineScript.FindAllStringSubmatch(rec.Body.String(), -1) {
		sum := sha256.Sum256([]byte(m[1]))
		src = append(src, "'sha256-"+base64.StdEncoding.EncodeToString(sum[:])+"'")
	}
	return "default-src 'none'; script-src " + strings.Join(src, " ") +
		"; style-src 'self' 'unsafe-inline'; img-src 'self' data:; font-src 'self' data:; connect-src 'self'" +
		"; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
}
