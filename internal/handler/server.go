// Package handler serves hookgate's HTTP API: the ingest endpoint, the
// operator API (/v1, behind a bearer token), the service endpoints and the
// API documentation, on a chi router generated from openapi.yaml (package
// api).
package handler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/swaggest/swgui/v5emb"

	"github.com/hookgate/hookgate/api"
	"github.com/hookgate/hookgate/internal/access"
	"github.com/hookgate/hookgate/internal/authlimit"
	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/dedup"
	"github.com/hookgate/hookgate/internal/forward"
	"github.com/hookgate/hookgate/internal/queue"
	"github.com/hookgate/hookgate/internal/sender"
	"github.com/hookgate/hookgate/internal/sigtoken"
	"github.com/hookgate/hookgate/internal/store"
	"github.com/hookgate/hookgate/internal/traffic"
)

// ReadyFunc reports whether the service can take traffic: nil when the
// database is reachable and its migrations are at head.
type ReadyFunc func(ctx context.Context) error

// Config configures a Server. Zero means zero (docs/configuration.md): no
// field takes a default from a 0, and validate refuses one; DefaultConfig
// has the defaults. The first dependencies below the settings (Senders to
// Log) are required; the others are optional: each says what the Server
// does without one.
type Config struct {
	// AdminToken is the bearer token of the operator API (and of the
	// console, which signs in with it itself); "" disables the operator
	// API, which then answers every request 403.
	AdminToken string
	// ReadTokens are the read-only tokens (HOOKGATE_READ_TOKENS): they
	// read every /v1 endpoint and are refused 403 on every other method.
	// Their names, never their values, are logged. New refuses them
	// without an AdminToken, or when access.NewTokens does.
	ReadTokens []access.Token
	// BodyBudget bounds the request body bytes that ingest requests hold
	// in memory at once (DefaultBodyBudget), at least 1, held as they
	// arrive; each client (AuthLimiter's ClientKey) holds at most a quarter
	// of it. A request that finds no room waits at most BodyBudgetWait
	// (DefaultBodyBudgetWait, positive) for it, each time, before it is
	// answered 503 with Retry-After. The oldest request of the budget, and of each
	// client, always gets room, past the bound by at most its own body; a
	// body larger than the share of large bodies (three quarters of the
	// budget) gets it only then: keep the budget above twice the largest
	// max_body_bytes.
	BodyBudget     int64
	BodyBudgetWait time.Duration
	// BodyMinRate is the rate, in bytes per second, at which a body must
	// arrive on average once BodyMinRateGrace has passed since the request
	// began reading it (DefaultBodyMinRate, DefaultBodyMinRateGrace): the
	// read deadline of its connection is start + grace + bytes/rate, and a
	// body that misses it is answered 408 with its connection closed. 0
	// sets no minimum rate. BodyReadTimeout (DefaultBodyReadTimeout,
	// positive) bounds the body's time in all, as the HTTP server's
	// ReadTimeout does: the deadline is never moved past it.
	BodyMinRate      int64
	BodyMinRateGrace time.Duration
	BodyReadTimeout  time.Duration
	// BodyIdleTimeout (DefaultBodyIdleTimeout) bounds a pause of a body:
	// when no byte of it arrived for that long, whatever came before, it
	// is answered 408 with its connection closed. 0 sets no bound (the
	// minimum rate and BodyReadTimeout still hold).
	BodyIdleTimeout time.Duration
	// MetricsElsewhere says that /metrics is served on a listener of its
	// own (MetricsHandler): the Server's routers then answer 404 there.
	MetricsElsewhere bool

	// Senders are the compiled senders the Server ingests for: a
	// *sender.Set, or the process's sender.Live, whose snapshot each
	// request takes once (a reload swaps it for the requests that follow).
	Senders sender.Source
	// Ingest stores the deliveries (the ingest transaction).
	Ingest *dedup.Store
	// Ready answers /readyz.
	Ready ReadyFunc
	// Registry is where the Server's metrics are registered, and what
	// /metrics serves.
	Registry *prometheus.Registry
	// Log is where requests and failures are logged.
	Log *slog.Logger

	// Queries reads the deliveries and events of the operator API. Forwards
	// reads its forwards: the process's one [*queue.Jobs]. Give both or
	// neither; without them the endpoints that read answer 503.
	Queries  *store.Queries
	Forwards ForwardReader
	// Redeliverer redelivers an event's forwards and a target's forwards
	// in a state (queue.River, on River's client, which need not
	// work jobs); nil: redeliver answers 503.
	Redeliverer Redeliverer
	// AuthLimiter counts the operator API's wrong tokens per client; share
	// it with the console so that both count against one limit. Its
	// ClientKey (the peer, or the client its trusted proxies name) is also
	// the client whose share of the body budget a request takes. nil: the
	// Server has a Limiter of its own, which trusts no proxy.
	AuthLimiter *authlimit.Limiter
	// Now is the clock deliveries are received by (time.Now when nil): a
	// test's fixed clock (the console's screenshots) sets it.
	Now func() time.Time
	// Console is served under /console (the browser console, package
	// console; it has its own sign-in); nil: none.
	Console http.Handler
	// FastPath makes the process attempt each accepted delivery's forwards
	// itself right after COMMIT; nil (a nil interface, not a nil
	// *forward.Dispatcher): the relay moves every forward into River.
	FastPath FastPath
	// Traffic counts every delivery of a configured sender, for the
	// console's charts; nil counts nothing.
	Traffic *traffic.Recorder
	// Reloader reloads the process's configuration for POST
	// /v1/config/reload (the gateway's, which swaps the sender.Live given
	// as Senders); nil: that endpoint answers 503.
	Reloader ConfigReloader
	// Tokens remembers the single-use tokens of the senders whose
	// signature scheme signs one instead of the body (Mailgun's:
	// sender.Sender.SignsNonces), so that each is accepted for one
	// delivery only (a *sigtoken.Store on the database deliveries are
	// stored in). Required when there is such a sender: New refuses a
	// configuration with one and no Tokens.
	Tokens TokenStore
	// Pauses is told when the operator API pauses or resumes a target, so
	// that this process holds or releases its forwards at once
	// (forward.Pauses, which reads the pauses anyway about every second);
	// nil: it learns at its next read.
	Pauses Poker
}

