package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/hookgate/hookgate/internal/access"
)

// Sessions are signed cookies. A cookie holds its issue time, its expiry,
// a random ID, and the scope and name of the token that signed in, signed
// with HMAC-SHA256 under a key derived from the admin token, and bound to
// the digest of the token that signed in. A restart with the same tokens
// keeps sessions valid; a new admin token ends them all, and a read
// token's change or removal ends its own. A read session cannot become an
// admin one: its scope is signed. A session's CSRF token is an HMAC of its
// ID, so it needs no storage either.
//
// Sign-out records the session as revoked in PostgreSQL. "Sign out
// everywhere" records the time before which every session is over. Every
// request with a session asks the database, so every process refuses a
// copy of a signed-out cookie.

// CookieName is the session cookie's name.
const CookieName = "hookgate_console"

// sessionKey derives the signing key from the admin token.
func sessionKey(token string) []byte {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("hookgate console session key v1"))
	return m.Sum(nil)
}

func (c *Console) mac(parts ...string) string {
	m := hmac.New(sha256.New, c.key)
	m.Write([]byte(strings.Join(parts, "\x00")))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// session is a valid session: its ID, issue time and expiry, and who
// signed in.
type session struct {
	id              string
	issued, expires time.Time
	caller          access.Caller
}

// canChange reports whether the session may change anything: redeliver,
// pause, resume, sign everyone out.
func (s session) canChange() bool { return s.caller.Scope.Allows(access.Admin) }

// sessionMAC signs a session's value val for the token of caller, or
// returns false when that token is no longer configured.
func (c *Console) sessionMAC(val string, caller access.Caller) (string, bool) {
	d, ok := c.callers.Digest(caller)
	if !ok {
		return "", false
	}
	return c.mac("session", val, hex.EncodeToString(d[:])), true
}

// newCookie returns a new session's cookie for a sign-in by r with the
// token of caller.
func (c *Console) newCookie(r *http.Request, caller access.Caller) *http.Cookie {
	b := make([]byte, 18)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	id := base64.RawURLEncoding.EncodeToString(b)
	now := c.opts.Now()
	exp := now.Add(c.opts.SessionTTL)
	val := "v3." + strconv.FormatInt(now.UnixMicro(), 10) + "." + strconv.FormatInt(exp.Unix(), 10) + "." + id +
		"." + string(caller.Scope) + "." + caller.Name
	sig, _ := c.sessionMAC(val, caller) // caller just signed in
	return &http.Cookie{
		Name: CookieName, Value: val + "." + sig,
		Path: Prefix, Expires: exp, MaxAge: int(c.opts.SessionTTL.Seconds()),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: c.secure(r),
	}
}

// session returns the session of r's cookie. ok is false when there is
// none, or it is malformed, badly signed, expired or signed out. err is set
// when the database could not say whether it was signed out.
func (c *Console) session(r *http.Request) (s session, ok bool, err error) {
	if s, ok := r.Context().Value(sessionKeyCtx{}).(session); ok {
		return s, true, nil
	}
	s, ok = c.cookieSession(r)
	if !ok {
		return session{}, false, nil
	}
	revoked, err := c.q.SessionRevoked(r.Context(), s.id, s.issued)
	if err != nil {
		return session{}, false, err
	}
	return s, !revoked, nil
}

// sessionKeyCtx is the context key of a request's checked session.
type sessionKeyCtx struct{}

// cookieSession returns the session of r's cookie when it is well formed,
// well signed and not expired; it does not ask whether it was signed out.
func (c *Console) cookieSession(r *http.Request) (session, bool) {
	if c.key == nil {
		return session{}, false
	}
	ck, err := r.Cookie(CookieName)
	if err != nil {
		return session{}, false
	}
	i := strings.LastIndexByte(ck.Value, '.')
	if i < 0 {
		return session{}, false
	}
	val, sig := ck.Value[:i], ck.Value[i+1:]
	// A token's name may hold dots: it is the last part.
	parts := strings.SplitN(val, ".", 6)
	if len(parts) != 6 || parts[0] != "v3" {
		return session{}, false
	}
	caller := access.Caller{Name: parts[5], Scope: access.Scope(parts[4])}
	want, ok := c.sessionMAC(val, caller)
	if !ok || subtle.ConstantTimeCompare([]byte(sig), []byte(want)) != 1 {
		return session{}, false
	}
	iat, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil {
		return session{}, false
	}
	exp, err := strconv.ParseInt(parts[2], 10, 64)
	if err != nil || !c.opts.Now().Before(time.Unix(exp, 0)) {
		return session{}, false
	}
	return session{id: parts[3], issued: time.UnixMicro(iat), expires: time.Unix(exp, 0), caller: caller}, true
}

// csrf returns the CSRF token of the session s.
func (c *Console) csrf(s session) string { return c.mac("csrf", s.id) }

// secure reports whether r came over TLS: directly, or through a trusted
// proxy that says so in X-Forwarded-Proto.
func (c *Console) secure(r *http.Request) bool {
	if r.TLS != nil {
		return true
	}
	return c.fromTrustedProxy(r) && strings.EqualFold(strings.TrimSpace(r.Header.Get("X-Forwarded-Proto")), "https")
}

func (c *Console) fromTrustedProxy(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	a = a.Unmap()
	for _, p := range c.opts.TrustedProxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// crossSite returns why r, a POST, is not from a page of this console, or
// "". It checks Sec-Fetch-Site and the host of Origin.
func crossSite(r *http.Request) string {
	if s := r.Header.Get("Sec-Fetch-Site"); s != "" && s != "same-origin" {
		return "it came from another site (Sec-Fetch-Site: " + s + ")"
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || o == "null" || !strings.EqualFold(u.Host, r.Host) {
			return "it came from another origin (" + o + ")"
		}
	}
	return ""
}

// ParseTrustedProxies parses a comma-separated list of CIDR prefixes or
// single addresses, such as "10.0.0.0/8, 127.0.0.1". An empty s is none.
func ParseTrustedProxies(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if p, err := netip.ParsePrefix(f); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(f)
		if err != nil {
			return nil, err
		}
		out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	return out, nil
}
