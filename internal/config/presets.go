package config

import (
	"errors"
	"fmt"
	"time"

	"github.com/hookgate/hookgate/internal/signature"
)

// Preset is one row of the preset table. Its plain values say where a
// provider's deliveries carry their ID and event type, how they are signed
// and which handshake the provider sends. Adding a provider is adding a row
// to [Presets]. Only a new signature scheme also needs a verifier in package
// signature, and only a new handshake needs its kind in package sender.
type Preset struct {
	// Name is what `preset:` in hookgate.yaml names. `signature.scheme:`
	// names it to take this row's signature check alone.
	Name string
	// DeliveryID is where the delivery ID is. When empty, the sender must
	// say.
	DeliveryID DeliveryID
	// EventType is where the event type is, if anywhere.
	EventType EventType
	// EventTypeEnvelope is where the event type is instead, when the value
	// at EventType is EventTypeEnvelope.When.
	EventTypeEnvelope Envelope
	// Signature is how the provider signs its requests.
	Signature PresetSignature
	// Handshake is the kind of handshake request the provider sends. It
	// is answered after its signature check, and stores nothing.
	Handshake string
	// Replay says whether a captured request of the provider can be sent
	// again under a new delivery ID, and what to do about it.
	// docs/providers.md shows it.
	Replay Replay
	// Docs is the provider's documentation of its webhooks.
	Docs string
}

// PresetSignature is a preset's signature check.
type PresetSignature struct {
	// Scheme is the verifier of package signature that checks it, or
	// SchemeNone for a provider that signs nothing.
	Scheme string
	// Header, Encoding and Prefix are where the MAC is and how it is
	// written, for the schemes that read them. Encoding is hex or base64.
	Header, Encoding, Prefix string
	// Signed documents what is signed, in the providers page's notation.
	// The scheme's verifier computes it.
	Signed string
	// Tolerance is how far a signed timestamp may be from now by default,
	// for the schemes that sign one. Zero means the signature package's
	// default.
	Tolerance time.Duration
	// Layout is the signature header's shape, for the schemes that read
	// it.
	Layout signature.Layout
	// SignatureHeaders are the request headers that carry the provider's
	// signature, or for the token schemes the secret itself. They include
	// any other signature header the provider sends, such as GitHub's
	// legacy X-Hub-Signature. With a body, they make a request anyone can
	// send again. So they are never stored with an event, whatever
	// store_headers says. Neither the operator API nor the console can show
	// them, and forwards never send them.
	SignatureHeaders []string
	// SignatureObject is the top-level member of a JSON body that carries
	// the signature, such as Mailgun's "signature". SignatureFields are the
	// fields of a form body that do. After the signature check, they are
	// removed from the body before it is stored, hashed and forwarded.
	SignatureObject string
	SignatureFields []string
}

// Params returns the check's parameters for [signature.New], with the
// sender's tolerance.
func (ps PresetSignature) Params(tolerance time.Duration) signature.Params {
	return signature.Params{Header: ps.Header, Encoding: ps.Encoding, Prefix: ps.Prefix, Tolerance: tolerance, Layout: ps.Layout}
}

// Replay is what a captured request of a preset allows, when someone sends
// a validly signed request to hookgate again. It may come from a proxy log
// or a pasted debug dump. When the delivery ID is signed, a copy has the
// same ID and is a duplicate. When the ID is an unsigned header, a copy can
// carry a fresh ID and is accepted as a new event. That works within the
// tolerance when a timestamp is signed, and at any time otherwise. The
// replay table of docs/providers.md is made of these, and a test checks
// NewID for each preset.
type Replay struct {
	// NewID reports that a copy under a new delivery ID is accepted as a
	// new event, with the preset's defaults.
	NewID bool
	// Why says why or why not, and until when, in the page's words.
	Why string
	// Do is what to do about it.
	Do string
}

// Replay texts of the common cases.
const (
	doNothing     = "nothing needed"
	doAfterKeyGap = "nothing for a new ID; a copy sent after `retention` is a new event with the same ID: let the services behind hookgate deduplicate on it (`X-Hookgate-Delivery-Id`)"
	doBodyHash    = "body-hash IDs (`delivery_id: { body_sha256: true }`) if the provider's retries resend the same bytes; keep signed requests out of logs"
	doToken       = "use HTTPS, keep requests out of logs, and rotate the token when one leaks: body-hash IDs stop only verbatim copies"
)

// idInSignedBody is the [Replay] of a delivery ID at ptr in the signed
// body. tol is the default tolerance as the page writes it, such as
// "300 s". It is "" for a scheme that signs no timestamp, here and below.
func idInSignedBody(ptr, tol string) Replay {
	return idSigned("the ID (`"+ptr+"`) is in the signed body", tol)
}

// idIsBodyHash is the [Replay] of a delivery ID that is the SHA-256 of the
// signed body.
func idIsBodyHash(tol string) Replay {
	return idSigned("the ID is the SHA-256 of the signed body", tol)
}

// idHeaderSigned is the [Replay] of a delivery ID in the signed header h.
func idHeaderSigned(h, tol string) Replay { return idSigned("the ID header `"+h+"` is signed", tol) }

func idSigned(why, tol string) Replay {
	if tol == "" {
		return Replay{Why: why + "; a copy is a duplicate while its key is retained (`retention`)", Do: doAfterKeyGap}
	}
	return Replay{Why: why + "; a copy is a duplicate, and refused once its timestamp is outside `tolerance` (" + tol + ")", Do: doNothing}
}

