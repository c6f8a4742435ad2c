package signature_test

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha1" //nolint:gosec // Twilio signs with HMAC-SHA1
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mailgun/mailgun-go/v4"
	twilioclient "github.com/twilio/twilio-go/client"

	"github.com/hookgate/hookgate/internal/signature"
)

// formHeader returns headers of a form POST with X-Twilio-Signature sig.
func formHeader(sig string) http.Header {
	h := http.Header{}
	h.Set("Content-Type", "application/x-www-form-urlencoded")
	h.Set(signature.HeaderTwilio, sig)
	return h
}

// formOf encodes params as a form body, in the given order.
func formOf(kv ...string) []byte {
	var b strings.Builder
	for i := 0; i+1 < len(kv); i += 2 {
		if i > 0 {
			b.WriteByte('&')
		}
		b.WriteString(url.QueryEscape(kv[i]) + "=" + url.QueryEscape(kv[i+1]))
	}
	return []byte(b.String())
}

// The worked example of Twilio's security page
// (https://www.twilio.com/docs/usage/security#validating-requests): auth
// token 12345, the URL and parameters below, signature
// 0/KCTR6DLpKmkAf8muzZqo1nDgQ=. The parameters are sent out of order: the
// check sorts them.
func TestTwilioDocumentedVector(t *testing.T) {
	t.Parallel()
	const docURL = "https://mycompany.com/myapp.php?foo=1&bar=2"
	v := signature.Twilio([][]byte{[]byte("other-token"), []byte("12345")})
	body := formOf("To", "+18005551212", "CallSid", "CA1234567890ABCDE", "Digits", "1234", "From", "+12349013030", "Caller", "+12349013030")
	req := signature.Request{Method: http.MethodPost, URL: docURL}
	if err := v.VerifyRequest(req, formHeader("0/KCTR6DLpKmkAf8muzZqo1nDgQ="), body, time.Now()); err != nil {
		t.Fatalf("Twilio's documented example: %v", err)
	}
	// With the port Twilio may or may not have signed.
	req.URL = "https://mycompany.com:443/myapp.php?foo=1&bar=2"
	if err := v.VerifyRequest(req, formHeader("0/KCTR6DLpKmkAf8muzZqo1nDgQ="), body, time.Now()); err != nil {
		t.Errorf("the documented example with :443: %v", err)
	}
	for name, tc := range map[string]struct {
		url  string
		body []byte
		want error
	}{
		"a parameter changed": {docURL, formOf("CallSid", "CA1234567890ABCDE", "Caller", "+12349013030", "Digits", "9999", "From", "+12349013030", "To", "+18005551212"), signature.ErrMismatch},
		"a parameter added":   {docURL, append(append([]byte(nil), body...), "&Extra=1"...), signature.ErrMismatch},
		"another URL":         {"https://mycompany.com/myapp.php?foo=1&bar=3", body, signature.ErrMismatch},
		"no URL":              {"", body, signature.ErrMissing},
		"not a form":          {docURL, []byte("%zz=1"), signature.ErrMalformed},
	} {
		err := v.VerifyRequest(signature.Request{Method: http.MethodPost, URL: tc.url}, formHeader("0/KCTR6DLpKmkAf8muzZqo1nDgQ="), tc.body, time.Now())
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
	}
}

