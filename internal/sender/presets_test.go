package sender_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/sender"
	"github.com/hookgate/hookgate/internal/signature"
)

// presetSender returns the YAML of one list item under senders: with the
// given preset and extra lines (indented by four spaces by this function).
func presetSender(name, preset string, extra ...string) string {
	s := "  - name: " + name + "\n    preset: " + preset + "\n"
	for _, e := range extra {
		s += "    " + e + "\n"
	}
	return s
}

// whsec returns a Standard Webhooks secret for key.
func whsec(key string) string {
	return signature.StandardSecretPrefix + base64.StdEncoding.EncodeToString([]byte(key))
}

func testMAC(key []byte, parts ...string) []byte {
	m := hmac.New(sha256.New, key)
	for _, p := range parts {
		m.Write([]byte(p))
	}
	return m.Sum(nil)
}

// signFor returns the headers with which scheme signs body under key at now,
// computed here with crypto/hmac. For hmac-sha256 it uses X-Sig, hex, no
// prefix.
func signFor(t *testing.T, scheme string, key []byte, body []byte, now time.Time) http.Header {
	t.Helper()
	ts := strconv.FormatInt(now.Unix(), 10)
	h := http.Header{}
	switch scheme {
	case "github":
		h.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(testMAC(key, string(body))))
	case "stripe":
		h.Set("Stripe-Signature", "t="+ts+",v1="+hex.EncodeToString(testMAC(key, ts, ".", string(body))))
	case "shopify":
		h.Set("X-Shopify-Hmac-Sha256", base64.StdEncoding.EncodeToString(testMAC(key, string(body))))
	case "slack":
		h.Set("X-Slack-Request-Timestamp", ts)
		h.Set("X-Slack-Signature", "v0="+hex.EncodeToString(testMAC(key, "v0:", ts, ":", string(body))))
	case "standard-webhooks":
		h.Set("webhook-id", "msg_1")
		h.Set("webhook-timestamp", ts)
		h.Set("webhook-signature", "v1,"+base64.StdEncoding.EncodeToString(testMAC(key, "msg_1.", ts, ".", string(body))))
	case config.SchemeHMAC:
		h.Set("X-Sig", hex.EncodeToString(testMAC(key, string(body))))
	default:
		t.Fatalf("signFor: unknown scheme %q", scheme)
	}
	return h
}

// wantVerifies checks that s's Verifier accepts body signed (per scheme)
// with each of keys, and refuses it signed with another key.
func wantVerifies(t *testing.T, s *sender.Sender, scheme string, keys ...string) {
	t.Helper()
	if s.Verifier == nil {
		t.Fatalf("sender %s has no Verifier", s.Name)
	}
	body := []byte(`{"id":"evt_1","event_id":"Ev1"}`)
	now := time.Now()
	for _, k := range keys {
		if err := s.Verifier.Verify(signFor(t, scheme, []byte(k), body, now), body, now); err != nil {
			t.Errorf("sender %s: a %s signature under key %q fails: %v", s.Name, scheme, k, err)
		}
	}
	if err := s.Verifier.Verify(signFor(t, scheme, []byte("some-other-key"), body, now), body, now); err == nil {
		t.Errorf("sender %s: a %s signature under an unconfigured key passes", s.Name, scheme)
	}
}

