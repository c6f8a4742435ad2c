// Package signature checks the signatures webhook senders put on their
// requests, before hookgate does any database work.
//
// Each signature scheme of the presets is a [Verifier]; [New] and [Schemes]
// list them. Every Verifier does the following:
//
//   - It accepts several secrets, so a secret can be rotated. A signature
//     valid under any of them passes.
//   - Where a scheme allows several signatures in one header, it accepts a
//     header that holds at least one valid signature.
//   - It compares MACs in constant time, with [hmac.Equal], after decoding
//     the received signature to bytes.
//   - Its errors wrap exactly one of [ErrMissing], [ErrMalformed],
//     [ErrTimestamp] or [ErrMismatch]. Their messages name the header at
//     fault. They never contain a secret, the expected signature or the
//     received value, so they are safe to send to the client.
//   - It is immutable and safe for concurrent use.
//
// The HTTP layer answers every error from Verify with 401. Handshakes, such
// as Slack's url_verification, are signed like any other request of their
// provider. Package sender answers them after Verify succeeds. Only
// Mailgun's verifier reads the body for more than its MAC, since its
// signature is inside it. Twilio's, Square's and HubSpot's sign the URL as
// well. They are [RequestVerifier] values, given the URL that the provider
// requested.
package signature

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"net/http"
	"strings"
	"time"
)

// Verifier checks a request's signature.
type Verifier interface {
	// Verify returns nil if h carries a valid signature of body under one of
	// the verifier's secrets and, for schemes with a timestamp, the
	// timestamp is within the tolerance of now. Otherwise it returns an
	// error wrapping ErrMissing, ErrMalformed, ErrTimestamp or ErrMismatch.
	// body must be the raw request body, byte for byte as received.
	// Only the first value of each header is considered.
	Verify(h http.Header, body []byte, now time.Time) error
}

// Errors that Verify and the parsers return, wrapped. Test with
// [errors.Is]. The HTTP layer answers all of them with 401.
var (
	// ErrMissing means that a required header is absent or empty.
	ErrMissing = errors.New("signature header missing")
	// ErrMalformed means that a header is present but cannot be parsed.
	// It may have the wrong prefix, encoding or length, no usable
	// signature, or a bad timestamp. It may also exceed MaxHeaderBytes or
	// MaxSignatures.
	ErrMalformed = errors.New("signature header malformed")
	// ErrTimestamp means that the signed timestamp is further than the
	// tolerance from now, in the past or in the future.
	ErrTimestamp = errors.New("signature timestamp outside tolerance")
	// ErrMismatch means that the headers are well formed, but no signature
	// in them matches the body under any of the secrets. A verifier without
	// a usable secret returns it for every well-formed request.
	ErrMismatch = errors.New("signature mismatch")
)

// Limits that keep hostile input cheap to reject.
const (
	// DefaultTolerance is the timestamp tolerance used when a constructor
	// is given a tolerance <= 0.
	DefaultTolerance = 300 * time.Second
	// MaxHeaderBytes is the longest signature, timestamp or ID header value
	// accepted; a longer one is ErrMalformed.
	MaxHeaderBytes = 8 << 10
	// MaxSignatures is the most candidate signatures that a
	// Stripe-Signature or webhook-signature header may carry. More is
	// ErrMalformed.
	MaxSignatures = 16
)

// Header names that the presets read, as net/http canonicalises them.
const (
	HeaderGitHub           = "X-Hub-Signature-256"
	HeaderStripe           = "Stripe-Signature"
	HeaderShopify          = "X-Shopify-Hmac-Sha256"
	HeaderSlackSignature   = "X-Slack-Signature"
	HeaderSlackTimestamp   = "X-Slack-Request-Timestamp"
	HeaderWebhookID        = "Webhook-Id"
	HeaderWebhookTimestamp = "Webhook-Timestamp"
	HeaderWebhookSignature = "Webhook-Signature"
)

// macSize is the length of an HMAC-SHA256 in bytes.
const macSize = sha256.Size

// keys is a verifier's copy of its secrets, empty ones dropped.
type keys [][]byte

// newKeys copies secrets, so later changes by the caller have no effect.
// It drops empty secrets. Anyone can compute an HMAC under an empty key, so
// accepting one would make the endpoint forgeable.
func newKeys(secrets [][]byte) keys {
	k := make(keys, 0, len(secrets))
	for _, s := range secrets {
		if len(s) > 0 {
			k = append(k, append([]byte(nil), s...))
		}
	}
	return k
}

