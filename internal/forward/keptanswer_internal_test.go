package forward

import (
	"strings"
	"testing"

	"github.com/hookgate/hookgate/internal/config"
)

// An attempt keeps the target's answer without what it echoes of the
// target's secrets, with credential-like headers masked, and its headers
// bounded.
func TestKeptAnswerMasksTheTargetsSecretsAndBoundsHeaders(t *testing.T) {
	t.Parallel()
	tg := &config.Target{Name: "slack", URL: "https://user:pa55word@hooks.example.com/services/T0/B0/XyZsecret123?key=qkey4567",
		SecretPath: true, SigningSecret: "whsec_signing999", Headers: map[string]string{"X-Api-Key": "hdrkey-777", "X-Team": "platform"}}
	body := []byte("Cannot POST /services/T0/B0/XyZsecret123?key=qkey4567 (auth pa55word, hdrkey-777, whsec_signing999); team platform")
	h := map[string][]string{
		"Location":       {"https://hooks.example.com/services/T0/B0/XyZsecret123"},
		"Set-Cookie":     {"s=abc"},
		"X-Echo":         {"hdrkey-777"},
		"Content-Type":   {"text/plain"},
		"X-Long":         {strings.Repeat("v", 5000)},
		"X-Zz-Last":      {"kept?"},
		"X-Padding-0001": {strings.Repeat("p", 1000)},
		"X-Padding-0002": {strings.Repeat("p", 1000)},
		"X-Padding-0003": {strings.Repeat("p", 1000)},
		"X-Padding-0004": {strings.Repeat("p", 1000)},
		"X-Padding-0005": {strings.Repeat("p", 1000)},
		"X-Padding-0006": {strings.Repeat("p", 1000)},
		"X-Padding-0007": {strings.Repeat("p", 1000)},
	}
	kh, kb := keptAnswer(tg, h, body)
	for _, secret := range []string{"XyZsecret123", "qkey4567", "pa55word", "hdrkey-777", "whsec_signing999"} {
		if strings.Contains(string(kb), secret) {
			t.Errorf("the kept body holds %s: %s", secret, kb)
		}
		for k, vs := range kh {
			if strings.Contains(strings.Join(vs, " "), secret) {
				t.Errorf("the kept header %s holds %s: %v", k, secret, vs)
			}
		}
	}
	if !strings.Contains(string(kb), "team platform") || !strings.HasPrefix(string(kb), "Cannot POST /") {
		t.Errorf("the kept body lost what is not secret: %s", kb)
	}
	if got := kh["Set-Cookie"]; len(got) != 1 || got[0] != "xxxxx" {
		t.Errorf("Set-Cookie kept as %v, want masked", got)
	}
	if got := kh["Content-Type"]; len(got) != 1 || got[0] != "text/plain" {
		t.Errorf("Content-Type kept as %v", got)
	}
	if got := kh["X-Long"]; len(got) != 1 || len(got[0]) > maxKeptHeaderValue+len("…") || !strings.HasSuffix(got[0], "…") {
		t.Errorf("a 5,000-byte value kept as %d bytes", len(got[0]))
	}
	n := 0
	for k, vs := range kh {
		for _, v := range vs {
			n += len(k) + len(v)
		}
	}
	if n > maxKeptHeaderBytes {
		t.Errorf("%d bytes of headers kept, over %d", n, maxKeptHeaderBytes)
	}
	if _, ok := kh["X-Zz-Last"]; ok {
		t.Errorf("the headers past the bound are kept: %v", kh["X-Zz-Last"])
	}
	// Without a target (a test's), the answer is kept as it came, but
	// credential-like headers.
	if _, b := keptAnswer(nil, nil, []byte("ok")); string(b) != "ok" {
		t.Errorf("body %q", b)
	}
}