// Twilio's Go library (twilio-go's client.RequestValidator) and package
// signature agree on signatures made here as Twilio's page prescribes,
// for a form body and for a JSON body with bodySHA256.
func TestTwilioAgreesWithTwilioGo(t *testing.T) {
	t.Parallel()
	const token = "tw-auth-token-0b9d"
	sign := func(s string) string {
		m := hmac.New(sha1.New, []byte(token))
		m.Write([]byte(s))
		return b64(m.Sum(nil))
	}
	lib := twilioclient.NewRequestValidator(token)
	ours := signature.Twilio([][]byte{[]byte(token)})

	base := "https://hooks.example.com/webhooks/twilio?tenant=a%20b"
	body := formOf("MessageSid", "SM42", "Body", "Hello & bye = ok", "From", "+15551230000", "To", "+15559870000")
	sig := sign(base + "BodyHello & bye = okFrom+15551230000MessageSidSM42To+15559870000")
	if !lib.ValidateBody(base, body, sig) {
		t.Fatal("twilio-go refuses the form signature made here")
	}
	if err := ours.VerifyRequest(signature.Request{Method: http.MethodPost, URL: base}, formHeader(sig), body, time.Now()); err != nil {
		t.Errorf("form body: %v", err)
	}

	jsonBody := []byte(`{"event":"call.completed","sid":"CA42"}`)
	sum := sha256.Sum256(jsonBody)
	jsonURL := "https://hooks.example.com/webhooks/twilio?bodySHA256=" + hex.EncodeToString(sum[:])
	jsig := sign(jsonURL)
	if !lib.ValidateBody(jsonURL, jsonBody, jsig) {
		t.Fatal("twilio-go refuses the JSON signature made here")
	}
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set(signature.HeaderTwilio, jsig)
	if err := ours.VerifyRequest(signature.Request{Method: http.MethodPost, URL: jsonURL}, h, jsonBody, time.Now()); err != nil {
		t.Errorf("JSON body: %v", err)
	}
	// A JSON body whose bodySHA256 is another body's: both refuse it.
	other := []byte(`{"event":"call.completed","sid":"CA43"}`)
	if lib.ValidateBody(jsonURL, other, jsig) {
		t.Error("twilio-go accepts another body")
	}
	if err := ours.VerifyRequest(signature.Request{Method: http.MethodPost, URL: jsonURL}, h, other, time.Now()); !errors.Is(err, signature.ErrMismatch) {
		t.Errorf("another body: %v, want ErrMismatch", err)
	}
	// A JSON body without bodySHA256 is not covered by the signature.
	if err := ours.VerifyRequest(signature.Request{Method: http.MethodPost, URL: base}, h, jsonBody, time.Now()); !errors.Is(err, signature.ErrMalformed) {
		t.Errorf("JSON without bodySHA256: %v, want ErrMalformed", err)
	}
	// HMAC-SHA256 when the settings header says so (a Webhooks Rule's key).
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte(jsonURL))
	h.Set(signature.HeaderTwilio, b64(m.Sum(nil)))
	h.Set(signature.HeaderTwilioSettings, "key=webhooks_sharedkey_1,algorithm=HMAC_SHA256")
	if err := ours.VerifyRequest(signature.Request{Method: http.MethodPost, URL: jsonURL}, h, jsonBody, time.Now()); err != nil {
		t.Errorf("HMAC_SHA256: %v", err)
	}
	h.Set(signature.HeaderTwilioSettings, "algorithm=HMAC_MD5")
	if err := ours.VerifyRequest(signature.Request{Method: http.MethodPost, URL: jsonURL}, h, jsonBody, time.Now()); !errors.Is(err, signature.ErrMalformed) {
		t.Errorf("unknown algorithm: %v, want ErrMalformed", err)
	}
}

