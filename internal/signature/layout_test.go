package signature_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha1" //nolint:gosec // Intercom and Vercel sign with HMAC-SHA1
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/signature"
)

// The verifiers of the providers' shapes (layout.go), each checked with
// signatures computed independently here.

var (
	layoutNow  = time.Unix(1714000000, 0)
	layoutBody = `{"event_id":"evt_1","event_type":"transaction.completed"}`
	layoutKeys = [][]byte{[]byte("old-secret-7f3a"), []byte("new-secret-91bc")}
	paddle     = signature.Layout{Separator: ";", TimestampKey: "ts", SignatureKey: "h1", Joiner: ":"}
	pagerduty  = signature.Layout{Separator: ",", SignatureKey: "v1"}
	zendesk    = signature.Layout{TimestampHeader: "X-Zendesk-Webhook-Signature-Timestamp"}
)

func newVerifier(t *testing.T, scheme string, p signature.Params) signature.Verifier {
	t.Helper()
	v, err := signature.New(scheme, p, layoutKeys)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func wantErr(t *testing.T, name string, err, want error) {
	t.Helper()
	if want == nil && err != nil || want != nil && !errors.Is(err, want) {
		t.Errorf("%s: error %v, want %v", name, err, want)
	}
	classify(t, err, layoutKeys)
}

func TestTokenVerifier(t *testing.T) {
	t.Parallel()
	v := newVerifier(t, signature.SchemeToken, signature.Params{Header: "X-Gitlab-Token"})
	for _, tc := range []struct {
		name  string
		value string
		want  error
	}{
		{"first secret", "old-secret-7f3a", nil},
		{"second secret", "new-secret-91bc", nil},
		{"white space around", "  new-secret-91bc ", nil},
		{"prefix of a secret", "new-secret-91b", signature.ErrMismatch},
		{"longer", "new-secret-91bcX", signature.ErrMismatch},
		{"missing", "", signature.ErrMissing},
		{"too long", strings.Repeat("a", signature.MaxHeaderBytes+1), signature.ErrMalformed},
	} {
		h := http.Header{}
		if tc.value != "" {
			h.Set("X-Gitlab-Token", tc.value)
		}
		wantErr(t, tc.name, v.Verify(h, []byte(layoutBody), layoutNow), tc.want)
	}
	if _, err := signature.New(signature.SchemeToken, signature.Params{Header: "bad header"}, layoutKeys); err == nil {
		t.Error("a token scheme with an invalid header name was built")
	}
}

func TestHMACSHA1Verifier(t *testing.T) {
	t.Parallel()
	v := newVerifier(t, signature.SchemeHMACSHA1, signature.Params{Header: "X-Hub-Signature", Encoding: "hex", Prefix: "sha1="})
	sum := func(k []byte, b string) string {
		m := hmac.New(sha1.New, k)
		m.Write([]byte(b))
		return hex.EncodeToString(m.Sum(nil))
	}
	for _, tc := range []struct {
		name, value string
		want        error
	}{
		{"first secret", "sha1=" + sum(layoutKeys[0], layoutBody), nil},
		{"second secret", "sha1=" + sum(layoutKeys[1], layoutBody), nil},
		{"upper-case hex", "sha1=" + strings.ToUpper(sum(layoutKeys[1], layoutBody)), nil},
		{"other body", "sha1=" + sum(layoutKeys[1], layoutBody+" "), signature.ErrMismatch},
		{"wrong secret", "sha1=" + sum([]byte("x"), layoutBody), signature.ErrMismatch},
		{"sha256-sized", "sha1=" + macHex(layoutKeys[0], layoutBody), signature.ErrMalformed},
		{"no prefix", sum(layoutKeys[0], layoutBody), signature.ErrMalformed},
	} {
		wantErr(t, tc.name, v.Verify(hdr("X-Hub-Signature", tc.value), []byte(layoutBody), layoutNow), tc.want)
	}
}

func TestListVerifier(t *testing.T) {
	t.Parallel()
	ts := strconv.FormatInt(layoutNow.Unix(), 10)
	stale := strconv.FormatInt(layoutNow.Unix()-301, 10)
	h1 := func(k []byte, ts string) string { return "h1=" + macHex(k, ts, ":", layoutBody) }
	pd := newVerifier(t, signature.SchemeList, signature.Params{Header: "X-PagerDuty-Signature", Layout: pagerduty})
	pa := newVerifier(t, signature.SchemeList, signature.Params{Header: "Paddle-Signature", Layout: paddle})
	for _, tc := range []struct {
		name  string
		v     signature.Verifier
		h     string
		value string
		want  error
	}{
		{"paddle", pa, "Paddle-Signature", "ts=" + ts + ";" + h1(layoutKeys[0], ts), nil},
		{"paddle rotation", pa, "Paddle-Signature", "ts=" + ts + ";h1=00;" + h1(layoutKeys[1], ts), nil},
		{"paddle stale", pa, "Paddle-Signature", "ts=" + stale + ";" + h1(layoutKeys[0], stale), signature.ErrTimestamp},
		{"paddle other ts", pa, "Paddle-Signature", "ts=" + stale + ";" + h1(layoutKeys[0], ts), signature.ErrTimestamp},
		{"paddle no ts", pa, "Paddle-Signature", h1(layoutKeys[0], ts), signature.ErrMalformed},
		{"paddle two ts", pa, "Paddle-Signature", "ts=" + ts + ";ts=" + ts + ";" + h1(layoutKeys[0], ts), signature.ErrMalformed},
		{"paddle comma", pa, "Paddle-Signature", "ts=" + ts + "," + h1(layoutKeys[0], ts), signature.ErrMalformed},
		{"paddle dot joiner", pa, "Paddle-Signature", "ts=" + ts + ";h1=" + macHex(layoutKeys[0], ts, ".", layoutBody), signature.ErrMismatch},
		{"paddle missing", pa, "Paddle-Signature", "", signature.ErrMissing},
		{"pagerduty", pd, "X-PagerDuty-Signature", "v1=" + macHex(layoutKeys[0], layoutBody), nil},
		{"pagerduty several", pd, "X-PagerDuty-Signature", "v1=" + macHex([]byte("x"), layoutBody) + ", v1=" + macHex(layoutKeys[1], layoutBody), nil},
		{"pagerduty wrong", pd, "X-PagerDuty-Signature", "v1=" + macHex([]byte("x"), layoutBody), signature.ErrMismatch},
		{"pagerduty too many", pd, "X-PagerDuty-Signature", strings.Repeat("v1=00,", signature.MaxSignatures) + "v1=" + macHex(layoutKeys[0], layoutBody), signature.ErrMalformed},
	} {
		h := http.Header{}
		if tc.value != "" {
			h.Set(tc.h, tc.value)
		}
		wantErr(t, tc.name, tc.v.Verify(h, []byte(layoutBody), layoutNow), tc.want)
	}
	if _, err := signature.New(signature.SchemeList, signature.Params{Header: "X-S"}, layoutKeys); err == nil {
		t.Error("a list scheme without separator and signature key was built")
	}
}

func TestTimestampHeaderVerifier(t *testing.T) {
	t.Parallel()
	v := newVerifier(t, signature.SchemeTimestampHeader, signature.Params{Header: "X-Zendesk-Webhook-Signature", Layout: zendesk})
	ts := layoutNow.UTC().Format(time.RFC3339)
	stale := layoutNow.Add(-301 * time.Second).UTC().Format(time.RFC3339)
	for _, tc := range []struct {
		name, ts, sig string
		want          error
	}{
		{"good", ts, macB64(layoutKeys[0], ts, layoutBody), nil},
		{"rotation", ts, macB64(layoutKeys[1], ts, layoutBody), nil},
		{"offset form", layoutNow.In(time.FixedZone("x", 3600)).Format(time.RFC3339), macB64(layoutKeys[0], layoutNow.In(time.FixedZone("x", 3600)).Format(time.RFC3339), layoutBody), nil},
		{"body then timestamp", ts, macB64(layoutKeys[0], layoutBody, ts), signature.ErrMismatch},
		{"stale", stale, macB64(layoutKeys[0], stale, layoutBody), signature.ErrTimestamp},
		{"unix seconds", "1714000000", macB64(layoutKeys[0], "1714000000", layoutBody), signature.ErrMalformed},
		{"hex", ts, macHex(layoutKeys[0], ts, layoutBody), signature.ErrMalformed},
		{"no timestamp", "", macB64(layoutKeys[0], ts, layoutBody), signature.ErrMissing},
		{"no signature", ts, "", signature.ErrMissing},
	} {
		h := http.Header{}
		if tc.ts != "" {
			h.Set("X-Zendesk-Webhook-Signature-Timestamp", tc.ts)
		}
		if tc.sig != "" {
			h.Set("X-Zendesk-Webhook-Signature", tc.sig)
		}
		wantErr(t, tc.name, v.Verify(h, []byte(layoutBody), layoutNow), tc.want)
	}
}

// FuzzParseSignatureList: the parser never panics, and on success returns
// 1 to MaxSignatures MACs of 32 bytes, each the decoding of a signature
// element of the input, and the canonical timestamp of its one ts element.
func FuzzParseSignatureList(f *testing.F) {
	f.Add("ts=1714000000;h1=" + strings.Repeat("ab", 32))
	f.Add("ts=1714000000;h1=" + strings.Repeat("ab", 32) + ";h1=" + strings.Repeat("CD", 32))
	f.Add("ts=01;h1=zz;ts=2")
	f.Add("h1=;;=;ts")
	f.Fuzz(func(t *testing.T, s string) {
		ts, sigs, err := signature.ParseSignatureList(s, paddle)
		if err != nil {
			classify(t, err, nil)
			if ts != 0 || sigs != nil {
				t.Fatalf("error %v with results %d, %d", err, ts, len(sigs))
			}
			return
		}
		if len(sigs) < 1 || len(sigs) > signature.MaxSignatures {
			t.Fatalf("%d signatures", len(sigs))
		}
		for _, sig := range sigs {
			if len(sig) != 32 || !strings.Contains(strings.ToLower(s), "h1="+hex.EncodeToString(sig)) {
				t.Fatalf("signature %x is not an element of %q", sig, s)
			}
		}
		if !strings.Contains(s, "ts="+strconv.FormatInt(ts, 10)) {
			t.Fatalf("timestamp %d is not an element of %q", ts, s)
		}
	})
}

// FuzzListVerify: a Paddle-shaped verifier accepts a header only when it
// holds the MAC of "<ts>:<body>" under one of its secrets.
func FuzzListVerify(f *testing.F) {
	ts := strconv.FormatInt(layoutNow.Unix(), 10)
	f.Add("ts="+ts+";h1="+macHex(layoutKeys[0], ts, ":", layoutBody), layoutBody)
	f.Add("ts="+ts+";h1="+macHex(layoutKeys[1], ts, ":", layoutBody), layoutBody+"x")
	f.Add("ts=;h1=", "")
	v := signature.List("Paddle-Signature", paddle, layoutKeys, 0)
	f.Fuzz(func(t *testing.T, value, body string) {
		err := v.Verify(hdr("Paddle-Signature", value), []byte(body), layoutNow)
		classify(t, err, layoutKeys)
		if err != nil {
			return
		}
		ts, sigs, perr := signature.ParseSignatureList(strings.TrimSpace(value), paddle)
		if perr != nil {
			t.Fatalf("accepted %q, which does not parse: %v", value, perr)
		}
		t0 := strconv.FormatInt(ts, 10)
		for _, k := range layoutKeys {
			want := mac(k, t0, ":", body)
			for _, s := range sigs {
				if hmac.Equal(s, want) {
					return
				}
			}
		}
		t.Fatalf("accepted %q for %q without a valid h1", value, body)
	})
}

func TestECDSAVerifier(t *testing.T) {
	t.Parallel()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	pub := func(k *ecdsa.PrivateKey) []byte {
		der, _ := x509.MarshalPKIXPublicKey(&k.PublicKey)
		return []byte(base64.StdEncoding.EncodeToString(der))
	}
	l := signature.Layout{TimestampHeader: "X-Twilio-Email-Event-Webhook-Timestamp"}
	v, err := signature.New(signature.SchemeECDSA, signature.Params{Header: "X-Twilio-Email-Event-Webhook-Signature", Layout: l}, [][]byte{pub(other), pub(priv)})
	if err != nil {
		t.Fatal(err)
	}
	sign := func(k *ecdsa.PrivateKey, ts, body string) string {
		d := sha256.Sum256([]byte(ts + body))
		sig, err := ecdsa.SignASN1(rand.Reader, k, d[:])
		if err != nil {
			t.Fatal(err)
		}
		return base64.StdEncoding.EncodeToString(sig)
	}
	ts := strconv.FormatInt(layoutNow.Unix(), 10)
	stale := strconv.FormatInt(layoutNow.Unix()-301, 10)
	third, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	for _, tc := range []struct {
		name, ts, sig, body string
		want                error
	}{
		{"good", ts, sign(priv, ts, layoutBody), layoutBody, nil},
		{"second key", ts, sign(other, ts, layoutBody), layoutBody, nil},
		{"tampered", ts, sign(priv, ts, layoutBody), layoutBody + " ", signature.ErrMismatch},
		{"unknown key", ts, sign(third, ts, layoutBody), layoutBody, signature.ErrMismatch},
		{"stale", stale, sign(priv, stale, layoutBody), layoutBody, signature.ErrTimestamp},
		{"not base64", ts, "!!", layoutBody, signature.ErrMalformed},
		{"too long", ts, base64.StdEncoding.EncodeToString(make([]byte, 200)), layoutBody, signature.ErrMalformed},
		{"no timestamp", "", sign(priv, ts, layoutBody), layoutBody, signature.ErrMissing},
		{"no signature", ts, "", layoutBody, signature.ErrMissing},
	} {
		h := http.Header{}
		if tc.ts != "" {
			h.Set("X-Twilio-Email-Event-Webhook-Timestamp", tc.ts)
		}
		if tc.sig != "" {
			h.Set("X-Twilio-Email-Event-Webhook-Signature", tc.sig)
		}
		if err := v.Verify(h, []byte(tc.body), layoutNow); tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("%s: error %v, want %v", tc.name, err, tc.want)
		}
	}
	if _, err := signature.New(signature.SchemeECDSA, signature.Params{Header: "X-S", Layout: l}, [][]byte{[]byte("c2VjcmV0")}); err == nil || strings.Contains(err.Error(), "c2VjcmV0") {
		t.Errorf("a key that is not a public key: error %v", err)
	}
}

// FuzzECDSAVerify: the verifier never panics on any header or body, its
// errors wrap one sentinel, and it accepts nothing signed by no key of its.
func FuzzECDSAVerify(f *testing.F) {
	f.Add("1714000000", "MEUCIQ==", layoutBody)
	f.Add("", "", "")
	f.Add("1714000000", base64.StdEncoding.EncodeToString(make([]byte, 72)), "[]")
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		f.Fatal(err)
	}
	der, _ := x509.MarshalPKIXPublicKey(&priv.PublicKey)
	v, err := signature.New(signature.SchemeECDSA, signature.Params{Header: "X-Sig",
		Layout: signature.Layout{TimestampHeader: "X-Ts"}}, [][]byte{[]byte(base64.StdEncoding.EncodeToString(der))})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, ts, sig, body string) {
		err := v.Verify(hdr("X-Ts", ts, "X-Sig", sig), []byte(body), layoutNow)
		classify(t, err, nil)
		if err == nil {
			t.Fatalf("accepted a signature no key of the test made: %q %q %q", ts, sig, body)
		}
	})
}
