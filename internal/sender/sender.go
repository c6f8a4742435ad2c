// Package sender compiles the configured senders into what ingest runs for
// each request. [Sender.Prepare] turns a request into a delivery in one
// call: it verifies the signature, reads the body once, answers handshakes,
// and finds the delivery ID, the event type and the routes. It also gives
// the headers and body stored with the event.
package sender

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/events"
	"github.com/hookgate/hookgate/internal/signature"
)

// Set is the compiled senders of one configuration. It is immutable and safe
// for concurrent use.
type Set struct {
	cfg *config.Config
	// snap is the set as a [Snapshot] of no file.
	snap *Snapshot
	// Senders are the compiled senders, in configuration order. Do not
	// modify them.
	Senders []Sender
}

// Sender is one configured sender compiled for ingest. The embedded
// *config.Sender is shared with the configuration: do not modify it.
type Sender struct {
	*config.Sender
	// Verifier checks request signatures; nil when the sender has none.
	Verifier signature.Verifier
	// HeaderFilter picks the request headers stored with an event. It never
	// keeps the sender's signature headers.
	HeaderFilter events.HeaderFilter

	plan plan
	// sigObject and sigFields are where the body carries the signature
	// ([Sender.StoredBody]).
	sigObject string
	sigFields []string
	// keyed holds one verifier per secret, for the handshakes whose answer
	// is keyed with the secret that signed the request, as Zoom's is. keys
	// are those secrets' keys.
	keyed []signature.Verifier
	keys  [][]byte
}

// Compile compiles every sender of cfg, a configuration [config.Parse]
// returned. Its error names each sender's field at fault, such as
// "senders[1].store_headers[0]: ...", and never contains a secret.
func Compile(cfg *config.Config) (*Set, error) {
	set := &Set{cfg: cfg, Senders: make([]Sender, len(cfg.Senders))}
	var errs []string
	for i := range cfg.Senders {
		if err := compile(&set.Senders[i], &cfg.Senders[i]); err != nil {
			errs = append(errs, fmt.Sprintf("senders[%d].%v", i, err))
		}
	}
	if len(errs) > 0 {
		return nil, errors.New(strings.Join(errs, "; "))
	}
	set.snap = &Snapshot{Set: set}
	return set, nil
}

// Load reads, validates and compiles the configuration file at path. Its
// errors start with path.
func Load(path string) (*Set, error) {
	snap, err := LoadSnapshot(path, time.Now())
	if err != nil {
		return nil, err
	}
	return snap.Set, nil
}

// Config returns the configuration the set was compiled from. It is shared:
// do not modify it.
func (set *Set) Config() *config.Config { return set.cfg }

// Get returns the compiled sender named name, or false.
func (set *Set) Get(name string) (*Sender, bool) {
	for i := range set.Senders {
		if set.Senders[i].Name == name {
			return &set.Senders[i], true
		}
	}
	return nil, false
}

// compile fills out from the configured sender s. Its errors start with the
// field at fault, relative to the sender.
func compile(out *Sender, s *config.Sender) error {
	out.Sender = s
	check := s.SignatureCheck()
	for i, n := range s.StoreHeaders {
		if events.NeverStored(n) {
			return fmt.Errorf("store_headers[%d]: %s is never stored (it carries the client's or a proxy's credentials)", i, n)
		}
		for _, sig := range check.SignatureHeaders {
			if http.CanonicalHeaderKey(n) == http.CanonicalHeaderKey(sig) {
				return fmt.Errorf("store_headers[%d]: %s is never stored (it carries the sender's signature: with the body it is a request anyone could send again)", i, n)
			}
		}
	}
	// The sender's signature headers are never stored, whatever
	// store_headers says, so that no view and no forward holds them.
	out.HeaderFilter = events.NewHeaderFilter(s.StoreHeaders, s.DropHeaders).Never(check.SignatureHeaders...)
	out.sigObject, out.sigFields = check.SignatureObject, check.SignatureFields
	v, keys, err := verifier(s)
	if err != nil {
		return err
	}
	out.Verifier, out.keys = v, keys
	if slices.Contains(s.Handshakes(), config.HandshakeZoomURLValidation) && v != nil {
		for _, k := range keys {
			kv, err := signature.New(check.Scheme, check.Params(time.Duration(s.Tolerance)), [][]byte{k})
			if err != nil {
				return fmt.Errorf("signature: %w", err)
			}
			out.keyed = append(out.keyed, kv)
		}
	}
	return buildPlan(out)
}

// verifier builds the sender's signature verifier from its signature check
// and secrets, and returns it with the secrets' keys. It returns nil when
// the sender checks no signature.
func verifier(s *config.Sender) (signature.Verifier, [][]byte, error) {
	check := s.SignatureCheck()
	if check.Scheme == config.SchemeNone {
		return nil, nil, nil
	}
	var keys [][]byte
	for _, sec := range s.SecretValues() {
		k, err := signature.DecodeSecret(check.Scheme, sec)
		if err != nil { // config.Parse checked it
			return nil, nil, fmt.Errorf("secret: is not a key scheme %s can use: %w", check.Scheme, err)
		}
		keys = append(keys, k)
	}
	v, err := signature.New(check.Scheme, check.Params(time.Duration(s.Tolerance)), keys)
	if err != nil {
		return nil, nil, fmt.Errorf("signature: %w", err)
	}
	return v, keys, nil
}

// Verify checks the request's signature with the sender's Verifier, if any.
// For the schemes that sign the URL it uses [Sender.RequestURL]. body is
// the body as received. Its errors are the verifier's.
func (s *Sender) Verify(r *http.Request, body []byte, now time.Time) error {
	if s.Verifier == nil {
		return nil
	}
	if rv, ok := s.Verifier.(signature.RequestVerifier); ok {
		return rv.VerifyRequest(signature.Request{Method: r.Method, URL: s.RequestURL(r)}, r.Header, body, now)
	}
	return s.Verifier.Verify(r.Header, body, now)
}

// SignsNonces reports whether the sender's scheme signs a single-use token
// instead of the body, as Mailgun's does. Ingest then accepts each token
// for one delivery only.
func (s *Sender) SignsNonces() bool {
	_, ok := s.Verifier.(signature.NonceVerifier)
	return ok
}

// nonce returns the single-use token of a request whose signature Verify
// accepted, and the time signed with it. ok is false for a sender whose
// scheme signs none ([Sender.SignsNonces]). body is the body as received.
func (s *Sender) nonce(r *http.Request, body []byte) (token string, signedAt time.Time, ok bool) {
	nv, isNonce := s.Verifier.(signature.NonceVerifier)
	if !isNonce {
		return "", time.Time{}, false
	}
	return nv.Nonce(r.Header, body)
}

// RequestURL returns the URL the provider requested, for the schemes that
// sign it. It is the sender's public_url followed by the request's query.
// Without public_url it is the request's own URL: https on TLS, its Host
// header, and its path and query as sent. Forwarded headers are not
// trusted: behind a proxy, set public_url.
func (s *Sender) RequestURL(r *http.Request) string {
	if s.PublicURL != "" {
		if r.URL.RawQuery != "" {
			return s.PublicURL + "?" + r.URL.RawQuery
		}
		return s.PublicURL
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	uri := r.RequestURI
	if uri == "" || uri[0] != '/' {
		uri = r.URL.RequestURI()
	}
	return scheme + "://" + r.Host + uri
}

// MustCompile is Compile for a configuration known to be valid (tests): it
// panics if Compile returns an error.
func MustCompile(cfg *config.Config) *Set {
	set, err := Compile(cfg)
	if err != nil {
		panic(err)
	}
	return set
}