// Signatures computed by the providers' own Node libraries (twilio 6.3.1
// getExpectedTwilioSignature, square 46.0.0 WebhooksHelper.verifySignature
// confirming an HMAC made with Node's crypto, @hubspot/api-client 13.5.0
// Signature.getSignature for v3, and discord-interactions 4.4.0 verifyKey
// confirming an Ed25519 signature made with Node's crypto from a seed of 32
// bytes of 7), recorded here as fixed vectors: package signature accepts
// each, and refuses it for a changed body.
func TestNodeLibraryVectors(t *testing.T) {
	t.Parallel()
	now := time.Unix(1795993200, 0)
	type vector struct {
		name string
		v    signature.Verifier
		req  signature.Request
		h    http.Header
		body []byte
	}
	twilioForm := formHeader("oZcO1IgH45DNHouy/X9Dc5JKcvo=")
	twilioJSON := http.Header{}
	twilioJSON.Set("Content-Type", "application/json")
	twilioJSON.Set(signature.HeaderTwilio, "PCKxEIG64s3HIcJMEP258LxaWWo=")
	square := http.Header{}
	square.Set(signature.HeaderSquare, "yCGf5Uzw9tYvlJlDCVlXk8cgJN8+hK25NeL+Lh4xLCA=")
	hubspot := http.Header{}
	hubspot.Set("X-HubSpot-Signature-v3", "55xJ1oWl43p3evKaA23FzWDuTbwn3JftYLsXxWzDqsI=")
	hubspot.Set("X-HubSpot-Request-Timestamp", "1795993200123")
	discord := http.Header{}
	discord.Set(signature.HeaderDiscordSignature, "d1456154ab013216158a587a0de6cca426dabcc125b3015f5a7060fc5d4d458ebfe155086d03dbd2ac1fb12bf8230129ece2ec06e30c154cf522a4e818134c0f")
	discord.Set(signature.HeaderDiscordTimestamp, "1795993200")
	pub, err := signature.ParseEd25519PublicKey("ea4a6c63e29c520abef5507b132ec5f9954776aebebe7b92421eea691446d22c")
	if err != nil {
		t.Fatal(err)
	}
	for _, vec := range []vector{
		{"twilio form", signature.Twilio([][]byte{[]byte("twilio-auth-token-1")}),
			signature.Request{Method: http.MethodPost, URL: "https://hooks.example.com/webhooks/twilio?tenant=a%20b"}, twilioForm,
			formOf("MessageSid", "SM1234567890abcdef", "From", "+15551230000", "To", "+15559870000", "Body", "Hello & bye = ok")},
		{"twilio json", signature.Twilio([][]byte{[]byte("twilio-auth-token-1")}),
			signature.Request{Method: http.MethodPost, URL: "https://hooks.example.com/webhooks/twilio?bodySHA256=96018c23b6ab4e63542c5c8225377a375858b06df5feae3d5ba0eef545f5f4eb"},
			twilioJSON, []byte(`{"event":"call.completed","sid":"CA42"}`)},
		{"square", signature.Square([][]byte{[]byte("square-signature-key-1")}),
			signature.Request{Method: http.MethodPost, URL: "https://hooks.example.com/webhooks/square"}, square,
			[]byte(`{"merchant_id":"6SSW7HV8K2ST5","type":"payment.created","event_id":"13b867cf-db3d-4b1c-90b6-2f32a9d78124","created_at":"2026-11-30T10:00:00Z","data":{"type":"payment","id":"KkAkhdMsgzn59SM8A89WgKwekxLZY"}}`)},
		{"hubspot v3", signature.HubSpotV3([][]byte{[]byte("hubspot-client-secret-1")}, 0),
			signature.Request{Method: http.MethodPost, URL: "https://hooks.example.com/webhooks/hubspot"}, hubspot,
			[]byte(`[{"eventId":1001,"subscriptionId":12345,"portalId":62515,"occurredAt":1564113600000,"subscriptionType":"contact.creation","attemptNumber":0,"objectId":123,"changeSource":"CRM","changeFlag":"NEW","appId":54321}]`)},
		{"discord", signature.Ed25519([]ed25519.PublicKey{pub}, 0), signature.Request{}, discord,
			[]byte(`{"id":"1133441121231312312","type":1,"application_id":"11223344556677"}`)},
	} {
		verify := func(body []byte) error {
			if rv, ok := vec.v.(signature.RequestVerifier); ok {
				return rv.VerifyRequest(vec.req, vec.h, body, now)
			}
			return vec.v.Verify(vec.h, body, now)
		}
		if err := verify(vec.body); err != nil {
			t.Errorf("%s: %v", vec.name, err)
		}
		changed := append(append([]byte(nil), vec.body...), ' ')
		if err := verify(changed); err == nil {
			t.Errorf("%s: a changed body passes", vec.name)
		}
	}
}

