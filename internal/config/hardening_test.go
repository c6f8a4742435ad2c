package config_test

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/hookgate/hookgate/internal/config"
)

// Signing secrets need at least 16 bytes (of the key, for whsec_ and base64
// keys) and no whitespace around them; public keys keep their own size.
// The refusals name the sender, the target and the field, never the value.
func TestWeakSecretsAreRefused(t *testing.T) {
	t.Parallel()
	key := func(n int) string { return base64.StdEncoding.EncodeToString([]byte(strings.Repeat("k", n))) }
	s15, s16 := "fifteen-bytes-1", "sixteen-bytes-16"
	lookup := env(map[string]string{"PADDED": " " + s16, "NL": s16 + "\n", "SHORT": s15})
	for _, tc := range []struct {
		name, yaml string
		want       string // "" when it is valid
	}{
		{"16 bytes", "senders:\n  - name: g\n    preset: github\n    secret: " + s16 + "\n", ""},
		{"15 bytes", "senders:\n  - name: g\n    preset: github\n    secret: " + s15 + "\n", "senders[0].secret (g): is 15 bytes"},
		{"15 bytes from the environment", "senders:\n  - name: g\n    preset: github\n    secret: ${SHORT}\n", "senders[0].secret (g): is 15 bytes"},
		{"a rotation with a short one", "senders:\n  - name: g\n    preset: github\n    secrets: [" + s16 + ", " + s15 + "]\n", "senders[0].secrets[1] (g)"},
		{"only spaces", "senders:\n  - name: g\n    preset: github\n    secret: \"                \"\n", "senders[0].secret (g): is only whitespace"},
		{"a leading space", "senders:\n  - name: g\n    preset: github\n    secret: ${PADDED}\n", "senders[0].secret (g): begins or ends with whitespace"},
		{"a trailing newline", "senders:\n  - name: g\n    preset: github\n    secret: ${NL}\n", "senders[0].secret (g): begins or ends with whitespace"},
		{"a 16-byte whsec_ key", "senders:\n  - name: w\n    preset: standard-webhooks\n    secret: whsec_" + key(16) + "\n", ""},
		{"a 15-byte whsec_ key", "senders:\n  - name: w\n    preset: standard-webhooks\n    secret: whsec_" + key(15) + "\n", "senders[0].secret (w): decodes to a key of 15 bytes"},
		{"a 15-byte base64 key", "senders:\n  - name: a\n    preset: airtable\n    secret: " + key(15) + "\n", "decodes to a key of 15 bytes"},
		{"an Ed25519 public key", "senders:\n  - name: d\n    preset: discord\n    secret: " + strings.Repeat("ab", 32) + "\n", ""},
		{"an ECDSA public key", "senders:\n  - name: e\n    preset: sendgrid\n    secret: " + testECDSAPublicKey + "\n", ""},
		{"a short hmac-sha256 signature.secret", "senders:\n  - name: b\n    preset: generic\n    delivery_id: { header: X-Id }\n    signature: { scheme: hmac-sha256, header: X-Sig, secret: " + s15 + " }\n",
			"senders[0].signature.secret (b)"},
		{"a short token", "senders:\n  - name: gl\n    preset: gitlab\n    secret: " + s15 + "\n", "senders[0].secret (gl)"},
		{"a short verify token", "senders:\n  - name: m\n    preset: meta\n    secret: " + s16 + "\n    verify_token: " + s15 + "\n", "senders[0].verify_token (m): is 15 bytes"},
		{"a short target key", "senders:\n  - name: o\n    preset: generic\n    delivery_id: { header: X-Id }\n    forward:\n      - name: t\n        url: http://svc/x\n        signing_secret: whsec_" + key(15) + "\n",
			"senders[0].forward[0].signing_secret (o, target t): decodes to a key of 15 bytes"},
		{"a 16-byte target key", "senders:\n  - name: o\n    preset: generic\n    delivery_id: { header: X-Id }\n    forward:\n      - name: t\n        url: http://svc/x\n        signing_secret: whsec_" + key(16) + "\n", ""},
	} {
		_, err := config.Parse([]byte(tc.yaml), lookup)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.want)
		case err != nil && (strings.Contains(err.Error(), s15) || strings.Contains(err.Error(), s16) || strings.Contains(err.Error(), key(15))):
			t.Errorf("%s: the error shows the secret: %v", tc.name, err)
		}
	}
}

