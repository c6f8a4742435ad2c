package config

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/hookgate/hookgate/internal/signature"
)

// MinSecretBytes is the fewest bytes a signing secret may have, as written
// or as the key it decodes to. 16 random bytes are 128 bits. A shorter
// secret can be guessed, or is a placeholder left in.
const MinSecretBytes = 16

// MaxTolerance is the longest tolerance a sender may have. A captured
// signed request passes the signature check while its timestamp is within
// the tolerance.
const MaxTolerance = time.Hour

// publicKeySchemes are the schemes whose "secrets" are the provider's
// public keys, such as Discord's. They are not secrets, and have the size
// that their algorithm gives them.
var publicKeySchemes = map[string]bool{signature.SchemeEd25519: true, signature.SchemeECDSA: true}

// checkSecretStrength refuses the sender's weak secrets: its signing
// secrets, its verify_token and its targets' signing secrets. A weak
// secret is only whitespace, has whitespace around it, or is shorter than
// [MinSecretBytes] once decoded. Public keys keep their own size. Its
// errors start with the field and name the sender, never a secret.
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

// weakSecret returns why the secret raw, whose key is key, is unfit, or
// "". It never quotes the secret.
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
// while signature.scheme none turns its check off. The handshake would
// then be answered for anyone. A stranger could claim the endpoint as
// theirs, or probe it.
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

// checkTargetURL refuses a target URL with a user name or password, in
// any server of a NATS list. It also refuses a comma in the host of any
// other URL. Only NATS takes a list, and elsewhere the later URLs would be
// shown as a path. It never quotes the URL. url is the URL's field, and
// where names its sender and target.
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
