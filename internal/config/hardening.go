package config

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/hookgate/hookgate/internal/signature"
)

// MinSecretBytes is the fewest bytes a signing secret may have: of the
// secret as written, or of the key it decodes to (a Standard Webhooks
// whsec_ secret, a base64 key). 16 bytes are 128 bits when random; a
// shorter secret can be guessed, or is a placeholder left in.
const MinSecretBytes = 16

// MaxTolerance is the longest tolerance a sender may have: a signed
// request that someone captured passes the signature check for as long as
// its timestamp is within the tolerance of the clock.
const MaxTolerance = time.Hour

// publicKeySchemes are the schemes whose "secrets" are the provider's
// public keys (Discord's Ed25519, SendGrid's ECDSA): not secrets, and of
// the size their algorithm gives them.
var publicKeySchemes = map[string]bool{signature.SchemeEd25519: true, signature.SchemeECDSA: true}

// checkSecretStrength refuses the sender's secrets that are only
// whitespace, begin or end with whitespace, or have fewer than
// MinSecretBytes bytes (decoded, for the schemes that decode them; public
// keys keep their own size): its signing secrets, its verify_token and
// its targets' signing secrets (decoded into SigningKey already). Its
// errors start with the field, name the sender (and target), and never
// contain a secret.
func checkSecretStrength(s *Sender) error {
	scheme := s.SignatureCheck().Scheme
	for _, sec := range s.secrets() {
		key := []byte(sec.value)
		if k, err := signature.DecodeSecret(scheme, sec.value); err == nil {
			key = k
		}
		if why := weakSecret(sec.value, key, publicKeySchemes[scheme]); why != "" {
			return fmt.Errorf("%s (%s): %s", sec.field, s.Name, why)
		}
	}
	if s.VerifyToken != "" {
		if why := weakSecret(s.VerifyToken, []byte(s.VerifyToken), false); why != "" {
			return fmt.Errorf("verify_token (%s): %s", s.Name, why)
		}
	}
	for i := range s.Forward {
		t := &s.Forward[i]
		if t.SigningSecret == "" {
			continue
		}
		if why := weakSecret(t.SigningSecret, t.SigningKey, false); why != "" {
			return fmt.Errorf("forward[%d].signing_secret (%s, target %s): %s", i, s.Name, t.Name, why)
		}
	}
	return nil
}

// secretHint says where a good secret comes from.
const secretHint = "use the secret the provider generated, or make one with: openssl rand -hex 32"

// weakSecret returns why the secret raw (whose key is key) is unfit, or
// "": only whitespace, whitespace around it, or, unless it is a public
// key, a key under MinSecretBytes. It never quotes the secret.
func weakSecret(raw string, key []byte, publicKey bool) string {
	switch {
	case strings.TrimSpace(raw) == "":
		return "is only whitespace; " + secretHint
	case strings.TrimSpace(raw) != raw:
		return "begins or ends with whitespace (a line break from the file or variable it was read from?), which would be part of the key: remove it"
	case !publicKey && len(key) < MinSecretBytes:
		what := "is"
		if string(key) != raw {
			what = "decodes to a key of"
		}
		unit := "bytes"
		if len(key) == 1 {
			unit = "byte"
		}
		return fmt.Sprintf("%s %d %s, and a signing secret must have at least %d, or it can be guessed; %s", what, len(key), unit, MinSecretBytes, secretHint)
	}
	return ""
}

// handshakeNames are how the refusals name each handshake kind.
var handshakeNames = map[string]string{
	HandshakeSlackURLVerification: "Slack's url_verification handshake",
	HandshakeZoomURLValidation:    "Zoom's endpoint.url_validation handshake",
	HandshakeTwitchVerification:   "Twitch's callback verification",
	HandshakeDiscordPing:          "Discord's PING",
	HandshakeMetaSubscribe:        "Meta's subscription check",
}

// checkHandshakeSigned refuses a sender whose preset answers a handshake
// while signature.scheme none turns its signature check off: the
// handshake would then be answered for anyone (a stranger could verify
// an endpoint they do not own as theirs, or probe it).
func checkHandshakeSigned(s *Sender) error {
	if s.Signature.Scheme != SchemeNone {
		return nil
	}
	p, ok := PresetNamed(s.Preset)
	if !ok || p.Handshake == HandshakeNone {
		return nil
	}
	return fmt.Errorf("signature.scheme (%s): none cannot turn off the signature check of preset %s: hookgate answers %s only after that check, and would answer it for anyone; leave signature.scheme out to keep the preset's check (or use preset generic for a sender that signs nothing)",
		s.Name, s.Preset, handshakeNames[p.Handshake])
}

// errURLCredentials explains what to do instead of credentials in a
// target URL.
var errURLCredentials = errors.New("has a user name or password in it, which hookgate does not send with forwards: remove them from the URL and give them as a header instead, headers: { Authorization: \"Basic <base64 of user:password>\" } (or \"Bearer <token>\")")

// checkTargetURL refuses a target URL with user information
// (http://user:password@host/…), in any server of a NATS target's list,
// and a host with a comma in any other URL (a list of servers, which only
// NATS takes, whose later URLs would be shown as its path), without
// quoting it. url is the URL's field ("forward[0].url") and where its
// sender and target names.
func checkTargetURL(raw, field, where string) error {
	t := &Target{URL: raw}
	withUser := false
	for _, s := range t.Servers() {
		u, err := url.Parse(s)
		if err != nil {
			return nil // validation refuses it
		}
		if t.Kind() != KindNATS && strings.Contains(u.Host, ",") {
			return fmt.Errorf("%s (%s): has a comma in its host: only a NATS target (nats://, tls://) takes a list of servers", field, where)
		}
		withUser = withUser || u.User != nil
	}
	if !withUser {
		return nil
	}
	switch t.Kind() {
	case KindNATS:
		return fmt.Errorf("%s (%s): has a user name or password in it, which hookgate does not keep in URLs (they are shown and logged): remove them and give them as nats: { user: …, password: ${…} } (or nats: { token: ${…} })", field, where)
	case KindRabbitMQ:
		return fmt.Errorf("%s (%s): has a user name or password in it, which hookgate does not keep in URLs (they are shown and logged): remove them and give them as rabbitmq: { user: …, password: ${…} }", field, where)
	}
	return fmt.Errorf("%s (%s): %w", field, where, errURLCredentials)
}
