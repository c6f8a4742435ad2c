package signature

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/hookgate/hookgate/internal/jsonptr"
)

// Scheme names of Zoom's, Twitch's, Discord's, Mailgun's and Airtable's
// verifiers.
const (
	// SchemeZoom is x-zm-signature with x-zm-request-timestamp. See
	// [Zoom].
	SchemeZoom = "zoom"
	// SchemeTwitch is Twitch-Eventsub-Message-Signature. See [Twitch].
	SchemeTwitch = "twitch"
	// SchemeEd25519 is Discord's X-Signature-Ed25519 with
	// X-Signature-Timestamp. The "secrets" are hex Ed25519 public keys.
	// See [Ed25519].
	SchemeEd25519 = "ed25519"
	// SchemeMailgun is the signature object inside the body. See
	// [Mailgun].
	SchemeMailgun = "mailgun"
	// SchemeHMACBase64Key is SchemeHMAC keyed with the base64-decoded
	// secret, such as Airtable's macSecretBase64.
	SchemeHMACBase64Key = "hmac-sha256-base64-key"
)

// Header names of those verifiers, as net/http canonicalises them.
const (
	HeaderZoomSignature     = "X-Zm-Signature"
	HeaderZoomTimestamp     = "X-Zm-Request-Timestamp"
	HeaderTwitchID          = "Twitch-Eventsub-Message-Id"
	HeaderTwitchTimestamp   = "Twitch-Eventsub-Message-Timestamp"
	HeaderTwitchSignature   = "Twitch-Eventsub-Message-Signature"
	HeaderDiscordSignature  = "X-Signature-Ed25519"
	HeaderDiscordTimestamp  = "X-Signature-Timestamp"
	HeaderAirtableSignature = "X-Airtable-Content-Mac"
)

// Zoom returns the Verifier of Zoom's webhooks
// (https://developers.zoom.us/docs/api/webhooks/#verify-webhook-events):
//
//	x-zm-request-timestamp: <Unix time>
//	x-zm-signature: v0=<hex HMAC-SHA256(secret token, "v0:<timestamp>:<body>")>
//
// The timestamp is read as seconds, or as milliseconds when it has 13 or
// more digits; either way it must be within tolerance of now.
func Zoom(secrets [][]byte, tolerance time.Duration) Verifier {
	return &zoom{keys: newKeys(secrets), tol: toleranceOrDefault(tolerance)}
}

type zoom struct {
	keys keys
	tol  time.Duration
}

func (v *zoom) Verify(h http.Header, body []byte, now time.Time) error {
	sig, err := header(h, HeaderZoomSignature)
	if err != nil {
		return err
	}
	tsText, err := header(h, HeaderZoomTimestamp)
	if err != nil {
		return err
	}
	ts, err := ParseUnixTimestamp(tsText)
	if err != nil {
		return fmt.Errorf("%w: %s must be Unix time", ErrMalformed, HeaderZoomTimestamp)
	}
	if len(tsText) >= 13 {
		ts /= 1000
	}
	hexMAC, ok := strings.CutPrefix(sig, "v0=")
	mac := decodeMAC(encHex, hexMAC)
	if !ok || mac == nil {
		return fmt.Errorf("%w: %s must be v0=<64 hex digits>", ErrMalformed, HeaderZoomSignature)
	}
	if err := checkTimestamp(HeaderZoomTimestamp, ts, now, v.tol); err != nil {
		return err
	}
	if !v.keys.match([][]byte{mac}, []byte("v0:"), []byte(tsText), []byte(":"), body) {
		return mismatch(HeaderZoomSignature)
	}
	return nil
}

// Twitch returns the Verifier of Twitch EventSub's webhooks
// (https://dev.twitch.tv/docs/eventsub/handling-webhook-events/#verifying-the-event-message):
//
//	Twitch-Eventsub-Message-Id: <id>
//	Twitch-Eventsub-Message-Timestamp: <RFC 3339 time, nanoseconds>
//	Twitch-Eventsub-Message-Signature: sha256=<hex HMAC-SHA256(secret, <id><timestamp><body>)>
//
// The timestamp is signed as sent. It must be within tolerance of now.
// Twitch asks to refuse messages older than 10 minutes.
func Twitch(secrets [][]byte, tolerance time.Duration) Verifier {
	return &twitch{keys: newKeys(secrets), tol: toleranceOrDefault(tolerance)}
}

type twitch struct {
	keys keys
	tol  time.Duration
}