func TestPresetDefaults(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		preset, secret    string
		header, pointer   string
		scheme            string
		key               string // the HMAC key the secret stands for
		signedWithTimeout bool
	}{
		{"github", "gh-secret-0123456789abcdef", "X-GitHub-Delivery", "", "github", "gh-secret-0123456789abcdef", false},
		{"stripe", "whsec_stripe-is-used-as-is", "", "/id", "stripe", "whsec_stripe-is-used-as-is", true},
		{"shopify", "shp-secret-0123456789abcdef", "X-Shopify-Event-Id", "", "shopify", "shp-secret-0123456789abcdef", false},
		{"slack", "slack-secret-0123456789abcdef", "", "/event_id", "slack", "slack-secret-0123456789abcdef", true},
		{"standard-webhooks", whsec("sw-key-0123456789abcdef"), "webhook-id", "", "standard-webhooks", "sw-key-0123456789abcdef", true},
	} {
		t.Run(tc.preset, func(t *testing.T) {
			t.Parallel()
			c := mustParse(t, "senders:\n"+presetSender("x", tc.preset, "secret: "+strconv.Quote(tc.secret)), noEnv)
			s := &c.Senders[0]
			if s.DeliveryID.Header != tc.header || s.DeliveryID.JSONPointer != tc.pointer {
				t.Errorf("delivery_id = %+v, want header %q json_pointer %q", s.DeliveryID, tc.header, tc.pointer)
			}
			if got := s.SignatureScheme(); got != tc.scheme {
				t.Errorf("SignatureScheme() = %q, want %q", got, tc.scheme)
			}
			if got := time.Duration(s.Tolerance); got != 300*time.Second {
				t.Errorf("tolerance = %v, want the default 300s", got)
			}
			wantVerifies(t, s, tc.scheme, tc.key)
		})
	}

	t.Run("generic", func(t *testing.T) {
		t.Parallel()
		c := mustParse(t, "senders:\n"+presetSender("x", "generic", "delivery_id: { header: X-Id }"), noEnv)
		s := &c.Senders[0]
		if got := s.SignatureScheme(); got != config.SchemeNone {
			t.Errorf("SignatureScheme() = %q, want %q", got, config.SchemeNone)
		}
		if s.Verifier != nil {
			t.Errorf("generic sender without a signature block has a Verifier: %T", s.Verifier)
		}
	})
}

func TestPresetTolerance(t *testing.T) {
	t.Parallel()
	for _, preset := range []string{"stripe", "slack", "standard-webhooks"} {
		t.Run(preset, func(t *testing.T) {
			t.Parallel()
			secret, key := "k-0123456789abcdef-"+preset, "k-0123456789abcdef-"+preset
			if preset == "standard-webhooks" {
				secret = whsec(key)
			}
			c := mustParse(t, "senders:\n"+
				presetSender("dflt", preset, "secret: "+secret)+
				presetSender("short", preset, "secret: "+secret, "tolerance: 30s")+
				presetSender("long", preset, "secret: "+secret, "tolerance: 15m"), noEnv)
			body := []byte(`{"id":"evt_1","event_id":"Ev1"}`)
			signedAt := time.Unix(1_700_000_000, 0)
			for _, tc := range []struct {
				sender string
				tol    time.Duration
			}{{"dflt", 300 * time.Second}, {"short", 30 * time.Second}, {"long", 15 * time.Minute}} {
				s, _ := c.Get(tc.sender)
				if got := time.Duration(s.Tolerance); got != tc.tol {
					t.Errorf("%s: tolerance = %v, want %v", tc.sender, got, tc.tol)
				}
				h := signFor(t, preset, []byte(key), body, signedAt)
				// Exactly at the tolerance, either way: accepted; a second more: refused.
				for _, d := range []time.Duration{-tc.tol, 0, tc.tol} {
					if err := s.Verifier.Verify(h, body, signedAt.Add(d)); err != nil {
						t.Errorf("%s: checked %v after signing: %v", tc.sender, d, err)
					}
				}
				for _, d := range []time.Duration{-tc.tol - time.Second, tc.tol + time.Second} {
					if err := s.Verifier.Verify(h, body, signedAt.Add(d)); err == nil {
						t.Errorf("%s: checked %v after signing: accepted, want refused", tc.sender, d)
					}
				}
			}
		})
	}
}

