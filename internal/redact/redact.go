// Package redact hides secrets before text leaves the process. It hides
// target URLs in metrics, logs, operator responses and errors, and the
// error texts that quote them. It is the one place that decides which parts
// of a URL are secret.
//
// The user name and password of a URL are secret, since a URL such as
// https://TOKEN@host carries its token as the user name. Every query value
// and the fragment are secret too. The path is secret when the target sets
// secret_path, or when [SecretPathHost] reports its host. The scheme, host,
// port, other paths and query parameter names are kept, so that an
// operator can still tell targets apart.
package redact

import (
	"bytes"
	"net/url"
	"slices"
	"strings"
	"unicode/utf8"
)

// Mask replaces each secret.
const Mask = "xxxxx"

// Unparseable is what [URL] returns for a string that does not parse as a
// URL. Such a string may be anything, a secret included.
const Unparseable = "(unparseable URL)"

// MinSecretLen is the length below which [Text] leaves a secret in place.
// Shorter strings, such as flags like v=1, are no secrets, and replacing
// them would mangle the text. [URL] hides secrets of any length.
const MinSecretLen = 4

// SecretPathHost reports whether host, without port, is one whose webhook
// URLs carry a secret in their path. These are Slack incoming webhooks,
// Discord webhooks and Microsoft Teams or Office 365 connectors. Their paths
// are redacted whether or not the target sets secret_path.
func SecretPathHost(host string) bool {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	switch host {
	case "hooks.slack.com", "hooks.slack-gov.com", "discord.com", "discordapp.com", "canary.discord.com", "ptb.discord.com":
		return true
	}
	return strings.HasSuffix(host, ".webhook.office.com")
}

// serverList returns the servers of raw when it is a NATS URL that lists
// several, comma-separated, as nats.go reads it. Each may hold secrets of
// its own, and the later ones would parse as the first one's path. A server
// without a scheme gets nats:// in front and bare true. It returns nil for
// any other URL.
func serverList(raw string) (servers []string, bare []bool) {
	scheme, _, _ := strings.Cut(raw, "://")
	if s := strings.ToLower(scheme); s != "nats" && s != "tls" || !strings.Contains(raw, ",") {
		return nil, nil
	}
	for s := range strings.SplitSeq(raw, ",") {
		s = strings.TrimSpace(s)
		b := s != "" && !strings.Contains(s, "://")
		if b {
			s = natsScheme + s
		}
		servers, bare = append(servers, s), append(bare, b)
	}
	return servers, bare
}

const natsScheme = "nats://"

// URL returns raw with every secret replaced by [Mask]. It hides the user
// name, the password, each query value and the fragment. It also hides
// each path segment when secretPath is true or [SecretPathHost] reports the
// host. A NATS URL that lists several servers has each server redacted. A
// URL without secrets comes back unchanged. A string that does not parse
// comes back as [Unparseable].
func URL(raw string, secretPath bool) string {
	if servers, bare := serverList(raw); servers != nil {
		changed := false
		for i, s := range servers {
			red := URL(s, secretPath)
			changed = changed || red != s
			servers[i] = red
			if bare[i] {
				servers[i] = strings.TrimPrefix(red, natsScheme)
			}
		}
		if !changed {
			return raw
		}
		return strings.Join(servers, ",")
	}
	p, err := url.Parse(raw)
	if err != nil {
		return Unparseable
	}
	changed := false
	if p.User != nil {
		if _, ok := p.User.Password(); ok {
			p.User = url.UserPassword(Mask, Mask)
		} else {
			p.User = url.User(Mask)
		}
		changed = true
	}
	if p.RawQuery != "" || p.ForceQuery {
		q, err := url.ParseQuery(p.RawQuery)
		if err != nil {
			p.RawQuery = Mask
		} else {
			for k := range q {
				q[k] = []string{Mask}
			}
			p.RawQuery = q.Encode()
		}
		changed = true
	}
	if p.Fragment != "" || p.RawFragment != "" {
		p.Fragment, p.RawFragment = Mask, ""
		changed = true
	}
	if p.Opaque != "" {
		p.Opaque = Mask
		changed = true
	}
	if (secretPath || SecretPathHost(p.Hostname())) && strings.Trim(p.Path, "/") != "" {
		segs := strings.Split(p.Path, "/")
		for i, s := range segs {
			if s != "" {
				segs[i] = Mask
			}
		}
		p.Path, p.RawPath = strings.Join(segs, "/"), ""
		changed = true
	}
	if !changed {
		return raw
	}
	return p.String()
}

