package signature_test

import (
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/signature"
)

// now is the clock of every table test; requests are signed at now unless a
// test says otherwise.
var now = time.Unix(1700000000, 0)

const body = `{"id":"evt_123","type":"thing.happened","data":{"n":1}}`

var (
	secret1 = []byte("first-secret-3f9a1c")
	secret2 = []byte("second-secret-77b2e0")
	secret3 = []byte("unrelated-secret-c41d")
)

// scheme describes one preset for the shared table tests.
type scheme struct {
	name        string
	timestamped bool
	newV        func(secrets [][]byte, tol time.Duration) signature.Verifier
	// sign returns the headers a sender holding secrets sends for b at ts:
	// one signature per secret (several only where the scheme allows it).
	sign func(b string, ts int64, secrets ...[]byte) http.Header
	// multi is true if one header may carry several signatures.
	multi bool
	// sigHeader carries the MAC; marker is the text just before it.
	sigHeader, marker string
	// required headers: absent or empty is ErrMissing.
	required []string
	// malformed values for headers, each of which is ErrMalformed.
	malformed []map[string]string
}

func ts10(ts int64) string { return strconv.FormatInt(ts, 10) }

func hexSigs(prefix, sep string, secrets [][]byte, parts ...string) string {
	var s []string
	for _, k := range secrets {
		s = append(s, prefix+macHex(k, parts...))
	}
	return strings.Join(s, sep)
}

func b64Sigs(prefix, sep string, secrets [][]byte, parts ...string) string {
	var s []string
	for _, k := range secrets {
		s = append(s, prefix+macB64(k, parts...))
	}
	return strings.Join(s, sep)
}

var (
	validHex  = macHex(secret1, body)
	validB64  = macB64(secret1, body)
	notHex    = strings.Repeat("zz", 32)
	notB64    = strings.Repeat("!", 43) + "="
	tooLong   = strings.Repeat("a", signature.MaxHeaderBytes+1)
	b64Of31   = base64.StdEncoding.EncodeToString(make([]byte, 31))
	b64Sloppy = validB64[:42] + "B=" // 44 characters, but the padding bits are not zero
)

func stripeMany(n int) string {
	s := "t=" + ts10(now.Unix())
	for range n {
		s += ",v1=" + validHex
	}
	return s
}

func standardMany(n int) string {
	return strings.TrimSpace(strings.Repeat("v1,"+validB64+" ", n))
}

