package config_test

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/signature"
)

// TestPresetTableIsConsistent: each row of the preset table names a unique
// preset, a signature scheme package signature builds (or none), an
// encoding it knows, and a delivery ID and event type location that are
// valid where set; and the names YAML accepts come from the table.
func TestPresetTableIsConsistent(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, p := range config.Presets {
		if p.Name == "" || seen[p.Name] {
			t.Errorf("preset %q: empty or listed twice", p.Name)
		}
		seen[p.Name] = true
		sig := p.Signature
		if sig.Scheme != config.SchemeNone && !slices.Contains(signature.Schemes(), sig.Scheme) {
			t.Errorf("preset %s: scheme %q is not one of package signature's %v", p.Name, sig.Scheme, signature.Schemes())
		}
		// (Mailgun's signature is in the body: no header.)
		if sig.Scheme != config.SchemeNone && ((sig.Header == "" && sig.Scheme != signature.SchemeMailgun) || sig.Signed == "" || p.Docs == "") {
			t.Errorf("preset %s: a signing preset names its header, what is signed and its documentation", p.Name)
		}
		// Where the signature travels is named, so that it is never
		// stored: the verifier's header among the signature headers, or
		// the body's signature object.
		if sig.Scheme != config.SchemeNone && len(sig.SignatureHeaders) == 0 && sig.SignatureObject == "" {
			t.Errorf("preset %s: names neither its signature headers nor its body's signature object", p.Name)
		}
		if sig.Header != "" && !slices.ContainsFunc(sig.SignatureHeaders, func(h string) bool { return strings.EqualFold(h, sig.Header) }) {
			t.Errorf("preset %s: its signature header %s is not among its SignatureHeaders %v", p.Name, sig.Header, sig.SignatureHeaders)
		}
		if (sig.SignatureObject == "") != (len(sig.SignatureFields) == 0) {
			t.Errorf("preset %s: a body's signature object (JSON) and fields (form) are named together", p.Name)
		}
		if sig.Encoding != "" && sig.Encoding != signature.EncodingHex && sig.Encoding != signature.EncodingBase64 {
			t.Errorf("preset %s: encoding %q", p.Name, sig.Encoding)
		}
		if p.DeliveryID.Header != "" && p.DeliveryID.JSONPointer != "" {
			t.Errorf("preset %s: the delivery ID is in a header or at a pointer, not both", p.Name)
		}
		if (p.EventTypeEnvelope != config.Envelope{}) && p.EventType.JSONPointer == "" {
			t.Errorf("preset %s: an envelope needs an event type pointer", p.Name)
		}
	}
	if got, want := strings.Join(config.PresetNames(), " "), "github stripe shopify slack standard-webhooks generic"; !strings.HasPrefix(got, strings.TrimSuffix(want, " generic")) {
		t.Errorf("preset names %q, want the six of today first (%q)", got, want)
	}
	if got := config.SchemeNames(); !slices.Equal(got[:2], []string{"none", "hmac-sha256"}) || slices.Contains(got, "generic") {
		t.Errorf("scheme names %v: none, hmac-sha256, then each signing preset", got)
	}
	// A preset named in YAML comes from the table.
	for _, p := range config.Presets {
		yaml := "senders:\n  - name: x\n    preset: " + p.Name + "\n    delivery_id: { header: X-Id }\n"
		if p.Signature.Scheme != config.SchemeNone {
			yaml += "    secret: " + testSecret(p.Signature.Scheme) + "\n"
		}
		if _, err := config.Parse([]byte(yaml), func(string) (string, bool) { return "", false }); err != nil {
			t.Errorf("preset %s: %v", p.Name, err)
		}
	}
}

