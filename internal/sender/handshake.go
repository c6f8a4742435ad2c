package sender

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/jsonptr"
)

// HandshakeReply is the answer to a provider's handshake request, which
// is sent instead of recording a delivery.
type HandshakeReply struct {
	Status      int
	ContentType string
	Body        []byte
}

// handshake is a compiled handshake kind, with the slots of the JSON values
// it reads.
type handshake struct {
	kind string
	// typeSlot holds what marks the request as the handshake; valueSlot
	// what the answer echoes (-1: none).
	typeSlot, valueSlot int
}

// planHandshake compiles the handshake kind, adding the pointers it reads
// to ptrs.
func planHandshake(kind string, ptrs *[]jsonptr.Pointer) (handshake, error) {
	hs := handshake{kind: kind, typeSlot: -1, valueSlot: -1}
	switch kind {
	case config.HandshakeSlackURLVerification:
		hs.typeSlot = slotOf(ptrs, jsonptr.Pointer{"type"})
		hs.valueSlot = slotOf(ptrs, jsonptr.Pointer{"challenge"})
	case config.HandshakeZoomURLValidation:
		hs.typeSlot = slotOf(ptrs, jsonptr.Pointer{"event"})
		hs.valueSlot = slotOf(ptrs, jsonptr.Pointer{"payload", "plainToken"})
	case config.HandshakeTwitchVerification:
		hs.valueSlot = slotOf(ptrs, jsonptr.Pointer{"challenge"})
	case config.HandshakeDiscordPing:
		hs.typeSlot = slotOf(ptrs, jsonptr.Pointer{"type"})
	case config.HandshakeMetaSubscribe:
	default:
		return hs, fmt.Errorf("preset: unknown handshake %q", kind)
	}
	return hs, nil
}

// Handshake returns the answer to a handshake of the sender's provider,
// which is sent instead of recording anything. It answers Slack's
// url_verification, Zoom's endpoint.url_validation, Twitch's
// webhook_callback_verification and Discord's PING. It returns false for
// any other request. It does not check the signature: call it after. signed
// is the body as received; in is what [Sender.Inspect] read of the body.
func (s *Sender) Handshake(r *http.Request, signed []byte, in *Inspection, now time.Time) (HandshakeReply, bool) {
	for _, hs := range s.plan.handshakes {
		typ, val := in.value(hs.typeSlot), in.value(hs.valueSlot)
		switch hs.kind {
		case config.HandshakeSlackURLVerification:
			if typ.Kind != jsonptr.KindString || typ.Str != "url_verification" || (val.Found && val.Kind != jsonptr.KindString) {
				continue
			}
			return jsonReply(map[string]string{"challenge": val.Str}), true
		case config.HandshakeZoomURLValidation:
			if typ.Kind != jsonptr.KindString || typ.Str != "endpoint.url_validation" || val.Kind != jsonptr.KindString {
				continue
			}
			key := s.signingKey(r, signed, now)
			if key == nil {
				continue
			}
			m := hmac.New(sha256.New, key)
			m.Write([]byte(val.Str))
			return jsonReply(map[string]string{"plainToken": val.Str, "encryptedToken": hex.EncodeToString(m.Sum(nil))}), true
		case config.HandshakeTwitchVerification:
			if r.Header.Get("Twitch-Eventsub-Message-Type") != "webhook_callback_verification" || val.Kind != jsonptr.KindString {
				continue
			}
			return HandshakeReply{Status: http.StatusOK, ContentType: "text/plain; charset=utf-8", Body: []byte(val.Str)}, true
		case config.HandshakeDiscordPing:
			if typ.Kind != jsonptr.KindNumber || typ.Str != "1" {
				continue
			}
			return HandshakeReply{Status: http.StatusOK, ContentType: "application/json", Body: []byte(`{"type":1}`)}, true
		}
	}
	return HandshakeReply{}, false
}

// signingKey returns the key of the first of the sender's secrets under
// which the request's signature of the body signed is valid; nil when there
// is none.
func (s *Sender) signingKey(r *http.Request, signed []byte, now time.Time) []byte {
	for i, v := range s.keyed {
		if v.Verify(r.Header, signed, now) == nil {
			return s.keys[i]
		}
	}
	return nil
}

func jsonReply(v map[string]string) HandshakeReply {
	b, _ := json.Marshal(v) // a map of strings always encodes
	return HandshakeReply{Status: http.StatusOK, ContentType: "application/json", Body: append(b, '\n')}
}

// Errors of CheckSubscription.
var (
	// ErrNoSubscriptionCheck: the sender's provider sends no GET
	// subscription check (405).
	ErrNoSubscriptionCheck = errors.New("the sender answers no subscription check")
	// ErrSubscriptionRequest: hub.mode is not subscribe, or hub.challenge
	// is missing or too long (400).
	ErrSubscriptionRequest = errors.New("not a subscription check")
	// ErrVerifyToken: hub.verify_token is not the sender's verify_token,
	// or the sender has none (403).
	ErrVerifyToken = errors.New("the verify token does not match")
)

// MaxChallengeBytes bounds the hub.challenge echoed by CheckSubscription.
const MaxChallengeBytes = 1024

// CheckSubscription answers Meta's subscription check
// (https://developers.facebook.com/docs/graph-api/webhooks/getting-started#verification-requests),
// GET /webhooks/{sender}?hub.mode=subscribe&hub.challenge=...&hub.verify_token=...:
// it returns hub.challenge, to be sent back as the body of a 200, when
// hub.verify_token equals the sender's verify_token (compared in constant
// time). Otherwise ErrNoSubscriptionCheck, ErrSubscriptionRequest or
// ErrVerifyToken. Nothing is recorded either way.
func (s *Sender) CheckSubscription(q url.Values) (string, error) {
	if !hasHandshake(s.Handshakes(), config.HandshakeMetaSubscribe) {
		return "", ErrNoSubscriptionCheck
	}
	challenge := q.Get("hub.challenge")
	if q.Get("hub.mode") != "subscribe" || challenge == "" || len(challenge) > MaxChallengeBytes {
		return "", ErrSubscriptionRequest
	}
	got, want := sha256.Sum256([]byte(q.Get("hub.verify_token"))), sha256.Sum256([]byte(s.VerifyToken))
	if s.VerifyToken == "" || !hmac.Equal(got[:], want[:]) {
		return "", ErrVerifyToken
	}
	return challenge, nil
}

func hasHandshake(kinds []string, kind string) bool {
	for _, k := range kinds {
		if k == kind {
			return true
		}
	}
	return false
}
