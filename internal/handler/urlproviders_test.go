package handler_test

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha1" //nolint:gosec // Twilio signs with HMAC-SHA1
	"crypto/sha256"
	"net/http"
	"strconv"
	"time"
)

// The presets of Twilio, Square, HubSpot (which sign the URL), Discord,
// Zoom, Twitch and Airtable, run through TestSignatureProviders (Mailgun,
// whose signature is inside the body, has its own test). Each signs as the
// provider's documentation, cited next to its row in package config,
// prescribes.

// The public URLs the URL-signing senders are configured with: what the
// provider requested, not the test server's address.
const (
	twilioURL  = "https://hooks.example.com/webhooks/twilio"
	squareURL  = "https://hooks.example.com/webhooks/square"
	hubspotURL = "https://hooks.example.com/webhooks/hubspot"
)

// twilioMAC returns base64 HMAC-SHA1(key, s), Twilio's signature.
func twilioMAC(key []byte, s string) string {
	m := hmac.New(sha1.New, key)
	m.Write([]byte(s))
	return b64Of(m.Sum(nil))
}

// bodySHA256Query returns the query string Twilio adds to a request with a
// JSON body.
func bodySHA256Query(body []byte) string {
	sum := sha256.Sum256(body)
	return "bodySHA256=" + hexOf(sum[:])
}

// ed25519Key returns the Ed25519 private key key names.
func ed25519Key(key []byte) ed25519.PrivateKey {
	seed := sha256.Sum256(key)
	return ed25519.NewKeyFromSeed(seed[:])
}

// ed25519Public returns the hex public key of the pair key names, as
// Discord's portal shows an application's public key.
func ed25519Public(key []byte) string {
	return hexOf(ed25519Key(key).Public().(ed25519.PublicKey))
}

var urlProviders = []provider{
	{
		name:       "twilio",
		lines:      []string{"preset: twilio", "public_url: " + twilioURL},
		idHeader:   "I-Twilio-Idempotency-Token",
		sigHeaders: []string{"X-Twilio-Signature"},
		query:      bodySHA256Query,
		sign: func(key []byte, _ string, _ int64, body []byte) http.Header {
			return header("X-Twilio-Signature", twilioMAC(key, twilioURL+"?"+bodySHA256Query(body)))
		},
	},
	{
		name:       "square",
		lines:      []string{"preset: square", "public_url: " + squareURL},
		sigHeaders: []string{"X-Square-Hmacsha256-Signature"},
		sign: func(key []byte, _ string, _ int64, body []byte) http.Header {
			return header("X-Square-Hmacsha256-Signature", b64Of(macOf(key, squareURL, string(body))))
		},
	},
	{
		// HubSpot's body is an array of events (TestHubSpotBatch); here the
		// delivery ID is in a header.
		name:        "hubspot",
		lines:       []string{"preset: hubspot", "public_url: " + hubspotURL, "delivery_id: { header: " + testIDHeader + " }"},
		idHeader:    testIDHeader,
		timestamped: true,
		sigHeaders:  []string{"X-HubSpot-Signature-v3", "X-HubSpot-Request-Timestamp"},
		sign: func(key []byte, _ string, ts int64, body []byte) http.Header {
			ms := strconv.FormatInt(ts*1000+123, 10)
			return header("X-HubSpot-Request-Timestamp", ms,
				"X-HubSpot-Signature-v3", b64Of(macOf(key, "POST", hubspotURL, string(body), ms)))
		},
	},
	{
		name:        "discord",
		lines:       []string{"preset: discord"},
		timestamped: true,
		public:      ed25519Public,
		sigHeaders:  []string{"X-Signature-Ed25519", "X-Signature-Timestamp"},
		sign: func(key []byte, _ string, ts int64, body []byte) http.Header {
			t := strconv.FormatInt(ts, 10)
			sig := ed25519.Sign(ed25519Key(key), append([]byte(t), body...))
			return header("X-Signature-Timestamp", t, "X-Signature-Ed25519", hexOf(sig))
		},
	},
	{
		name:        "zoom",
		lines:       []string{"preset: zoom", "delivery_id: { header: " + testIDHeader + " }"},
		idHeader:    testIDHeader,
		timestamped: true,
		sigHeaders:  []string{"x-zm-signature", "x-zm-request-timestamp"},
		sign: func(key []byte, _ string, ts int64, body []byte) http.Header {
			t := strconv.FormatInt(ts, 10)
			return header("x-zm-request-timestamp", t, "x-zm-signature", "v0="+hexOf(macOf(key, "v0:", t, ":", string(body))))
		},
	},
	{
		name:        "twitch",
		lines:       []string{"preset: twitch"},
		timestamped: true,
		tol:         600,
		// The delivery ID is Twitch-Eventsub-Message-Id, which is signed:
		// sign sets it.
		sigHeaders: []string{"Twitch-Eventsub-Message-Signature", "Twitch-Eventsub-Message-Timestamp", "Twitch-Eventsub-Message-Id"},
		sign: func(key []byte, id string, ts int64, body []byte) http.Header {
			t := time.Unix(ts, 123456789).UTC().Format(time.RFC3339Nano)
			return header("Twitch-Eventsub-Message-Id", id, "Twitch-Eventsub-Message-Timestamp", t,
				"Twitch-Eventsub-Message-Type", "notification",
				"Twitch-Eventsub-Message-Signature", "sha256="+hexOf(macOf(key, id, t, string(body))))
		},
	},
	{
		name:       "airtable",
		lines:      []string{"preset: airtable", "delivery_id: { header: " + testIDHeader + " }"},
		idHeader:   testIDHeader,
		public:     func(key []byte) string { return b64Of(key) },
		sigHeaders: []string{"X-Airtable-Content-MAC"},
		sign: func(key []byte, _ string, _ int64, body []byte) http.Header {
			return header("X-Airtable-Content-MAC", "hmac-sha256="+hexOf(macOf(key, string(body))))
		},
	},
}