// Poker is told that the operators' pauses changed (forward.Pauses.Poke):
// it must not block.
type Poker interface{ Poke() }

// TokenStore claims a single-use signature token for a delivery
// (sigtoken.Store): true when the request may go on, false when another
// delivery used the token before (a replay, answered 401).
type TokenStore interface {
	Claim(ctx context.Context, u sigtoken.Use) (bool, error)
}

// DefaultConfig returns the Server's defaults: no admin token (the operator
// API disabled), the default body budget and minimum rate of bodies, and no
// dependency (the caller gives the required ones).
func DefaultConfig() Config {
	return Config{BodyBudget: DefaultBodyBudget, BodyBudgetWait: DefaultBodyBudgetWait,
		BodyMinRate: DefaultBodyMinRate, BodyMinRateGrace: DefaultBodyMinRateGrace, BodyReadTimeout: DefaultBodyReadTimeout,
		BodyIdleTimeout: DefaultBodyIdleTimeout}
}

// MaxBodyMinRate is the largest Config.BodyMinRate: 1 GiB/s.
const MaxBodyMinRate = 1 << 30

// validate returns an error naming the field at fault, or nil.
func (c Config) validate() error {
	if c.BodyBudget < 1 {
		return fmt.Errorf("handler config: BodyBudget %d: must be at least 1 byte", c.BodyBudget)
	}
	if c.BodyBudgetWait <= 0 {
		return fmt.Errorf("handler config: BodyBudgetWait %s: must be positive", c.BodyBudgetWait)
	}
	if c.BodyMinRate < 0 || c.BodyMinRate > MaxBodyMinRate {
		return fmt.Errorf("handler config: BodyMinRate %d: must be from 0 (none) to %d bytes per second", c.BodyMinRate, MaxBodyMinRate)
	}
	if c.BodyMinRateGrace < 0 {
		return fmt.Errorf("handler config: BodyMinRateGrace %s: must not be negative", c.BodyMinRateGrace)
	}
	if c.BodyIdleTimeout < 0 {
		return fmt.Errorf("handler config: BodyIdleTimeout %s: must not be negative", c.BodyIdleTimeout)
	}
	if c.BodyReadTimeout <= 0 {
		return fmt.Errorf("handler config: BodyReadTimeout %s: must be positive", c.BodyReadTimeout)
	}
	for _, d := range []struct {
		name, what string
		missing    bool
	}{
		{"Senders", "the compiled senders", c.Senders == nil},
		{"Ingest", "the ingest store", c.Ingest == nil},
		{"Ready", "the readiness check", c.Ready == nil},
		{"Registry", "the metrics registry", c.Registry == nil},
		{"Log", "a logger", c.Log == nil},
	} {
		if d.missing {
			return fmt.Errorf("handler config: %s: nil: %s is required", d.name, d.what)
		}
	}
	if len(c.ReadTokens) > 0 && c.AdminToken == "" {
		return errors.New("handler config: ReadTokens: given without an AdminToken")
	}
	if _, err := access.NewTokens(c.AdminToken, c.ReadTokens); err != nil {
		return fmt.Errorf("handler config: ReadTokens: %w", err)
	}
	if (c.Queries == nil) != (c.Forwards == nil) {
		return errors.New("handler config: Queries and Forwards: give both or neither")
	}
	return c.needsTokens()
}