func TestPresetDeliveryIDOverride(t *testing.T) {
	t.Parallel()
	c := mustParse(t, "senders:\n"+
		presetSender("gh", "github", "secret: s-0123456789abcdef", "delivery_id: { json_pointer: /hook_id }")+
		presetSender("st", "stripe", "secret: s-0123456789abcdef", "delivery_id: { header: X-Event }")+
		presetSender("sl", "slack", "secret: s-0123456789abcdef", "delivery_id: { json_pointer: /event/client_msg_id }")+
		presetSender("sw", "standard-webhooks", "secret: "+whsec("key-0123456789abcdef"), "delivery_id: { header: X-Msg }"), noEnv)
	for name, want := range map[string]config.DeliveryID{
		"gh": {JSONPointer: "/hook_id"},
		"st": {Header: "X-Event"},
		"sl": {JSONPointer: "/event/client_msg_id"},
		"sw": {Header: "X-Msg"},
	} {
		s, _ := c.Get(name)
		if s.DeliveryID != want {
			t.Errorf("%s: delivery_id = %+v, want %+v (the explicit field, not the preset's)", name, s.DeliveryID, want)
		}
	}
	// The signature check stays the preset's.
	gh, _ := c.Get("gh")
	wantVerifies(t, gh, "github", "s-0123456789abcdef")
}

func TestPresetSchemeOverride(t *testing.T) {
	t.Parallel()
	c := mustParse(t, "senders:\n"+
		// A GitHub sender whose proxy re-signs in X-Sig.
		presetSender("gh", "github", "secret: s1-0123456789abcdef", "signature: { scheme: hmac-sha256, header: X-Sig }")+
		// A generic sender checked like Shopify.
		presetSender("gen", "generic", "delivery_id: { header: X-Id }", "secret: s2-0123456789abcdef", "signature: { scheme: shopify }")+
		// A Stripe sender whose check is turned off (a preset that answers
		// a handshake, such as Slack's, refuses that: config).
		presetSender("sl", "stripe", "signature: { scheme: none }")+
		// A generic sender with the Standard Webhooks scheme.
		presetSender("gsw", "generic", "delivery_id: { header: webhook-id }", "signature: { scheme: standard-webhooks, secret: \""+whsec("s3-0123456789abcdef")+"\" }"), noEnv)

	gh, _ := c.Get("gh")
	if got := gh.SignatureScheme(); got != config.SchemeHMAC {
		t.Errorf("gh: SignatureScheme() = %q, want hmac-sha256", got)
	}
	if gh.DeliveryID.Header != "X-GitHub-Delivery" {
		t.Errorf("gh: delivery_id = %+v; overriding the scheme must keep the preset's delivery ID", gh.DeliveryID)
	}
	wantVerifies(t, gh, config.SchemeHMAC, "s1-0123456789abcdef")
	body := []byte("{}")
	if err := gh.Verifier.Verify(signFor(t, "github", []byte("s1-0123456789abcdef"), body, time.Now()), body, time.Now()); err == nil {
		t.Error("gh: a GitHub-style signature passes though the scheme is hmac-sha256 in X-Sig")
	}

	gen, _ := c.Get("gen")
	if got := gen.SignatureScheme(); got != "shopify" {
		t.Errorf("gen: SignatureScheme() = %q, want shopify", got)
	}
	wantVerifies(t, gen, "shopify", "s2-0123456789abcdef")

	sl, _ := c.Get("sl")
	if got := sl.SignatureScheme(); got != config.SchemeNone || sl.Verifier != nil {
		t.Errorf("sl: SignatureScheme() = %q, Verifier %v; want none and nil", got, sl.Verifier)
	}
	if sl.DeliveryID.JSONPointer != "/id" {
		t.Errorf("sl: delivery_id = %+v, want the preset's /id", sl.DeliveryID)
	}

	gsw, _ := c.Get("gsw")
	wantVerifies(t, gsw, "standard-webhooks", "s3-0123456789abcdef")
}