func TestCanonicalTwilioParams(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ body, want string }{
		{"", ""},
		{"b=2&a=1", "a1b2"},
		{"To=%2B1&Body=a+b%26c", "Bodya b&cTo+1"},
		// A repeated name: its values deduplicated and sorted (twilio-node).
		{"M=z&M=a&M=z", "MaMz"},
		{"empty=&x=1", "emptyx1"},
	} {
		got, err := signature.CanonicalTwilioParams([]byte(tc.body))
		if err != nil || string(got) != tc.want {
			t.Errorf("%q: %q, %v; want %q", tc.body, got, err, tc.want)
		}
	}
	for _, bad := range []string{"a=%zz", "a=1;b=2", strings.Repeat("a=1&", signature.MaxFormParams) + "a=1"} {
		if _, err := signature.CanonicalTwilioParams([]byte(bad)); !errors.Is(err, signature.ErrMalformed) {
			t.Errorf("%.40q: %v, want ErrMalformed", bad, err)
		}
	}
}

// Zoom's timestamp may be milliseconds; Twitch's is RFC 3339 with
// nanoseconds, and its default tolerance (set by the preset) is ten
// minutes.
func TestZoomAndTwitchTimestamps(t *testing.T) {
	t.Parallel()
	key := []byte("zoom-secret-token")
	now := time.Unix(1795993200, 0)
	body := []byte(`{"event":"meeting.started","payload":{}}`)
	for _, ts := range []string{"1795993200", "1795993200456"} {
		m := hmac.New(sha256.New, key)
		m.Write([]byte("v0:" + ts + ":" + string(body)))
		h := http.Header{}
		h.Set(signature.HeaderZoomTimestamp, ts)
		h.Set(signature.HeaderZoomSignature, "v0="+hex.EncodeToString(m.Sum(nil)))
		if err := signature.Zoom([][]byte{key}, 0).Verify(h, body, now); err != nil {
			t.Errorf("zoom ts %s: %v", ts, err)
		}
		if err := signature.Zoom([][]byte{key}, 0).Verify(h, body, now.Add(301*time.Second)); !errors.Is(err, signature.ErrTimestamp) {
			t.Errorf("zoom ts %s, 301 s later: %v", ts, err)
		}
	}
	tw := signature.Twitch([][]byte{key}, 10*time.Minute)
	ts := now.Add(123456789).UTC().Format(time.RFC3339Nano)
	m := hmac.New(sha256.New, key)
	m.Write([]byte("msg-1" + ts + string(body)))
	h := http.Header{}
	h.Set(signature.HeaderTwitchID, "msg-1")
	h.Set(signature.HeaderTwitchTimestamp, ts)
	h.Set(signature.HeaderTwitchSignature, "sha256="+hex.EncodeToString(m.Sum(nil)))
	for d, ok := range map[time.Duration]bool{0: true, 9 * time.Minute: true, 11 * time.Minute: false} {
		if err := tw.Verify(h, body, now.Add(d)); (err == nil) != ok {
			t.Errorf("twitch %v after: %v", d, err)
		}
	}
	h.Set(signature.HeaderTwitchID, "msg-2")
	if err := tw.Verify(h, body, now); !errors.Is(err, signature.ErrMismatch) {
		t.Errorf("twitch with another message id: %v", err)
	}
}

