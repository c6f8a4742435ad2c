package signature

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// StandardSecretPrefix starts every Standard Webhooks symmetric secret.
const StandardSecretPrefix = "whsec_"

// StandardWebhooks returns the Verifier for Standard Webhooks
// (https://www.standardwebhooks.com/), symmetric (HMAC) signatures only:
//
//	webhook-id: <msg id>
//	webhook-timestamp: <unix seconds>
//	webhook-signature: v1,<base64 HMAC-SHA256(key, "<id>.<ts>.<body>")> [v1,<...> ...]
//
// secrets are the raw key bytes, already decoded with DecodeStandardSecret.
// The signature header is parsed with ParseStandardSignatures: any one v1
// signature valid under any key passes; other versions (such as the
// asymmetric v1a) are ignored. All three headers are required (ErrMissing).
// A webhook-id containing "." is ErrMalformed: the specification forbids
// it, because it would make "<id>.<ts>.<body>" ambiguous. The timestamp
// must parse with ParseUnixTimestamp and be within tolerance of now, in the
// past or the future; tolerance <= 0 means DefaultTolerance (300 s).
// secrets are copied; empty ones are ignored, and with no usable secret
// every well-formed, timely request fails with ErrMismatch.
func StandardWebhooks(secrets [][]byte, tolerance time.Duration) Verifier {
	return &standard{keys: newKeys(secrets), tol: toleranceOrDefault(tolerance)}
}

type standard struct {
	keys keys
	tol  time.Duration
}

func (v *standard) Verify(h http.Header, body []byte, now time.Time) error {
	id, err := header(h, HeaderWebhookID)
	if err != nil {
		return err
	}
	tsText, err := header(h, HeaderWebhookTimestamp)
	if err != nil {
		return err
	}
	sig, err := header(h, HeaderWebhookSignature)
	if err != nil {
		return err
	}
	if strings.Contains(id, ".") {
		return fmt.Errorf("%w: %s must not contain \".\"", ErrMalformed, HeaderWebhookID)
	}
	ts, err := ParseUnixTimestamp(tsText)
	if err != nil {
		return fmt.Errorf("%w: %s must be Unix seconds", ErrMalformed, HeaderWebhookTimestamp)
	}
	sigs := ParseStandardSignatures(sig)
	if len(sigs) == 0 {
		return fmt.Errorf("%w: %s must hold at most %d v1,<base64> signatures, at least one of them valid base64 of 32 bytes",
			ErrMalformed, HeaderWebhookSignature, MaxSignatures)
	}
	if err := checkTimestamp(HeaderWebhookTimestamp, ts, now, v.tol); err != nil {
		return err
	}
	if !v.keys.match(sigs, []byte(id), []byte("."), []byte(tsText), []byte("."), body) {
		return mismatch(HeaderWebhookSignature)
	}
	return nil
}

// ParseStandardSignatures parses a webhook-signature value: a list of
// "<version>,<signature>" entries separated by white space. It returns the
// 32-byte MACs of the "v1" entries whose signature is 44 characters of
// padded standard base64, in header order. Entries of other versions (v1a,
// v2, ...) and v1 entries that do not decode are skipped.
//
// It returns nil if s is longer than MaxHeaderBytes, if s has more than
// MaxSignatures v1 entries (valid or not), or if no v1 entry decodes.
func ParseStandardSignatures(s string) [][]byte {
	if len(s) > MaxHeaderBytes {
		return nil
	}
	var out [][]byte
	n := 0
	for entry := range strings.FieldsSeq(s) {
		version, sig, ok := strings.Cut(entry, ",")
		if !ok || version != "v1" {
			continue
		}
		if n++; n > MaxSignatures {
			return nil
		}
		if b := decodeMAC(encBase64, sig); b != nil {
			out = append(out, b)
		}
	}
	return out
}

// SignStandard returns the Standard Webhooks signature of body, "v1,"
// followed by the padded standard base64 of
// HMAC-SHA256(key, "<id>.<unix seconds of ts>.<body>"). It is what
// hookgate sends in webhook-signature when forwarding, with webhook-id id
// and webhook-timestamp strconv.FormatInt(ts.Unix(), 10). key is the raw
// key (see DecodeStandardSecret). It never fails; an empty key yields a
// signature anyone could compute, and StandardWebhooks never accepts it.
func SignStandard(key []byte, id string, ts time.Time, body []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id))
	m.Write([]byte("."))
	m.Write(strconv.AppendInt(nil, ts.Unix(), 10))
	m.Write([]byte("."))
	m.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// Errors returned by DecodeStandardSecret. Neither contains the secret.
var (
	ErrSecretPrefix = errors.New("signature: a Standard Webhooks secret must start with " + StandardSecretPrefix)
	ErrSecretBase64 = errors.New("signature: a Standard Webhooks secret must be " + StandardSecretPrefix + " followed by non-empty standard base64")
)

// DecodeStandardSecret turns a Standard Webhooks secret, "whsec_" followed
// by the canonical standard base64 (padded or not, unused bits zero) of the
// key, into the key bytes used by StandardWebhooks and SignStandard.
//
// The prefix is required: a secret without it returns ErrSecretPrefix
// (the reference libraries also accept a bare base64 key; hookgate does
// not, so that a Stripe-style or raw secret given to the wrong preset is
// caught at start-up). Invalid base64, a line break anywhere or an empty
// key returns ErrSecretBase64. The key length is not otherwise checked (the
// specification recommends 24 to 64 bytes). The errors are these two fixed
// values, so they never contain s.
func DecodeStandardSecret(s string) ([]byte, error) {
	b64, ok := strings.CutPrefix(s, StandardSecretPrefix)
	if !ok {
		return nil, ErrSecretPrefix
	}
	// The base64 decoder skips CR and LF; a secret containing them (say, a
	// line ending carried over from a file) is not canonical, so refuse it
	// rather than silently use a key the operator did not write.
	if strings.ContainsAny(b64, "\r\n") {
		return nil, ErrSecretBase64
	}
	var key []byte
	var err error
	if strings.HasSuffix(b64, "=") {
		key, err = base64.StdEncoding.Strict().DecodeString(b64)
	} else {
		key, err = base64.RawStdEncoding.Strict().DecodeString(b64)
	}
	if err != nil || len(key) == 0 {
		return nil, ErrSecretBase64
	}
	return key, nil
}
