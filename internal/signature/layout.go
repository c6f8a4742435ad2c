package signature

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// More scheme names: the shapes that the providers' presets share. The
// preset row's [Params] configure each.
const (
	// SchemeHMACSHA1 is SchemeHMAC with HMAC-SHA1, as Intercom and Vercel
	// use.
	SchemeHMACSHA1 = "hmac-sha1"
	// SchemeToken is a header that holds the secret itself, as GitLab and
	// Telegram send. See [Token].
	SchemeToken = "token"
	// SchemeList is one header of key=value elements: an optional
	// timestamp and hex HMAC-SHA256 signatures. Mux, Calendly, Paddle and
	// PagerDuty use it. See [List].
	SchemeList = "hmac-sha256-list"
	// SchemeTimestampHeader is a base64 HMAC-SHA256 of
	// "<timestamp><body>", with the timestamp in its own header. Zendesk
	// uses it. See [TimestampHeader].
	SchemeTimestampHeader = "hmac-sha256-timestamp-header"
)

// Layout is the shape of a signature header, for [SchemeList] and
// [SchemeTimestampHeader].
type Layout struct {
	// Separator separates the elements of a SchemeList header, such as
	// ",".
	Separator string
	// TimestampKey is the key of the signed timestamp element of a
	// SchemeList header, such as "t". It is empty when none is signed.
	TimestampKey string
	// SignatureKey is the key of the signature elements, such as "v1".
	SignatureKey string
	// Joiner is written between the timestamp and the body in what is
	// signed, such as ".".
	Joiner string
	// TimestampHeader is the header that holds an RFC 3339 timestamp, for
	// SchemeTimestampHeader.
	TimestampHeader string
}

// Token returns the Verifier of a provider that sends the shared secret
// itself in header name, as GitLab and Telegram do. The header's value must
// equal one of the secrets. Both are hashed with SHA-256 before a
// constant-time comparison, so timing reveals neither the secret's length
// nor its content. Nothing binds the token to the body; only TLS protects
// the body.
func Token(name string, secrets [][]byte) Verifier {
	t := &token{name: http.CanonicalHeaderKey(name)}
	for _, s := range newKeys(secrets) {
		t.sums = append(t.sums, sha256.Sum256(s))
	}
	return t
}

type token struct {
	name string
	sums [][sha256.Size]byte
}

func (v *token) Verify(h http.Header, _ []byte, _ time.Time) error {
	s, err := header(h, v.name)
	if err != nil {
		return err
	}
	got := sha256.Sum256([]byte(s))
	ok := false
	for i := range v.sums {
		if hmac.Equal(got[:], v.sums[i][:]) {
			ok = true
		}
	}
	if !ok {
		return fmt.Errorf("%w: %s does not hold a configured token", ErrMismatch, v.name)
	}
	return nil
}

// List returns the Verifier of a header of key=value elements separated
// by l.Separator, ignoring white space around them:
//
//	<Header>: <TimestampKey>=<unix seconds><Separator><SignatureKey>=<hex HMAC-SHA256(secret, "<ts><Joiner><body>")>[<Separator><SignatureKey>=...]
//
// With no TimestampKey, only the body is signed, and there is no timestamp
// check. Any one signature valid under any secret passes, since providers
// send several while they rotate a secret. Other keys are ignored. The
// timestamp must be within tolerance of now.
func List(name string, l Layout, secrets [][]byte, tolerance time.Duration) Verifier {
	return &list{name: http.CanonicalHeaderKey(name), l: l, keys: newKeys(secrets), tol: toleranceOrDefault(tolerance)}
}

type list struct {
	name string
	l    Layout
	keys keys
	tol  time.Duration
}

func (v *list) Verify(h http.Header, body []byte, now time.Time) error {
	s, err := header(h, v.name)
	if err != nil {
		return err
	}
	ts, sigs, err := ParseSignatureList(s, v.l)
	if err != nil {
		return fmt.Errorf("%w: %s must be %s", ErrMalformed, v.name, v.describe())
	}
	if v.l.TimestampKey == "" {
		if !v.keys.match(sigs, body) {
			return mismatch(v.name)
		}
		return nil
	}
	if err := checkTimestamp(v.name+" "+v.l.TimestampKey, ts, now, v.tol); err != nil {
		return err
	}
	if !v.keys.match(sigs, fmt.Appendf(nil, "%d%s", ts, v.l.Joiner), body) {
		return mismatch(v.name)
	}
	return nil
}

func (v *list) describe() string {
	sig := v.l.SignatureKey + "=<64 hex digits>"
	if v.l.TimestampKey == "" {
		return sig + "[" + v.l.Separator + sig + "...]"
	}
	return v.l.TimestampKey + "=<unix seconds>" + v.l.Separator + sig
}

