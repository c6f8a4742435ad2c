package signature

import (
	"fmt"
	"net/http"
	"strings"
)

// Encodings accepted in [HMACConfig.Encoding].
const (
	EncodingHex    = "hex"
	EncodingBase64 = "base64"
)

// HMACConfig configures the generic hmac-sha256 scheme: one header holding
// Prefix followed by HMAC-SHA256(secret, body), encoded as Encoding.
type HMACConfig struct {
	// Header is the request header that carries the signature, such as
	// "X-Signature". It is required and must be a valid HTTP header name.
	Header string
	// Encoding is "hex" or "base64", padded standard base64. Empty means
	// "hex".
	Encoding string
	// Prefix, if not empty, must precede the encoded MAC exactly, such as
	// "sha256=". A value without it is [ErrMalformed].
	Prefix string
}

// Validate returns an error if Header is empty or not a valid header name,
// or Encoding is not "", "hex" or "base64". The error names the field and
// never contains a secret.
func (c HMACConfig) Validate() error {
	if c.Header == "" {
		return fmt.Errorf("signature: hmac-sha256 needs a header")
	}
	if !validHeaderName(c.Header) {
		return fmt.Errorf("signature: hmac-sha256 header %q is not a valid header name", c.Header)
	}
	switch c.Encoding {
	case "", EncodingHex, EncodingBase64:
	default:
		return fmt.Errorf("signature: hmac-sha256 encoding %q is not hex or base64", c.Encoding)
	}
	if len(c.Prefix) > MaxHeaderBytes || strings.ContainsAny(c.Prefix, "\r\n") {
		return fmt.Errorf("signature: hmac-sha256 prefix is too long or contains a line break")
	}
	return nil
}

// HMAC returns the Verifier for the generic hmac-sha256 scheme configured
// by cfg. The first value of cfg.Header, trimmed, must be cfg.Prefix and the
// encoded HMAC-SHA256 of the raw body. There is no timestamp.
//
// HMAC panics if cfg.Validate returns an error, since loading the
// configuration calls Validate first. Empty secrets are ignored. Without a
// usable secret, every well-formed request fails with [ErrMismatch].
func HMAC(cfg HMACConfig, secrets [][]byte) Verifier {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	enc := encHex
	if cfg.Encoding == EncodingBase64 {
		enc = encBase64
	}
	return &prefixed{
		name:   http.CanonicalHeaderKey(cfg.Header),
		prefix: cfg.Prefix,
		enc:    enc,
		keys:   newKeys(secrets),
	}
}

// validHeaderName reports whether s is an RFC 9110 field name, a token.
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}