func FuzzCanonicalTwilioParams(f *testing.F) {
	for _, s := range []string{"", "a=1", "b=2&a=1&a=0", "To=%2B1&Body=a+b", "a=%zz", "a;b", "=&=", "%00=%ff"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, err := signature.CanonicalTwilioParams(body)
		if err != nil {
			if !errors.Is(err, signature.ErrMalformed) || got != nil {
				t.Fatalf("%q: %q, %v", body, got, err)
			}
			return
		}
		// Every name and value is in the canonical string, and the names
		// come in sorted order (reference: url.ParseQuery).
		vals, perr := url.ParseQuery(string(body))
		if perr != nil {
			t.Fatalf("%q accepted, but url.ParseQuery refuses it: %v", body, perr)
		}
		n := 0
		for k, vs := range vals {
			for _, v := range vs {
				n += len(k) + len(v)
				if !strings.Contains(string(got), k+v) {
					t.Fatalf("%q: %q lacks %q", body, got, k+v)
				}
			}
		}
		if len(got) > n {
			t.Fatalf("%q: %q is longer than its parameters", body, got)
		}
	})
}

func FuzzTwilioVerify(f *testing.F) {
	key := []byte("tw-fuzz-token")
	f.Add("https://h.example/x?a=1", "application/x-www-form-urlencoded", "", []byte("a=1&b=2"))
	f.Add("https://h.example:8443/x?bodySHA256=00", "application/json", "algorithm=HMAC_SHA256", []byte(`{}`))
	f.Add("http://[::1]:80/x", "text/plain", "", []byte(""))
	f.Fuzz(func(t *testing.T, u, contentType, settings string, body []byte) {
		h := http.Header{}
		h.Set("Content-Type", contentType)
		h.Set(signature.HeaderTwilioSettings, settings)
		v := signature.Twilio([][]byte{key, secret2})
		// A signature made as Twilio's page says passes whenever the body
		// is a form.
		params, perr := signature.CanonicalTwilioParams(body)
		m := hmac.New(sha1.New, key)
		m.Write([]byte(u))
		m.Write(params)
		h.Set(signature.HeaderTwilio, b64(m.Sum(nil)))
		err := v.VerifyRequest(signature.Request{Method: http.MethodPost, URL: u}, h, body, time.Now())
		classify(t, err, [][]byte{key, secret2})
		plainForm := perr == nil && u != "" && !strings.Contains(u, "bodySHA256") && h.Get(signature.HeaderTwilioSettings) == "" &&
			strings.HasPrefix(contentType, "application/x-www-form-urlencoded") && !strings.ContainsAny(contentType, "\"()<>@,:\\/[]?={} \t")
		if plainForm && err != nil && !errors.Is(err, signature.ErrMalformed) {
			t.Fatalf("url %q body %q: a signature made as documented fails: %v", u, body, err)
		}
		// Another key's signature never passes.
		m = hmac.New(sha1.New, []byte("not-configured"))
		m.Write([]byte(u))
		m.Write(params)
		h.Set(signature.HeaderTwilio, b64(m.Sum(nil)))
		h.Del(signature.HeaderTwilioSettings)
		if v.VerifyRequest(signature.Request{Method: http.MethodPost, URL: u}, h, body, time.Now()) == nil {
			t.Fatalf("url %q body %q: another key's signature passes", u, body)
		}
	})
}

func FuzzParseMailgunSignature(f *testing.F) {
	f.Add([]byte(`{"signature":{"timestamp":"1795993200","token":"t","signature":"ab"}}`), "application/json")
	f.Add([]byte(`timestamp=1&token=t&signature=s`), "application/x-www-form-urlencoded")
	f.Add([]byte(`{"signature":{"timestamp":1795993200,"token":null}}`), "")
	f.Fuzz(func(t *testing.T, body []byte, contentType string) {
		ts, token, sig, err := signature.ParseMailgunSignature(body, contentType)
		if err != nil {
			if !errors.Is(err, signature.ErrMissing) && !errors.Is(err, signature.ErrMalformed) {
				t.Fatalf("%q: error %v wraps neither ErrMissing nor ErrMalformed", body, err)
			}
			return
		}
		for _, v := range []string{ts, token, sig} {
			if v == "" || len(v) > signature.MaxHeaderBytes {
				t.Fatalf("%q: %q %q %q", body, ts, token, sig)
			}
		}
		// What parses verifies (or fails) without panicking, and a MAC
		// made from the parsed values under the key passes when timely.
		key := []byte("mg-fuzz-key")
		err = signature.Mailgun([][]byte{key}, 0).Verify(http.Header{"Content-Type": {contentType}}, body, time.Now())
		classify(t, err, [][]byte{key})
		if n, perr := strconv.ParseInt(ts, 10, 64); perr == nil && err == nil && !within(n, time.Now()) {
			t.Fatalf("%q: a stale timestamp passes", body)
		}
	})
}