// Secrets returns the parts of raw that [URL] hides, for [Text]. A string
// that does not parse is a secret as a whole.
func Secrets(raw string, secretPath bool) []string {
	if servers, _ := serverList(raw); servers != nil {
		var out []string
		for _, s := range servers {
			out = append(out, Secrets(s, secretPath)...)
		}
		return out
	}
	p, err := url.Parse(raw)
	if err != nil {
		return []string{raw}
	}
	var out []string
	if p.User != nil {
		out = append(out, p.User.Username())
		if pw, ok := p.User.Password(); ok {
			out = append(out, pw)
		}
	}
	if q, err := url.ParseQuery(p.RawQuery); err == nil {
		for _, vs := range q {
			out = append(out, vs...)
		}
	} else {
		out = append(out, p.RawQuery)
	}
	out = append(out, p.Fragment, p.Opaque)
	if secretPath || SecretPathHost(p.Hostname()) {
		for s := range strings.SplitSeq(p.Path, "/") {
			out = append(out, s)
		}
	}
	return slices.DeleteFunc(out, func(s string) bool { return s == "" })
}

// Text returns text with every occurrence of each secret replaced by
// [Mask]. It replaces the literal, query-escaped and path-escaped forms,
// since error messages quote URLs encoded. Secrets shorter than
// [MinSecretLen] are left alone. Longer ones are replaced first, so a
// secret that contains another is hidden whole.
func Text(text string, secrets ...string) string {
	var forms []string
	for _, s := range secrets {
		if len(s) < MinSecretLen {
			continue
		}
		forms = append(forms, s, url.QueryEscape(s), url.PathEscape(s))
	}
	slices.SortFunc(forms, func(a, b string) int { return len(b) - len(a) })
	for _, f := range slices.Compact(forms) {
		text = strings.ReplaceAll(text, f, Mask)
	}
	return text
}

// URLInText returns text with the target URL raw hidden. Each occurrence
// of raw becomes URL(raw, secretPath). So does the form that net/http's
// errors quote, from [url.URL.Redacted], which hides only the password.
// Then every secret of raw that remains is replaced as by [Text].
func URLInText(text, raw string, secretPath bool) string {
	red := URL(raw, secretPath)
	text = strings.ReplaceAll(text, raw, red)
	if p, err := url.Parse(raw); err == nil {
		if r := p.Redacted(); r != raw {
			text = strings.ReplaceAll(text, r, red)
		}
	}
	return Text(text, Secrets(raw, secretPath)...)
}

// credentialHeaders are the response headers whose values are always
// hidden, by canonical name.
var credentialHeaders = map[string]bool{
	"Authorization": true, "Proxy-Authorization": true, "Cookie": true, "Set-Cookie": true,
}

// CredentialHeader reports whether the header name may carry a credential:
// Authorization, Proxy-Authorization, Cookie, Set-Cookie, or any name that
// holds token, secret, key, signature, auth, session or password, in any
// case.
func CredentialHeader(name string) bool {
	if credentialHeaders[name] {
		return true
	}
	var buf [64]byte
	n := LowerName(buf[:0], name)
	for _, w := range credentialHeaderWords {
		if bytes.Contains(n, w) {
			return true
		}
	}
	return false
}

// credentialHeaderWords are the words that make a header name
// credential-like for [CredentialHeader], in lower case.
var credentialHeaderWords = Words("token", "secret", "key", "signature", "auth", "session", "password", "cookie")

// Words returns ws as byte slices, to look for in a name that
// [LowerName] lowered.
func Words(ws ...string) [][]byte {
	out := make([][]byte, len(ws))
	for i, w := range ws {
		out[i] = []byte(w)
	}
	return out
}

// LowerName returns name in lower case, as [strings.ToLower] does,
// appended to buf. A header name is ASCII: it is lowered byte by byte,
// into buf when it fits, so that a test of a name on the stack allocates
// nothing. A name that is not ASCII is lowered by strings.ToLower.
func LowerName(buf []byte, name string) []byte {
	for i := range len(name) {
		if name[i] >= utf8.RuneSelf {
			return append(buf, strings.ToLower(name)...)
		}
	}
	for i := range len(name) {
		c := name[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		buf = append(buf, c)
	}
	return buf
}

// Headers returns a copy of h with the value of every header that may
// carry a credential ([CredentialHeader]) replaced by one [Mask]. The
// names stay, so that an operator sees that the header was sent. It
// returns nil for an empty h.
func Headers(h map[string][]string) map[string][]string {
	if len(h) == 0 {
		return nil
	}
	out := make(map[string][]string, len(h))
	for k, v := range h {
		if CredentialHeader(k) {
			out[k] = []string{Mask}
			continue
		}
		out[k] = v
	}
	return out
}