// idHeaderUnsigned is the [Replay] of a delivery ID in the unsigned header
// h.
func idHeaderUnsigned(h, tol string) Replay {
	if tol == "" {
		return Replay{NewID: true, Why: "at any time: the ID header `" + h + "` is not signed, and no timestamp is", Do: doBodyHash}
	}
	return Replay{NewID: true, Why: "within `tolerance` (" + tol + "): the ID header `" + h + "` is not signed, the timestamp is",
		Do: "body-hash IDs (`delivery_id: { body_sha256: true }`) if the provider's retries resend the same bytes, or a shorter `tolerance` (`tolerance: 30s`) to narrow the window"}
}

// nothingSigned is the [Replay] of a request that carries the secret token
// itself.
var nothingSigned = Replay{NewID: true, Why: "whatever the body: nothing is signed, a captured request holds the secret token, and with it any body is accepted under any ID", Do: doToken}

// Envelope says where the event type is when the value at the sender's
// event type location is When. It is then at JSONPointer instead.
type Envelope struct {
	When        string
	JSONPointer string
}

// Handshake kinds, for [Preset.Handshake].
const (
	HandshakeNone = ""
	// HandshakeSlackURLVerification answers a JSON body with "type":
	// "url_verification" with its "challenge".
	HandshakeSlackURLVerification = "slack-url-verification"
	// HandshakeZoomURLValidation answers a JSON body with "event":
	// "endpoint.url_validation". The answer holds "plainToken" and
	// "encryptedToken", its hex HMAC-SHA256 under the request's secret.
	HandshakeZoomURLValidation = "zoom-url-validation"
	// HandshakeTwitchVerification answers a request whose
	// Twitch-Eventsub-Message-Type is webhook_callback_verification. The
	// answer is its /challenge as text/plain.
	HandshakeTwitchVerification = "twitch-callback-verification"
	// HandshakeDiscordPing answers a PING, a JSON body with "type": 1,
	// with a PONG, {"type":1}.
	HandshakeDiscordPing = "discord-ping"
	// HandshakeMetaSubscribe answers a GET with hub.mode=subscribe whose
	// hub.verify_token is the sender's verify_token. The answer is
	// hub.challenge as text/plain. Another token gets 403.
	HandshakeMetaSubscribe = "meta-subscribe"
)

// Signature schemes besides the presets' own names.
const (
	SchemeNone = "none"
	SchemeHMAC = signature.SchemeHMAC
)

