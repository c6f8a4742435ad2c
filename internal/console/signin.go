package console

import (
	"context"
	"crypto/subtle"
	"fmt"
	"net/http"
	"strconv"

	"github.com/hookgate/hookgate/internal/access"
)

// requireSession lets signed-in requests through, with the session's
// caller in their context (access.With). It sends other GETs to
// the sign-in page and refuses other POSTs with 403. A POST must also come
// from this console, see [crossSite], and carry the session's CSRF token
// in the form field csrf_token, and a read session may POST only its
// sign-out.
func (c *Console) requireSession(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c.key == nil {
			c.disabled(w, r)
			return
		}
		s, ok, err := c.session(r)
		if err != nil {
			c.fail(w, r, err)
			return
		}
		if ok {
			ctx := context.WithValue(r.Context(), sessionKeyCtx{}, s)
			r = r.WithContext(access.With(ctx, s.caller))
		}
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			if !ok {
				http.Redirect(w, r, Prefix+"/login", http.StatusSeeOther)
				return
			}
			next.ServeHTTP(w, r)
			return
		}
		if why := crossSite(r); why != "" {
			c.forbidden(w, r, "This request was refused because "+why+".")
			return
		}
		if !ok {
			c.forbidden(w, r, "You are not signed in (or your session expired). Sign in and try again.")
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
		got := r.PostFormValue("csrf_token")
		if subtle.ConstantTimeCompare([]byte(got), []byte(c.csrf(s))) != 1 {
			c.forbidden(w, r, "This request was refused: its CSRF token is missing or wrong. Go back, reload the page and try again.")
			return
		}
		c.audited(w, r, s, func(w http.ResponseWriter, r *http.Request) {
			if !s.canChange() && r.URL.Path != Prefix+"/logout" {
				c.forbidden(w, r, fmt.Sprintf("This request changes something and needs a token with scope %q: you signed in with token %q, of scope %q, which reads everything and changes nothing. Sign in with the admin token for it.",
					access.Admin, s.caller.Name, s.caller.Scope))
				return
			}
			next.ServeHTTP(w, r)
		})
	})
}

func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	if c.key == nil {
		c.disabled(w, r)
		return
	}
	if _, ok, _ := c.session(r); ok {
		http.Redirect(w, r, Prefix+"/", http.StatusSeeOther)
		return
	}
	c.render(w, r, http.StatusOK, "login", page{Title: "Sign in"})
}

// login signs in with the admin token in the form field token. Wrong
// tokens count against the client's address in the shared limiter. Past
// its burst a wrong token gets 429, but the right token always signs in.
func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	if c.key == nil {
		c.disabled(w, r)
		return
	}
	if why := crossSite(r); why != "" {
		c.forbidden(w, r, "This sign-in was refused because "+why+".")
		return
	}
	// The token is checked first, so that the right one always signs in.
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	caller, ok := c.callers.Check(r.PostFormValue("token"))
	if !ok {
		if wait := c.opts.Limiter.Blocked(r); wait > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(int(wait.Seconds())+1))
			c.render(w, r, http.StatusTooManyRequests, "login", page{Title: "Sign in",
				Message: fmt.Sprintf("Too many wrong tokens came from your address. Wait %d seconds and try again.", int(wait.Seconds())+1)})
			return
		}
		c.opts.Limiter.Failed(r)
		c.render(w, r, http.StatusUnauthorized, "login", page{Title: "Sign in",
			Message: "That is not the admin token or a read token. Paste the value of HOOKGATE_ADMIN_TOKEN (make run prints it), or of a token of HOOKGATE_READ_TOKENS."})
		return
	}
	r = r.WithContext(access.With(r.Context(), caller)) // the log line names it
	http.SetCookie(w, c.newCookie(r, caller))
	c.signedIn(r, caller)
	http.Redirect(w, r, Prefix+"/", http.StatusSeeOther)
}

// logout ends this session. It is recorded as revoked, so that every
// process on the database refuses a copy of its cookie.
func (c *Console) logout(w http.ResponseWriter, r *http.Request) {
	s, _, _ := c.session(r) // requireSession found it
	if err := c.q.RevokeSession(r.Context(), s.id, s.expires, c.opts.Now()); err != nil {
		c.fail(w, r, err)
		return
	}
	c.signedOut(w, r)
}

// logoutEverywhere ends every session issued until now, in every process
// on the database.
func (c *Console) logoutEverywhere(w http.ResponseWriter, r *http.Request) {
	if err := c.q.RevokeAllSessions(r.Context(), c.opts.Now()); err != nil {
		c.fail(w, r, err)
		return
	}
	c.signedOut(w, r)
}

// signedOut deletes the session cookie and sends the browser to the
// sign-in page.
func (c *Console) signedOut(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: "", Path: Prefix, MaxAge: -1,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: c.secure(r)})
	http.Redirect(w, r, Prefix+"/login", http.StatusSeeOther)
}