// needsTokens returns an error naming the field when a sender of
// c.Senders signs single-use tokens and c has no Tokens to remember them
// in.
func (c Config) needsTokens() error {
	if c.Tokens != nil {
		return nil
	}
	set := c.Senders.Snapshot()
	for i := range set.Senders {
		if sd := &set.Senders[i]; sd.SignsNonces() {
			return fmt.Errorf("handler config: Tokens: sender %q's signature scheme signs a single-use token, not the body: a token store is required", sd.Name)
		}
	}
	return nil
}

// Server implements api.ServerInterface.
type Server struct {
	// senders are the compiled senders: each request takes one snapshot
	// (snapshot) and uses it throughout.
	senders    sender.Source
	deliveries *dedup.Store
	ready      ReadyFunc
	log        *slog.Logger
	metrics    *metrics
	gather     prometheus.Gatherer
	docs       http.Handler
	docsCSP    string
	now        func() time.Time

	// The operator API's: callers are its tokens, without an admin one
	// when none is configured (the operator API is disabled); q and
	// redeliver read and redeliver (nil without Config.Queries and
	// Config.Redeliverer).
	callers   *access.Tokens
	authLimit *authlimit.Limiter
	q         *store.Queries
	jobs      ForwardReader
	redeliver Redeliverer

	// console is the browser console served under /console; nil for none.
	console http.Handler

	// metricsElsewhere: /metrics is served on another listener, not here.
	metricsElsewhere bool

	// budget bounds the request bodies held in memory (Config.BodyBudget);
	// shed counts the deliveries shed, by reason.
	budget *bodyBudget
	shed   *prometheus.CounterVec

	// The pace of bodies (Config.BodyMinRate, BodyMinRateGrace,
	// BodyReadTimeout, BodyIdleTimeout); minRate 0: none, idleTimeout 0:
	// none.
	minRate      int64
	minRateGrace time.Duration
	readTimeout  time.Duration
	idleTimeout  time.Duration

	// fast attempts forwards right after the ingest COMMIT (Config.FastPath);
	// nil for none: the relay moves every forward into River.
	fast FastPath

	// traffic counts deliveries for the console's charts (Config.Traffic);
	// nil counts nothing.
	traffic *traffic.Recorder

	// tokens claims the single-use signature tokens (Config.Tokens).
	tokens TokenStore

	// pauses is told of a pause or a resume (Config.Pauses); nil: none.
	pauses Poker
	// reloader reloads the configuration (Config.Reloader); nil for none.
	reloader ConfigReloader
}

// snapshot returns the configuration in force, for one request: the
// compiled senders and their config.Config (snapshot.Config()).
func (s *Server) snapshot() *sender.Snapshot { return s.senders.Snapshot() }

