// Package console is hookgate's operator console, served under /console.
// Its pages are HTML rendered on the server, with no script. An operator
// finds deliveries, sees why their forwards failed and sends them again.
// The overview shows which target is sick, and a target's page pauses it.
//
// The console reads through the JSON API's queries and has no SQL of its
// own. An operator signs in with the admin token. The session is a signed
// cookie that sign-out revokes in the database. Every state-changing
// request is a POST with a CSRF token, and one from another site is
// refused.
package console

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/hookgate/hookgate/internal/access"
	"github.com/hookgate/hookgate/internal/authlimit"
	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/queue"
	"github.com/hookgate/hookgate/internal/store"
)

// DefaultSessionTTL is how long a sign-in lasts by default.
const DefaultSessionTTL = 12 * time.Hour

// Config configures a [Console]. A zero setting is refused, never taken
// for the default; [DefaultConfig] has the defaults. Senders, Queries,
// Forwards and Log are required. Each optional dependency says what the
// console does without it.
type Config struct {
	// Senders is the configuration in force. Each page reads it when asked
	// for, so a reload shows on the next page.
	Senders config.Source
	// Queries reads deliveries, events, breakers and sessions. Share the
	// process's.
	Queries *store.Queries
	// Forwards reads the forwards' jobs: the process's [queue.Jobs].
	Forwards Forwards
	// Log receives what fails.
	Log *slog.Logger

	// AdminToken signs operators in. Empty disables the console, and its
	// pages say how to enable it.
	AdminToken string
	// ReadTokens sign operators in who may read every page and change
	// nothing: their pages have no forms, and their POSTs (but sign-out)
	// are refused 403. They need an AdminToken.
	ReadTokens []access.Token
	// TrustedProxies are the proxies whose X-Forwarded-Proto and
	// X-Forwarded-For are believed. Through one of them, X-Forwarded-Proto:
	// https gets a Secure cookie, as TLS does. Give the Limiter the same.
	TrustedProxies []netip.Prefix
	// SessionTTL is how long a sign-in lasts.
	SessionTTL time.Duration
	// Limiter counts wrong tokens per client; share the operator API's.
	// When nil, New makes one that trusts TrustedProxies.
	Limiter *authlimit.Limiter
	// Redeliverer sends forwards again. Without it, redelivery answers 503.
	Redeliverer Redeliverer
	// Now is the clock; nil means [time.Now].
	Now func() time.Time
	// Pauses is told when an operator pauses or resumes a target here, so
	// that this process acts at once. When nil, the process learns at its
	// next read of the pauses, about every second.
	Pauses Poker
}

// Forwards reads the forwards the pages show. [queue.Jobs] implements it.
type Forwards interface {
	CountForwards(ctx context.Context, sender string, delivered bool) (map[string]queue.Counts, error)
	ForwardSummaries(ctx context.Context, sender string, targets []string, events []uuid.UUID) (map[uuid.UUID]queue.Summary, error)
	EventForwards(ctx context.Context, sender string, eventID uuid.UUID) ([]queue.Forward, error)
	ListTargetForwards(ctx context.Context, f queue.Filter, limit int, after *store.Cursor) (queue.ForwardPage, error)
}

// Poker is told that the operators' pauses changed. Poke must not block.
// The forward package's Pauses implements it.
type Poker interface{ Poke() }

// Redeliverer enqueues forwards again. [queue.River] implements it.
// Redeliver does an event's forwards, BulkRedeliver a target's forwards in
// one state.
type Redeliverer interface {
	Redeliver(ctx context.Context, sender *config.Sender, eventID uuid.UUID, deliveryID string) ([]queue.Enqueued, error)
	BulkRedeliver(ctx context.Context, req queue.BulkRequest) (queue.Bulk, error)
}

// DefaultConfig returns the default settings: no admin token, so the
// console is disabled, and [DefaultSessionTTL]. The caller adds the
// dependencies.
func DefaultConfig() Config {
	return Config{SessionTTL: DefaultSessionTTL}
}

// validate returns an error naming the fields at fault, or nil.
func (c Config) validate() error {
	var errs []error
	if c.SessionTTL <= 0 {
		errs = append(errs, fmt.Errorf("console config: SessionTTL %s: must be positive", c.SessionTTL))
	}
	if c.Senders == nil {
		errs = append(errs, errors.New("console config: Senders: nil: the senders' configuration is required"))
	}
	if c.Queries == nil {
		errs = append(errs, errors.New("console config: Queries: nil: the queries the pages read with are required"))
	}
	if c.Forwards == nil {
		errs = append(errs, errors.New("console config: Forwards: nil: the forwards' reads are required"))
	}
	if c.Log == nil {
		errs = append(errs, errors.New("console config: Log: nil: a logger is required"))
	}
	if len(c.ReadTokens) > 0 && c.AdminToken == "" {
		errs = append(errs, errors.New("console config: ReadTokens: given without an AdminToken"))
	}
	if _, err := access.NewTokens(c.AdminToken, c.ReadTokens); err != nil {
		errs = append(errs, fmt.Errorf("console config: ReadTokens: %w", err))
	}
	return errors.Join(errs...)
}