// Presets is the preset table, in the order the documentation lists them.
var Presets = []Preset{
	{
		Name:       "github",
		DeliveryID: DeliveryID{Header: "X-GitHub-Delivery"},
		EventType:  EventType{Header: "X-GitHub-Event"},
		Signature: PresetSignature{Scheme: signature.SchemeHMAC, Header: signature.HeaderGitHub, Encoding: signature.EncodingHex,
			Prefix: "sha256=", Signed: "body",
			SignatureHeaders: []string{signature.HeaderGitHub, "X-Hub-Signature"}},
		Replay: idHeaderUnsigned("X-GitHub-Delivery", ""),
		Docs:   "https://docs.github.com/en/webhooks/using-webhooks/validating-webhook-deliveries",
	},
	{
		Name:       "stripe",
		DeliveryID: DeliveryID{JSONPointer: "/id"},
		EventType:  EventType{JSONPointer: "/type"},
		Signature: PresetSignature{Scheme: signature.SchemeStripe, Header: signature.HeaderStripe, Encoding: signature.EncodingHex,
			Signed: "t=<ts>,v1=<hex of <ts>.<body>>", Tolerance: signature.DefaultTolerance,
			SignatureHeaders: []string{signature.HeaderStripe}},
		Replay: idInSignedBody("/id", "300 s"),
		Docs:   "https://docs.stripe.com/webhooks#verify-manually",
	},
	{
		Name:       "shopify",
		DeliveryID: DeliveryID{Header: "X-Shopify-Event-Id"},
		EventType:  EventType{Header: "X-Shopify-Topic"},
		Signature: PresetSignature{Scheme: signature.SchemeHMAC, Header: signature.HeaderShopify, Encoding: signature.EncodingBase64,
			Signed:           "body",
			SignatureHeaders: []string{signature.HeaderShopify}},
		Replay: idHeaderUnsigned("X-Shopify-Event-Id", ""),
		Docs:   "https://shopify.dev/docs/apps/build/webhooks/subscribe/https#step-5-verify-the-webhook",
	},
	{
		Name:              "slack",
		DeliveryID:        DeliveryID{JSONPointer: "/event_id"},
		EventType:         EventType{JSONPointer: "/type"},
		EventTypeEnvelope: Envelope{When: "event_callback", JSONPointer: "/event/type"},
		Signature: PresetSignature{Scheme: signature.SchemeSlack, Header: signature.HeaderSlackSignature, Encoding: signature.EncodingHex,
			Prefix: "v0=", Signed: "v0:<X-Slack-Request-Timestamp>:<body>", Tolerance: signature.DefaultTolerance,
			SignatureHeaders: []string{signature.HeaderSlackSignature}},
		Handshake: HandshakeSlackURLVerification,
		Replay:    idInSignedBody("/event_id", "300 s"),
		Docs:      "https://api.slack.com/authentication/verifying-requests-from-slack",
	},
	{
		Name:       "standard-webhooks",
		DeliveryID: DeliveryID{Header: "webhook-id"},
		EventType:  EventType{JSONPointer: "/type"},
		Signature: PresetSignature{Scheme: signature.SchemeStandardWebhooks, Header: signature.HeaderWebhookSignature, Encoding: signature.EncodingBase64,
			Prefix: "v1,", Signed: "<webhook-id>.<webhook-timestamp>.<body>", Tolerance: signature.DefaultTolerance,
			SignatureHeaders: []string{signature.HeaderWebhookSignature}},
		Replay: idHeaderSigned("webhook-id", "300 s"),
		Docs:   "https://github.com/standard-webhooks/standard-webhooks/blob/main/spec/standard-webhooks.md",
	},
	{
		Name:      "generic",
		Signature: PresetSignature{Scheme: SchemeNone},
		Replay: Replay{NewID: true,
			Why: "with `delivery_id: { header: … }` and `signature: { scheme: hmac-sha256 }`, at any time (the header is not signed, and no timestamp is); not with `json_pointer` or `body_sha256` (the ID is then in, or the hash of, the signed body: a copy is a duplicate while its key is retained); without a signature anyone can send anything",
			Do:  "sign with `hmac-sha256` and take the ID from the body (`json_pointer` or `body_sha256`)"},
	},
	// The providers below are rows of the same shapes. Each cites the
	// provider's own documentation of its webhooks' headers and signature.
	{
		// https://docs.gitlab.com/user/project/integrations/webhooks/#delivery-headers
		// https://docs.gitlab.com/user/project/integrations/webhooks/#create-a-webhook (secret token)
		// Idempotency-Key stays the same across GitLab's retries of a delivery.
		Name:       "gitlab",
		DeliveryID: DeliveryID{Header: "Idempotency-Key"},
		EventType:  EventType{Header: "X-Gitlab-Event"},
		Signature: PresetSignature{Scheme: signature.SchemeToken, Header: "X-Gitlab-Token", Signed: "nothing: the header holds the secret token itself",
			SignatureHeaders: []string{"X-Gitlab-Token"}},
		Replay: nothingSigned,
		Docs:   "https://docs.gitlab.com/user/project/integrations/webhooks/",
	},
	{
		// https://support.atlassian.com/bitbucket-cloud/docs/manage-webhooks/#Secure-webhooks
		// https://support.atlassian.com/bitbucket-cloud/docs/event-payloads/#HTTP-headers
		Name:       "bitbucket",
		DeliveryID: DeliveryID{Header: "X-Request-UUID"},
		EventType:  EventType{Header: "X-Event-Key"},
		Signature: PresetSignature{Scheme: signature.SchemeHMAC, Header: "X-Hub-Signature", Encoding: signature.EncodingHex,
			Prefix: "sha256=", Signed: "body",
			SignatureHeaders: []string{"X-Hub-Signature"}},
		Replay: idHeaderUnsigned("X-Request-UUID", ""),
		Docs:   "https://support.atlassian.com/bitbucket-cloud/docs/manage-webhooks/",
	},
	{
		// https://docs.gitea.com/usage/webhooks (X-Gitea-Delivery, X-Gitea-Event,
		// X-Gitea-Signature: hex HMAC-SHA256 of the body). Forgejo sends the
		// same X-Gitea-* headers besides its own, so this preset serves both.
		Name:       "gitea",
		DeliveryID: DeliveryID{Header: "X-Gitea-Delivery"},
		EventType:  EventType{Header: "X-Gitea-Event"},
		Signature: PresetSignature{Scheme: signature.SchemeHMAC, Header: "X-Gitea-Signature", Encoding: signature.EncodingHex, Signed: "body",
			SignatureHeaders: []string{"X-Gitea-Signature", "X-Gogs-Signature", "X-Hub-Signature", "X-Hub-Signature-256"}},
		Replay: idHeaderUnsigned("X-Gitea-Delivery", ""),
		Docs:   "https://docs.gitea.com/usage/webhooks",
	},
	{
		// https://forgejo.org/docs/latest/user/webhooks/ (X-Forgejo-Delivery,
		// X-Forgejo-Event, X-Forgejo-Signature).
		Name:       "forgejo",
		DeliveryID: DeliveryID{Header: "X-Forgejo-Delivery"},
		EventType:  EventType{Header: "X-Forgejo-Event"},
		Signature: PresetSignature{Scheme: signature.SchemeHMAC, Header: "X-Forgejo-Signature", Encoding: signature.EncodingHex, Signed: "body",
			SignatureHeaders: []string{"X-Forgejo-Signature", "X-Gitea-Signature", "X-Gogs-Signature", "X-Hub-Signature", "X-Hub-Signature-256"}},
		Replay: idHeaderUnsigned("X-Forgejo-Delivery", ""),
		Docs:   "https://forgejo.org/docs/latest/user/webhooks/",
	},
	{
		// https://razorpay.com/docs/webhooks/validate-test/ (X-Razorpay-Signature:
		// hex HMAC-SHA256 of the raw body; X-Razorpay-Event-Id is the same on
		// every retry of an event, for deduplication).
		Name:       "razorpay",
		DeliveryID: DeliveryID{Header: "X-Razorpay-Event-Id"},
		EventType:  EventType{JSONPointer: "/event"},
		Signature: PresetSignature{Scheme: signature.SchemeHMAC, Header: "X-Razorpay-Signature", Encoding: signature.EncodingHex, Signed: "body",
			SignatureHeaders: []string{"X-Razorpay-Signature"}},
		Replay: idHeaderUnsigned("X-Razorpay-Event-Id", ""),
		Docs:   "https://razorpay.com/docs/webhooks/validate-test/",
	},
	{
		// https://woocommerce.github.io/woocommerce-rest-api-docs/#webhooks
		// (X-WC-Webhook-Signature: base64 HMAC-SHA256 of the body;
		// X-WC-Webhook-Delivery-ID, X-WC-Webhook-Topic).
		Name:       "woocommerce",
		DeliveryID: DeliveryID{Header: "X-WC-Webhook-Delivery-ID"},
		EventType:  EventType{Header: "X-WC-Webhook-Topic"},
		Signature: PresetSignature{Scheme: signature.SchemeHMAC, Header: "X-WC-Webhook-Signature", Encoding: signature.EncodingBase64, Signed: "body",
			SignatureHeaders: []string{"X-WC-Webhook-Signature"}},
		Replay: idHeaderUnsigned("X-WC-Webhook-Delivery-ID", ""),
		Docs:   "https://woocommerce.github.io/woocommerce-rest-api-docs/#webhooks",
	},
	{
		// https://developers.intercom.com/docs/references/webhooks/webhook-models
		// (X-Hub-Signature: sha1=<hex HMAC-SHA1 of the body, keyed with the
		// app's client secret>; notification /id, /topic).
		Name:       "intercom",
		DeliveryID: DeliveryID{JSONPointer: "/id"},
		EventType:  EventType{JSONPointer: "/topic"},
		Signature: PresetSignature{Scheme: signature.SchemeHMACSHA1, Header: "X-Hub-Signature", Encoding: signature.EncodingHex,
			Prefix: "sha1=", Signed: "body (HMAC-SHA1)",
			SignatureHeaders: []string{"X-Hub-Signature"}},
		Replay: idInSignedBody("/id", ""),
		Docs:   "https://developers.intercom.com/docs/references/webhooks/webhook-models",
	},
	{
		// https://linear.app/developers/webhooks#securing-webhooks (Linear-Signature:
		// hex HMAC-SHA256 of the body; Linear-Delivery, Linear-Event). The
		// webhookTimestamp inside the body is not checked.
		Name:       "linear",
		DeliveryID: DeliveryID{Header: "Linear-Delivery"},
		EventType:  EventType{Header: "Linear-Event"},
		Signature: PresetSignature{Scheme: signature.SchemeHMAC, Header: "Linear-Signature", Encoding: signature.EncodingHex, Signed: "body",
			SignatureHeaders: []string{"Linear-Signature"}},
		Replay: Replay{NewID: true, Why: idHeaderUnsigned("Linear-Delivery", "").Why,
			Do: "body-hash IDs (`delivery_id: { body_sha256: true }`) if Linear's retries resend the same bytes (its body holds `webhookTimestamp`, which hookgate does not check), or let the service behind hookgate refuse an old `webhookTimestamp`; keep signed requests out of logs"},
		Docs: "https://linear.app/developers/webhooks",
	},
	{
		// https://docs.sentry.io/organization/integrations/integration-platform/webhooks/
		// (Sentry-Hook-Signature: hex HMAC-SHA256 of the body with the client
		// secret; Request-ID; Sentry-Hook-Resource).
		Name:       "sentry",
		DeliveryID: DeliveryID{Header: "Request-ID"},
		EventType:  EventType{Header: "Sentry-Hook-Resource"},
		Signature: PresetSignature{Scheme: signature.SchemeHMAC, Header: "Sentry-Hook-Signature", Encoding: signature.EncodingHex, Signed: "body",
			SignatureHeaders: []string{"Sentry-Hook-Signature"}},
		Replay: idHeaderUnsigned("Request-ID", ""),
		Docs:   "https://docs.sentry.io/organization/integrations/integration-platform/webhooks/",
	},
	{
		// https://www.typeform.com/developers/webhooks/secure-your-webhooks/
		// (Typeform-Signature: sha256=<base64 HMAC-SHA256 of the body>;
		// /event_id, /event_type).
		Name:       "typeform",
		DeliveryID: DeliveryID{JSONPointer: "/event_id"},
		EventType:  EventType{JSONPointer: "/event_type"},
		Signature: PresetSignature{Scheme: signature.SchemeHMAC, Header: "Typeform-Signature", Encoding: signature.EncodingBase64,
			Prefix: "sha256=", Signed: "body",
			SignatureHeaders: []string{"Typeform-Signature"}},
		Replay: idInSignedBody("/event_id", ""),
		Docs:   "https://www.typeform.com/developers/webhooks/secure-your-webhooks/",
	},
	{
		// https://vercel.com/docs/webhooks/webhooks-api#securing-webhooks
		// (x-vercel-signature: hex HMAC-SHA1 of the body; /id, /type).
		Name:       "vercel",
		DeliveryID: DeliveryID{JSONPointer: "/id"},
		EventType:  EventType{JSONPointer: "/type"},
		Signature: PresetSignature{Scheme: signature.SchemeHMACSHA1, Header: "X-Vercel-Signature", Encoding: signature.EncodingHex, Signed: "body (HMAC-SHA1)",
			SignatureHeaders: []string{"X-Vercel-Signature"}},
		Replay: idInSignedBody("/id", ""),
		Docs:   "https://vercel.com/docs/webhooks/webhooks-api",
	},
	{
		// https://docs.cdp.coinbase.com/commerce-onchain/docs/webhooks-security
		// (X-CC-Webhook-Signature: hex HMAC-SHA256 of the body). The top-level
		// id numbers the delivery attempt; the event's is /event/id.
		Name:       "coinbase-commerce",
		DeliveryID: DeliveryID{JSONPointer: "/event/id"},
		EventType:  EventType{JSONPointer: "/event/type"},
		Signature: PresetSignature{Scheme: signature.SchemeHMAC, Header: "X-CC-Webhook-Signature", Encoding: signature.EncodingHex, Signed: "body",
			SignatureHeaders: []string{"X-CC-Webhook-Signature"}},
		Replay: idInSignedBody("/event/id", ""),
		Docs:   "https://docs.cdp.coinbase.com/commerce-onchain/docs/webhooks-security",
	},
	{
		// https://docs.lemonsqueezy.com/help/webhooks/signing-requests (X-Signature:
		// hex HMAC-SHA256 of the body; X-Event-Name). Lemon Squeezy sends no
		// delivery ID: the SHA-256 of the body is one.
		Name:       "lemon-squeezy",
		DeliveryID: DeliveryID{BodySHA256: true},
		EventType:  EventType{Header: "X-Event-Name"},
		Signature: PresetSignature{Scheme: signature.SchemeHMAC, Header: "X-Signature", Encoding: signature.EncodingHex, Signed: "body",
			SignatureHeaders: []string{"X-Signature"}},
		Replay: idIsBodyHash(""),
		Docs:   "https://docs.lemonsqueezy.com/help/webhooks/signing-requests",
	},
	{
		// https://developer.pagerduty.com/docs/webhooks-v3-overview#verifying-signatures
		// (X-PagerDuty-Signature: v1=<hex HMAC-SHA256 of the body>, several
		// comma-separated while a secret rotates; /event/id, /event/event_type).
		Name:       "pagerduty",
		DeliveryID: DeliveryID{JSONPointer: "/event/id"},
		EventType:  EventType{JSONPointer: "/event/event_type"},
		Signature: PresetSignature{Scheme: signature.SchemeList, Header: "X-PagerDuty-Signature", Encoding: signature.EncodingHex,
			Signed: "v1=<hex of body>[,v1=...]", Layout: signature.Layout{Separator: ",", SignatureKey: "v1"},
			SignatureHeaders: []string{"X-PagerDuty-Signature"}},
		Replay: idInSignedBody("/event/id", ""),
		Docs:   "https://developer.pagerduty.com/docs/webhooks-v3-overview",
	},
	{
		// https://developer.paddle.com/webhooks/signature-verification
		// (Paddle-Signature: ts=<unix>;h1=<hex HMAC-SHA256 of "<ts>:<body>">;
		// /event_id, /event_type). Paddle's SDKs allow 5 s; the default here
		// is 300 s, as for every timed preset (tolerance: sets it).
		Name:       "paddle",
		DeliveryID: DeliveryID{JSONPointer: "/event_id"},
		EventType:  EventType{JSONPointer: "/event_type"},
		Signature: PresetSignature{Scheme: signature.SchemeList, Header: "Paddle-Signature", Encoding: signature.EncodingHex,
			Signed: "ts=<ts>;h1=<hex of <ts>:<body>>", Tolerance: signature.DefaultTolerance,
			Layout:           signature.Layout{Separator: ";", TimestampKey: "ts", SignatureKey: "h1", Joiner: ":"},
			SignatureHeaders: []string{"Paddle-Signature"}},
		Replay: idInSignedBody("/event_id", "300 s"),
		Docs:   "https://developer.paddle.com/webhooks/signature-verification",
	},
	{
		// https://docs.mux.com/core/verify-webhook-signatures (Mux-Signature:
		// t=<unix>,v1=<hex HMAC-SHA256 of "<t>.<body>">; /id, /type).
		Name:       "mux",
		DeliveryID: DeliveryID{JSONPointer: "/id"},
		EventType:  EventType{JSONPointer: "/type"},
		Signature: PresetSignature{Scheme: signature.SchemeList, Header: "Mux-Signature", Encoding: signature.EncodingHex,
			Signed: "t=<ts>,v1=<hex of <ts>.<body>>", Tolerance: signature.DefaultTolerance,
			Layout:           signature.Layout{Separator: ",", TimestampKey: "t", SignatureKey: "v1", Joiner: "."},
			SignatureHeaders: []string{"Mux-Signature"}},
		Replay: idInSignedBody("/id", "300 s"),
		Docs:   "https://docs.mux.com/core/verify-webhook-signatures",
	},
	{
		// https://developer.calendly.com/api-docs/4c305798a61d3-webhook-signatures
		// (Calendly-Webhook-Signature: t=<unix>,v1=<hex HMAC-SHA256 of
		// "<t>.<body>">; /event). Calendly sends no delivery ID: the SHA-256 of
		// the body is one.
		Name:       "calendly",
		DeliveryID: DeliveryID{BodySHA256: true},
		EventType:  EventType{JSONPointer: "/event"},
		Signature: PresetSignature{Scheme: signature.SchemeList, Header: "Calendly-Webhook-Signature", Encoding: signature.EncodingHex,
			Signed: "t=<ts>,v1=<hex of <ts>.<body>>", Tolerance: signature.DefaultTolerance,
			Layout:           signature.Layout{Separator: ",", TimestampKey: "t", SignatureKey: "v1", Joiner: "."},
			SignatureHeaders: []string{"Calendly-Webhook-Signature"}},
		Replay: idIsBodyHash("300 s"),
		Docs:   "https://developer.calendly.com/api-docs/4c305798a61d3-webhook-signatures",
	},
	{
		// https://developer.zendesk.com/documentation/webhooks/verifying/
		// (X-Zendesk-Webhook-Signature: base64 HMAC-SHA256 of
		// "<X-Zendesk-Webhook-Signature-Timestamp><body>", the timestamp an RFC
		// 3339 time); X-Zendesk-Webhook-Invocation-Id; /type of event webhooks.
		Name:       "zendesk",
		DeliveryID: DeliveryID{Header: "X-Zendesk-Webhook-Invocation-Id"},
		EventType:  EventType{JSONPointer: "/type"},
		Signature: PresetSignature{Scheme: signature.SchemeTimestampHeader, Header: "X-Zendesk-Webhook-Signature", Encoding: signature.EncodingBase64,
			Signed: "<X-Zendesk-Webhook-Signature-Timestamp><body>", Tolerance: signature.DefaultTolerance,
			Layout:           signature.Layout{TimestampHeader: "X-Zendesk-Webhook-Signature-Timestamp"},
			SignatureHeaders: []string{"X-Zendesk-Webhook-Signature"}},
		Replay: idHeaderUnsigned("X-Zendesk-Webhook-Invocation-Id", "300 s"),
		Docs:   "https://developer.zendesk.com/documentation/webhooks/verifying/",
	},
	{
		// https://core.telegram.org/bots/api#setwebhook (secret_token is sent
		// in X-Telegram-Bot-Api-Secret-Token; each Update has /update_id).
		Name:       "telegram",
		DeliveryID: DeliveryID{JSONPointer: "/update_id"},
		Signature: PresetSignature{Scheme: signature.SchemeToken, Header: "X-Telegram-Bot-Api-Secret-Token", Signed: "nothing: the header holds the secret token itself",
			SignatureHeaders: []string{"X-Telegram-Bot-Api-Secret-Token"}},
		Replay: nothingSigned,
		Docs:   "https://core.telegram.org/bots/api#setwebhook",
	},
	{
		// https://developers.line.biz/en/docs/messaging-api/verify-webhook-signature/
		// (x-line-signature: base64 HMAC-SHA256 of the body with the channel
		// secret). https://developers.line.biz/en/docs/messaging-api/receiving-messages/#webhook-event-in-one-on-one-talk-or-group-chat
		// webhookEventId is the same when LINE redelivers the event.
		Name:       "line",
		DeliveryID: DeliveryID{JSONPointer: "/events/0/webhookEventId"},
		EventType:  EventType{JSONPointer: "/events/0/type"},
		Signature: PresetSignature{Scheme: signature.SchemeHMAC, Header: "X-Line-Signature", Encoding: signature.EncodingBase64, Signed: "body",
			SignatureHeaders: []string{"X-Line-Signature"}},
		Replay: idInSignedBody("/events/0/webhookEventId", ""),
		Docs:   "https://developers.line.biz/en/docs/messaging-api/verify-webhook-signature/",
	},
	{
		// https://developers.facebook.com/docs/graph-api/webhooks/getting-started#validate-payloads
		// (X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the body with the
		// app secret>; /object). Meta sends no delivery ID: the SHA-256 of
		// the body is one. Covers Facebook, Instagram and WhatsApp.
		Name:       "meta",
		DeliveryID: DeliveryID{BodySHA256: true},
		EventType:  EventType{JSONPointer: "/object"},
		Signature: PresetSignature{Scheme: signature.SchemeHMAC, Header: "X-Hub-Signature-256", Encoding: signature.EncodingHex,
			Prefix: "sha256=", Signed: "body",
			SignatureHeaders: []string{"X-Hub-Signature-256", "X-Hub-Signature"}},
		// https://developers.facebook.com/docs/graph-api/webhooks/getting-started#verification-requests
		// (GET ?hub.mode=subscribe&hub.challenge=...&hub.verify_token=...).
		Handshake: HandshakeMetaSubscribe,
		Replay:    idIsBodyHash(""),
		Docs:      "https://developers.facebook.com/docs/graph-api/webhooks/getting-started",
	},
	{
		// https://www.twilio.com/docs/sendgrid/for-developers/tracking-events/getting-started-event-webhook-security-features
		// (X-Twilio-Email-Event-Webhook-Signature: base64 ECDSA P-256 signature
		// of SHA-256("<X-Twilio-Email-Event-Webhook-Timestamp><body>"); the
		// secret is the verification key, base64 DER). The body is an array of
		// events and carries no delivery ID: the SHA-256 of the body is one.
		Name:       "sendgrid",
		DeliveryID: DeliveryID{BodySHA256: true},
		EventType:  EventType{JSONPointer: "/0/event"},
		Signature: PresetSignature{Scheme: signature.SchemeECDSA, Header: "X-Twilio-Email-Event-Webhook-Signature", Encoding: signature.EncodingBase64,
			Signed: "ECDSA P-256 of <X-Twilio-Email-Event-Webhook-Timestamp><body>", Tolerance: signature.DefaultTolerance,
			Layout:           signature.Layout{TimestampHeader: "X-Twilio-Email-Event-Webhook-Timestamp"},
			SignatureHeaders: []string{"X-Twilio-Email-Event-Webhook-Signature"}},
		Replay: idIsBodyHash("300 s"),
		Docs:   "https://www.twilio.com/docs/sendgrid/for-developers/tracking-events/getting-started-event-webhook-security-features",
	},
	{
		// https://www.twilio.com/docs/usage/security#validating-requests
		// (X-Twilio-Signature: base64 HMAC-SHA1 of the full URL followed by
		// the form's parameters sorted by name, each name then value; a JSON
		// body is covered by the URL's bodySHA256 parameter instead).
		// https://www.twilio.com/docs/usage/webhooks/webhooks-connection-overrides
		// I-Twilio-Idempotency-Token is the same on each retry of a request.
		// The URL is the sender's public_url (or the request's own).
		Name:       "twilio",
		DeliveryID: DeliveryID{Header: "I-Twilio-Idempotency-Token"},
		Signature: PresetSignature{Scheme: signature.SchemeTwilio, Header: signature.HeaderTwilio, Encoding: signature.EncodingBase64,
			Signed:           "<URL><name><value>... of the form, sorted by name (HMAC-SHA1)",
			SignatureHeaders: []string{signature.HeaderTwilio}},
		Replay: idHeaderUnsigned("I-Twilio-Idempotency-Token", ""),
		Docs:   "https://www.twilio.com/docs/usage/security#validating-requests",
	},
	{
		// https://discord.com/developers/docs/interactions/overview#setting-up-an-endpoint-validating-security-request-headers
		// (X-Signature-Ed25519: hex Ed25519 signature of
		// "<X-Signature-Timestamp><body>" under the application's public
		// key); https://discord.com/developers/docs/interactions/receiving-and-responding#interaction-object
		// (/id, /type; type 1 is PING, answered with {"type":1}).
		Name:       "discord",
		DeliveryID: DeliveryID{JSONPointer: "/id"},
		EventType:  EventType{JSONPointer: "/type"},
		Signature: PresetSignature{Scheme: signature.SchemeEd25519, Header: signature.HeaderDiscordSignature, Encoding: signature.EncodingHex,
			Signed: "Ed25519 of <X-Signature-Timestamp><body>", Tolerance: signature.DefaultTolerance,
			SignatureHeaders: []string{signature.HeaderDiscordSignature}},
		Handshake: HandshakeDiscordPing,
		Replay:    idInSignedBody("/id", "300 s"),
		Docs:      "https://discord.com/developers/docs/interactions/overview#setting-up-an-endpoint-validating-security-request-headers",
	},
	{
		// https://developers.zoom.us/docs/api/webhooks/#verify-webhook-events
		// (x-zm-signature: v0=<hex HMAC-SHA256 of
		// "v0:<x-zm-request-timestamp>:<body>"> under the secret token; /event)
		// and #validate-your-webhook-endpoint (endpoint.url_validation). Zoom
		// sends no delivery ID: the SHA-256 of the body is one.
		Name:       "zoom",
		DeliveryID: DeliveryID{BodySHA256: true},
		EventType:  EventType{JSONPointer: "/event"},
		Signature: PresetSignature{Scheme: signature.SchemeZoom, Header: signature.HeaderZoomSignature, Encoding: signature.EncodingHex,
			Prefix: "v0=", Signed: "v0:<x-zm-request-timestamp>:<body>", Tolerance: signature.DefaultTolerance,
			SignatureHeaders: []string{signature.HeaderZoomSignature}},
		Handshake: HandshakeZoomURLValidation,
		Replay:    idIsBodyHash("300 s"),
		Docs:      "https://developers.zoom.us/docs/api/webhooks/",
	},
	{
		// https://dev.twitch.tv/docs/eventsub/handling-webhook-events/
		// (Twitch-Eventsub-Message-Signature: sha256=<hex HMAC-SHA256 of
		// "<message id><timestamp><body>">; refuse messages older than 10
		// minutes; Twitch-Eventsub-Message-Id is the same on a resend;
		// webhook_callback_verification answered with the challenge;
		// revocation messages are recorded like notifications).
		Name:       "twitch",
		DeliveryID: DeliveryID{Header: signature.HeaderTwitchID},
		EventType:  EventType{JSONPointer: "/subscription/type"},
		Signature: PresetSignature{Scheme: signature.SchemeTwitch, Header: signature.HeaderTwitchSignature, Encoding: signature.EncodingHex,
			Prefix: "sha256=", Signed: "<Twitch-Eventsub-Message-Id><Twitch-Eventsub-Message-Timestamp><body>", Tolerance: 10 * time.Minute,
			SignatureHeaders: []string{signature.HeaderTwitchSignature}},
		Handshake: HandshakeTwitchVerification,
		Replay:    idHeaderSigned("Twitch-Eventsub-Message-Id", "600 s"),
		Docs:      "https://dev.twitch.tv/docs/eventsub/handling-webhook-events/",
	},
	{
		// https://developer.squareup.com/docs/webhooks/step3validate
		// (x-square-hmacsha256-signature: base64 HMAC-SHA256 of
		// "<notification URL><body>" under the subscription's signature key);
		// https://developer.squareup.com/docs/webhooks/step2subscribe (/event_id
		// is the same on retries, /type).
		Name:       "square",
		DeliveryID: DeliveryID{JSONPointer: "/event_id"},
		EventType:  EventType{JSONPointer: "/type"},
		Signature: PresetSignature{Scheme: signature.SchemeSquare, Header: signature.HeaderSquare, Encoding: signature.EncodingBase64,
			Signed:           "<notification URL><body>",
			SignatureHeaders: []string{signature.HeaderSquare, "X-Square-Signature"}},
		Replay: idInSignedBody("/event_id", ""),
		Docs:   "https://developer.squareup.com/docs/webhooks/step3validate",
	},
	{
		// https://developers.hubspot.com/docs/apps/legacy-apps/authentication/validating-requests#validate-the-v3-request-signature
		// (X-HubSpot-Signature-v3: base64 HMAC-SHA256 of
		// "<method><URI><body><X-HubSpot-Request-Timestamp>" under the app's
		// client secret; reject timestamps older than 5 minutes).
		// https://developers.hubspot.com/docs/api/webhooks (the body is an
		// array of events: the first one's eventId and subscriptionType).
		Name:       "hubspot",
		DeliveryID: DeliveryID{JSONPointer: "/0/eventId"},
		EventType:  EventType{JSONPointer: "/0/subscriptionType"},
		Signature: PresetSignature{Scheme: signature.SchemeHubSpotV3, Header: signature.HeaderHubSpotV3, Encoding: signature.EncodingBase64,
			Signed: "<method><URI><body><X-HubSpot-Request-Timestamp>", Tolerance: 5 * time.Minute,
			SignatureHeaders: []string{signature.HeaderHubSpotV3, "X-Hubspot-Signature"}},
		Replay: idInSignedBody("/0/eventId", "300 s"),
		Docs:   "https://developers.hubspot.com/docs/apps/legacy-apps/authentication/validating-requests",
	},
	{
		// https://documentation.mailgun.com/docs/mailgun/user-manual/webhooks/securing-webhooks
		// (the body's signature object: signature = hex HMAC-SHA256 of
		// "<timestamp><token>" under the webhook signing key, parent-signature
		// the same under the primary account's for a subaccount's event;
		// /event-data/id, /event-data/event).
		Name:       "mailgun",
		DeliveryID: DeliveryID{JSONPointer: "/event-data/id"},
		EventType:  EventType{JSONPointer: "/event-data/event"},
		Signature: PresetSignature{Scheme: signature.SchemeMailgun, Encoding: signature.EncodingHex,
			Signed: "<signature.timestamp><signature.token> (in the body)", Tolerance: signature.DefaultTolerance,
			SignatureObject: "signature", SignatureFields: []string{"timestamp", "token", "signature"}},
		Replay: Replay{Why: "the body (and the ID in it) is not signed, but the signed token is accepted for one delivery, its ID and body: a copy under another ID gets 401 (tokens are remembered for `tolerance`, 300 s)",
			Do: "nothing needed; a longer `tolerance`, to accept Mailgun's later retries, keeps the tokens as long"},
		Docs: "https://documentation.mailgun.com/docs/mailgun/user-manual/webhooks/securing-webhooks",
	},
	{
		// https://airtable.com/developers/web/api/webhooks-overview#webhook-notification-delivery
		// (X-Airtable-Content-MAC: hmac-sha256=<hex HMAC-SHA256 of the body
		// under the base64-decoded macSecretBase64>). The notification
		// carries no delivery ID: the SHA-256 of the body is one.
		Name:       "airtable",
		DeliveryID: DeliveryID{BodySHA256: true},
		Signature: PresetSignature{Scheme: signature.SchemeHMACBase64Key, Header: signature.HeaderAirtableSignature, Encoding: signature.EncodingHex,
			Prefix: "hmac-sha256=", Signed: "body (key: the base64-decoded secret)",
			SignatureHeaders: []string{signature.HeaderAirtableSignature}},
		Replay: idIsBodyHash(""),
		Docs:   "https://airtable.com/developers/web/api/webhooks-overview",
	},
}

