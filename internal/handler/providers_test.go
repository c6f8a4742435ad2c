package handler_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha1" //nolint:gosec // Intercom and Vercel sign with HMAC-SHA1
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"
)

// The providers' presets beyond the first six, run through the same
// checks as they (TestSignatureProviders): each signs as the provider's
// documentation (cited next to its row in package config) prescribes.

// sha1Of returns HMAC-SHA1(key, concat(parts)).
func sha1Of(key []byte, parts ...string) []byte {
	m := hmac.New(sha1.New, key)
	for _, p := range parts {
		m.Write([]byte(p))
	}
	return m.Sum(nil)
}

// bodyMAC returns a provider signing the body alone into header, as
// prefix followed by enc(mac).
func bodyMAC(name, idHeader, sigHeader, prefix string, enc func([]byte) string, mac func([]byte, ...string) []byte, extra ...string) provider {
	return provider{
		name:       name,
		lines:      append([]string{"preset: " + name}, extra...),
		idHeader:   idHeader,
		sigHeaders: []string{sigHeader},
		sign: func(key []byte, _ string, _ int64, body []byte) http.Header {
			return header(sigHeader, prefix+enc(mac(key, string(body))))
		},
	}
}

// tsList returns a provider of the t=<ts>,v1=<sig> family: the header
// holds tsKey=<ts> and sigKey=<hex HMAC-SHA256("<ts><joiner><body>")>,
// separated by sep.
func tsList(name, idHeader, sigHeader, sep, tsKey, sigKey, joiner string, extra ...string) provider {
	sig := func(key []byte, t string, body []byte) string {
		return sigKey + "=" + hexOf(macOf(key, t, joiner, string(body)))
	}
	return provider{
		name:        name,
		lines:       append([]string{"preset: " + name}, extra...),
		idHeader:    idHeader,
		timestamped: true,
		sigHeaders:  []string{sigHeader},
		sign: func(key []byte, _ string, ts int64, body []byte) http.Header {
			t := strconv.FormatInt(ts, 10)
			return header(sigHeader, tsKey+"="+t+sep+sig(key, t, body))
		},
		multi: func(key []byte, _ string, ts int64, body []byte) http.Header {
			t := strconv.FormatInt(ts, 10)
			bad := sig([]byte("not-the-secret"), t, body)
			return header(sigHeader, tsKey+"="+t+sep+bad+sep+"v0=x"+sep+sig(key, t, body))
		},
	}
}

// Lemon Squeezy and Calendly send no delivery ID (their presets take the
// body's SHA-256: TestDeliveryIDFromBodySHA256); here their signatures are
// checked with a delivery ID in a header, as the configuration may say.
const testIDHeader = "X-Test-Delivery"

var moreProviders = []provider{
	{
		name:       "gitlab",
		lines:      []string{"preset: gitlab"},
		idHeader:   "Idempotency-Key",
		unbound:    true,
		sigHeaders: []string{"X-Gitlab-Token"},
		sign: func(key []byte, _ string, _ int64, _ []byte) http.Header {
			return header("X-Gitlab-Token", string(key))
		},
	},
	{
		name:       "telegram",
		lines:      []string{"preset: telegram"},
		unbound:    true,
		sigHeaders: []string{"X-Telegram-Bot-Api-Secret-Token"},
		sign: func(key []byte, _ string, _ int64, _ []byte) http.Header {
			return header("X-Telegram-Bot-Api-Secret-Token", string(key))
		},
	},
	bodyMAC("bitbucket", "X-Request-UUID", "X-Hub-Signature", "sha256=", hexOf, macOf),
	bodyMAC("gitea", "X-Gitea-Delivery", "X-Gitea-Signature", "", hexOf, macOf),
	bodyMAC("forgejo", "X-Forgejo-Delivery", "X-Forgejo-Signature", "", hexOf, macOf),
	bodyMAC("razorpay", "X-Razorpay-Event-Id", "X-Razorpay-Signature", "", hexOf, macOf),
	bodyMAC("woocommerce", "X-WC-Webhook-Delivery-ID", "X-WC-Webhook-Signature", "", b64Of, macOf),
	bodyMAC("intercom", "", "X-Hub-Signature", "sha1=", hexOf, sha1Of),
	bodyMAC("linear", "Linear-Delivery", "Linear-Signature", "", hexOf, macOf),
	bodyMAC("sentry", "Request-ID", "Sentry-Hook-Signature", "", hexOf, macOf),
	bodyMAC("typeform", "", "Typeform-Signature", "sha256=", b64Of, macOf),
	bodyMAC("vercel", "", "x-vercel-signature", "", hexOf, sha1Of),
	bodyMAC("coinbase-commerce", "", "X-CC-Webhook-Signature", "", hexOf, macOf),
	bodyMAC("lemon-squeezy", testIDHeader, "X-Signature", "", hexOf, macOf, "delivery_id: { header: "+testIDHeader+" }"),
	{
		name:       "pagerduty",
		lines:      []string{"preset: pagerduty"},
		sigHeaders: []string{"X-PagerDuty-Signature"},
		sign: func(key []byte, _ string, _ int64, body []byte) http.Header {
			return header("X-PagerDuty-Signature", "v1="+hexOf(macOf(key, string(body))))
		},
		multi: func(key []byte, _ string, _ int64, body []byte) http.Header {
			bad := hexOf(macOf([]byte("not-the-secret"), string(body)))
			return header("X-PagerDuty-Signature", "v1="+bad+",v2=x,v1="+hexOf(macOf(key, string(body))))
		},
	},
	bodyMAC("line", testIDHeader, "X-Line-Signature", "", b64Of, macOf, "delivery_id: { header: "+testIDHeader+" }"),
	bodyMAC("meta", testIDHeader, "X-Hub-Signature-256", "sha256=", hexOf, macOf, "delivery_id: { header: "+testIDHeader+" }"),
	{
		name:        "sendgrid",
		lines:       []string{"preset: sendgrid", "delivery_id: { header: " + testIDHeader + " }"},
		idHeader:    testIDHeader,
		timestamped: true,
		public:      ecdsaPublic,
		sigHeaders:  []string{"X-Twilio-Email-Event-Webhook-Signature", "X-Twilio-Email-Event-Webhook-Timestamp"},
		sign: func(key []byte, _ string, ts int64, body []byte) http.Header {
			t := strconv.FormatInt(ts, 10)
			d := sha256.Sum256(append([]byte(t), body...))
			sig, err := ecdsa.SignASN1(rand.Reader, ecdsaKey(key), d[:])
			if err != nil {
				panic(err)
			}
			return header("X-Twilio-Email-Event-Webhook-Timestamp", t,
				"X-Twilio-Email-Event-Webhook-Signature", b64Of(sig))
		},
	},
	tsList("paddle", "", "Paddle-Signature", ";", "ts", "h1", ":"),
	tsList("mux", "", "Mux-Signature", ",", "t", "v1", "."),
	tsList("calendly", testIDHeader, "Calendly-Webhook-Signature", ",", "t", "v1", ".", "delivery_id: { header: "+testIDHeader+" }"),
	{
		name:        "zendesk",
		lines:       []string{"preset: zendesk"},
		idHeader:    "X-Zendesk-Webhook-Invocation-Id",
		timestamped: true,
		sigHeaders:  []string{"X-Zendesk-Webhook-Signature", "X-Zendesk-Webhook-Signature-Timestamp"},
		sign: func(key []byte, _ string, ts int64, body []byte) http.Header {
			t := time.Unix(ts, 0).UTC().Format(time.RFC3339)
			return header("X-Zendesk-Webhook-Signature-Timestamp", t,
				"X-Zendesk-Webhook-Signature", b64Of(macOf(key, t, string(body))))
		},
	},
}

