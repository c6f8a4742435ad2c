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

// StandardWebhooks returns the Verifier for the symmetric signatures of
// Standard Webhooks, https://www.standardwebhooks.com/:
//
//	webhook-id: <msg id>
//	webhook-timestamp: <unix seconds>
//	webhook-signature: v1,<base64 HMAC-SHA256(key, "<id>.<ts>.<body>")> [v1,<...> ...]
//
// secrets are the raw key bytes, decoded with [DecodeStandardSecret]. Any
// one v1 signature valid under any key passes. Other versions, such as the
// asymmetric v1a, are ignored. All three headers are required. A
// webhook-id that contains "." is [ErrMalformed], because it would make
// "<id>.<ts>.<body>" ambiguous. The timestamp must be within tolerance of
// now; zero or less means [DefaultTolerance]. Empty secrets are ignored.
// Without a usable secret, every well-formed request fails with
// [ErrMismatch].
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
// padded standard base64, in header order. Entries of other versions, and
// v1 entries that do not decode, are skipped.
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

// SignStandard returns the Standard Webhooks signature of body: "v1,"
// and the padded standard base64 of HMAC-SHA256(key, "<id>.<ts>.<body>"),
// with ts in Unix seconds. hookgate sends it in webhook-signature when it
// forwards. key is the raw key. An empty key yields a signature that
// anyone could compute, and [StandardWebhooks] never accepts it.
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

// DecodeStandardSecret turns a Standard Webhooks secret into its key
// bytes. The secret is "whsec_" and the canonical standard base64 of the
// key, padded or not.
//
// The prefix is required, or it returns [ErrSecretPrefix]. The reference
// libraries also accept a bare base64 key. hookgate does not, so a raw
// secret given to the wrong preset is caught at start-up. Invalid base64,
// a line break or an empty key returns [ErrSecretBase64]. The key length
// is not checked otherwise. The errors are fixed values, so they never
// contain s.
func DecodeStandardSecret(s string) ([]byte, error) {
	b64, ok := strings.CutPrefix(s, StandardSecretPrefix)
	if !ok {
		return nil, ErrSecretPrefix
	}
	// The base64 decoder skips CR and LF. A secret with them, such as a
	// line ending from a file, is not canonical. Refuse it rather than use
	// a key that the operator did not write.
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