// TestDeliveryIDFromBodySHA256Config: body_sha256 is a delivery ID
// location of its own, for any sender, and the presets of providers that
// send no delivery ID use it.
func TestDeliveryIDFromBodySHA256Config(t *testing.T) {
	t.Parallel()
	yaml := "senders:\n  - name: x\n    preset: generic\n    delivery_id: { body_sha256: true }\n" +
		"  - name: y\n    preset: calendly\n    secret: " + testKey + "\n" +
		"  - name: z\n    preset: calendly\n    secret: " + testKey + "\n    delivery_id: { json_pointer: /payload/uri }\n"
	cfg, err := config.Parse([]byte(yaml), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	if d := cfg.Senders[0].DeliveryID; !d.BodySHA256 || d.Header != "" || d.JSONPointer != "" {
		t.Errorf("generic with body_sha256: %+v", d)
	}
	if d := cfg.Senders[1].DeliveryID; !d.BodySHA256 {
		t.Errorf("calendly preset: %+v, want body_sha256", d)
	}
	if d := cfg.Senders[2].DeliveryID; d.BodySHA256 || d.JSONPointer != "/payload/uri" {
		t.Errorf("calendly with an explicit pointer: %+v", d)
	}
}

// testSecret returns a secret of the form the scheme takes.
func testSecret(scheme string) string {
	switch scheme {
	case signature.SchemeECDSA:
		return testECDSAPublicKey
	case signature.SchemeEd25519:
		return strings.Repeat("ab", 32)
	case signature.SchemeHMACBase64Key:
		return testKey
	}
	return "whsec_" + testKey
}

// testKey is a key of 32 bytes in base64, as Standard Webhooks (after
// whsec_) and Airtable take theirs; as written, it is a secret of 44 bytes.
const testKey = "aG9va2dhdGUgdGVzdCBzZWNyZXQsIDMyIGJ5dGVzISE="

// testECDSAPublicKey is an ECDSA P-256 public key, base64 DER, as the
// ECDSA presets (SendGrid) take their "secret".
const testECDSAPublicKey = "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEFZdyA4JbTEDW5ZLLJE10vIOj/6Bs05G7ShGvtzwAsYPND03kWjbV5C28gw32n9cgQCn8tIwBrUbJNqjgYOxehg=="

// An ECDSA preset refuses a secret that is not a public key, without
// showing it.
func TestECDSASecretMustBeAPublicKey(t *testing.T) {
	t.Parallel()
	_, err := config.Parse([]byte("senders:\n  - name: x\n    preset: sendgrid\n    secret: not-a-key-8d1f\n"), func(string) (string, bool) { return "", false })
	if err == nil || !strings.Contains(err.Error(), "senders[0].secret") || strings.Contains(err.Error(), "not-a-key-8d1f") {
		t.Errorf("error %v: want senders[0].secret named, the value not shown", err)
	}
}

// public_url is an http(s) URL without query or fragment, for any sender;
// verify_token only for the presets that answer Meta's subscription check;
// neither value shows in an error.
func TestPublicURLAndVerifyToken(t *testing.T) {
	t.Parallel()
	parse := func(extra string) error {
		_, err := config.Parse([]byte("senders:\n  - name: x\n    preset: twilio\n    secret: tok-5e1f-9a8b7c6d\n"+extra+
			"  - name: m\n    preset: meta\n    secret: "+testKey+"\n    verify_token: vt-secret-9a8b7c6d\n"), func(string) (string, bool) { return "", false })
		return err
	}
	if err := parse("    public_url: https://hooks.example.com/webhooks/twilio\n"); err != nil {
		t.Fatalf("a plain public_url and a meta verify_token: %v", err)
	}
	for extra, want := range map[string]string{
		"    public_url: https://hooks.example.com/webhooks/twilio?a=1\n": "senders[0].public_url: must not have a query",
		"    public_url: hooks.example.com/webhooks/twilio\n":             "senders[0].public_url: must be an http or https URL",
		"    verify_token: vt-secret-9a8b7c6d\n":                          "senders[0].verify_token: is only used by the meta preset",
	} {
		err := parse(extra)
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "vt-secret-9a8b7c6d") || strings.Contains(err.Error(), "tok-5e1f-9a8b7c6d") {
			t.Errorf("%q: %v, want %q (and no secret)", extra, err, want)
		}
	}
}

// replayRow is a preset's row of the table "Replays under a new delivery
// ID" of docs/providers.md.
func replayRow(p config.Preset) string {
	answer := "no: "
	if p.Replay.NewID {
		answer = "**yes**, "
	}
	return "| `" + p.Name + "` | " + answer + p.Replay.Why + " | " + p.Replay.Do + " |"
}

// TestReplayTableIsDocumented: docs/providers.md's table "Replays under a
// new delivery ID" has one row per preset, as the preset table's Replay
// says, in the table's order, and no other.
func TestReplayTableIsDocumented(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/providers.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## Replays under a new delivery ID\n")
	if !ok {
		t.Fatal("docs/providers.md has no section ## Replays under a new delivery ID")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var rows []string
	for line := range strings.SplitSeq(section, "\n") {
		if strings.HasPrefix(line, "| `") {
			rows = append(rows, line)
		}
	}
	var want []string
	for _, p := range config.Presets {
		if p.Replay.Why == "" || p.Replay.Do == "" || strings.Contains(p.Replay.Why+p.Replay.Do, "|") {
			t.Errorf("preset %s: Replay %+v: say why and what to do, without a |", p.Name, p.Replay)
		}
		want = append(want, replayRow(p))
	}
	if got := strings.Join(rows, "\n"); got != strings.Join(want, "\n") {
		t.Errorf("the table's rows in docs/providers.md:\n%s\n\nwant (from config.Presets):\n%s", got, strings.Join(want, "\n"))
	}
}