// ParseSignatureList parses a SchemeList header value laid out as l. It
// returns the timestamp, when l.TimestampKey is set, and the 32-byte MACs
// of the signature elements written as 64 hex digits, in order. Other
// elements are skipped. It returns an error wrapping [ErrMalformed] if s is
// too long, or the timestamp is missing, repeated or invalid. It does so
// too for more than [MaxSignatures] signatures, or none usable.
func ParseSignatureList(s string, l Layout) (ts int64, sigs [][]byte, err error) {
	if len(s) > MaxHeaderBytes {
		return 0, nil, fmt.Errorf("%w: longer than %d bytes", ErrMalformed, MaxHeaderBytes)
	}
	if l.Separator == "" || l.SignatureKey == "" {
		return 0, nil, fmt.Errorf("%w: no separator or signature key", ErrMalformed)
	}
	haveT := false
	n := 0
	for elem := range strings.SplitSeq(s, l.Separator) {
		key, val, ok := strings.Cut(strings.TrimSpace(elem), "=")
		if !ok {
			continue
		}
		switch {
		case l.TimestampKey != "" && key == l.TimestampKey:
			if haveT {
				return 0, nil, fmt.Errorf("%w: more than one %s", ErrMalformed, key)
			}
			haveT = true
			if ts, err = ParseUnixTimestamp(val); err != nil {
				return 0, nil, err
			}
		case key == l.SignatureKey:
			if n++; n > MaxSignatures {
				return 0, nil, fmt.Errorf("%w: more than %d signatures", ErrMalformed, MaxSignatures)
			}
			if b := decodeMAC(encHex, val); b != nil {
				sigs = append(sigs, b)
			}
		}
	}
	if l.TimestampKey != "" && !haveT {
		return 0, nil, fmt.Errorf("%w: no %s", ErrMalformed, l.TimestampKey)
	}
	if len(sigs) == 0 {
		return 0, nil, fmt.Errorf("%w: no %s signature of 64 hex digits", ErrMalformed, l.SignatureKey)
	}
	return ts, sigs, nil
}

// TimestampHeader returns the Verifier of a base64 HMAC-SHA256 of
// "<timestamp><body>" in header name. This is Zendesk's scheme. The
// timestamp is the value of header l.TimestampHeader as sent. It must be an
// RFC 3339 time within tolerance of now.
func TimestampHeader(name string, l Layout, secrets [][]byte, tolerance time.Duration) Verifier {
	return &tsHeader{name: http.CanonicalHeaderKey(name), tsName: http.CanonicalHeaderKey(l.TimestampHeader),
		keys: newKeys(secrets), tol: toleranceOrDefault(tolerance)}
}

type tsHeader struct {
	name, tsName string
	keys         keys
	tol          time.Duration
}

func (v *tsHeader) Verify(h http.Header, body []byte, now time.Time) error {
	sig, err := header(h, v.name)
	if err != nil {
		return err
	}
	tsText, err := header(h, v.tsName)
	if err != nil {
		return err
	}
	ts, err := time.Parse(time.RFC3339, tsText)
	if err != nil {
		return fmt.Errorf("%w: %s must be an RFC 3339 time", ErrMalformed, v.tsName)
	}
	mac := decodeMAC(encBase64, sig)
	if mac == nil {
		return fmt.Errorf("%w: %s must be %s", ErrMalformed, v.name, describe(encBase64))
	}
	if err := checkTimestamp(v.tsName, ts.Unix(), now, v.tol); err != nil {
		return err
	}
	if !v.keys.match([][]byte{mac}, []byte(tsText), body) {
		return mismatch(v.name)
	}
	return nil
}

// SchemeECDSA is SendGrid's Event Webhook scheme: an ECDSA P-256 signature
// over SHA-256 of "<timestamp><body>", in base64 ASN.1 DER. The Unix
// timestamp is in l.TimestampHeader. The "secrets" are the provider's
// public keys, in base64 PKIX DER as the provider shows them.
const SchemeECDSA = "ecdsa-p256"

// ParseECDSAPublicKey parses an ECDSA P-256 public key in padded standard
// base64 of PKIX DER. Its error never contains the input.
func ParseECDSAPublicKey(s string) (*ecdsa.PublicKey, error) {
	der, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return nil, errors.New("not base64")
	}
	k, err := x509.ParsePKIXPublicKey(der)
	if err != nil {
		return nil, errors.New("not a DER (PKIX) public key")
	}
	pub, ok := k.(*ecdsa.PublicKey)
	if !ok || pub.Curve != elliptic.P256() {
		return nil, errors.New("not an ECDSA P-256 public key")
	}
	return pub, nil
}

// ECDSA returns the Verifier of [SchemeECDSA] with the public keys pubs. A
// signature valid under any of them passes, so a key can be rotated. The
// timestamp must be within tolerance of now.
func ECDSA(name string, l Layout, pubs []*ecdsa.PublicKey, tolerance time.Duration) Verifier {
	return &ecdsaV{name: http.CanonicalHeaderKey(name), tsName: http.CanonicalHeaderKey(l.TimestampHeader),
		pubs: pubs, tol: toleranceOrDefault(tolerance)}
}

type ecdsaV struct {
	name, tsName string
	pubs         []*ecdsa.PublicKey
	tol          time.Duration
}

// maxECDSASignature bounds a DER ECDSA P-256 signature, which is at most
// 72 bytes.
const maxECDSASignature = 80

func (v *ecdsaV) Verify(h http.Header, body []byte, now time.Time) error {
	sigText, err := header(h, v.name)
	if err != nil {
		return err
	}
	tsText, err := header(h, v.tsName)
	if err != nil {
		return err
	}
	ts, err := ParseUnixTimestamp(tsText)
	if err != nil {
		return fmt.Errorf("%w: %s must be Unix seconds", ErrMalformed, v.tsName)
	}
	sig, err := base64.StdEncoding.DecodeString(sigText)
	if err != nil || len(sig) == 0 || len(sig) > maxECDSASignature {
		return fmt.Errorf("%w: %s must be a base64 DER ECDSA signature", ErrMalformed, v.name)
	}
	if err := checkTimestamp(v.tsName, ts, now, v.tol); err != nil {
		return err
	}
	d := sha256.New()
	d.Write([]byte(tsText))
	d.Write(body)
	sum := d.Sum(nil)
	for _, pub := range v.pubs {
		if ecdsa.VerifyASN1(pub, sum, sig) {
			return nil
		}
	}
	return fmt.Errorf("%w: the signature in %s is not valid for the body under any configured public key", ErrMismatch, v.name)
}