var schemes = []scheme{
	{
		name: "github",
		newV: func(s [][]byte, _ time.Duration) signature.Verifier { return signature.GitHub(s) },
		sign: func(b string, _ int64, s ...[]byte) http.Header {
			return hdr(signature.HeaderGitHub, hexSigs("sha256=", "", s, b))
		},
		sigHeader: signature.HeaderGitHub, marker: "sha256=",
		required: []string{signature.HeaderGitHub},
		malformed: []map[string]string{
			{signature.HeaderGitHub: "sha256=" + notHex},
			{signature.HeaderGitHub: "sha1=" + validHex[:40]},
			{signature.HeaderGitHub: validHex},
			{signature.HeaderGitHub: "SHA256=" + validHex},
			{signature.HeaderGitHub: "sha256=" + validHex[:62]},
			{signature.HeaderGitHub: "sha256=" + validHex + "00"},
			{signature.HeaderGitHub: "sha256= " + validHex},
			{signature.HeaderGitHub: "sha256=" + validB64},
			{signature.HeaderGitHub: "sha256=" + validHex + "," + "sha256=" + validHex},
			{signature.HeaderGitHub: tooLong},
		},
	},
	{
		name:        "stripe",
		timestamped: true,
		multi:       true,
		newV:        signature.Stripe,
		sign: func(b string, ts int64, s ...[]byte) http.Header {
			return hdr(signature.HeaderStripe, "t="+ts10(ts)+","+hexSigs("v1=", ",", s, ts10(ts), ".", b))
		},
		sigHeader: signature.HeaderStripe, marker: "v1=",
		required: []string{signature.HeaderStripe},
		malformed: []map[string]string{
			{signature.HeaderStripe: "v1=" + validHex},
			{signature.HeaderStripe: "t=" + ts10(now.Unix())},
			{signature.HeaderStripe: "t=" + ts10(now.Unix()) + ",v0=" + validHex},
			{signature.HeaderStripe: "t=" + ts10(now.Unix()) + ",v1=" + notHex},
			{signature.HeaderStripe: "t=" + ts10(now.Unix()) + ",v1=" + validB64},
			{signature.HeaderStripe: "t=abc,v1=" + validHex},
			{signature.HeaderStripe: "t=-1700000000,v1=" + validHex},
			{signature.HeaderStripe: "t=1700000000.5,v1=" + validHex},
			{signature.HeaderStripe: "t=1700000000,t=1700000000,v1=" + validHex},
			{signature.HeaderStripe: stripeMany(signature.MaxSignatures + 1)},
			{signature.HeaderStripe: "t=1700000000,v1=" + tooLong},
			{signature.HeaderStripe: "garbage"},
		},
	},
	{
		name: "shopify",
		newV: func(s [][]byte, _ time.Duration) signature.Verifier { return signature.Shopify(s) },
		sign: func(b string, _ int64, s ...[]byte) http.Header {
			return hdr(signature.HeaderShopify, b64Sigs("", "", s, b))
		},
		sigHeader: signature.HeaderShopify,
		required:  []string{signature.HeaderShopify},
		malformed: []map[string]string{
			{signature.HeaderShopify: notB64},
			{signature.HeaderShopify: validHex},
			{signature.HeaderShopify: strings.TrimRight(validB64, "=")},
			{signature.HeaderShopify: b64Of31},
			{signature.HeaderShopify: b64Sloppy},
			{signature.HeaderShopify: strings.NewReplacer("+", "-", "/", "_").Replace(validB64) + "-"},
			{signature.HeaderShopify: validB64[:20] + "\n" + validB64[20:]},
			{signature.HeaderShopify: tooLong},
		},
	},
	{
		name:        "slack",
		timestamped: true,
		newV:        signature.Slack,
		sign: func(b string, ts int64, s ...[]byte) http.Header {
			return hdr(signature.HeaderSlackSignature, hexSigs("v0=", "", s, "v0:", ts10(ts), ":", b),
				signature.HeaderSlackTimestamp, ts10(ts))
		},
		sigHeader: signature.HeaderSlackSignature, marker: "v0=",
		required: []string{signature.HeaderSlackSignature, signature.HeaderSlackTimestamp},
		malformed: []map[string]string{
			{signature.HeaderSlackSignature: "v0=" + notHex},
			{signature.HeaderSlackSignature: "v1=" + validHex},
			{signature.HeaderSlackSignature: validHex},
			{signature.HeaderSlackSignature: "v0=" + validHex[:63]},
			{signature.HeaderSlackTimestamp: "abc"},
			{signature.HeaderSlackTimestamp: "-1700000000"},
			{signature.HeaderSlackTimestamp: "+1700000000"},
			{signature.HeaderSlackTimestamp: "01700000000"},
			{signature.HeaderSlackTimestamp: "1700000000.000"},
			{signature.HeaderSlackTimestamp: "1234567890123456789"},
			{signature.HeaderSlackTimestamp: tooLong},
		},
	},
	{
		name:        "standard-webhooks",
		timestamped: true,
		multi:       true,
		newV:        signature.StandardWebhooks,
		sign: func(b string, ts int64, s ...[]byte) http.Header {
			return hdr(
				"webhook-id", "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W",
				"webhook-timestamp", ts10(ts),
				"webhook-signature", b64Sigs("v1,", " ", s, "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W.", ts10(ts), ".", b),
			)
		},
		sigHeader: signature.HeaderWebhookSignature, marker: "v1,",
		required: []string{signature.HeaderWebhookID, signature.HeaderWebhookTimestamp, signature.HeaderWebhookSignature},
		malformed: []map[string]string{
			{signature.HeaderWebhookSignature: "v1," + notB64},
			{signature.HeaderWebhookSignature: "v1a," + validB64},
			{signature.HeaderWebhookSignature: "v2," + validB64},
			{signature.HeaderWebhookSignature: "v1=" + validB64},
			{signature.HeaderWebhookSignature: "v1," + validHex},
			{signature.HeaderWebhookSignature: "v1," + b64Sloppy},
			{signature.HeaderWebhookSignature: standardMany(signature.MaxSignatures + 1)},
			{signature.HeaderWebhookSignature: tooLong},
			{signature.HeaderWebhookID: "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W.1700000000"},
			{signature.HeaderWebhookTimestamp: "2023-11-14T22:13:20Z"},
			{signature.HeaderWebhookTimestamp: "1700000000000000000000"},
		},
	},
	{
		name: "generic-hex-prefix",
		newV: func(s [][]byte, _ time.Duration) signature.Verifier {
			return signature.HMAC(signature.HMACConfig{Header: "X-Signature", Encoding: "hex", Prefix: "sha256="}, s)
		},
		sign: func(b string, _ int64, s ...[]byte) http.Header {
			return hdr("X-Signature", hexSigs("sha256=", "", s, b))
		},
		sigHeader: "X-Signature", marker: "sha256=",
		required: []string{"X-Signature"},
		malformed: []map[string]string{
			{"X-Signature": validHex},
			{"X-Signature": "sha256=" + notHex},
			{"X-Signature": "sha256=" + validB64},
		},
	},
	{
		name: "generic-base64",
		newV: func(s [][]byte, _ time.Duration) signature.Verifier {
			return signature.HMAC(signature.HMACConfig{Header: "X-Body-Mac", Encoding: "base64"}, s)
		},
		sign:      func(b string, _ int64, s ...[]byte) http.Header { return hdr("X-Body-Mac", b64Sigs("", "", s, b)) },
		sigHeader: "X-Body-Mac",
		required:  []string{"X-Body-Mac"},
		malformed: []map[string]string{
			{"X-Body-Mac": validHex},
			{"X-Body-Mac": notB64},
			{"X-Body-Mac": "sha256=" + validB64},
		},
	},
	{
		name: "generic-default-encoding",
		newV: func(s [][]byte, _ time.Duration) signature.Verifier {
			return signature.HMAC(signature.HMACConfig{Header: "X-Sig"}, s)
		},
		sign:      func(b string, _ int64, s ...[]byte) http.Header { return hdr("X-Sig", hexSigs("", "", s, b)) },
		sigHeader: "X-Sig",
		required:  []string{"X-Sig"},
		malformed: []map[string]string{{"X-Sig": validB64}},
	},
}

