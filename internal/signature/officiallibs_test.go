package signature_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"strconv"
	"testing"
	"time"

	paddlesdk "github.com/PaddleHQ/paddle-go-sdk/v4"
	linewebhook "github.com/line/line-bot-sdk-go/v8/linebot/webhook"
	razorpayutils "github.com/razorpay/razorpay-go/utils"
	"github.com/slack-go/slack"
	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/hookgate/hookgate/internal/signature"
)

// Stripe's Go library (stripe-go's webhook.GenerateTestSignedPayload)
// signs; package signature's Stripe verifier accepts what it signed, and
// refuses it for another body, another secret or a stale timestamp; and
// stripe-go's ValidatePayload accepts what is signed here as Stripe's page
// prescribes.
func TestStripeAgreesWithStripeGo(t *testing.T) {
	t.Parallel()
	const secret = "whsec_stripe_go_cross_check"
	body := []byte(`{"id":"evt_1","object":"event","type":"invoice.paid"}`)
	now := time.Now()
	signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: secret, Timestamp: now})
	h := http.Header{}
	h.Set(signature.HeaderStripe, signed.Header)
	v := signature.Stripe([][]byte{[]byte("whsec_old"), []byte(secret)}, 0)
	if err := v.Verify(h, body, now); err != nil {
		t.Fatalf("stripe-go's signature: %v", err)
	}
	if err := v.Verify(h, append(body, ' '), now); !errors.Is(err, signature.ErrMismatch) {
		t.Errorf("another body: %v", err)
	}
	if err := signature.Stripe([][]byte{[]byte("whsec_other")}, 0).Verify(h, body, now); !errors.Is(err, signature.ErrMismatch) {
		t.Errorf("another secret: %v", err)
	}
	if err := v.Verify(h, body, now.Add(301*time.Second)); !errors.Is(err, signature.ErrTimestamp) {
		t.Errorf("301 s later: %v", err)
	}
	// The other way: a header made here passes stripe-go's check.
	ts := strconv.FormatInt(now.Unix(), 10)
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts + "." + string(body)))
	if err := webhook.ValidatePayload(body, "t="+ts+",v1="+hex.EncodeToString(m.Sum(nil)), secret); err != nil {
		t.Errorf("stripe-go refuses the signature made here: %v", err)
	}
}

// Slack's Go library (slack-go's SecretsVerifier) and package signature's
// Slack verifier agree on a request signed as Slack's page prescribes.
func TestSlackAgreesWithSlackGo(t *testing.T) {
	t.Parallel()
	const secret = "slack-signing-secret-cross-check"
	body := []byte(`{"type":"event_callback","event_id":"Ev1","event":{"type":"message"}}`)
	now := time.Now()
	ts := strconv.FormatInt(now.Unix(), 10)
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("v0:" + ts + ":" + string(body)))
	h := http.Header{}
	h.Set(signature.HeaderSlackTimestamp, ts)
	for _, tc := range []struct {
		sig string
		ok  bool
	}{
		{"v0=" + hex.EncodeToString(m.Sum(nil)), true},
		{"v0=" + hex.EncodeToString(make([]byte, 32)), false},
	} {
		h.Set(signature.HeaderSlackSignature, tc.sig)
		sv, err := slack.NewSecretsVerifier(h, secret)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sv.Write(body); err != nil {
			t.Fatal(err)
		}
		if err := sv.Ensure(); (err == nil) != tc.ok {
			t.Errorf("slack-go: %v, want ok %v", err, tc.ok)
		}
		if err := signature.Slack([][]byte{[]byte(secret)}, 0).Verify(h, body, now); (err == nil) != tc.ok {
			t.Errorf("package signature: %v, want ok %v", err, tc.ok)
		}
	}
}

// hmacOf returns HMAC-SHA256(key, s).
func hmacOf(key, s string) []byte {
	m := hmac.New(sha256.New, []byte(key))
	m.Write([]byte(s))
	return m.Sum(nil)
}

// LINE's (line-bot-sdk-go's webhook.ValidateSignature), Razorpay's
// (razorpay-go's utils.VerifyWebhookSignature) and Paddle's
// (paddle-go-sdk's WebhookVerifier) Go libraries and the verifiers their
// presets build agree on requests signed as each provider's page
// prescribes, and on refusing them for another body.
func TestLineRazorpayPaddleAgreeWithTheirGoLibraries(t *testing.T) {
	t.Parallel()
	now := time.Now()
	build := func(scheme string, p signature.Params, key string) signature.Verifier {
		v, err := signature.New(scheme, p, [][]byte{[]byte(key)})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	body := []byte(`{"destination":"U1","events":[{"type":"message","webhookEventId":"01H"}],"event":"payment.captured","event_id":"evt_1"}`)
	other := append(append([]byte(nil), body...), ' ')

	const lineSecret = "line-channel-secret"
	lineV := build(signature.SchemeHMAC, signature.Params{Header: "X-Line-Signature", Encoding: signature.EncodingBase64}, lineSecret)
	lineSig := b64(hmacOf(lineSecret, string(body)))
	for _, b := range [][]byte{body, other} {
		lib := linewebhook.ValidateSignature(lineSecret, lineSig, b)
		ours := lineV.Verify(http.Header{"X-Line-Signature": {lineSig}}, b, now) == nil
		if lib != ours || lib != (string(b) == string(body)) {
			t.Errorf("LINE: line-bot-sdk-go %v, package signature %v", lib, ours)
		}
	}

	const rpSecret = "razorpay-webhook-secret"
	rpV := build(signature.SchemeHMAC, signature.Params{Header: "X-Razorpay-Signature", Encoding: signature.EncodingHex}, rpSecret)
	rpSig := hex.EncodeToString(hmacOf(rpSecret, string(body)))
	for _, b := range [][]byte{body, other} {
		lib := razorpayutils.VerifyWebhookSignature(string(b), rpSig, rpSecret)
		ours := rpV.Verify(http.Header{"X-Razorpay-Signature": {rpSig}}, b, now) == nil
		if lib != ours || lib != (string(b) == string(body)) {
			t.Errorf("Razorpay: razorpay-go %v, package signature %v", lib, ours)
		}
	}

	const pdSecret = "pdl_ntfset_01h_secret"
	pdV := build(signature.SchemeList, signature.Params{Header: "Paddle-Signature",
		Layout: signature.Layout{Separator: ";", TimestampKey: "ts", SignatureKey: "h1", Joiner: ":"}}, pdSecret)
	ts := strconv.FormatInt(now.Unix(), 10)
	pdSig := "ts=" + ts + ";h1=" + hex.EncodeToString(hmacOf(pdSecret, ts+":"+string(body)))
	for _, b := range [][]byte{body, other} {
		req, err := http.NewRequest(http.MethodPost, "https://hooks.example.com/webhooks/paddle", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Paddle-Signature", pdSig)
		lib, _ := paddlesdk.NewWebhookVerifier(pdSecret, paddlesdk.VerifierWithTimestampTolerance(5*time.Minute)).Verify(req)
		ours := pdV.Verify(http.Header{"Paddle-Signature": {pdSig}}, b, now) == nil
		if lib != ours || lib != (string(b) == string(body)) {
			t.Errorf("Paddle: paddle-go-sdk %v, package signature %v", lib, ours)
		}
	}
}
