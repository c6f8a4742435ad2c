package signature_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The helpers below sign independently of the package under test, so that a
// mistake in the package's framing is not mirrored by the tests.

func mac(secret []byte, parts ...string) []byte {
	m := hmac.New(sha256.New, secret)
	for _, p := range parts {
		m.Write([]byte(p))
	}
	return m.Sum(nil)
}

func macHex(secret []byte, parts ...string) string {
	return hex.EncodeToString(mac(secret, parts...))
}

func macB64(secret []byte, parts ...string) string {
	return base64.StdEncoding.EncodeToString(mac(secret, parts...))
}

// hdr builds a header from name/value pairs without canonicalising or
// validating values, like a hostile client could.
func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		k := http.CanonicalHeaderKey(kv[i])
		h[k] = append(h[k], kv[i+1])
	}
	return h
}