// tamper changes the first character of the MAC in h[name] (just after
// marker) to another character valid in both hex and base64.
func tamper(t *testing.T, h http.Header, name, marker string) {
	t.Helper()
	v := h.Get(name)
	i := strings.Index(v, marker)
	if i < 0 {
		t.Fatalf("marker %q not in %q", marker, v)
	}
	i += len(marker)
	c := byte('a')
	if v[i] == 'a' {
		c = 'b'
	}
	h.Set(name, v[:i]+string(c)+v[i+1:])
}

// check fails unless err wraps want (nil means success) and, for an error,
// its message leaks none of the secrets or expected MACs in leaks.
func check(t *testing.T, err, want error, leaks ...string) {
	t.Helper()
	if want == nil {
		if err != nil {
			t.Fatalf("Verify = %v, want nil", err)
		}
		return
	}
	if !errors.Is(err, want) {
		t.Fatalf("Verify = %v, want %v", err, want)
	}
	n := 0
	for _, sentinel := range []error{signature.ErrMissing, signature.ErrMalformed, signature.ErrTimestamp, signature.ErrMismatch} {
		if errors.Is(err, sentinel) {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("Verify = %v wraps %d sentinel errors, want exactly 1", err, n)
	}
	msg := err.Error()
	for _, l := range leaks {
		if l != "" && strings.Contains(strings.ToLower(msg), strings.ToLower(l)) {
			t.Fatalf("error %q leaks %q", msg, l)
		}
	}
}

// leaks lists what an error message must never contain: the secrets in
// any encoding, and the MACs the verifier computes or receives.
func leaks(h http.Header, secrets ...[]byte) []string {
	var l []string
	for _, s := range secrets {
		l = append(l, string(s), hex.EncodeToString(s), base64.StdEncoding.EncodeToString(s))
	}
	for _, vs := range h {
		for _, v := range vs {
			if len(v) >= 16 {
				l = append(l, v)
			}
			for _, f := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == '=' || r == ' ' }) {
				if len(f) >= 16 {
					l = append(l, f)
				}
			}
		}
	}
	return l
}