// FastPath is the forward fast path (forward.Dispatcher): Lease is asked
// before the ingest transaction (one lease per target, zero for none),
// Dispatch after its COMMIT, with the same lease (rows without a lease
// are the relay's, and Dispatch tells it).
type FastPath interface {
	Lease(sender *config.Sender, targets []string, bodyBytes int) forward.Lease
	Dispatch(f *forward.Fast)
}

// ForwardReader reads the forwards the operator API shows, as [*queue.Jobs]
// does: an event's forwards, the counts by target, and a target's list.
type ForwardReader interface {
	EventForwards(ctx context.Context, sender string, eventID uuid.UUID) ([]queue.Forward, error)
	CountForwards(ctx context.Context, sender string, delivered bool) (map[string]queue.Counts, error)
	ListTargetForwards(ctx context.Context, f queue.Filter, limit int, after *store.Cursor) (queue.ForwardPage, error)
}

// Redeliverer is the forward queue's redelivery (queue.River):
// Redeliver enqueues an event's forwards again, BulkRedeliver the
// forwards of a target in a state.
type Redeliverer interface {
	Redeliver(ctx context.Context, sender *config.Sender, eventID uuid.UUID, deliveryID string) ([]queue.Enqueued, error)
	BulkRedeliver(ctx context.Context, req queue.BulkRequest) (queue.Bulk, error)
}

var _ api.ServerInterface = (*Server)(nil)

// New returns a Server for hc.Senders, storing deliveries with hc.Ingest,
// answering /readyz with hc.Ready, and configured by hc (DefaultConfig);
// an error naming the field when hc is invalid or lacks a required
// dependency. Its metrics are registered on hc.Registry, which /metrics
// serves.
func New(hc Config) (*Server, error) {
	if err := hc.validate(); err != nil {
		return nil, err
	}
	reg := hc.Registry
	now := time.Now
	if hc.Now != nil {
		now = hc.Now
	}
	s := &Server{
		senders:    hc.Senders,
		deliveries: hc.Ingest,
		ready:      hc.Ready,
		log:        hc.Log,
		metrics:    newMetrics(reg),
		gather:     reg,
		docs:       v5emb.New("hookgate API", "/openapi.yaml", "/docs"),
		authLimit:  hc.AuthLimiter,
		now:        now,
		budget:     newBodyBudget(hc.BodyBudget, hc.BodyBudgetWait),

		minRate: hc.BodyMinRate, minRateGrace: hc.BodyMinRateGrace, readTimeout: hc.BodyReadTimeout, idleTimeout: hc.BodyIdleTimeout,

		metricsElsewhere: hc.MetricsElsewhere,
		q:                hc.Queries,
		jobs:             hc.Forwards,
		redeliver:        hc.Redeliverer,
		console:          hc.Console,
		fast:             hc.FastPath,
		traffic:          hc.Traffic,
		tokens:           hc.Tokens,
		pauses:           hc.Pauses,
		reloader:         hc.Reloader,
	}
	if s.authLimit == nil {
		s.authLimit = authlimit.New()
	}
	s.callers, _ = access.NewTokens(hc.AdminToken, hc.ReadTokens) // validate checked it
	s.docsCSP = docsPolicy(s.docs)
	s.shed = registerShedMetrics(reg, s)
	return s, nil
}

// Router returns the HTTP handler serving every route of openapi.yaml, plus
// the API explorer's static assets under /docs/, and the console under
// /console when Config.Console gave one (it signs in with the admin token
// itself). Every request under /v1 (the operator API) must carry the admin
// token, whether or not a route matches it.
func (s *Server) Router() http.Handler {
	r := chi.NewRouter()
	r.Use(assignRequestID, securityHeaders(s.docsCSP), s.logRequests, s.recoverPanics, s.requireToken)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		_ = writeProblem(w, newProblem(probNotFound, "No route for "+r.Method+" "+r.URL.Path+". See /docs for the API."))
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, req *http.Request) {
		if allow := allowedMethods(r, req.URL.Path); allow != "" {
			w.Header().Set("Allow", allow)
		}
		_ = writeProblem(w, newProblem(probMethodNotAllowed, req.Method+" is not allowed on "+req.URL.Path+". See /docs for the API."))
	})
	r.Method(http.MethodGet, "/docs/*", problemOn404(s.docs))
	if s.console != nil {
		r.Mount("/console", noteCallers(s.console))
	}
	return api.HandlerWithOptions(s, api.ChiServerOptions{
		BaseRouter: r,
		ErrorHandlerFunc: func(w http.ResponseWriter, r *http.Request, err error) {
			s.fail(w, r, invalidParameter(r, err))
		},
	})
}

