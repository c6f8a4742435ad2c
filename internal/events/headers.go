package events

import (
	"bytes"
	"net/http"
	"slices"
	"strings"

	"github.com/hookgate/hookgate/internal/redact"
)

// MaxStoredHeaders is the most header values (field lines) stored with an
// event; the excess is dropped, in the order of the names sorted, so that
// what is kept does not depend on map order.
const MaxStoredHeaders = 100

// neverStored are the request headers that carry the client's or a proxy's
// credentials: they are never stored, whatever a sender's configuration
// says.
var neverStored = map[string]bool{"Authorization": true, "Proxy-Authorization": true, "Cookie": true}

// NeverStored reports whether the header name is one no configuration can
// have stored (Authorization, Proxy-Authorization, Cookie).
func NeverStored(name string) bool { return neverStored[http.CanonicalHeaderKey(name)] }

// credentialWords are the parts of a header name that mark it as carrying a
// credential by default (case-insensitive): X-Api-Key, X-Auth-Token,
// X-Amz-Security-Token, X-Session-Id, X-Webhook-Secret and the like. Senders'
// signature headers (X-Hub-Signature-256, Stripe-Signature,
// X-Shopify-Hmac-Sha256, webhook-signature, …) are among them: they are no
// secret of hookgate's, but where the scheme signs no timestamp (GitHub,
// Shopify, generic hmac-sha256) a stored body with its signature is a request
// anyone can send again under a new delivery ID, and forwards carry
// hookgate's own signature instead.
var credentialWords = redact.Words("auth", "token", "secret", "password", "passwd", "api-key", "apikey", "session",
	"cookie", "credential", "signature", "hmac")

// credentialParts are the words that mark a header name as carrying a
// credential when one of its hyphen- or underscore-separated parts is
// exactly the word (case-insensitive): a MAC (X-Airtable-Content-MAC,
// X-Payload-Mac) but not X-Machine-Id.
var credentialParts = redact.Words("mac", "sig")

// CredentialLike reports whether the header name carries a credential by
// default (see credentialWords and credentialParts), so that it is not
// stored unless a sender's store_headers lists it. It allocates nothing
// for a name of up to 64 ASCII bytes.
func CredentialLike(name string) bool {
	var buf [64]byte
	n := redact.LowerName(buf[:0], name)
	for _, w := range credentialWords {
		if bytes.Contains(n, w) {
			return true
		}
	}
	for _, w := range credentialParts {
		for i := bytes.Index(n, w); i >= 0; {
			end := i + len(w)
			if (i == 0 || n[i-1] == '-' || n[i-1] == '_') && (end == len(n) || n[end] == '-' || n[end] == '_') {
				return true
			}
			next := bytes.Index(n[i+1:], w)
			if next < 0 {
				break
			}
			i += 1 + next
		}
	}
	return false
}

// HeaderFilter decides which request headers of a sender are stored with
// its events. The zero value is the default: every header but the
// credential-like ones.
type HeaderFilter struct {
	store map[string]bool // allow-list; nil for the default
	drop  map[string]bool // dropped besides the default
	never map[string]bool // dropped whatever store says (Never)
}

// NewHeaderFilter returns the filter of a sender's store_headers (an
// allow-list: only these, and Content-Type, are stored; credential-like
// names may be listed) or drop_headers (dropped besides the credential-like
// ones). Both empty is the default filter. Names are case-insensitive.
func NewHeaderFilter(store, drop []string) HeaderFilter {
	var f HeaderFilter
	if len(store) > 0 {
		f.store = map[string]bool{"Content-Type": true}
		for _, n := range store {
			f.store[http.CanonicalHeaderKey(n)] = true
		}
	}
	if len(drop) > 0 {
		f.drop = map[string]bool{}
		for _, n := range drop {
			f.drop[http.CanonicalHeaderKey(n)] = true
		}
	}
	return f
}

// Never returns a copy of f that never stores the headers names, even
// where store_headers lists them: a sender's signature headers (package
// config's PresetSignature.SignatureHeaders). Names are case-insensitive.
func (f HeaderFilter) Never(names ...string) HeaderFilter {
	if len(names) == 0 {
		return f
	}
	never := make(map[string]bool, len(f.never)+len(names))
	for n := range f.never {
		never[n] = true
	}
	for _, n := range names {
		never[http.CanonicalHeaderKey(n)] = true
	}
	f.never = never
	return f
}

// keeps reports whether f stores the header name (canonical).
func (f HeaderFilter) keeps(name string) bool {
	if neverStored[name] || f.never[name] || strings.TrimSpace(name) == "" {
		return false
	}
	if name == "Content-Type" {
		return true // how to read the body; forwards send it on
	}
	if f.store != nil {
		return f.store[name]
	}
	return !f.drop[name] && !CredentialLike(name)
}

// Filter returns the headers of h that f stores, at most MaxStoredHeaders
// values in all (names in sorted order; Content-Type first). It never
// returns nil and does not modify h.
func (f HeaderFilter) Filter(h http.Header) http.Header {
	// The common case, no more values than the cap: keep what passes,
	// without sorting (the order only decides which are cut).
	total := 0
	for _, v := range h {
		total += len(v)
	}
	if total <= MaxStoredHeaders {
		out := make(http.Header, len(h))
		for k, v := range h {
			if f.keeps(http.CanonicalHeaderKey(k)) {
				out[k] = v
			}
		}
		return out
	}
	names := make([]string, 0, len(h))
	for k := range h {
		if f.keeps(http.CanonicalHeaderKey(k)) {
			names = append(names, k)
		}
	}
	slices.SortFunc(names, func(a, b string) int {
		switch {
		case http.CanonicalHeaderKey(a) == "Content-Type":
			return -1
		case http.CanonicalHeaderKey(b) == "Content-Type":
			return 1
		}
		return strings.Compare(a, b)
	})
	out := make(http.Header, len(names))
	n := 0
	for _, k := range names {
		if n >= MaxStoredHeaders {
			break
		}
		v := h[k]
		if len(v) > MaxStoredHeaders-n {
			v = v[:MaxStoredHeaders-n]
		}
		out[k] = v
		n += len(v)
	}
	return out
}