func TestGenericHMACOptions(t *testing.T) {
	t.Parallel()
	c := mustParse(t, "senders:\n"+
		presetSender("hexp", "generic", "delivery_id: { header: X-Id }", "secret: k-0123456789abcdef",
			`signature: { scheme: hmac-sha256, header: X-Signature, encoding: hex, prefix: "sha256=" }`)+
		presetSender("b64", "generic", "delivery_id: { header: X-Id }", "secret: k-0123456789abcdef",
			"signature: { scheme: hmac-sha256, header: X-Mac, encoding: base64 }"), noEnv)
	body := []byte(`{"a":1}`)
	mac := testMAC([]byte("k-0123456789abcdef"), string(body))
	now := time.Now()
	for _, tc := range []struct {
		sender, header, value string
		ok                    bool
	}{
		{"hexp", "X-Signature", "sha256=" + hex.EncodeToString(mac), true},
		{"hexp", "X-Signature", hex.EncodeToString(mac), false}, // prefix missing
		{"hexp", "X-Signature", "sha256=" + base64.StdEncoding.EncodeToString(mac), false},
		{"b64", "X-Mac", base64.StdEncoding.EncodeToString(mac), true},
		{"b64", "X-Mac", hex.EncodeToString(mac), false},
		{"b64", "X-Signature", base64.StdEncoding.EncodeToString(mac), false}, // wrong header
	} {
		s, _ := c.Get(tc.sender)
		h := http.Header{}
		h.Set(tc.header, tc.value)
		if err := s.Verifier.Verify(h, body, now); (err == nil) != tc.ok {
			t.Errorf("%s with %s: %q: err = %v, want ok=%t", tc.sender, tc.header, tc.value, err, tc.ok)
		}
	}
}

// Every secret a sender lists is used: secret, secrets (rotation) and
// signature.secret, from the environment or written in the file.
func TestPresetSecretsRotation(t *testing.T) {
	t.Parallel()
	vars := env(map[string]string{
		"GH_OLD": "gh-old-0123456789abcdef", "GH_NEW": "gh-new-0123456789abcdef", "GH_CUR": "gh-cur-0123456789abcdef",
		"SW_OLD": whsec("sw-old-0123456789abcdef"), "SW_NEW": whsec("sw-new-0123456789abcdef"),
		"WEIRD": "a: b #c, \"quoted\" ${NOT_EXPANDED}",
	})
	c := mustParse(t, "senders:\n"+
		presetSender("gh", "github", "secret: ${GH_CUR}", `secrets: ["${GH_OLD}", "${GH_NEW}"]`)+
		presetSender("st", "stripe", "secrets: [literal-1-0123456789abcdef, literal-2-0123456789abcdef]")+
		presetSender("sh", "shopify", "secret: ${WEIRD}")+
		presetSender("sl", "slack", "secret: one-0123456789abcdef", "secrets: [two-0123456789abcdef]", "signature: { secret: three-0123456789abcdef }")+
		presetSender("sw", "standard-webhooks", `secrets: ["${SW_OLD}", "${SW_NEW}"]`)+
		presetSender("gen", "generic", "delivery_id: { header: X-Id }", "secrets: [g1-0123456789abcdef, g2-0123456789abcdef]",
			"signature: { scheme: hmac-sha256, header: X-Sig, secret: g3-0123456789abcdef }"), vars)
	for _, tc := range []struct {
		sender, scheme string
		keys           []string
	}{
		{"gh", "github", []string{"gh-old-0123456789abcdef", "gh-new-0123456789abcdef", "gh-cur-0123456789abcdef"}},
		{"st", "stripe", []string{"literal-1-0123456789abcdef", "literal-2-0123456789abcdef"}},
		{"sh", "shopify", []string{"a: b #c, \"quoted\" ${NOT_EXPANDED}"}},
		{"sl", "slack", []string{"one-0123456789abcdef", "two-0123456789abcdef", "three-0123456789abcdef"}},
		{"sw", "standard-webhooks", []string{"sw-old-0123456789abcdef", "sw-new-0123456789abcdef"}},
		{"gen", config.SchemeHMAC, []string{"g1-0123456789abcdef", "g2-0123456789abcdef", "g3-0123456789abcdef"}},
	} {
		s, _ := c.Get(tc.sender)
		wantVerifies(t, s, tc.scheme, tc.keys...)
	}
}

