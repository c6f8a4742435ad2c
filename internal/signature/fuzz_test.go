package signature_test

import (
	"bytes"
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

// Fuzz targets. Each one checks, besides "never panics":
//   - the parsers' documented post-conditions;
//   - for the verifiers, that every error wraps exactly one sentinel and
//     never shows a secret, and that Verify accepts only a header holding the
//     MAC of the body under one of the verifier's secrets, as computed by
//     the independent helpers in main_test.go. Where the scheme is simple
//     enough the check goes both ways: Verify accepts exactly when an
//     independent reference check does.
//
// The seed corpora live in testdata/fuzz/<FuzzName>/ and are written from
// fuzzSeeds by `go test ./internal/signature/ -run TestFuzzSeedCorpus -update-seeds`.

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// fuzzSecrets returns the verifier's secrets for a fuzz target: the
// vector's secret and a second one (rotation).
func fuzzSecrets(first []byte) [][]byte { return [][]byte{first, secret2} }

func standardDocKey() []byte {
	k, err := signature.DecodeStandardSecret(standardDocSecret)
	if err != nil {
		panic(err)
	}
	return k
}

// classify fails t unless err is nil or wraps exactly one sentinel, and
// its message contains none of the secrets.
func classify(t *testing.T, err error, secrets [][]byte) {
	t.Helper()
	if err == nil {
		return
	}
	n := 0
	for _, s := range []error{signature.ErrMissing, signature.ErrMalformed, signature.ErrTimestamp, signature.ErrMismatch} {
		if errors.Is(err, s) {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("error %q wraps %d sentinels, want 1", err, n)
	}
	for _, s := range secrets {
		if bytes.Contains([]byte(err.Error()), s) {
			t.Fatalf("error %q contains a secret", err)
		}
	}
}

// canonicalTS is the reference for ParseUnixTimestamp.
func canonicalTS(s string) (int64, bool) {
	if len(s) == 0 || len(s) > 18 || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// hexMatches reports whether s is prefix (exactly) followed by want in
// either letter case.
func hexMatches(s, prefix, want string) bool {
	rest, ok := strings.CutPrefix(s, prefix)
	return ok && strings.EqualFold(rest, want)
}

func within(ts int64, now time.Time) bool {
	d := now.Unix() - ts
	return -300 <= d && d <= 300
}

func FuzzParseUnixTimestamp(f *testing.F) {
	f.Add("1531420618")
	f.Add("0")
	f.Add("-1")
	f.Fuzz(func(t *testing.T, s string) {
		n, err := signature.ParseUnixTimestamp(s)
		want, ok := canonicalTS(s)
		if ok != (err == nil) || n != want {
			t.Fatalf("ParseUnixTimestamp(%q) = %d, %v; reference %d, %v", s, n, err, want, ok)
		}
		if err != nil && !errors.Is(err, signature.ErrMalformed) {
			t.Fatalf("error %v does not wrap ErrMalformed", err)
		}
		if err == nil && strconv.FormatInt(n, 10) != s {
			t.Fatalf("ParseUnixTimestamp(%q) = %d is not canonical", s, n)
		}
	})
}

func FuzzParseSlackSignature(f *testing.F) {
	f.Add(slackDocSignature)
	f.Add("v0=")
	f.Fuzz(func(t *testing.T, s string) {
		b, ok := signature.ParseSlackSignature(s)
		if ok != (b != nil) {
			t.Fatalf("ParseSlackSignature(%q) = %x, %v", s, b, ok)
		}
		if ok && (len(b) != 32 || !strings.EqualFold(s, "v0="+hex.EncodeToString(b))) {
			t.Fatalf("ParseSlackSignature(%q) = %x does not round-trip", s, b)
		}
	})
}

func FuzzParseStripeHeader(f *testing.F) {
	f.Add("t=1492774577,v1=5257a869e7ecebeda32affa62cdca3fa51cad7e77a0e56ff536d0ce8e108d8bd,v0=6ffbb59b2300aae63f272406069a9788598b792a944a07aba816edb039989a39")
	f.Add("t=1,v1=" + strings.Repeat("0", 64) + ",v1=" + strings.Repeat("F", 64))
	f.Add("t=,v1=")
	f.Fuzz(func(t *testing.T, s string) {
		ts, sigs, err := signature.ParseStripeHeader(s)
		if err != nil {
			if !errors.Is(err, signature.ErrMalformed) || ts != 0 || sigs != nil {
				t.Fatalf("ParseStripeHeader(%q) = %d, %x, %v", s, ts, sigs, err)
			}
			return
		}
		if len(s) > signature.MaxHeaderBytes || len(sigs) == 0 || len(sigs) > signature.MaxSignatures {
			t.Fatalf("ParseStripeHeader(%q): %d signatures accepted", s, len(sigs))
		}
		// Every element the result came from is in the header.
		var elems []string
		for e := range strings.SplitSeq(s, ",") {
			elems = append(elems, strings.ToLower(strings.TrimSpace(e)))
		}
		if !contains(elems, "t="+strconv.FormatInt(ts, 10)) {
			t.Fatalf("ParseStripeHeader(%q): t=%d is not an element", s, ts)
		}
		for _, sig := range sigs {
			if len(sig) != 32 || !contains(elems, "v1="+hex.EncodeToString(sig)) {
				t.Fatalf("ParseStripeHeader(%q): v1 %x is not an element", s, sig)
			}
		}
	})
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func FuzzParseStandardSignatures(f *testing.F) {
	f.Add(standardDocSignature)
	f.Add("v1,K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN/H/pI4= v1a,hnO3f9T8Ytu9HwrXslvumlUpqtNVqkhqw/enGzPCXe5BdqzCInXqYXFymVJaA7AZdpXwVLPo3mNl8EM+m7TBAg==")
	f.Add("v1,")
	f.Fuzz(func(t *testing.T, s string) {
		sigs := signature.ParseStandardSignatures(s)
		if len(sigs) > signature.MaxSignatures || (len(sigs) > 0 && len(s) > signature.MaxHeaderBytes) {
			t.Fatalf("ParseStandardSignatures(%.100q): %d signatures accepted", s, len(sigs))
		}
		fields := strings.Fields(s)
		for _, sig := range sigs {
			if len(sig) != 32 || !contains(fields, "v1,"+b64(sig)) {
				t.Fatalf("ParseStandardSignatures(%.100q): %x is not an entry", s, sig)
			}
		}
	})
}

func FuzzDecodeStandardSecret(f *testing.F) {
	f.Add(standardDocSecret)
	f.Add("whsec_")
	f.Add("whsec_AQI=")
	f.Fuzz(func(t *testing.T, s string) {
		key, err := signature.DecodeStandardSecret(s)
		if err != nil {
			// Exactly the fixed sentinels, so the message cannot contain s.
			if key != nil || (!errors.Is(err, signature.ErrSecretPrefix) && !errors.Is(err, signature.ErrSecretBase64)) {
				t.Fatalf("DecodeStandardSecret(%q) = %x, %v", s, key, err)
			}
			return
		}
		rest, ok := strings.CutPrefix(s, "whsec_")
		if !ok || len(key) == 0 || strings.TrimRight(b64(key), "=") != strings.TrimRight(rest, "=") {
			t.Fatalf("DecodeStandardSecret(%q) = %x", s, key)
		}
	})
}

func FuzzGitHubVerify(f *testing.F) {
	f.Add(githubDocSignature, []byte(githubDocBody))
	f.Add("sha256=", []byte{})
	secrets := fuzzSecrets([]byte(githubDocSecret))
	v := signature.GitHub(secrets)
	f.Fuzz(func(t *testing.T, sig string, body []byte) {
		err := v.Verify(hdr(signature.HeaderGitHub, sig), body, now)
		classify(t, err, secrets)
		want := false
		for _, k := range secrets {
			want = want || hexMatches(strings.TrimSpace(sig), "sha256=", macHex(k, string(body)))
		}
		if (err == nil) != want {
			t.Fatalf("Verify(%q, %q) = %v; reference says valid=%v", sig, body, err, want)
		}
	})
}

func FuzzShopifyVerify(f *testing.F) {
	f.Add(shopifyOwnSignature, []byte(shopifyOwnBody))
	f.Add("", []byte{})
	secrets := fuzzSecrets([]byte(shopifyOwnSecret))
	v := signature.Shopify(secrets)
	f.Fuzz(func(t *testing.T, sig string, body []byte) {
		err := v.Verify(hdr(signature.HeaderShopify, sig), body, now)
		classify(t, err, secrets)
		want := false
		for _, k := range secrets {
			want = want || strings.TrimSpace(sig) == macB64(k, string(body))
		}
		if (err == nil) != want {
			t.Fatalf("Verify(%q, %q) = %v; reference says valid=%v", sig, body, err, want)
		}
	})
}

func FuzzHMACVerify(f *testing.F) {
	f.Add("sha256="+genericOwnHex, []byte(genericOwnBody))
	f.Add(genericOwnBase64, []byte(genericOwnBody))
	secrets := fuzzSecrets([]byte(genericOwnSecret))
	hexV := signature.HMAC(signature.HMACConfig{Header: "X-Signature", Encoding: "hex", Prefix: "sha256="}, secrets)
	b64V := signature.HMAC(signature.HMACConfig{Header: "X-Signature", Encoding: "base64"}, secrets)
	f.Fuzz(func(t *testing.T, sig string, body []byte) {
		h := hdr("X-Signature", sig)
		errHex := hexV.Verify(h, body, now)
		errB64 := b64V.Verify(h, body, now)
		classify(t, errHex, secrets)
		classify(t, errB64, secrets)
		wantHex, wantB64 := false, false
		for _, k := range secrets {
			wantHex = wantHex || hexMatches(strings.TrimSpace(sig), "sha256=", macHex(k, string(body)))
			wantB64 = wantB64 || strings.TrimSpace(sig) == macB64(k, string(body))
		}
		if (errHex == nil) != wantHex || (errB64 == nil) != wantB64 {
			t.Fatalf("Verify(%q, %q) = hex %v, base64 %v; reference says %v, %v", sig, body, errHex, errB64, wantHex, wantB64)
		}
	})
}

func FuzzSlackVerify(f *testing.F) {
	f.Add(slackDocSignature, slackDocTimestamp, []byte(slackDocBody))
	f.Add("v0=", "0", []byte{})
	secrets := fuzzSecrets([]byte(slackDocSecret))
	v := signature.Slack(secrets, 0)
	clock := time.Unix(1531420618, 0)
	f.Fuzz(func(t *testing.T, sig, ts string, body []byte) {
		err := v.Verify(hdr(signature.HeaderSlackSignature, sig, signature.HeaderSlackTimestamp, ts), body, clock)
		classify(t, err, secrets)
		tsText := strings.TrimSpace(ts)
		n, ok := canonicalTS(tsText)
		want := false
		if ok && within(n, clock) {
			for _, k := range secrets {
				want = want || hexMatches(strings.TrimSpace(sig), "v0=", macHex(k, "v0:", tsText, ":", string(body)))
			}
		}
		if (err == nil) != want {
			t.Fatalf("Verify(%q, %q, %q) = %v; reference says valid=%v", sig, ts, body, err, want)
		}
	})
}

func FuzzStripeVerify(f *testing.F) {
	f.Add("t=1700000000,v1="+stripeOwnV1, []byte(stripeOwnBody))
	f.Add("t=1700000000,v1=", []byte{})
	secrets := fuzzSecrets([]byte(stripeOwnSecret))
	v := signature.Stripe(secrets, 0)
	f.Fuzz(func(t *testing.T, header string, body []byte) {
		err := v.Verify(hdr(signature.HeaderStripe, header), body, now)
		classify(t, err, secrets)
		if err != nil {
			return
		}
		// Accepted: a t element with a canonical, timely timestamp, and a
		// v1 element holding the MAC of "<t>.<body>" under a secret.
		var elems []string
		var tsText string
		for e := range strings.SplitSeq(header, ",") {
			e = strings.TrimSpace(e)
			elems = append(elems, strings.ToLower(e))
			if x, ok := strings.CutPrefix(e, "t="); ok {
				tsText = x
			}
		}
		n, ok := canonicalTS(tsText)
		if !ok || !within(n, now) {
			t.Fatalf("Verify(%q) accepted timestamp %q", header, tsText)
		}
		for _, k := range secrets {
			if contains(elems, "v1="+macHex(k, tsText, ".", string(body))) {
				return
			}
		}
		t.Fatalf("Verify(%q, %q) accepted a header without a valid v1", header, body)
	})
}

func FuzzStandardWebhooksVerify(f *testing.F) {
	f.Add(standardDocID, "1614265330", standardDocSignature, []byte(standardDocBody))
	f.Add("", "", "", []byte{})
	secrets := fuzzSecrets(standardDocKey())
	v := signature.StandardWebhooks(secrets, 0)
	clock := time.Unix(standardDocTimestamp, 0)
	f.Fuzz(func(t *testing.T, id, ts, sig string, body []byte) {
		h := hdr("webhook-id", id, "webhook-timestamp", ts, "webhook-signature", sig)
		err := v.Verify(h, body, clock)
		classify(t, err, secrets)
		if err != nil {
			return
		}
		id, ts = strings.TrimSpace(id), strings.TrimSpace(ts)
		n, ok := canonicalTS(ts)
		if id == "" || strings.Contains(id, ".") || !ok || !within(n, clock) {
			t.Fatalf("Verify accepted id %q, timestamp %q", id, ts)
		}
		fields := strings.Fields(sig)
		for _, k := range secrets {
			if contains(fields, "v1,"+macB64(k, id, ".", ts, ".", string(body))) {
				return
			}
		}
		t.Fatalf("Verify(%q, %q, %q, %q) accepted a header without a valid v1", id, ts, sig, body)
	})
}

// Make sure the fuzz verifiers' fixed inputs are what the seeds assume.
func TestFuzzFixtures(t *testing.T) {
	t.Parallel()
	if got := signature.SignStandard(standardDocKey(), standardDocID, time.Unix(standardDocTimestamp, 0), []byte(standardDocBody)); got != standardDocSignature {
		t.Fatal(got)
	}
	h := http.Header{}
	h.Set(signature.HeaderStripe, "t=1700000000,v1="+stripeOwnV1)
	if err := signature.Stripe(fuzzSecrets([]byte(stripeOwnSecret)), 0).Verify(h, []byte(stripeOwnBody), now); err != nil {
		t.Fatal(err)
	}
}