// match reports whether one of cands equals HMAC-SHA256(key, concat(parts))
// for one of the keys. Each comparison is constant-time; candidates are
// always macSize bytes long.
func (k keys) match(cands [][]byte, parts ...[]byte) bool {
	return k.matchHash(sha256.New, cands, parts...)
}

// matchHash is match with the HMAC's hash function h, such as sha1.New.
// Candidates have that hash's size.
func (k keys) matchHash(h func() hash.Hash, cands [][]byte, parts ...[]byte) bool {
	var sum [sha512.Size]byte
	for _, key := range k {
		m := hmac.New(h, key)
		for _, p := range parts {
			m.Write(p)
		}
		mac := m.Sum(sum[:0])
		for _, c := range cands {
			if hmac.Equal(c, mac) {
				return true
			}
		}
	}
	return false
}

// toleranceOrDefault returns d, or DefaultTolerance if d <= 0.
func toleranceOrDefault(d time.Duration) time.Duration {
	if d <= 0 {
		return DefaultTolerance
	}
	return d
}

// header returns the first value of h[name] with surrounding white space
// removed. An absent or empty value is ErrMissing; one longer than
// MaxHeaderBytes is ErrMalformed.
func header(h http.Header, name string) (string, error) {
	v := strings.TrimSpace(h.Get(name))
	if v == "" {
		return "", fmt.Errorf("%w: %s is absent or empty", ErrMissing, name)
	}
	if len(v) > MaxHeaderBytes {
		return "", fmt.Errorf("%w: %s is longer than %d bytes", ErrMalformed, name, MaxHeaderBytes)
	}
	return v, nil
}

// encoding is how a MAC is written in a header.
type encoding int

const (
	encHex encoding = iota
	encBase64
)

func (e encoding) String() string {
	if e == encBase64 {
		return "base64"
	}
	return "hex"
}

// decodeMAC decodes s as a 32-byte MAC. It takes 64 hex digits of either
// case, or 44 characters of padded standard base64 with zero padding bits.
// Anything else, including embedded white space, returns nil.
func decodeMAC(enc encoding, s string) []byte { return decodeMACSize(enc, s, macSize) }

// decodeMACSize is decodeMAC for a MAC of size bytes.
func decodeMACSize(enc encoding, s string, size int) []byte {
	switch enc {
	case encHex:
		if len(s) != hex.EncodedLen(size) {
			return nil
		}
		b, err := hex.DecodeString(s)
		if err != nil {
			return nil
		}
		return b
	default:
		if len(s) != base64.StdEncoding.EncodedLen(size) {
			return nil
		}
		b, err := base64.StdEncoding.Strict().DecodeString(s)
		if err != nil || len(b) != size {
			return nil
		}
		return b
	}
}

// ParseUnixTimestamp parses a signature timestamp: Unix seconds written as
// 1 to 18 ASCII decimal digits. It refuses a sign, white space and leading
// zeros, but allows "0" itself. Since only this canonical form is accepted,
// the signed string is exactly strconv.FormatInt of the result. Any other
// input returns an error wrapping [ErrMalformed].
func ParseUnixTimestamp(s string) (int64, error) {
	if len(s) == 0 || len(s) > 18 || (len(s) > 1 && s[0] == '0') {
		return 0, fmt.Errorf("%w: timestamp must be Unix seconds", ErrMalformed)
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%w: timestamp must be Unix seconds", ErrMalformed)
		}
		n = n*10 + int64(c-'0')
	}
	return n, nil
}

// checkTimestamp returns an error wrapping ErrTimestamp unless ts is at most
// tol before or after now, in whole seconds. It cannot overflow.
func checkTimestamp(name string, ts int64, now time.Time, tol time.Duration) error {
	n := now.Unix()
	limit := uint64(tol / time.Second)
	if ts <= n {
		if age := uint64(n) - uint64(ts); age > limit {
			return fmt.Errorf("%w: %s is %d s in the past; at most %d s allowed", ErrTimestamp, name, age, limit)
		}
		return nil
	}
	if ahead := uint64(ts) - uint64(n); ahead > limit {
		return fmt.Errorf("%w: %s is %d s in the future; at most %d s allowed", ErrTimestamp, name, ahead, limit)
	}
	return nil
}

func mismatch(name string) error {
	return fmt.Errorf("%w: no signature in %s matches the body", ErrMismatch, name)
}