func TestVerify(t *testing.T) {
	t.Parallel()
	for _, sc := range schemes {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			ts := now.Unix()
			v := sc.newV([][]byte{secret1}, 0)
			all := [][]byte{secret1, secret2, secret3}

			t.Run("valid", func(t *testing.T) {
				t.Parallel()
				check(t, v.Verify(sc.sign(body, ts, secret1), []byte(body), now), nil)
			})
			t.Run("empty body", func(t *testing.T) {
				t.Parallel()
				check(t, v.Verify(sc.sign("", ts, secret1), nil, now), nil)
			})
			t.Run("tampered body", func(t *testing.T) {
				t.Parallel()
				h := sc.sign(body, ts, secret1)
				tb := []byte(strings.Replace(body, `"n":1`, `"n":2`, 1))
				check(t, v.Verify(h, tb, now), signature.ErrMismatch, leaks(h, all...)...)
				check(t, v.Verify(h, append([]byte(body), ' '), now), signature.ErrMismatch, leaks(h, all...)...)
			})
			t.Run("tampered signature", func(t *testing.T) {
				t.Parallel()
				h := sc.sign(body, ts, secret1)
				tamper(t, h, sc.sigHeader, sc.marker)
				check(t, v.Verify(h, []byte(body), now), signature.ErrMismatch, leaks(h, all...)...)
			})
			t.Run("wrong secret", func(t *testing.T) {
				t.Parallel()
				h := sc.sign(body, ts, secret3)
				check(t, v.Verify(h, []byte(body), now), signature.ErrMismatch, leaks(h, all...)...)
			})
			t.Run("missing header", func(t *testing.T) {
				t.Parallel()
				for _, name := range sc.required {
					h := sc.sign(body, ts, secret1)
					h.Del(name)
					check(t, v.Verify(h, []byte(body), now), signature.ErrMissing, leaks(h, all...)...)
					for _, empty := range []string{"", "  \t"} {
						h.Set(name, empty)
						check(t, v.Verify(h, []byte(body), now), signature.ErrMissing, leaks(h, all...)...)
					}
				}
				check(t, v.Verify(http.Header{}, []byte(body), now), signature.ErrMissing)
				check(t, v.Verify(nil, nil, now), signature.ErrMissing)
			})
			t.Run("malformed", func(t *testing.T) {
				t.Parallel()
				for i, m := range sc.malformed {
					h := sc.sign(body, ts, secret1)
					for k, val := range m {
						h[http.CanonicalHeaderKey(k)] = []string{val}
					}
					t.Run(fmt.Sprint(i), func(t *testing.T) {
						check(t, v.Verify(h, []byte(body), now), signature.ErrMalformed, leaks(h, all...)...)
					})
				}
			})
			t.Run("surrounding white space", func(t *testing.T) {
				t.Parallel()
				h := sc.sign(body, ts, secret1)
				h.Set(sc.sigHeader, " "+h.Get(sc.sigHeader)+"\t")
				check(t, v.Verify(h, []byte(body), now), nil)
			})
			t.Run("first header value counts", func(t *testing.T) {
				t.Parallel()
				good := sc.sign(body, ts, secret1).Get(sc.sigHeader)
				bad := sc.sign(body, ts, secret3).Get(sc.sigHeader)
				h := sc.sign(body, ts, secret1)
				h[http.CanonicalHeaderKey(sc.sigHeader)] = []string{good, bad}
				check(t, v.Verify(h, []byte(body), now), nil)
				h[http.CanonicalHeaderKey(sc.sigHeader)] = []string{bad, good}
				check(t, v.Verify(h, []byte(body), now), signature.ErrMismatch)
			})
			t.Run("rotation", func(t *testing.T) {
				t.Parallel()
				rv := sc.newV([][]byte{secret1, secret2}, 0)
				check(t, rv.Verify(sc.sign(body, ts, secret1), []byte(body), now), nil)
				check(t, rv.Verify(sc.sign(body, ts, secret2), []byte(body), now), nil)
				h := sc.sign(body, ts, secret3)
				check(t, rv.Verify(h, []byte(body), now), signature.ErrMismatch, leaks(h, all...)...)
			})
			t.Run("several signatures", func(t *testing.T) {
				t.Parallel()
				if !sc.multi {
					t.Skip("one signature per header in this scheme")
				}
				rv := sc.newV([][]byte{secret1, secret2}, 0)
				check(t, rv.Verify(sc.sign(body, ts, secret3, secret2), []byte(body), now), nil)
				check(t, rv.Verify(sc.sign(body, ts, secret2, secret3), []byte(body), now), nil)
				check(t, v.Verify(sc.sign(body, ts, secret3, secret3, secret3, secret1), []byte(body), now), nil)
				h := sc.sign(body, ts, secret3, []byte("yet another"))
				check(t, rv.Verify(h, []byte(body), now), signature.ErrMismatch, leaks(h, all...)...)
				max := make([][]byte, signature.MaxSignatures)
				for i := range max {
					max[i] = secret3
				}
				max[len(max)-1] = secret1
				check(t, v.Verify(sc.sign(body, ts, max...), []byte(body), now), nil)
				check(t, v.Verify(sc.sign(body, ts, append(max, secret1)...), []byte(body), now), signature.ErrMalformed)
			})
			t.Run("timestamp", func(t *testing.T) {
				t.Parallel()
				if !sc.timestamped {
					t.Skip("no timestamp in this scheme")
				}
				for _, tc := range []struct {
					tol    time.Duration
					offset int64
					want   error
				}{
					{0, -300, nil},
					{0, -301, signature.ErrTimestamp},
					{0, 300, nil},
					{0, 301, signature.ErrTimestamp},
					{0, -86400, signature.ErrTimestamp},
					{0, -now.Unix(), signature.ErrTimestamp},
					{0, 1e15, signature.ErrTimestamp},
					{-time.Second, -300, nil},
					{-time.Second, 301, signature.ErrTimestamp},
					{10 * time.Second, -10, nil},
					{10 * time.Second, -11, signature.ErrTimestamp},
					{10 * time.Second, 10, nil},
					{10 * time.Second, 11, signature.ErrTimestamp},
					{time.Hour, -3600, nil},
					{time.Hour, 3601, signature.ErrTimestamp},
				} {
					tv := sc.newV([][]byte{secret1}, tc.tol)
					h := sc.sign(body, ts+tc.offset, secret1)
					err := tv.Verify(h, []byte(body), now)
					if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
						t.Errorf("tolerance %v, offset %d s: Verify = %v, want %v", tc.tol, tc.offset, err, tc.want)
					}
					if err != nil {
						check(t, err, tc.want, leaks(h, all...)...)
					}
				}
				// The clock's sub-second part does not matter: whole seconds count.
				h := sc.sign(body, ts-300, secret1)
				check(t, v.Verify(h, []byte(body), now.Add(999*time.Millisecond)), nil)
				// A wrong MAC with a stale timestamp reports the timestamp.
				h = sc.sign(body, ts-301, secret3)
				check(t, v.Verify(h, []byte(body), now), signature.ErrTimestamp)
				// A timestamp changed after signing no longer matches.
				h = sc.sign(body, ts, secret1)
				for k, vals := range h {
					for i, val := range vals {
						h[k][i] = strings.ReplaceAll(val, ts10(ts), ts10(ts+1))
					}
				}
				check(t, v.Verify(h, []byte(body), now), signature.ErrMismatch)
			})
			t.Run("no usable secret", func(t *testing.T) {
				t.Parallel()
				for _, secrets := range [][][]byte{nil, {}, {nil}, {{}}} {
					nv := sc.newV(secrets, 0)
					check(t, nv.Verify(sc.sign(body, ts, []byte{}), []byte(body), now), signature.ErrMismatch)
				}
				// An empty secret next to a real one is ignored, not accepted.
				nv := sc.newV([][]byte{{}, secret1}, 0)
				check(t, nv.Verify(sc.sign(body, ts, []byte{}), []byte(body), now), signature.ErrMismatch)
				check(t, nv.Verify(sc.sign(body, ts, secret1), []byte(body), now), nil)
			})
			t.Run("secrets are copied", func(t *testing.T) {
				t.Parallel()
				s := append([]byte(nil), secret1...)
				secrets := [][]byte{s}
				cv := sc.newV(secrets, 0)
				s[0] ^= 0xff
				secrets[0] = secret3
				check(t, cv.Verify(sc.sign(body, ts, secret1), []byte(body), now), nil)
			})
			t.Run("concurrent use", func(t *testing.T) {
				t.Parallel()
				good := sc.sign(body, ts, secret1)
				bad := sc.sign(body, ts, secret3)
				var wg sync.WaitGroup
				errs := make(chan error, 16)
				for g := range 8 {
					wg.Go(func() {
						for range 50 {
							if err := v.Verify(good, []byte(body), now); err != nil {
								errs <- fmt.Errorf("goroutine %d: good: %w", g, err)
								return
							}
							if err := v.Verify(bad, []byte(body), now); !errors.Is(err, signature.ErrMismatch) {
								errs <- fmt.Errorf("goroutine %d: bad: %w", g, err)
								return
							}
						}
					})
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					t.Error(err)
				}
			})
		})
	}
}