// FuzzProviderHeaders feeds arbitrary header values to the verifiers of
// Zoom, Twitch, Discord, HubSpot, Square and Airtable: none panics, every
// error wraps exactly one sentinel and shows no secret, and a value that
// is not the MAC (or signature) of the request never passes.
func FuzzProviderHeaders(f *testing.F) {
	f.Add("v0=00", "1795993200", "msg-1", []byte(`{}`))
	f.Add("sha256="+strings.Repeat("0", 64), "2026-12-01T08:00:00.123456789Z", "id", []byte(`x`))
	f.Add(strings.Repeat("ab", 64), "1795993200123", "", []byte(``))
	f.Add("hmac-sha256="+strings.Repeat("f", 64), "", "", []byte(`[]`))
	key := []byte("fuzz-provider-key")
	pub := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize)).Public().(ed25519.PublicKey)
	base64Key, err := signature.DecodeSecret(signature.SchemeHMACBase64Key, b64(key))
	if err != nil {
		f.Fatal(err)
	}
	airtable, err := signature.New(signature.SchemeHMACBase64Key, signature.Params{Header: signature.HeaderAirtableSignature,
		Encoding: signature.EncodingHex, Prefix: "hmac-sha256="}, [][]byte{base64Key})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, sig, ts, id string, body []byte) {
		now := time.Unix(1795993200, 0)
		for name, tc := range map[string]struct {
			v              signature.Verifier
			sigH, tsH, idH string
		}{
			"zoom":     {signature.Zoom([][]byte{key}, 0), signature.HeaderZoomSignature, signature.HeaderZoomTimestamp, ""},
			"twitch":   {signature.Twitch([][]byte{key}, 0), signature.HeaderTwitchSignature, signature.HeaderTwitchTimestamp, signature.HeaderTwitchID},
			"discord":  {signature.Ed25519([]ed25519.PublicKey{pub}, 0), signature.HeaderDiscordSignature, signature.HeaderDiscordTimestamp, ""},
			"hubspot":  {signature.HubSpotV3([][]byte{key}, 0), signature.HeaderHubSpotV3, signature.HeaderHubSpotTimestmp, ""},
			"square":   {signature.Square([][]byte{key}), signature.HeaderSquare, "", ""},
			"airtable": {airtable, signature.HeaderAirtableSignature, "", ""},
		} {
			h := http.Header{}
			h.Set(tc.sigH, sig)
			if tc.tsH != "" {
				h.Set(tc.tsH, ts)
			}
			if tc.idH != "" {
				h.Set(tc.idH, id)
			}
			var err error
			if rv, ok := tc.v.(signature.RequestVerifier); ok {
				err = rv.VerifyRequest(signature.Request{Method: http.MethodPost, URL: "https://h.example/x"}, h, body, now)
			} else {
				err = tc.v.Verify(h, body, now)
			}
			classify(t, err, [][]byte{key, base64Key})
			if err == nil {
				t.Fatalf("%s: arbitrary headers %q %q %q pass", name, sig, ts, id)
			}
		}
	})
}

