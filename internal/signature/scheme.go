package signature

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"fmt"
	"sort"
	"time"
)

// Names of the schemes that [New] builds, as the preset table names them.
const (
	// SchemeHMAC is one header that holds a prefix and the HMAC-SHA256 of
	// the body, in hex or base64. GitHub's and Shopify's presets use it.
	SchemeHMAC = "hmac-sha256"
	// SchemeStripe is Stripe's Stripe-Signature.
	SchemeStripe = "stripe"
	// SchemeSlack is Slack's X-Slack-Signature with
	// X-Slack-Request-Timestamp.
	SchemeSlack = "slack"
	// SchemeStandardWebhooks is webhook-signature with whsec_ secrets.
	SchemeStandardWebhooks = "standard-webhooks"
)

// Params are a scheme's parameters, from a preset row or a sender's
// signature block. Each scheme reads those it needs.
type Params struct {
	// Header, Encoding and Prefix say where the MAC is and how it is
	// written, for SchemeHMAC.
	Header, Encoding, Prefix string
	// Tolerance bounds a signed timestamp's distance from now. Zero or
	// less means DefaultTolerance.
	Tolerance time.Duration
	// Layout is the header's shape, for the schemes that read it.
	Layout Layout
}

// scheme is one entry of schemes.
type scheme struct {
	// standardSecrets reports that the secrets are Standard Webhooks
	// secrets, decoded with DecodeStandardSecret before use.
	standardSecrets bool
	// decode turns a secret as written into the key that New is given.
	// When nil, the key is the secret's bytes. Its error never contains
	// the secret.
	decode func(string) ([]byte, error)
	build  func(p Params, secrets [][]byte) (Verifier, error)
}