func TestHMACConfig(t *testing.T) {
	t.Parallel()
	for _, c := range []signature.HMACConfig{
		{Header: "X-Signature"},
		{Header: "x-signature", Encoding: "hex", Prefix: "sha256="},
		{Header: "X-Sig", Encoding: "base64"},
	} {
		if err := c.Validate(); err != nil {
			t.Errorf("%+v: Validate = %v", c, err)
		}
	}
	for _, c := range []signature.HMACConfig{
		{},
		{Header: "X Signature"},
		{Header: "X-Signature:"},
		{Header: "X-Signature", Encoding: "HEX"},
		{Header: "X-Signature", Encoding: "base64url"},
		{Header: "X-Signature", Prefix: "a\r\nb"},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v: Validate = nil, want an error", c)
		}
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%+v: HMAC did not panic", c)
				}
			}()
			signature.HMAC(c, [][]byte{secret1})
		}()
	}
}

func TestErrorMessages(t *testing.T) {
	t.Parallel()
	// Messages name the header at fault, so a sender's operator can tell
	// what went wrong, and are stable enough to show to clients.
	v := signature.Stripe([][]byte{secret1}, 0)
	for _, tc := range []struct {
		h    http.Header
		want string
	}{
		{hdr(), "signature header missing: Stripe-Signature is absent or empty"},
		{hdr(signature.HeaderStripe, "nope"), "signature header malformed: Stripe-Signature must be"},
		{hdr(signature.HeaderStripe, "t=1699999000,v1="+validHex), "signature timestamp outside tolerance: Stripe-Signature t is 1000 s in the past; at most 300 s allowed"},
		{hdr(signature.HeaderStripe, "t=1700000400,v1="+validHex), "signature timestamp outside tolerance: Stripe-Signature t is 400 s in the future; at most 300 s allowed"},
		{hdr(signature.HeaderStripe, "t=1700000000,v1="+validHex), "signature mismatch: no signature in Stripe-Signature matches the body"},
	} {
		err := v.Verify(tc.h, []byte(body), now)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("Verify = %v, want prefix %q", err, tc.want)
		}
	}
}

