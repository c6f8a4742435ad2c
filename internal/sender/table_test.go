package sender_test

import (
	"testing"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/signature"
)

// TestEveryPresetCompiles: a sender of each row of the preset table
// compiles into a verifier exactly when the row checks a signature, and
// answers a handshake exactly when the row names one.
func TestEveryPresetCompiles(t *testing.T) {
	t.Parallel()
	for _, p := range config.Presets {
		yaml := "senders:\n  - name: x\n    preset: " + p.Name + "\n    delivery_id: { header: X-Id }\n"
		if p.Signature.Scheme != config.SchemeNone {
			secret := "whsec_c2VjcmV0"
			if p.Signature.Scheme == signature.SchemeECDSA {
				secret = "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEFZdyA4JbTEDW5ZLLJE10vIOj/6Bs05G7ShGvtzwAsYPND03kWjbV5C28gw32n9cgQCn8tIwBrUbJNqjgYOxehg=="
			}
			yaml += "    secret: " + secret + "\n"
		}
		set := mustParse(t, yaml, noEnv)
		s, _ := set.Get("x")
		if (s.Verifier != nil) != (p.Signature.Scheme != config.SchemeNone) {
			t.Errorf("preset %s: verifier %v, scheme %q", p.Name, s.Verifier, p.Signature.Scheme)
		}
		in := s.Inspect([]byte(`{"type":"url_verification","challenge":"c"}`))
		if _, ok := s.Handshake(&in); ok != (p.Handshake != config.HandshakeNone) {
			t.Errorf("preset %s: handshake answered %v, kind %q", p.Name, ok, p.Handshake)
		}
	}
}