// schemes are the verifiers that New builds, by scheme name. Adding a
// signature scheme is adding its Verifier to this package and an entry
// here.
var schemes = map[string]scheme{
	SchemeHMAC: {build: func(p Params, secrets [][]byte) (Verifier, error) {
		hc := HMACConfig{Header: p.Header, Encoding: p.Encoding, Prefix: p.Prefix}
		if err := hc.Validate(); err != nil {
			return nil, err
		}
		return HMAC(hc, secrets), nil
	}},
	SchemeHMACSHA1: {build: func(p Params, secrets [][]byte) (Verifier, error) {
		hc := HMACConfig{Header: p.Header, Encoding: p.Encoding, Prefix: p.Prefix}
		if err := hc.Validate(); err != nil {
			return nil, err
		}
		v := HMAC(hc, secrets).(*prefixed)
		v.sha1 = true
		return v, nil
	}},
	SchemeToken: {build: func(p Params, secrets [][]byte) (Verifier, error) {
		if !validHeaderName(p.Header) {
			return nil, fmt.Errorf("token: header %q is not a valid header name", p.Header)
		}
		return Token(p.Header, secrets), nil
	}},
	SchemeList: {build: func(p Params, secrets [][]byte) (Verifier, error) {
		if !validHeaderName(p.Header) || p.Layout.Separator == "" || p.Layout.SignatureKey == "" {
			return nil, fmt.Errorf("%s: needs a header, a separator and a signature key", SchemeList)
		}
		return List(p.Header, p.Layout, secrets, p.Tolerance), nil
	}},
	SchemeTimestampHeader: {build: func(p Params, secrets [][]byte) (Verifier, error) {
		if !validHeaderName(p.Header) || !validHeaderName(p.Layout.TimestampHeader) {
			return nil, fmt.Errorf("%s: needs a header and a timestamp header", SchemeTimestampHeader)
		}
		return TimestampHeader(p.Header, p.Layout, secrets, p.Tolerance), nil
	}},
	SchemeECDSA: {build: func(p Params, secrets [][]byte) (Verifier, error) {
		if !validHeaderName(p.Header) || !validHeaderName(p.Layout.TimestampHeader) {
			return nil, fmt.Errorf("%s: needs a header and a timestamp header", SchemeECDSA)
		}
		pubs := make([]*ecdsa.PublicKey, 0, len(secrets))
		for i, s := range secrets {
			pub, err := ParseECDSAPublicKey(string(s))
			if err != nil {
				return nil, fmt.Errorf("%s: key %d: %w", SchemeECDSA, i+1, err)
			}
			pubs = append(pubs, pub)
		}
		return ECDSA(p.Header, p.Layout, pubs, p.Tolerance), nil
	}},
	SchemeHMACBase64Key: {decode: DecodeBase64Key, build: func(p Params, secrets [][]byte) (Verifier, error) {
		hc := HMACConfig{Header: p.Header, Encoding: p.Encoding, Prefix: p.Prefix}
		if err := hc.Validate(); err != nil {
			return nil, err
		}
		return HMAC(hc, secrets), nil
	}},
	SchemeTwilio: {build: func(_ Params, secrets [][]byte) (Verifier, error) { return Twilio(secrets), nil }},
	SchemeSquare: {build: func(_ Params, secrets [][]byte) (Verifier, error) { return Square(secrets), nil }},
	SchemeHubSpotV3: {build: func(p Params, secrets [][]byte) (Verifier, error) {
		return HubSpotV3(secrets, p.Tolerance), nil
	}},
	SchemeZoom:    {build: func(p Params, secrets [][]byte) (Verifier, error) { return Zoom(secrets, p.Tolerance), nil }},
	SchemeTwitch:  {build: func(p Params, secrets [][]byte) (Verifier, error) { return Twitch(secrets, p.Tolerance), nil }},
	SchemeMailgun: {build: func(p Params, secrets [][]byte) (Verifier, error) { return Mailgun(secrets, p.Tolerance), nil }},
	SchemeEd25519: {decode: decodeEd25519Key, build: func(p Params, secrets [][]byte) (Verifier, error) {
		pubs := make([]ed25519.PublicKey, 0, len(secrets))
		for i, s := range secrets {
			if len(s) != ed25519.PublicKeySize {
				return nil, fmt.Errorf("%s: key %d is not an Ed25519 public key", SchemeEd25519, i+1)
			}
			pubs = append(pubs, ed25519.PublicKey(s))
		}
		return Ed25519(pubs, p.Tolerance), nil
	}},
	SchemeStripe: {build: func(p Params, secrets [][]byte) (Verifier, error) {
		return Stripe(secrets, p.Tolerance), nil
	}},
	SchemeSlack: {build: func(p Params, secrets [][]byte) (Verifier, error) {
		return Slack(secrets, p.Tolerance), nil
	}},
	SchemeStandardWebhooks: {standardSecrets: true, decode: DecodeStandardSecret, build: func(p Params, secrets [][]byte) (Verifier, error) {
		return StandardWebhooks(secrets, p.Tolerance), nil
	}},
}

// New returns the Verifier of the named scheme with params p and the
// secrets, decoded already. It returns an error for an unknown scheme or
// parameters that the scheme refuses. The error never contains a secret.
func New(name string, p Params, secrets [][]byte) (Verifier, error) {
	s, ok := schemes[name]
	if !ok {
		return nil, fmt.Errorf("unknown scheme %q", name)
	}
	return s.build(p, secrets)
}

// StandardSecrets reports whether the named scheme's secrets are Standard
// Webhooks secrets, to decode with [DecodeStandardSecret].
func StandardSecrets(name string) bool { return schemes[name].standardSecrets }

// DecodeSecret returns the key that the named scheme's verifier is built
// with, for a secret as the configuration writes it. It decodes Standard
// Webhooks secrets, base64 keys and Ed25519 public keys. Otherwise the key
// is the secret's bytes. Its error never contains the secret.
func DecodeSecret(name, secret string) ([]byte, error) {
	if d := schemes[name].decode; d != nil {
		return d(secret)
	}
	return []byte(secret), nil
}

// Schemes returns the names New knows, sorted.
func Schemes() []string {
	out := make([]string, 0, len(schemes))
	for n := range schemes {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