// PresetNamed returns the row of Presets named name, or false.
func PresetNamed(name string) (Preset, bool) {
	for _, p := range Presets {
		if p.Name == name {
			return p, true
		}
	}
	return Preset{}, false
}

// PresetNames returns the names of the presets, in table order.
func PresetNames() []string {
	out := make([]string, 0, len(Presets))
	for _, p := range Presets {
		out = append(out, p.Name)
	}
	return out
}

// SchemeNames returns what signature.scheme may be: none, hmac-sha256, or
// the name of a preset that checks a signature.
func SchemeNames() []string {
	out := []string{SchemeNone, SchemeHMAC}
	for _, p := range Presets {
		if p.Signature.Scheme != SchemeNone {
			out = append(out, p.Name)
		}
	}
	return out
}

// SignatureScheme returns the name of the check that the sender's requests
// get. That is its signature block's scheme, or else its preset's name. It
// is "none" for a preset that checks no signature, such as generic.
func (s *Sender) SignatureScheme() string {
	if s.Signature.Scheme != "" {
		return s.Signature.Scheme
	}
	if p, _ := PresetNamed(s.Preset); p.Signature.Scheme == SchemeNone {
		return SchemeNone
	}
	return s.Preset
}

// SignatureCheck returns the sender's signature check as data. It is the
// check of the preset that signature.scheme names, or else of the sender's
// preset. For hmac-sha256 it takes the signature block's header, encoding
// and prefix. Scheme is SchemeNone when no signature is checked.
func (s *Sender) SignatureCheck() PresetSignature {
	switch name := s.SignatureScheme(); name {
	case SchemeNone:
		return PresetSignature{Scheme: SchemeNone}
	case SchemeHMAC:
		enc := s.Signature.Encoding
		if enc == "" {
			enc = signature.EncodingHex
		}
		return PresetSignature{Scheme: SchemeHMAC, Header: s.Signature.Header, Encoding: enc, Prefix: s.Signature.Prefix, Signed: "body",
			SignatureHeaders: []string{s.Signature.Header}}
	default:
		p, _ := PresetNamed(name)
		return p.Signature
	}
}