// resolveError parses yaml, expects an error and checks that it contains
// each of want and none of secrets.
func resolveError(t *testing.T, yaml string, lookup func(string) (string, bool), want []string, secrets ...string) {
	t.Helper()
	c, err := parse([]byte(yaml), lookup)
	if err == nil {
		t.Fatalf("Parse accepted:\n%s\nresult: %+v", yaml, c)
	}
	if c != nil {
		t.Errorf("Parse returned a config with its error")
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not contain %q", err, w)
		}
	}
	for _, s := range secrets {
		if s != "" && strings.Contains(err.Error(), s) {
			t.Errorf("error %q contains the secret %q", err, s)
		}
	}
}

// A valid first sender, so that errors must name the right index.
var okSender = presetSender("ok", "github", "secret: fine-0123456789abcdef")

func TestPresetMissingSecret(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, yaml string }{
		{"github", presetSender("x", "github")},
		{"stripe", presetSender("x", "stripe")},
		{"shopify", presetSender("x", "shopify")},
		{"slack", presetSender("x", "slack")},
		{"standard-webhooks", presetSender("x", "standard-webhooks")},
		{"generic hmac-sha256", presetSender("x", "generic", "delivery_id: { header: X-Id }",
			"signature: { scheme: hmac-sha256, header: X-Sig }")},
		{"generic with scheme github", presetSender("x", "generic", "delivery_id: { header: X-Id }",
			"signature: { scheme: github }")},
		// A variable set to "" is no secret.
		{"empty variable", presetSender("x", "github", "secret: ${EMPTY}")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			resolveError(t, "senders:\n"+okSender+tc.yaml, env(map[string]string{"EMPTY": ""}),
				[]string{"senders[1].secret:", "needs a secret"})
		})
	}
	// An empty entry in secrets is a validation error naming it.
	resolveError(t, "senders:\n"+okSender+presetSender("x", "stripe", `secrets: [good, ""]`), noEnv,
		[]string{"senders[1].secrets[1]", "is required"})
}

func TestPresetBadStandardWebhooksSecret(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{
		"c3VwZXJzZWNyZXQ=",          // base64 without whsec_
		"whsec_",                    // nothing after the prefix
		"whsec_not base64!",         // not base64
		"whsec_c3VwZXJzZWNyZXQ===",  // bad padding
		"WHSEC_c3VwZXJzZWNyZXQ=",    // prefix in the wrong case
		"sk_live_supersecret_value", // another provider's secret
	} {
		t.Run(bad, func(t *testing.T) {
			t.Parallel()
			lookup := env(map[string]string{"SW": bad})
			// The error may name the prefix, so "whsec_" alone is no leak.
			var leaks []string
			if bad != signature.StandardSecretPrefix {
				leaks = []string{bad, strings.TrimPrefix(bad, signature.StandardSecretPrefix)}
			}
			resolveError(t, "senders:\n"+okSender+presetSender("x", "standard-webhooks", `secrets: ["${SW}"]`), lookup,
				[]string{"senders[1].secrets[0]:", "whsec_"}, leaks...)
			// The second of two: the error names its index.
			resolveError(t, "senders:\n"+okSender+presetSender("x", "standard-webhooks", `secrets: ["`+whsec("good-0123456789abcdef")+`", "${SW}"]`), lookup,
				[]string{"senders[1].secrets[1]:"}, leaks...)
		})
	}
}