func (v *twitch) Verify(h http.Header, body []byte, now time.Time) error {
	sig, err := header(h, HeaderTwitchSignature)
	if err != nil {
		return err
	}
	id, err := header(h, HeaderTwitchID)
	if err != nil {
		return err
	}
	tsText, err := header(h, HeaderTwitchTimestamp)
	if err != nil {
		return err
	}
	ts, err := time.Parse(time.RFC3339Nano, tsText)
	if err != nil {
		return fmt.Errorf("%w: %s must be an RFC 3339 time", ErrMalformed, HeaderTwitchTimestamp)
	}
	hexMAC, ok := strings.CutPrefix(sig, "sha256=")
	mac := decodeMAC(encHex, hexMAC)
	if !ok || mac == nil {
		return fmt.Errorf("%w: %s must be sha256=<64 hex digits>", ErrMalformed, HeaderTwitchSignature)
	}
	if err := checkTimestamp(HeaderTwitchTimestamp, ts.Unix(), now, v.tol); err != nil {
		return err
	}
	if !v.keys.match([][]byte{mac}, []byte(id), []byte(tsText), body) {
		return mismatch(HeaderTwitchSignature)
	}
	return nil
}

// ParseEd25519PublicKey decodes an Ed25519 public key written as 64 hex
// digits, as Discord's developer portal shows it. Its error never contains
// the input.
func ParseEd25519PublicKey(s string) (ed25519.PublicKey, error) {
	b, err := hex.DecodeString(strings.TrimSpace(s))
	if err != nil || len(b) != ed25519.PublicKeySize {
		return nil, errors.New("not an Ed25519 public key of 64 hex digits")
	}
	return ed25519.PublicKey(b), nil
}

// Ed25519 returns the Verifier of Discord's interactions
// (https://discord.com/developers/docs/interactions/overview#setting-up-an-endpoint-validating-security-request-headers):
//
//	X-Signature-Timestamp: <Unix seconds>
//	X-Signature-Ed25519: <hex Ed25519 signature of <timestamp><body>>
//
// under any of the public keys pubs. The timestamp must be within
// tolerance of now.
func Ed25519(pubs []ed25519.PublicKey, tolerance time.Duration) Verifier {
	return &edV{pubs: pubs, tol: toleranceOrDefault(tolerance)}
}

type edV struct {
	pubs []ed25519.PublicKey
	tol  time.Duration
}

func (v *edV) Verify(h http.Header, body []byte, now time.Time) error {
	sigText, err := header(h, HeaderDiscordSignature)
	if err != nil {
		return err
	}
	tsText, err := header(h, HeaderDiscordTimestamp)
	if err != nil {
		return err
	}
	ts, err := ParseUnixTimestamp(tsText)
	if err != nil {
		return fmt.Errorf("%w: %s must be Unix seconds", ErrMalformed, HeaderDiscordTimestamp)
	}
	sig, err := hex.DecodeString(sigText)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return fmt.Errorf("%w: %s must be 128 hex digits", ErrMalformed, HeaderDiscordSignature)
	}
	if err := checkTimestamp(HeaderDiscordTimestamp, ts, now, v.tol); err != nil {
		return err
	}
	msg := make([]byte, 0, len(tsText)+len(body))
	msg = append(append(msg, tsText...), body...)
	for _, pub := range v.pubs {
		if ed25519.Verify(pub, msg, sig) {
			return nil
		}
	}
	return fmt.Errorf("%w: the signature in %s is not valid for the body under any configured public key", ErrMismatch, HeaderDiscordSignature)
}

// Mailgun returns the Verifier of Mailgun's webhooks
// (https://documentation.mailgun.com/docs/mailgun/user-manual/webhooks/securing-webhooks):
// the signature is inside the body. The JSON body's "signature" member
// holds the Unix timestamp, the token and the signature. The signature is
// the hex HMAC-SHA256 of <timestamp><token> under the webhook signing key.
// A subaccount's event also carries parent-signature, made with the
// primary account's key, and either passes. A form body with timestamp,
// token and signature fields is read too. The timestamp must be within
// tolerance of now.
//
// Only the timestamp and token are signed, not the event. So a genuine
// signature object fits any event. The verifier is a [NonceVerifier], and
// ingest accepts each token for one delivery only, as Mailgun's
// documentation suggests.
func Mailgun(secrets [][]byte, tolerance time.Duration) NonceVerifier {
	return &mailgun{keys: newKeys(secrets), tol: toleranceOrDefault(tolerance)}
}

// A NonceVerifier is a Verifier whose scheme signs a single-use token and a
// timestamp instead of the body, as Mailgun's does. A valid signature proves
// that the token came from the provider, not that the rest of the request
// did. So each token must be accepted for one delivery only, as long as
// Verify accepts it.
type NonceVerifier interface {
	Verifier
	// Nonce returns the token of a request that Verify accepted, and the
	// timestamp signed with it. ok is false when the request carries no
	// well-formed token and timestamp, which Verify refuses.
	Nonce(h http.Header, body []byte) (token string, signedAt time.Time, ok bool)
}

