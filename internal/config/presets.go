package config

import (
	"errors"
	"fmt"
	"time"

	"github.com/hookgate/hookgate/internal/signature"
)

// preset is what a sender preset sets: where the delivery ID is and which
// signature scheme is checked.
type preset struct {
	deliveryID DeliveryID
	scheme     string
	// eventType is where the event type is. Slack's is left empty here:
	// it is /event/type for an event_callback and /type otherwise
	// (Sender.EventTypeOf).
	eventType EventType
}

// Signature schemes besides the presets' own names.
const (
	SchemeNone = "none"
	SchemeHMAC = "hmac-sha256"
)

// presets are the sender presets of hookgate.yaml.
var presets = map[string]preset{
	"github":            {DeliveryID{Header: "X-GitHub-Delivery"}, "github", EventType{Header: "X-GitHub-Event"}},
	"stripe":            {DeliveryID{JSONPointer: "/id"}, "stripe", EventType{JSONPointer: "/type"}},
	"shopify":           {DeliveryID{Header: "X-Shopify-Event-Id"}, "shopify", EventType{Header: "X-Shopify-Topic"}},
	"slack":             {DeliveryID{JSONPointer: "/event_id"}, "slack", EventType{}},
	"standard-webhooks": {DeliveryID{Header: "webhook-id"}, "standard-webhooks", EventType{JSONPointer: "/type"}},
	"generic":           {DeliveryID{}, SchemeNone, EventType{}},
}

// SignatureScheme returns the scheme the sender's requests are checked with:
// its signature block's, or else its preset's ("none" for generic).
func (s *Sender) SignatureScheme() string {
	if s.Signature.Scheme != "" {
		return s.Signature.Scheme
	}
	return presets[s.Preset].scheme
}

// namedSecret is a secret and the field it was given in.
type namedSecret struct {
	field, value string
}

// secrets returns every secret the sender lists, in order, with its field.
func (s *Sender) secrets() []namedSecret {
	var out []namedSecret
	if s.Secret != "" {
		out = append(out, namedSecret{"secret", s.Secret})
	}
	if s.Signature.Secret != "" {
		out = append(out, namedSecret{"signature.secret", s.Signature.Secret})
	}
	for i, v := range s.Secrets {
		out = append(out, namedSecret{fmt.Sprintf("secrets[%d]", i), v})
	}
	return out
}

// resolve builds s.Verifier and decodes the forward targets' signing
// secrets. Its errors start with the field at fault (relative to the sender)
// and never contain a secret.
func resolve(s *Sender) error {
	if err := resolveIngest(s); err != nil {
		return err
	}
	if p := s.DeliveryID.JSONPointer; p != "" {
		ptr, err := ParsePointer(p) // validated already; parsed once here, not per request
		if err != nil {
			return fmt.Errorf("delivery_id.json_pointer: %w", err)
		}
		s.DeliveryIDPointer = ptr
	}
	for i := range s.Forward {
		t := &s.Forward[i]
		if t.SigningSecret == "" {
			continue
		}
		k, err := signature.DecodeStandardSecret(t.SigningSecret)
		if err != nil {
			return fmt.Errorf("forward[%d].signing_secret: is not a Standard Webhooks secret (whsec_ followed by base64)", i)
		}
		t.SigningKey = k
	}
	scheme := s.SignatureScheme()
	secrets := s.secrets()
	if scheme == SchemeNone {
		if len(secrets) > 0 {
			return errors.New("secret: a secret is set but no signature is checked: set signature.scheme (e.g. hmac-sha256) or remove the secret")
		}
		return nil
	}
	if len(secrets) == 0 {
		return fmt.Errorf("secret: signature scheme %s needs a secret: set secret or secrets", scheme)
	}
	if scheme != SchemeHMAC {
		for field, v := range map[string]string{"header": s.Signature.Header, "encoding": s.Signature.Encoding, "prefix": s.Signature.Prefix} {
			if v != "" {
				return fmt.Errorf("signature.%s: is only used with scheme hmac-sha256, not %s", field, scheme)
			}
		}
	}
	keys := make([][]byte, 0, len(secrets))
	for _, sec := range secrets {
		if scheme != "standard-webhooks" {
			keys = append(keys, []byte(sec.value))
			continue
		}
		k, err := signature.DecodeStandardSecret(sec.value)
		if err != nil {
			return fmt.Errorf("%s: is not a Standard Webhooks secret (whsec_ followed by base64)", sec.field)
		}
		keys = append(keys, k)
	}
	tol := time.Duration(s.Tolerance)
	switch scheme {
	case "github":
		s.Verifier = signature.GitHub(keys)
	case "stripe":
		s.Verifier = signature.Stripe(keys, tol)
	case "shopify":
		s.Verifier = signature.Shopify(keys)
	case "slack":
		s.Verifier = signature.Slack(keys, tol)
	case "standard-webhooks":
		s.Verifier = signature.StandardWebhooks(keys, tol)
	case SchemeHMAC:
		hc := signature.HMACConfig{Header: s.Signature.Header, Encoding: s.Signature.Encoding, Prefix: s.Signature.Prefix}
		if hc.Header == "" {
			return errors.New("signature.header: is required for scheme hmac-sha256")
		}
		if err := hc.Validate(); err != nil {
			return fmt.Errorf("signature: %w", err)
		}
		s.Verifier = signature.HMAC(hc, keys)
	default:
		return fmt.Errorf("signature.scheme: unknown scheme %q", scheme)
	}
	return nil
}