// The field named is the one that holds the bad secret: a malformed
// Standard Webhooks secret given as `secret:` (not `secrets:`) is reported
// under senders[i].secret, one in signature.secret under
// senders[i].signature.secret, and one that is the only entry of secrets:
// is not called "secret 2 of 2" because a good `secret:` precedes it.
func TestPresetBadStandardWebhooksSecretNamesItsField(t *testing.T) {
	t.Parallel()
	const bad = "not-a-whsec-secret"
	for _, tc := range []struct {
		name, yaml string
		want       []string
		notWant    string
	}{
		{"secret", presetSender("x", "standard-webhooks", "secret: "+bad),
			[]string{"senders[1].secret:"}, ""},
		{"signature.secret", presetSender("x", "generic", "delivery_id: { header: webhook-id }",
			"signature: { scheme: standard-webhooks, secret: "+bad+" }"),
			[]string{"senders[1].signature.secret:"}, ""},
		{"secrets after secret", presetSender("x", "standard-webhooks", "secret: "+whsec("good-0123456789abcdef"), "secrets: ["+bad+"]"),
			[]string{"senders[1].secrets[0]:"}, "secrets[1]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			resolveError(t, "senders:\n"+okSender+tc.yaml, noEnv, tc.want, bad)
			_, err := parse([]byte("senders:\n"+okSender+tc.yaml), noEnv)
			if tc.notWant != "" && err != nil && strings.Contains(err.Error(), tc.notWant) {
				t.Errorf("error %q counts the secret's position over secret and secrets together; secrets has one entry", err)
			}
		})
	}
}

func TestPresetSchemeErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, yaml string
		want       []string
	}{
		{"unknown scheme", presetSender("x", "generic", "delivery_id: { header: X-Id }", "secret: s",
			"signature: { scheme: hmac-sha1, header: X-Sig }"),
			[]string{"senders[1].signature.scheme", "must be one of"}},
		{"unknown scheme on a preset", presetSender("x", "github", "secret: s", "signature: { scheme: ed25519 }"),
			[]string{"senders[1].signature.scheme", "must be one of"}},
		{"hmac-sha256 without header", presetSender("x", "generic", "delivery_id: { header: X-Id }", "secret: s",
			"signature: { scheme: hmac-sha256 }"),
			[]string{"senders[1].signature.header", "required"}},
		{"hmac-sha256 with an invalid header", presetSender("x", "generic", "delivery_id: { header: X-Id }", "secret: s",
			`signature: { scheme: hmac-sha256, header: "X Sig" }`),
			[]string{"senders[1].signature.header", "header name"}},
		{"hmac-sha256 with an unknown encoding", presetSender("x", "generic", "delivery_id: { header: X-Id }", "secret: s",
			"signature: { scheme: hmac-sha256, header: X-Sig, encoding: base32 }"),
			[]string{"senders[1].signature.encoding", "must be one of"}},
		{"hmac field on another scheme", presetSender("x", "github", "secret: s", "signature: { header: X-Foo }"),
			[]string{"senders[1].signature.header", "only used with scheme hmac-sha256"}},
		{"secret without a signature check", presetSender("x", "generic", "delivery_id: { header: X-Id }", "secret: s"),
			[]string{"senders[1].secret:", "no signature is checked"}},
		{"secrets without a signature check", presetSender("x", "generic", "delivery_id: { header: X-Id }", "secrets: [s]"),
			[]string{"senders[1].secret", "no signature is checked"}},
		{"signature.secret without a scheme", presetSender("x", "generic", "delivery_id: { header: X-Id }", "signature: { secret: s }"),
			[]string{"senders[1].", "no signature is checked"}},
		{"scheme none with a secret", presetSender("x", "github", "secret: s", "signature: { scheme: none }"),
			[]string{"senders[1].secret:", "no signature is checked"}},
		{"tolerance under 1s", presetSender("x", "stripe", "secret: s", "tolerance: 500ms"),
			[]string{"senders[1].tolerance", "at least 1s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			resolveError(t, "senders:\n"+okSender+tc.yaml, noEnv, tc.want)
		})
	}
}

// Every sender's error is reported, each naming its index, and none
// contains a secret from the environment.
func TestPresetErrorsAcrossSenders(t *testing.T) {
	t.Parallel()
	const secret = "s3cr3t-value-from-env"
	lookup := env(map[string]string{"S": secret})
	yaml := "senders:\n" +
		presetSender("a", "stripe") +
		okSender +
		presetSender("c", "standard-webhooks", "secret: ${S}") +
		presetSender("d", "generic", "delivery_id: { header: X-Id }", "secret: ${S}")
	resolveError(t, yaml, lookup, []string{"senders[0].secret:", "senders[2].secret", "senders[3].secret:"}, secret, "s3cr3t")
}
