package signature

import (
	"crypto/hmac"
	"crypto/sha1" //nolint:gosec // HMAC-SHA1 is what Twilio signs with by default
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"
)

// Request is what a [RequestVerifier] reads of a request besides its
// headers and body: the method and the URL as the provider requested it.
// Behind a proxy, the URL is the public one that the configuration names.
type Request struct {
	Method string
	URL    string
}

// RequestVerifier is a Verifier whose providers also sign the request's
// URL, and maybe its method: Twilio, Square and HubSpot. Verify, without a
// URL, fails with [ErrMissing], so ingest calls VerifyRequest.
type RequestVerifier interface {
	Verifier
	// VerifyRequest is Verify with the request's method and URL.
	VerifyRequest(r Request, h http.Header, body []byte, now time.Time) error
}

// Scheme names of the verifiers that sign the URL.
const (
	// SchemeTwilio is X-Twilio-Signature. See [Twilio].
	SchemeTwilio = "twilio"
	// SchemeSquare is x-square-hmacsha256-signature. See [Square].
	SchemeSquare = "square"
	// SchemeHubSpotV3 is X-HubSpot-Signature-v3. See [HubSpotV3].
	SchemeHubSpotV3 = "hubspot-v3"
)

// Header names of the verifiers that sign the URL.
const (
	HeaderTwilio          = "X-Twilio-Signature"
	HeaderTwilioSettings  = "X-Twilio-Webhooks-Signature-Settings"
	HeaderSquare          = "X-Square-Hmacsha256-Signature"
	HeaderHubSpotV3       = "X-Hubspot-Signature-V3"
	HeaderHubSpotTimestmp = "X-Hubspot-Request-Timestamp"
)

// MaxFormParams bounds the parameters of a form body that Twilio's check
// reads, as Express's urlencoded parser does. More is [ErrMalformed].
const MaxFormParams = 1000

var errNoURL = fmt.Errorf("%w: the request URL is unknown", ErrMissing)

// Twilio returns the Verifier of Twilio's requests
// (https://www.twilio.com/docs/usage/security#validating-requests):
//
//	X-Twilio-Signature: <base64 HMAC-SHA1(auth token, <URL><name1><value1><name2><value2>...)>
//
// URL is the full URL that Twilio requested, with its query string. The
// names and values are a form body's POST parameters, sorted by name; see
// [CanonicalTwilioParams]. A JSON body is not signed. Instead, the URL's
// bodySHA256 parameter carries the body's hex SHA-256, which must match.
// Any other non-empty body is [ErrMalformed], since the signature would
// not cover it. As in Twilio's libraries, the URL is tried with and without
// its default port. A request whose X-Twilio-Webhooks-Signature-Settings
// names algorithm=HMAC_SHA256 is checked with HMAC-SHA256. There is no
// timestamp.
func Twilio(secrets [][]byte) RequestVerifier { return &twilio{keys: newKeys(secrets)} }

type twilio struct{ keys keys }

func (v *twilio) Verify(h http.Header, body []byte, now time.Time) error {
	return v.VerifyRequest(Request{}, h, body, now)
}