// Handshakes returns the kinds of handshake the sender answers: its
// preset's, and that of the preset its signature.scheme names. So a generic
// sender that checks Slack's signature answers Slack's url_verification.
func (s *Sender) Handshakes() []string {
	var out []string
	for _, name := range []string{s.Preset, s.Signature.Scheme} {
		if p, ok := PresetNamed(name); ok && p.Handshake != HandshakeNone {
			if len(out) == 0 || out[0] != p.Handshake {
				out = append(out, p.Handshake)
			}
		}
	}
	return out
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

// SecretValues returns every signing secret the sender lists, in order:
// secret, signature.secret, then secrets.
func (s *Sender) SecretValues() []string {
	var out []string
	for _, sec := range s.secrets() {
		out = append(out, sec.value)
	}
	return out
}

// checkSignature checks that the sender's secrets fit its signature check.
// Its errors start with the field at fault, relative to the sender, and
// never contain a secret.
func checkSignature(s *Sender) error {
	scheme := s.SignatureScheme()
	check := s.SignatureCheck()
	secrets := s.secrets()
	if check.Scheme == SchemeNone {
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
	if signature.StandardSecrets(check.Scheme) {
		for _, sec := range secrets {
			if _, err := signature.DecodeStandardSecret(sec.value); err != nil {
				return fmt.Errorf("%s: is not a Standard Webhooks secret (whsec_ followed by base64)", sec.field)
			}
		}
	}
	for _, sec := range secrets {
		if _, err := signature.DecodeSecret(check.Scheme, sec.value); err != nil {
			return fmt.Errorf("%s: is not a key scheme %s can use: %w", sec.field, scheme, err)
		}
	}
	if check.Scheme == signature.SchemeECDSA {
		for _, sec := range secrets {
			if _, err := signature.ParseECDSAPublicKey(sec.value); err != nil {
				return fmt.Errorf("%s: is not an ECDSA P-256 public key in base64 DER (the provider's verification key): %w", sec.field, err)
			}
		}
	}
	if scheme == SchemeHMAC {
		if check.Header == "" {
			return errors.New("signature.header: is required for scheme hmac-sha256")
		}
		hc := signature.HMACConfig{Header: check.Header, Encoding: check.Encoding, Prefix: check.Prefix}
		if err := hc.Validate(); err != nil {
			return fmt.Errorf("signature: %w", err)
		}
	}
	if _, err := signature.New(check.Scheme, check.Params(0), nil); err != nil {
		return fmt.Errorf("signature.scheme: %w", err)
	}
	return nil
}
