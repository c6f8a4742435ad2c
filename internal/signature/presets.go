package signature

import (
	"crypto/sha1" //nolint:gosec // HMAC-SHA1 is what Intercom and Vercel sign with
	"fmt"
	"net/http"
	"strings"
	"time"
)

// GitHub returns the Verifier for GitHub webhooks:
//
//	X-Hub-Signature-256: sha256=<hex HMAC-SHA256(secret, body)>
//
// The hex digits may be upper or lower case. The legacy SHA-1 header
// X-Hub-Signature is ignored. Empty secrets are ignored. Without a usable
// secret, every well-formed request fails with [ErrMismatch].
func GitHub(secrets [][]byte) Verifier {
	return &prefixed{
		name:   HeaderGitHub,
		prefix: "sha256=",
		enc:    encHex,
		keys:   newKeys(secrets),
	}
}

// Shopify returns the Verifier for Shopify webhooks:
//
//	X-Shopify-Hmac-Sha256: <base64 HMAC-SHA256(secret, body)>
//
// The value must be padded standard base64. Empty secrets are ignored.
// Without a usable secret, every well-formed request fails with
// [ErrMismatch].
func Shopify(secrets [][]byte) Verifier {
	return &prefixed{
		name: HeaderShopify,
		enc:  encBase64,
		keys: newKeys(secrets),
	}
}

// prefixed verifies a single MAC of the raw body, written after an optional
// fixed prefix in one header. It backs GitHub, Shopify and HMAC.
type prefixed struct {
	name   string
	prefix string
	enc    encoding
	keys   keys
	// sha1 reports that the MAC is HMAC-SHA1, not HMAC-SHA256.
	sha1 bool
}

func (v *prefixed) Verify(h http.Header, body []byte, _ time.Time) error {
	s, err := header(h, v.name)
	if err != nil {
		return err
	}
	mac, ok := strings.CutPrefix(s, v.prefix)
	if !ok {
		return fmt.Errorf("%w: %s must start with %q", ErrMalformed, v.name, v.prefix)
	}
	if v.sha1 {
		b := decodeMACSize(v.enc, mac, sha1.Size)
		if b == nil {
			return fmt.Errorf("%w: %s must be %s<%s HMAC-SHA1>", ErrMalformed, v.name, v.prefix, v.enc)
		}
		if !v.keys.matchHash(sha1.New, [][]byte{b}, body) {
			return mismatch(v.name)
		}
		return nil
	}
	b := decodeMAC(v.enc, mac)
	if b == nil {
		return fmt.Errorf("%w: %s must be %s%s", ErrMalformed, v.name, v.prefix, describe(v.enc))
	}
	if !v.keys.match([][]byte{b}, body) {
		return mismatch(v.name)
	}
	return nil
}

// describe names the accepted form of a MAC in error messages.
func describe(e encoding) string {
	if e == encBase64 {
		return "<44 characters of base64>"
	}
	return "<64 hex digits>"
}

// Slack returns the Verifier for Slack requests:
//
//	X-Slack-Request-Timestamp: <unix seconds>
//	X-Slack-Signature: v0=<hex HMAC-SHA256(secret, "v0:<ts>:<body>")>
//
// The timestamp must be within tolerance of now, in the past or the future.
// Zero or less means [DefaultTolerance]. Empty secrets are ignored. Without
// a usable secret, every well-formed request fails with [ErrMismatch].
func Slack(secrets [][]byte, tolerance time.Duration) Verifier {
	return &slack{keys: newKeys(secrets), tol: toleranceOrDefault(tolerance)}
}

type slack struct {
	keys keys
	tol  time.Duration
}

func (v *slack) Verify(h http.Header, body []byte, now time.Time) error {
	sig, err := header(h, HeaderSlackSignature)
	if err != nil {
		return err
	}
	tsText, err := header(h, HeaderSlackTimestamp)
	if err != nil {
		return err
	}
	ts, err := ParseUnixTimestamp(tsText)
	if err != nil {
		return fmt.Errorf("%w: %s must be Unix seconds", ErrMalformed, HeaderSlackTimestamp)
	}
	mac, ok := ParseSlackSignature(sig)
	if !ok {
		return fmt.Errorf("%w: %s must be v0=<64 hex digits>", ErrMalformed, HeaderSlackSignature)
	}
	if err := checkTimestamp(HeaderSlackTimestamp, ts, now, v.tol); err != nil {
		return err
	}
	if !v.keys.match([][]byte{mac}, []byte("v0:"), []byte(tsText), []byte(":"), body) {
		return mismatch(HeaderSlackSignature)
	}
	return nil
}