// Console serves the console's pages. Mount it at [Prefix].
type Console struct {
	senders  config.Source
	q        *store.Queries
	forwards Forwards
	log      *slog.Logger
	opts     Config
	key      []byte // session signing key, nil without an admin token
	callers  *access.Tokens
	pages    map[string]*template.Template
	handler  http.Handler
}

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// New returns the console configured by opts. It returns an error naming
// the field when opts is invalid or lacks a required dependency.
func New(opts Config) (*Console, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if opts.Limiter == nil {
		opts.Limiter = authlimit.New(opts.TrustedProxies...)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	c := &Console{senders: opts.Senders, q: opts.Queries, forwards: opts.Forwards, log: opts.Log, opts: opts, pages: parsePages()}
	c.callers, _ = access.NewTokens(opts.AdminToken, opts.ReadTokens) // validate checked them
	if opts.AdminToken != "" {
		c.key = sessionKey(opts.AdminToken)
	}
	c.handler = c.routes()
	return c, nil
}

// config returns the configuration in force.
func (c *Console) config() *config.Config { return c.senders.Current() }

// ServeHTTP serves the console. Mount it at [Prefix] on a chi router, as
// the handler package does. Its routes are relative to the mount point,
// and its links are absolute.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) { c.handler.ServeHTTP(w, r) }

// Prefix is the path the console is served under.
const Prefix = "/console"

func (c *Console) routes() http.Handler {
	r := chi.NewRouter()
	r.Use(pageHeaders)
	static, _ := fs.Sub(staticFS, "static")
	files := http.StripPrefix(Prefix+"/static/", http.FileServerFS(static))
	r.Get("/static/*", func(w http.ResponseWriter, r *http.Request) {
		// Files only: no directory is listed.
		name := strings.TrimPrefix(r.URL.Path, Prefix+"/static/")
		if st, err := fs.Stat(static, strings.TrimSuffix(name, "/")); name == "" || strings.HasSuffix(name, "/") || err != nil || st.IsDir() {
			c.notFound(w, r, "There is no console page at this address.")
			return
		}
		files.ServeHTTP(w, r)
	})
	r.Get("/login", c.loginPage)
	r.Post("/login", c.login)
	r.Group(func(r chi.Router) {
		r.Use(c.requireSession)
		r.Get("/", c.overview)
		r.Get("/search", c.search)
		r.Get("/audit", c.audit)
		r.Post("/logout", c.logout)
		r.Post("/logout-everywhere", c.logoutEverywhere)
		r.Get("/senders/{sender}/deliveries", c.deliveries)
		r.Get("/senders/{sender}/deliveries/{delivery_id}", c.delivery)
		r.Get("/senders/{sender}/deliveries/{delivery_id}/body", c.rawBody)
		r.Post("/senders/{sender}/deliveries/{delivery_id}/redeliver", c.redeliver)
		// Browsers remove the IDs "." and ".." from a path, so these
		// routes take the ID in the query (?id=).
		r.Get("/senders/{sender}/delivery", c.delivery)
		r.Get("/senders/{sender}/delivery/body", c.rawBody)
		r.Post("/senders/{sender}/delivery/redeliver", c.redeliver)
		r.Get("/senders/{sender}/targets/{target}/failed", c.failed)
		r.Post("/senders/{sender}/targets/{target}/redeliver", c.bulkRedeliver)
		r.Post("/senders/{sender}/targets/{target}/pause", c.pauseTarget)
		r.Post("/senders/{sender}/targets/{target}/resume", c.resumeTarget)
		r.Post("/senders/{sender}/targets/{target}/skip", c.skipForward)
	})
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		c.render(w, r, http.StatusNotFound, "error", page{Title: "Not found", Message: "There is no console page at this address."})
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		c.render(w, r, http.StatusMethodNotAllowed, "error", page{Title: "Method not allowed", Message: r.Method + " is not allowed here."})
	})
	return r
}

// CSP is the console's Content-Security-Policy. It allows no script and no
// framing. Styles, images and form posts stay on this origin.
const CSP = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// pageHeaders sets the console's security headers, replacing the API's.
func pageHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", CSP)
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "same-origin")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}

// deliveryID returns the delivery ID of a delivery page's request. It is
// the path parameter, or the query parameter id, see [deliveryURL].
func deliveryID(r *http.Request) string {
	if rc := chi.RouteContext(r.Context()); rc != nil && strings.Contains(rc.RoutePattern(), "{delivery_id}") {
		return param(r, "delivery_id")
	}
	return r.URL.Query().Get("id")
}

// deliveryURL returns the address of delivery id's page, or of its
// sub-page sub, such as "/body". Browsers remove the IDs "." and ".." from
// a path, even percent-encoded, so theirs go in the query.
func deliveryURL(sender, id, sub string) string {
	if id == "." || id == ".." {
		return Prefix + "/senders/" + url.PathEscape(sender) + "/delivery" + sub + "?id=" + url.QueryEscape(id)
	}
	return Prefix + "/senders/" + url.PathEscape(sender) + "/deliveries/" + url.PathEscape(id) + sub
}

// param returns the path parameter name, unescaped. chi routes on the raw
// path when there is one, such as for an ID with an escaped '/', and its
// parameters are then still escaped.
func param(r *http.Request, name string) string {
	v := chi.URLParam(r, name)
	if r.URL.RawPath == "" {
		return v
	}
	if u, err := url.PathUnescape(v); err == nil {
		return u
	}
	return v
}
