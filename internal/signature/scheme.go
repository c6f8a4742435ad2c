package signature

import (
	"crypto/ecdsa"
	"fmt"
	"sort"
	"time"
)

// Names of the schemes New builds, as the preset table (package config)
// names them.
const (
	// SchemeHMAC: one header holding a prefix and the HMAC-SHA256 of the
	// body, hex or base64 (HMAC); GitHub's and Shopify's presets use it.
	SchemeHMAC = "hmac-sha256"
	// SchemeStripe: Stripe-Signature (Stripe).
	SchemeStripe = "stripe"
	// SchemeSlack: X-Slack-Signature with X-Slack-Request-Timestamp (Slack).
	SchemeSlack = "slack"
	// SchemeStandardWebhooks: webhook-signature (StandardWebhooks), with
	// whsec_ secrets.
	SchemeStandardWebhooks = "standard-webhooks"
)

// Params are a scheme's parameters, from a preset row or a sender's
// signature block. Each scheme reads those it needs.
type Params struct {
	// Header, Encoding and Prefix: where the MAC is and how it is written
	// (SchemeHMAC).
	Header, Encoding, Prefix string
	// Tolerance bounds a signed timestamp's distance from now (the schemes
	// that sign one); <= 0 means DefaultTolerance.
	Tolerance time.Duration
	// Layout is the header's shape (SchemeList, SchemeTimestampHeader).
	Layout Layout
}

// scheme is one entry of schemes.
type scheme struct {
	// standardSecrets: the secrets are Standard Webhooks secrets (whsec_
	// followed by base64), decoded with DecodeStandardSecret before use.
	standardSecrets bool
	build           func(p Params, secrets [][]byte) (Verifier, error)
}

// schemes are the verifiers New builds, by scheme name. Adding a signature
// scheme is adding its Verifier to this package and an entry here.
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
	SchemeStripe: {build: func(p Params, secrets [][]byte) (Verifier, error) {
		return Stripe(secrets, p.Tolerance), nil
	}},
	SchemeSlack: {build: func(p Params, secrets [][]byte) (Verifier, error) {
		return Slack(secrets, p.Tolerance), nil
	}},
	SchemeStandardWebhooks: {standardSecrets: true, build: func(p Params, secrets [][]byte) (Verifier, error) {
		return StandardWebhooks(secrets, p.Tolerance), nil
	}},
}

// New returns the Verifier of the named scheme with params p and the
// secrets (decoded already: see StandardSecrets). It returns an error for
// an unknown scheme or parameters the scheme refuses; the error never
// contains a secret.
func New(name string, p Params, secrets [][]byte) (Verifier, error) {
	s, ok := schemes[name]
	if !ok {
		return nil, fmt.Errorf("unknown scheme %q", name)
	}
	return s.build(p, secrets)
}

// StandardSecrets reports whether the named scheme's secrets are written
// as Standard Webhooks secrets (whsec_ followed by base64) and must be
// decoded with DecodeStandardSecret; false for an unknown scheme.
func StandardSecrets(name string) bool { return schemes[name].standardSecrets }

// Schemes returns the names New knows, sorted.
func Schemes() []string {
	out := make([]string, 0, len(schemes))
	for n := range schemes {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