// ParseSlackSignature decodes an X-Slack-Signature value, "v0=" and 64 hex
// digits, into the 32-byte MAC. Any other input returns nil, false.
func ParseSlackSignature(s string) ([]byte, bool) {
	rest, ok := strings.CutPrefix(s, "v0=")
	if !ok {
		return nil, false
	}
	b := decodeMAC(encHex, rest)
	return b, b != nil
}

// Stripe returns the Verifier for Stripe webhooks:
//
//	Stripe-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>[,v1=...][,v0=...]
//
// Any one v1 signature valid under any secret passes, and other schemes
// are ignored. The timestamp must be within tolerance of now. The secret
// is used as is: Stripe's "whsec_..." string is the HMAC key, not base64 as
// in Standard Webhooks. Empty secrets are ignored. Without a usable secret,
// every well-formed request fails with [ErrMismatch].
func Stripe(secrets [][]byte, tolerance time.Duration) Verifier {
	return &stripe{keys: newKeys(secrets), tol: toleranceOrDefault(tolerance)}
}

type stripe struct {
	keys keys
	tol  time.Duration
}

func (v *stripe) Verify(h http.Header, body []byte, now time.Time) error {
	s, err := header(h, HeaderStripe)
	if err != nil {
		return err
	}
	ts, sigs, err := ParseStripeHeader(s)
	if err != nil {
		return fmt.Errorf("%w: %s must be t=<unix seconds>,v1=<64 hex digits>[,v1=...]", ErrMalformed, HeaderStripe)
	}
	if err := checkTimestamp(HeaderStripe+" t", ts, now, v.tol); err != nil {
		return err
	}
	// ParseUnixTimestamp accepts only the canonical form, so this is
	// exactly the text that was signed.
	tsText := fmt.Appendf(nil, "%d.", ts)
	if !v.keys.match(sigs, tsText, body) {
		return mismatch(HeaderStripe)
	}
	return nil
}

// ParseStripeHeader parses a Stripe-Signature value: comma-separated
// key=value elements (white space around elements is ignored).
//
//   - Exactly one "t" element is required; its value must parse with
//     ParseUnixTimestamp.
//   - Each "v1" element whose value is 64 hex digits contributes its
//     32-byte MAC to v1, in header order; other v1 values are skipped.
//   - Elements with any other key, and elements without "=", are ignored.
//
// It returns an error wrapping [ErrMalformed] if s is too long, or t is
// missing, repeated or invalid. It does so too for more than
// [MaxSignatures] v1 elements, or none usable. On success, v1 holds 1 to
// MaxSignatures MACs.
func ParseStripeHeader(s string) (ts int64, v1 [][]byte, err error) {
	if len(s) > MaxHeaderBytes {
		return 0, nil, fmt.Errorf("%w: longer than %d bytes", ErrMalformed, MaxHeaderBytes)
	}
	haveT := false
	n := 0
	for elem := range strings.SplitSeq(s, ",") {
		key, val, ok := strings.Cut(strings.TrimSpace(elem), "=")
		if !ok {
			continue
		}
		switch key {
		case "t":
			if haveT {
				return 0, nil, fmt.Errorf("%w: more than one t", ErrMalformed)
			}
			haveT = true
			if ts, err = ParseUnixTimestamp(val); err != nil {
				return 0, nil, err
			}
		case "v1":
			if n++; n > MaxSignatures {
				return 0, nil, fmt.Errorf("%w: more than %d v1 signatures", ErrMalformed, MaxSignatures)
			}
			if b := decodeMAC(encHex, val); b != nil {
				v1 = append(v1, b)
			}
		}
	}
	if !haveT {
		return 0, nil, fmt.Errorf("%w: no t", ErrMalformed)
	}
	if len(v1) == 0 {
		return 0, nil, fmt.Errorf("%w: no v1 signature of 64 hex digits", ErrMalformed)
	}
	return ts, v1, nil
}
