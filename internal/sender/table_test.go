package sender_test

import (
	"testing"

	"github.com/hookgate/hookgate/internal/config"
)

// TestEveryPresetCompiles: a sender of each row of the preset table
// compiles into a verifier exactly when the row checks a signature, and
// answers a handshake exactly when the row names one.
func TestEveryPresetCompiles(t *testing.T) {
	t.Parallel()
	for _, p := range config.Presets {
		yaml := "senders:\n  - name: x\n    preset: " + p.Name + "\n    delivery_id: { header: X-Id }\n"
		if p.Signature.Scheme != config.SchemeNone {
			yaml += "    secret: whsec_c2VjcmV0\n"
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
