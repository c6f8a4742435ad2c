package signature_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/signature"
)

// Published and own test vectors. Every expected value below was checked
// with an implementation independent of this package (Python's hmac module
// and openssl dgst) before being written down.

// GitHub, "Validating webhook deliveries", section "Testing the webhook
// payload validation":
// https://docs.github.com/en/webhooks/using-webhooks/validating-webhook-deliveries
const (
	githubDocSecret    = "It's a Secret to Everybody"
	githubDocBody      = "Hello, World!"
	githubDocSignature = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
)

// Standard Webhooks, reference Go library test TestWebhookSign
// (github.com/standard-webhooks/standard-webhooks, libraries/go/webhook_test.go).
const (
	standardDocSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	standardDocID        = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	standardDocTimestamp = 1614265330
	standardDocBody      = `{"test": 2432232314}`
	standardDocSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

// Slack, "Verifying requests from Slack", worked example:
// https://docs.slack.dev/authentication/verifying-requests-from-slack/
const (
	slackDocSecret    = "8f742231b10e8888abcd99yyyzzz85a5"
	slackDocTimestamp = "1531420618"
	slackDocBody      = "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c"
	slackDocSignature = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"
)

// Own vectors, computed with Python from each provider's documented scheme
// (Stripe: HMAC-SHA256(secret, "<t>.<body>") hex, the whsec_ string used
// verbatim as the key; Shopify: base64 HMAC-SHA256(secret, body); generic:
// HMAC-SHA256(secret, body) hex and base64).
const (
	stripeOwnSecret    = "whsec_hookgate_test_stripe"
	stripeOwnTimestamp = 1700000000
	stripeOwnBody      = `{"id":"evt_1NG8Du2eZvKYlo2CUI79vXWy","object":"event","type":"payment_intent.succeeded"}`
	stripeOwnV1        = "d0b835c9d336c7d8a67fc77f55f0906d621223eb6e1a5f0e44ea87b941d8e979"

	shopifyOwnSecret    = "hookgate-shopify-test-secret"
	shopifyOwnBody      = `{"id":820982911946154508,"email":"jon@example.com"}`
	shopifyOwnSignature = "xZMt8uJ6zFlWgLD9wKCQCLlC+C3uit6B9+yIS6+nsgU="

	genericOwnSecret = "hookgate-generic-secret"
	genericOwnBody   = `{"order":42}`
	genericOwnHex    = "f6f715e883f5657853e837030924b9709689f5a0f9b03505bb64db9adf78788a"
	genericOwnBase64 = "9vcV6IP1ZXhT6DcDCSS5cJaJ9aD5sDUFu2Tbmt94eIo="
)

func TestPublishedVectors(t *testing.T) {
	t.Parallel()

	t.Run("github", func(t *testing.T) {
		t.Parallel()
		if got := "sha256=" + macHex([]byte(githubDocSecret), githubDocBody); got != githubDocSignature {
			t.Fatalf("test helper disagrees with GitHub's example: %s", got)
		}
		v := signature.GitHub([][]byte{[]byte(githubDocSecret)})
		h := hdr(signature.HeaderGitHub, githubDocSignature)
		if err := v.Verify(h, []byte(githubDocBody), time.Now()); err != nil {
			t.Fatalf("Verify(GitHub example) = %v", err)
		}
		if err := v.Verify(h, []byte("Hello, World?"), time.Now()); !errors.Is(err, signature.ErrMismatch) {
			t.Fatalf("Verify(changed body) = %v, want ErrMismatch", err)
		}
	})

	t.Run("standard-webhooks", func(t *testing.T) {
		t.Parallel()
		key, err := signature.DecodeStandardSecret(standardDocSecret)
		if err != nil {
			t.Fatal(err)
		}
		ts := time.Unix(standardDocTimestamp, 0)
		if got := signature.SignStandard(key, standardDocID, ts, []byte(standardDocBody)); got != standardDocSignature {
			t.Fatalf("SignStandard = %s, want %s", got, standardDocSignature)
		}
		if got := "v1," + macB64(key, standardDocID, ".1614265330.", standardDocBody); got != standardDocSignature {
			t.Fatalf("test helper disagrees with the reference vector: %s", got)
		}
		v := signature.StandardWebhooks([][]byte{key}, 0)
		h := hdr(
			"webhook-id", standardDocID,
			"webhook-timestamp", "1614265330",
			"webhook-signature", standardDocSignature,
		)
		if err := v.Verify(h, []byte(standardDocBody), ts.Add(30*time.Second)); err != nil {
			t.Fatalf("Verify(reference vector) = %v", err)
		}
		// The reference library's multi-signature case: invalid v1, a v2,
		// the valid one, another invalid v1.
		h.Set("webhook-signature", "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc= v2,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc= "+
			standardDocSignature+" v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc=")
		if err := v.Verify(h, []byte(standardDocBody), ts); err != nil {
			t.Fatalf("Verify(multi-signature) = %v", err)
		}
		h.Set("webhook-signature", "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc=")
		if err := v.Verify(h, []byte(standardDocBody), ts); !errors.Is(err, signature.ErrMismatch) {
			t.Fatalf("Verify(invalid signature) = %v, want ErrMismatch", err)
		}
	})

	t.Run("slack", func(t *testing.T) {
		t.Parallel()
		if got := "v0=" + macHex([]byte(slackDocSecret), "v0:", slackDocTimestamp, ":", slackDocBody); got != slackDocSignature {
			t.Fatalf("test helper disagrees with Slack's example: %s", got)
		}
		v := signature.Slack([][]byte{[]byte(slackDocSecret)}, 0)
		h := hdr(signature.HeaderSlackSignature, slackDocSignature, signature.HeaderSlackTimestamp, slackDocTimestamp)
		if err := v.Verify(h, []byte(slackDocBody), time.Unix(1531420618, 0)); err != nil {
			t.Fatalf("Verify(Slack example) = %v", err)
		}
		if err := v.Verify(h, []byte(slackDocBody), time.Now()); !errors.Is(err, signature.ErrTimestamp) {
			t.Fatalf("Verify(Slack example, today) = %v, want ErrTimestamp", err)
		}
	})
}

func TestOwnVectors(t *testing.T) {
	t.Parallel()

	t.Run("stripe", func(t *testing.T) {
		t.Parallel()
		v := signature.Stripe([][]byte{[]byte(stripeOwnSecret)}, 0)
		// Shaped like a real header during a secret roll: a stale v1, the
		// valid v1, and a v0 test-mode signature that must be ignored.
		h := hdr(signature.HeaderStripe, "t=1700000000,v1="+macHex([]byte("old secret"), "1700000000.", stripeOwnBody)+
			",v1="+stripeOwnV1+",v0=6ffbb59b2300aae63f272406069a9788598b792a944a07aba816edb039989a39")
		if err := v.Verify(h, []byte(stripeOwnBody), time.Unix(stripeOwnTimestamp+299, 0)); err != nil {
			t.Fatalf("Verify = %v", err)
		}
		if got := macHex([]byte(stripeOwnSecret), "1700000000.", stripeOwnBody); got != stripeOwnV1 {
			t.Fatalf("test helper disagrees with the vector: %s", got)
		}
	})

	t.Run("shopify", func(t *testing.T) {
		t.Parallel()
		v := signature.Shopify([][]byte{[]byte(shopifyOwnSecret)})
		h := hdr(signature.HeaderShopify, shopifyOwnSignature)
		if err := v.Verify(h, []byte(shopifyOwnBody), time.Time{}); err != nil {
			t.Fatalf("Verify = %v", err)
		}
	})

	t.Run("generic", func(t *testing.T) {
		t.Parallel()
		secrets := [][]byte{[]byte(genericOwnSecret)}
		hexV := signature.HMAC(signature.HMACConfig{Header: "X-Signature", Encoding: "hex", Prefix: "sha256="}, secrets)
		if err := hexV.Verify(hdr("X-Signature", "sha256="+genericOwnHex), []byte(genericOwnBody), time.Time{}); err != nil {
			t.Fatalf("hex: Verify = %v", err)
		}
		b64V := signature.HMAC(signature.HMACConfig{Header: "x-signature", Encoding: "base64"}, secrets)
		if err := b64V.Verify(hdr("X-Signature", genericOwnBase64), []byte(genericOwnBody), time.Time{}); err != nil {
			t.Fatalf("base64: Verify = %v", err)
		}
	})
}

func TestDecodeStandardSecret(t *testing.T) {
	t.Parallel()
	want := []byte{0x31, 0xf2, 0x90, 0xf6, 0xbf, 0x06, 0x29, 0x8a, 0xab, 0x4f, 0x08, 0xd4,
		0x3c, 0x3f, 0x08, 0x2c, 0xf6, 0x48, 0xa3, 0x62, 0xda, 0x2d, 0xa4, 0xb0}
	for _, tc := range []struct {
		in      string
		want    []byte
		wantErr error
	}{
		{in: standardDocSecret, want: want},
		{in: "whsec_AQI=", want: []byte{1, 2}},
		{in: "whsec_AQI", want: []byte{1, 2}},
		{in: "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", wantErr: signature.ErrSecretPrefix},
		{in: "WHSEC_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", wantErr: signature.ErrSecretPrefix},
		{in: "", wantErr: signature.ErrSecretPrefix},
		{in: "whsec_", wantErr: signature.ErrSecretBase64},
		{in: "whsec_not base64!", wantErr: signature.ErrSecretBase64},
		{in: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw==", wantErr: signature.ErrSecretBase64},
		{in: "whsec_MfKQ-r8GKYqrTwjUPD8ILPZIo2LaLaSw", wantErr: signature.ErrSecretBase64},
		{in: "whsec_AQJ", wantErr: signature.ErrSecretBase64},
		{in: "whsec_00\r0", wantErr: signature.ErrSecretBase64},
		{in: standardDocSecret + "\n", wantErr: signature.ErrSecretBase64},
		{in: "whsec_MfKQ9r8GKYqrTwjU\nPD8ILPZIo2LaLaSw", wantErr: signature.ErrSecretBase64},
	} {
		got, err := signature.DecodeStandardSecret(tc.in)
		if tc.wantErr != nil {
			if !errors.Is(err, tc.wantErr) || got != nil {
				t.Errorf("DecodeStandardSecret(%q) = %x, %v; want %v", tc.in, got, err, tc.wantErr)
			}
			if err != nil && len(tc.in) > len("whsec_") && bytes.Contains([]byte(err.Error()), []byte(tc.in[6:])) {
				t.Errorf("error %q contains the secret", err)
			}
			continue
		}
		if err != nil || !bytes.Equal(got, tc.want) {
			t.Errorf("DecodeStandardSecret(%q) = %x, %v; want %x", tc.in, got, err, tc.want)
		}
	}
}