func (v *twilio) VerifyRequest(r Request, h http.Header, body []byte, _ time.Time) error {
	sig, err := header(h, HeaderTwilio)
	if err != nil {
		return err
	}
	hf, size := sha1.New, sha1.Size
	if algo := twilioAlgorithm(h.Get(HeaderTwilioSettings)); algo == "HMAC_SHA256" {
		hf, size = sha256.New, sha256.Size
	} else if algo != "HMAC_SHA1" {
		return fmt.Errorf("%w: %s names an algorithm other than HMAC_SHA1 or HMAC_SHA256", ErrMalformed, HeaderTwilioSettings)
	}
	mac := decodeMACSize(encBase64, sig, size)
	if mac == nil {
		return fmt.Errorf("%w: %s must be the base64 of a %d-byte HMAC", ErrMalformed, HeaderTwilio, size)
	}
	if r.URL == "" {
		return errNoURL
	}
	var params []byte
	q, _, _ := strings.Cut(r.URL, "#")
	_, rawQuery, _ := strings.Cut(q, "?")
	query, qerr := url.ParseQuery(rawQuery)
	switch sum := query.Get("bodySHA256"); {
	case qerr == nil && sum != "":
		want := sha256.Sum256(body)
		if !hmac.Equal([]byte(strings.ToLower(sum)), []byte(hex.EncodeToString(want[:]))) {
			return fmt.Errorf("%w: the body's SHA-256 is not the URL's bodySHA256", ErrMismatch)
		}
	case isForm(h.Get("Content-Type")):
		if params, err = CanonicalTwilioParams(body); err != nil {
			return err
		}
	case len(body) > 0:
		return fmt.Errorf("%w: a body that is not form-encoded must be covered by the URL's bodySHA256 parameter", ErrMalformed)
	}
	for _, u := range urlPortVariants(r.URL) {
		if v.keys.matchHash(hf, [][]byte{mac}, []byte(u), params) {
			return nil
		}
	}
	return mismatch(HeaderTwilio)
}

// twilioAlgorithm returns the algorithm= of an
// X-Twilio-Webhooks-Signature-Settings value. It is HMAC_SHA1 when there
// is none, as Twilio's libraries read it.
func twilioAlgorithm(settings string) string {
	for part := range strings.SplitSeq(settings, ",") {
		if k, v, ok := strings.Cut(part, "="); ok && strings.TrimSpace(k) == "algorithm" {
			if v = strings.ToUpper(strings.TrimSpace(v)); v != "" {
				return v
			}
		}
	}
	return "HMAC_SHA1"
}

// isForm reports whether contentType is application/x-www-form-urlencoded.
func isForm(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && mt == "application/x-www-form-urlencoded"
}

// CanonicalTwilioParams returns what Twilio appends to the URL for a form
// body: each parameter's name and then its value, sorted by name. The
// values of a repeated name are deduplicated and sorted, as twilio-node
// does. Names and values are decoded first. A body that is not a valid
// form, or has more than [MaxFormParams] parameters, returns an error
// wrapping [ErrMalformed].
func CanonicalTwilioParams(body []byte) ([]byte, error) {
	if n := strings.Count(string(body), "&") + 1; n > MaxFormParams {
		return nil, fmt.Errorf("%w: the form body has more than %d parameters", ErrMalformed, MaxFormParams)
	}
	vals, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, fmt.Errorf("%w: the body is not a valid form (application/x-www-form-urlencoded)", ErrMalformed)
	}
	names := make([]string, 0, len(vals))
	for k := range vals {
		names = append(names, k)
	}
	sort.Strings(names)
	out := make([]byte, 0, len(body))
	for _, k := range names {
		vs := vals[k]
		sort.Strings(vs)
		for i, val := range vs {
			if i > 0 && vs[i-1] == val {
				continue
			}
			out = append(out, k...)
			out = append(out, val...)
		}
	}
	return out, nil
}

// urlPortVariants returns u without its port, and with the scheme's
// default port when it has none. Twilio's libraries try both forms.
func urlPortVariants(u string) []string {
	scheme, rest, ok := strings.Cut(u, "://")
	if !ok {
		return []string{u}
	}
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	authority, tail := rest[:end], rest[end:]
	userinfo := ""
	if at := strings.LastIndexByte(authority, '@'); at >= 0 {
		userinfo, authority = authority[:at+1], authority[at+1:]
	}
	host, port := authority, ""
	if i := strings.LastIndexByte(authority, ':'); i >= 0 && i > strings.LastIndexByte(authority, ']') {
		host, port = authority[:i], authority[i:]
	}
	without := scheme + "://" + userinfo + host + tail
	if port != "" {
		return []string{without, u}
	}
	def := ":80"
	if strings.EqualFold(scheme, "https") {
		def = ":443"
	}
	return []string{without, scheme + "://" + userinfo + host + def + tail}
}