func TestHeaderLengthCap(t *testing.T) {
	t.Parallel()
	ts := ts10(now.Unix())
	std := signature.StandardWebhooks([][]byte{secret1}, 0)
	for _, n := range []int{signature.MaxHeaderBytes, signature.MaxHeaderBytes + 1} {
		id := strings.Repeat("i", n)
		h := hdr("webhook-id", id, "webhook-timestamp", ts,
			"webhook-signature", "v1,"+macB64(secret1, id, ".", ts, ".", body))
		var want error
		if n > signature.MaxHeaderBytes {
			want = signature.ErrMalformed
		}
		check(t, std.Verify(h, []byte(body), now), want)
	}

	st := signature.Stripe([][]byte{secret1}, 0)
	valid := "t=" + ts + ",v1=" + macHex(secret1, ts, ".", body) + ",x="
	for _, n := range []int{signature.MaxHeaderBytes, signature.MaxHeaderBytes + 1} {
		h := hdr(signature.HeaderStripe, valid+strings.Repeat("x", n-len(valid)))
		var want error
		if n > signature.MaxHeaderBytes {
			want = signature.ErrMalformed
		}
		check(t, st.Verify(h, []byte(body), now), want)
	}

	// White space around the value does not count towards the cap.
	gh := signature.GitHub([][]byte{secret1})
	pad := strings.Repeat(" ", signature.MaxHeaderBytes)
	check(t, gh.Verify(hdr(signature.HeaderGitHub, pad+"sha256="+validHex+pad), []byte(body), now), nil)
}