type mailgun struct {
	keys keys
	tol  time.Duration
}

var mailgunPointers = []jsonptr.Pointer{{"signature", "timestamp"}, {"signature", "token"}, {"signature", "signature"}, {"signature", "parent-signature"}}

// ParseMailgunSignature returns the timestamp, token and signature of a
// Mailgun webhook body, in JSON or as a form. Each must be present, a
// string, and no longer than [MaxHeaderBytes]; the timestamp may also be a
// number. Otherwise the error wraps [ErrMissing] or [ErrMalformed].
func ParseMailgunSignature(body []byte, contentType string) (ts, token, sig string, err error) {
	if isForm(contentType) {
		q, perr := url.ParseQuery(string(body))
		if perr != nil {
			return "", "", "", fmt.Errorf("%w: the body is not a valid form", ErrMalformed)
		}
		ts, token, sig = q.Get("timestamp"), q.Get("token"), q.Get("signature")
	} else {
		vals, jerr := jsonptr.Extract(body, mailgunPointers)
		if jerr != nil {
			return "", "", "", fmt.Errorf("%w: the body is not JSON with a signature object", ErrMalformed)
		}
		for i, dst := range []*string{&ts, &token, &sig} {
			v := vals[i]
			if v.Found && (v.Kind == jsonptr.KindString || (i == 0 && v.Kind == jsonptr.KindNumber)) {
				*dst = v.Str
			}
		}
	}
	for name, v := range map[string]string{"timestamp": ts, "token": token, "signature": sig} {
		if v == "" {
			return "", "", "", fmt.Errorf("%w: the body's signature.%s is absent or empty", ErrMissing, name)
		}
		if len(v) > MaxHeaderBytes {
			return "", "", "", fmt.Errorf("%w: the body's signature.%s is longer than %d bytes", ErrMalformed, name, MaxHeaderBytes)
		}
	}
	return ts, token, sig, nil
}

func (v *mailgun) Verify(h http.Header, body []byte, now time.Time) error {
	tsText, token, sigText, err := ParseMailgunSignature(body, h.Get("Content-Type"))
	if err != nil {
		return err
	}
	ts, err := ParseUnixTimestamp(tsText)
	if err != nil {
		return fmt.Errorf("%w: signature.timestamp must be Unix seconds", ErrMalformed)
	}
	mac := decodeMAC(encHex, sigText)
	if mac == nil {
		return fmt.Errorf("%w: signature.signature must be 64 hex digits", ErrMalformed)
	}
	if err := checkTimestamp("signature.timestamp", ts, now, v.tol); err != nil {
		return err
	}
	cands := [][]byte{mac}
	if parent := mailgunParentSignature(body, h.Get("Content-Type")); parent != nil {
		cands = append(cands, parent)
	}
	if !v.keys.match(cands, []byte(tsText), []byte(token)) {
		return fmt.Errorf("%w: signature.signature does not match signature.timestamp and signature.token", ErrMismatch)
	}
	return nil
}

func (v *mailgun) Nonce(h http.Header, body []byte) (string, time.Time, bool) {
	tsText, token, _, err := ParseMailgunSignature(body, h.Get("Content-Type"))
	if err != nil {
		return "", time.Time{}, false
	}
	ts, err := ParseUnixTimestamp(tsText)
	if err != nil {
		return "", time.Time{}, false
	}
	return token, time.Unix(ts, 0), true
}

// mailgunParentSignature returns the decoded signature.parent-signature of
// a subaccount's JSON body, or nil.
func mailgunParentSignature(body []byte, contentType string) []byte {
	if isForm(contentType) {
		return nil
	}
	vals, err := jsonptr.Extract(body, mailgunPointers[3:])
	if err != nil || vals[0].Kind != jsonptr.KindString {
		return nil
	}
	return decodeMAC(encHex, vals[0].Str)
}

// DecodeBase64Key decodes a secret given as standard base64, padded or not,
// such as Airtable's macSecretBase64. Its error never contains the input.
func DecodeBase64Key(s string) ([]byte, error) {
	s = strings.TrimRight(strings.TrimSpace(s), "=")
	b, err := base64.RawStdEncoding.DecodeString(s)
	if err != nil || len(b) == 0 {
		return nil, errors.New("not standard base64")
	}
	return b, nil
}

// decodeEd25519Key checks a Discord public key and returns its bytes.
func decodeEd25519Key(s string) ([]byte, error) {
	k, err := ParseEd25519PublicKey(s)
	return k, err
}