// Square returns the Verifier of Square's webhooks
// (https://developer.squareup.com/docs/webhooks/step3validate):
//
//	x-square-hmacsha256-signature: <base64 HMAC-SHA256(signature key, <notification URL><body>)>
//
// The notification URL is the one of the subscription, as Square
// requested it. There is no timestamp.
func Square(secrets [][]byte) RequestVerifier { return &square{keys: newKeys(secrets)} }

type square struct{ keys keys }

func (v *square) Verify(h http.Header, body []byte, now time.Time) error {
	return v.VerifyRequest(Request{}, h, body, now)
}

func (v *square) VerifyRequest(r Request, h http.Header, body []byte, _ time.Time) error {
	sig, err := header(h, HeaderSquare)
	if err != nil {
		return err
	}
	mac := decodeMAC(encBase64, sig)
	if mac == nil {
		return fmt.Errorf("%w: %s must be %s", ErrMalformed, HeaderSquare, describe(encBase64))
	}
	if r.URL == "" {
		return errNoURL
	}
	if !v.keys.match([][]byte{mac}, []byte(r.URL), body) {
		return mismatch(HeaderSquare)
	}
	return nil
}

// HubSpotV3 returns the Verifier of HubSpot's v3 request signature
// (https://developers.hubspot.com/docs/apps/legacy-apps/authentication/validating-requests#validate-the-v3-request-signature):
//
//	X-HubSpot-Request-Timestamp: <Unix milliseconds>
//	X-HubSpot-Signature-v3: <base64 HMAC-SHA256(client secret, <method><URI><body><timestamp>)>
//
// URI is the full URL that HubSpot requested. HubSpot's page asks to
// decode some percent-escapes of the URI before signing, but its Node
// client signs the URL as given. Both forms are tried. The timestamp must
// be within tolerance of now. HubSpot rejects requests older than 5
// minutes.
func HubSpotV3(secrets [][]byte, tolerance time.Duration) RequestVerifier {
	return &hubspot{keys: newKeys(secrets), tol: toleranceOrDefault(tolerance)}
}

type hubspot struct {
	keys keys
	tol  time.Duration
}

func (v *hubspot) Verify(h http.Header, body []byte, now time.Time) error {
	return v.VerifyRequest(Request{}, h, body, now)
}

var hubspotDecoder = strings.NewReplacer(
	"%3A", ":", "%2F", "/", "%3F", "?", "%40", "@", "%21", "!", "%24", "$", "%27", "'",
	"%28", "(", "%29", ")", "%2A", "*", "%2C", ",", "%3B", ";",
	"%3a", ":", "%2f", "/", "%3f", "?", "%2a", "*", "%2c", ",", "%3b", ";")

func (v *hubspot) VerifyRequest(r Request, h http.Header, body []byte, now time.Time) error {
	sig, err := header(h, HeaderHubSpotV3)
	if err != nil {
		return err
	}
	tsText, err := header(h, HeaderHubSpotTimestmp)
	if err != nil {
		return err
	}
	ms, err := ParseUnixTimestamp(tsText)
	if err != nil {
		return fmt.Errorf("%w: %s must be Unix milliseconds", ErrMalformed, HeaderHubSpotTimestmp)
	}
	mac := decodeMAC(encBase64, sig)
	if mac == nil {
		return fmt.Errorf("%w: %s must be %s", ErrMalformed, HeaderHubSpotV3, describe(encBase64))
	}
	if err := checkTimestamp(HeaderHubSpotTimestmp, ms/1000, now, v.tol); err != nil {
		return err
	}
	if r.URL == "" || r.Method == "" {
		return errNoURL
	}
	candidates := []string{r.URL}
	if d := hubspotDecoder.Replace(r.URL); d != r.URL {
		candidates = append(candidates, d)
	}
	for _, u := range candidates {
		if v.keys.match([][]byte{mac}, []byte(r.Method), []byte(u), body, []byte(tsText)) {
			return nil
		}
	}
	return mismatch(HeaderHubSpotV3)
}
