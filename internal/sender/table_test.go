package sender_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/sender"
	"github.com/hookgate/hookgate/internal/signature"
)

// handshakeProbes are, by handshake kind, a request of that kind: each
// preset answers exactly its own kind's (the GET subscription check is
// CheckSubscription's, not Handshake's).
var handshakeProbes = map[string]func() *http.Request{
	config.HandshakeSlackURLVerification: func() *http.Request {
		return httptest.NewRequest(http.MethodPost, "/webhooks/x", strings.NewReader(`{"type":"url_verification","challenge":"c"}`))
	},
	config.HandshakeZoomURLValidation: func() *http.Request {
		return httptest.NewRequest(http.MethodPost, "/webhooks/x", strings.NewReader(`{"event":"endpoint.url_validation","payload":{"plainToken":"p"}}`))
	},
	config.HandshakeTwitchVerification: func() *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/webhooks/x", strings.NewReader(`{"challenge":"c"}`))
		r.Header.Set("Twitch-Eventsub-Message-Type", "webhook_callback_verification")
		return r
	},
	config.HandshakeDiscordPing: func() *http.Request {
		return httptest.NewRequest(http.MethodPost, "/webhooks/x", strings.NewReader(`{"type":1}`))
	},
}

// testKey is a key of 32 bytes in base64, as Standard Webhooks (after
// whsec_) and Airtable take theirs; as written, a secret of 44 bytes.
const testKey = "aG9va2dhdGUgdGVzdCBzZWNyZXQsIDMyIGJ5dGVzISE="

// TestEveryPresetCompiles: a sender of each row of the preset table
// compiles into a verifier exactly when the row checks a signature, and
// answers a handshake exactly when the row names one.
func TestEveryPresetCompiles(t *testing.T) {
	t.Parallel()
	for _, p := range config.Presets {
		yaml := "senders:\n  - name: x\n    preset: " + p.Name + "\n    delivery_id: { header: X-Id }\n"
		if p.Signature.Scheme != config.SchemeNone {
			secret := "whsec_" + testKey
			switch p.Signature.Scheme {
			case signature.SchemeECDSA:
				secret = "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEFZdyA4JbTEDW5ZLLJE10vIOj/6Bs05G7ShGvtzwAsYPND03kWjbV5C28gw32n9cgQCn8tIwBrUbJNqjgYOxehg=="
			case signature.SchemeEd25519:
				secret = strings.Repeat("ab", 32)
			case signature.SchemeHMACBase64Key:
				secret = testKey
			}
			yaml += "    secret: " + secret + "\n"
		}
		set := mustParse(t, yaml, noEnv)
		s, _ := set.Get("x")
		if (s.Verifier != nil) != (p.Signature.Scheme != config.SchemeNone) {
			t.Errorf("preset %s: verifier %v, scheme %q", p.Name, s.Verifier, p.Signature.Scheme)
		}
		for kind, probe := range handshakeProbes {
			r := probe()
			body := []byte(readAll(t, r))
			in := s.Inspect(body)
			_, ok := s.Handshake(r, body, &in, time.Now())
			// Zoom's answer is keyed with the secret that signed the
			// probe, which is unsigned here: no answer.
			want := p.Handshake == kind && kind != config.HandshakeZoomURLValidation
			if ok != want {
				t.Errorf("preset %s: %s answered %v, its kind %q", p.Name, kind, ok, p.Handshake)
			}
		}
		if _, err := s.CheckSubscription(map[string][]string{"hub.mode": {"subscribe"}, "hub.challenge": {"c"}}); err == nil ||
			errors.Is(err, sender.ErrNoSubscriptionCheck) != (p.Handshake != config.HandshakeMetaSubscribe) {
			t.Errorf("preset %s: CheckSubscription without a verify token: %v", p.Name, err)
		}
	}
}

func readAll(t *testing.T, r *http.Request) string {
	t.Helper()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