// ServiceRouter returns the HTTP handler of a worker-only process: /healthz,
// /readyz and /metrics.
func (s *Server) ServiceRouter() http.Handler {
	r := chi.NewRouter()
	r.Use(assignRequestID, securityHeaders(s.docsCSP), s.logRequests, s.recoverPanics)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		_ = writeProblem(w, newProblem(probNotFound, "No route for "+r.Method+" "+r.URL.Path+": this process only forwards (role worker)."))
	})
	r.Get("/healthz", s.GetHealthz)
	r.Get("/readyz", s.GetReadyz)
	r.Get("/metrics", s.GetMetrics)
	return r
}

// GetHealthz answers 200 while the process is up.
func (s *Server) GetHealthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// GetReadyz answers 200 when the database is reachable, takes writes and is
// migrated to head, 503 with Retry-After otherwise. The answer does not say
// which; the log does.
func (s *Server) GetReadyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := s.ready(ctx); err != nil {
		s.log.Warn("not ready", "err", err)
		_ = writeProblem(w, &problemError{typ: probUnavailable, detail: "The database is unreachable, read-only, or its migrations are not at head.", cause: err})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// GetMetrics serves the Prometheus metrics, or 404 when they are served on
// an address of their own (Config.MetricsElsewhere).
func (s *Server) GetMetrics(w http.ResponseWriter, r *http.Request) {
	if s.metricsElsewhere {
		_ = writeProblem(w, newProblem(probNotFound, "Metrics are not served on this address: this process serves them on its --metrics-addr."))
		return
	}
	s.MetricsHandler().ServeHTTP(w, r)
}

// MetricsHandler returns the handler of the Prometheus metrics, for a
// listener of their own (--metrics-addr).
func (s *Server) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(s.gather, promhttp.HandlerOpts{})
}

// GetOpenAPISpec serves the repository's openapi.yaml as embedded at build.
func (s *Server) GetOpenAPISpec(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/yaml")
	_, _ = w.Write(api.Spec)
}

// GetDocs serves the API explorer, rendered from /openapi.yaml with assets
// embedded in the binary.
func (s *Server) GetDocs(w http.ResponseWriter, r *http.Request) {
	s.docs.ServeHTTP(w, r)
}

// allowedMethods lists the methods routes serves path with, for the Allow
// header of a 405.
func allowedMethods(routes chi.Routes, path string) string {
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		if routes.Match(chi.NewRouteContext(), m, path) {
			allow = append(allow, m)
		}
	}
	return strings.Join(allow, ", ")
}

// problemOn404 answers a 404 of h (a static file server) with a problem
// instead of h's plain-text page.
func problemOn404(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(&notFoundInterceptor{ResponseWriter: w, r: r}, r)
	})
}

// notFoundInterceptor passes everything through to ResponseWriter except a
// 404, which it replaces with a problem.
type notFoundInterceptor struct {
	http.ResponseWriter
	r        *http.Request
	notFound bool
}

func (n *notFoundInterceptor) WriteHeader(status int) {
	if status == http.StatusNotFound {
		n.notFound = true
		_ = writeProblem(n.ResponseWriter, newProblem(probNotFound, "No such file: "+n.r.URL.Path+"."))
		return
	}
	n.ResponseWriter.WriteHeader(status)
}

func (n *notFoundInterceptor) Write(b []byte) (int, error) {
	if n.notFound {
		return len(b), nil // drop the file server's own text
	}
	return n.ResponseWriter.Write(b)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