// A tolerance is at most an hour; the presets' own are within it.
func TestToleranceIsAtMostAnHour(t *testing.T) {
	t.Parallel()
	for tol, ok := range map[string]bool{"1h": true, "3600s": true, "1h0m1s": false, "87600h": false} {
		_, err := config.Parse([]byte("senders:\n  - name: s\n    preset: stripe\n    secret: whsec_0123456789abcdef\n    tolerance: "+tol+"\n"), noEnv)
		if ok != (err == nil) || (err != nil && !strings.Contains(err.Error(), "senders[0].tolerance: must be at most 1h")) {
			t.Errorf("tolerance %s: %v", tol, err)
		}
	}
	for _, p := range config.Presets {
		if p.Signature.Tolerance > config.MaxTolerance {
			t.Errorf("preset %s: tolerance %v", p.Name, p.Signature.Tolerance)
		}
	}
	// The forward timeout's bound is still said as it was.
	_, err := config.Parse([]byte("senders:\n  - name: o\n    preset: generic\n    delivery_id: { header: X-Id }\n    forward:\n      - name: t\n        url: http://svc/x\n        timeout: 6m\n"), noEnv)
	if err == nil || !strings.Contains(err.Error(), "senders[0].forward[0].timeout: must be at most 5m") {
		t.Errorf("timeout 6m: %v", err)
	}
}

// signature.scheme none is refused on every preset that answers a
// handshake, and allowed on the others.
func TestHandshakePresetsKeepTheirSignatureCheck(t *testing.T) {
	t.Parallel()
	handshakes := 0
	for _, p := range config.Presets {
		yaml := "senders:\n  - name: x\n    preset: " + p.Name + "\n    delivery_id: { header: X-Id }\n    signature: { scheme: none }\n"
		_, err := config.Parse([]byte(yaml), noEnv)
		if p.Handshake == config.HandshakeNone {
			if err != nil {
				t.Errorf("preset %s with scheme none: %v", p.Name, err)
			}
			continue
		}
		handshakes++
		if err == nil || !strings.Contains(err.Error(), "senders[0].signature.scheme (x): none cannot turn off the signature check of preset "+p.Name) {
			t.Errorf("preset %s (handshake %s) with scheme none: %v", p.Name, p.Handshake, err)
		}
	}
	if handshakes < 5 {
		t.Errorf("%d presets answer a handshake, want Slack's, Zoom's, Twitch's, Discord's and Meta's at least", handshakes)
	}
}

// A target URL with user information is refused, pointing to headers:,
// without the URL (or its password) in the error.
func TestTargetURLCredentialsAreRefused(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"http://user:pw-7h3k@svc/x", "https://tok-7h3k@svc/x", "http://:pw-7h3k@svc/x", "http://user@svc:9000/x"} {
		yaml := "senders:\n  - name: o\n    preset: generic\n    delivery_id: { header: X-Id }\n    forward:\n      - name: t\n        url: " + u + "\n"
		_, err := config.Parse([]byte(yaml), noEnv)
		if err == nil || !strings.Contains(err.Error(), "senders[0].forward[0].url (o, target t): has a user name or password") || !strings.Contains(err.Error(), "headers: { Authorization:") {
			t.Errorf("%s: %v", u, err)
			continue
		}
		if strings.Contains(err.Error(), "7h3k") || strings.Contains(err.Error(), "svc") {
			t.Errorf("%s: the error shows the URL: %v", u, err)
		}
	}
}
