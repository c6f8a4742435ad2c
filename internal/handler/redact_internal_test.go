package handler

import (
	"strings"
	"testing"
)

// Target URLs lose their password and query values wherever the operator
// API shows them: in the URL itself and in error texts that quote it.
func TestRedactTargetURLs(t *testing.T) {
	t.Parallel()
	const target = "https://user:hunter22@svc.internal/hook?token=s3cr3t-token&v=1"
	got := redactURL(target)
	for _, secret := range []string{"hunter22", "s3cr3t-token"} {
		if strings.Contains(got, secret) {
			t.Errorf("redactURL(%q) = %q: still contains %q", target, got, secret)
		}
	}
	if !strings.Contains(got, "svc.internal/hook") || !strings.Contains(got, "token=xxxxx") {
		t.Errorf("redactURL(%q) = %q: want the host, path and parameter names kept", target, got)
	}
	text := `post to target: Post "` + target + `": dial tcp: connection refused; token s3cr3t-token`
	red := redactText(text, target)
	for _, secret := range []string{"hunter22", "s3cr3t-token"} {
		if strings.Contains(red, secret) {
			t.Errorf("redactText left %q in %q", secret, red)
		}
	}
	if !strings.Contains(red, "connection refused") {
		t.Errorf("redactText(%q) = %q: want the rest of the text kept", text, red)
	}
	if got := redactURL("http://svc/hook"); got != "http://svc/hook" {
		t.Errorf("redactURL of a plain URL = %q, want it unchanged", got)
	}
}