// Mailgun's Go library (mailgun-go's MailgunImpl.VerifyWebhookSignature)
// and package signature agree on a webhook body signed here as Mailgun's
// page prescribes, and both refuse it with another token.
func TestMailgunAgreesWithMailgunGo(t *testing.T) {
	t.Parallel()
	const key = "mg-webhook-signing-key-7d"
	mg := mailgun.NewMailgun("example.com", "not-an-api-key")
	mg.SetWebhookSigningKey(key)
	ours := signature.Mailgun([][]byte{[]byte(key)}, 0)
	now := time.Now()
	ts := strconv.FormatInt(now.Unix(), 10)
	m := hmac.New(sha256.New, []byte(key))
	m.Write([]byte(ts + "tok-42"))
	body := []byte(`{"signature":{"timestamp":"` + ts + `","token":"tok-42","signature":"` + hex.EncodeToString(m.Sum(nil)) +
		`"},"event-data":{"id":"evt-42","event":"delivered"}}`)
	for _, tc := range []struct {
		body []byte
		ok   bool
	}{
		{body, true},
		{[]byte(strings.Replace(string(body), "tok-42", "tok-43", 1)), false},
	} {
		var payload mailgun.WebhookPayload
		if err := json.Unmarshal(tc.body, &payload); err != nil {
			t.Fatal(err)
		}
		libOK, err := mg.VerifyWebhookSignature(payload.Signature)
		if err != nil || libOK != tc.ok {
			t.Errorf("mailgun-go: %v, %v; want %v", libOK, err, tc.ok)
		}
		if err := ours.Verify(http.Header{"Content-Type": {"application/json"}}, tc.body, now); (err == nil) != tc.ok {
			t.Errorf("package signature: %v; want ok %v", err, tc.ok)
		}
	}
}

// Mailgun's verifier tells ingest the token of a request it accepts and
// the timestamp signed with it: Verify accepts the request while that is
// within the tolerance (counted in whole seconds), and not a second
// longer. A JSON body and a form give the same; a request without a token
// gives none.
func TestMailgunNonce(t *testing.T) {
	t.Parallel()
	key := []byte("mg-nonce-key")
	for _, tol := range []time.Duration{0, 30 * time.Second, 90*time.Second + 500*time.Millisecond} {
		v := signature.Mailgun([][]byte{key}, tol)
		ts := int64(1795993200)
		m := hmac.New(sha256.New, key)
		m.Write([]byte(strconv.FormatInt(ts, 10) + "tok-n"))
		sig := hex.EncodeToString(m.Sum(nil))
		window := tol.Truncate(time.Second)
		if tol == 0 {
			window = signature.DefaultTolerance
		}
		for ctype, body := range map[string]string{
			"application/json":                  `{"signature":{"timestamp":"1795993200","token":"tok-n","signature":"` + sig + `"},"event-data":{}}`,
			"application/x-www-form-urlencoded": "timestamp=1795993200&token=tok-n&signature=" + sig,
		} {
			h := http.Header{"Content-Type": {ctype}}
			token, signedAt, ok := v.Nonce(h, []byte(body))
			if !ok || token != "tok-n" || !signedAt.Equal(time.Unix(ts, 0)) {
				t.Fatalf("tolerance %s, %s: Nonce = %q, %v, %t", tol, ctype, token, signedAt, ok)
			}
			last := signedAt.Add(window + time.Second - time.Nanosecond)
			if err := v.Verify(h, []byte(body), last); err != nil {
				t.Errorf("tolerance %s, %s: refused at %v: %v", tol, ctype, last.Sub(signedAt), err)
			}
			if err := v.Verify(h, []byte(body), last.Add(time.Nanosecond)); !errors.Is(err, signature.ErrTimestamp) {
				t.Errorf("tolerance %s, %s: at %v: %v, want ErrTimestamp", tol, ctype, last.Add(time.Nanosecond).Sub(signedAt), err)
			}
		}
	}
	if _, _, ok := signature.Mailgun([][]byte{key}, 0).Nonce(http.Header{}, []byte(`{"event-data":{}}`)); ok {
		t.Error("a body without a signature object has a nonce")
	}
}