// ecdsaKeys are the ECDSA P-256 key pairs the test keys name (one each).
var ecdsaKeys sync.Map

// ecdsaKey returns the private key that key names.
func ecdsaKey(key []byte) *ecdsa.PrivateKey {
	if k, ok := ecdsaKeys.Load(string(key)); ok {
		return k.(*ecdsa.PrivateKey)
	}
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	actual, _ := ecdsaKeys.LoadOrStore(string(key), k)
	return actual.(*ecdsa.PrivateKey)
}

// ecdsaPublic returns the base64 DER public key of the pair key names, as
// SendGrid shows its verification key.
func ecdsaPublic(key []byte) string {
	der, err := x509.MarshalPKIXPublicKey(&ecdsaKey(key).PublicKey)
	if err != nil {
		panic(err)
	}
	return b64Of(der)
}

// A sender whose delivery ID is the SHA-256 of the body: the same bytes
// again are a replay, other bytes a new delivery; the limit (identical
// bytes are one delivery, whatever the sender meant) is what this shows.
func TestDeliveryIDFromBodySHA256(t *testing.T) {
	t.Parallel()
	yaml := `senders:
  - name: lemon
    preset: lemon-squeezy
    secret: ${KEY}
  - name: plain
    preset: generic
    delivery_id: { body_sha256: true }
`
	key := "lemon-key-6c1d0b1e"
	s, pool := newDBServer(t, options{yaml: yaml, env: map[string]string{"KEY": key}})
	idOf := func(b []byte) string { sum := sha256.Sum256(b); return hex.EncodeToString(sum[:]) }
	sign := func(b []byte) func(*http.Request) {
		return func(r *http.Request) {
			r.Header.Set("X-Signature", hexOf(macOf([]byte(key), string(b))))
			r.Header.Set("X-Event-Name", "order_created")
		}
	}
	for _, name := range []string{"lemon", "plain"} {
		t.Run(name, func(t *testing.T) {
			s := s.with(t)
			a := []byte(`{"meta":{"event_name":"order_created"},"data":{"id":"1"},"sender":"` + name + `"}`)
			b := []byte(`{"meta":{"event_name":"order_created"},"data":{"id":"2"},"sender":"` + name + `"}`)
			first := s.post(name, "", a, sign(a))
			wantAccepted(t, first, name, idOf(a))
			wantRecorded(t, pool, name, idOf(a), 1)
			wantReplay(t, s.post(name, "", a, sign(a)), first)
			wantAccepted(t, s.post(name, "", b, sign(b)), name, idOf(b))
			wantRecorded(t, pool, name, idOf(b), 1)
			if name == "lemon" {
				// A tampered body is refused before its hash is a delivery ID.
				wantRejected(t, s.post(name, "", b[1:], sign(b)), key)
				wantRecorded(t, pool, name, idOf(b[1:]), 0)
			}
		})
	}
}
