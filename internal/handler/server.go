// Package handler serves hookgate's HTTP API: the ingest endpoint, the
// operator API (/v1, behind a bearer token), the service endpoints and the
// API documentation, on a chi router generated from openapi.yaml (package
// api).
package handler

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/riverqueue/river"
	"github.com/swaggest/swgui/v5emb"

	"github.com/hookgate/hookgate/api"
	"github.com/hookgate/hookgate/internal/authlimit"
	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/dedup"
	"github.com/hookgate/hookgate/internal/forward"
	"github.com/hookgate/hookgate/internal/sender"
	"github.com/hookgate/hookgate/internal/store"
	"github.com/hookgate/hookgate/internal/traffic"
)

// ReadyFunc reports whether the service can take traffic: nil when the
// database is reachable and its migrations are at head.
type ReadyFunc func(ctx context.Context) error

// Option configures a Server.
type Option func(*Server)

// Server implements api.ServerInterface.
type Server struct {
	senders    *sender.Set
	cfg        *config.Config // senders.Config()
	deliveries *dedup.Store
	ready      ReadyFunc
	log        *slog.Logger
	metrics    *metrics
	gather     prometheus.Gatherer
	docs       http.Handler
	docsCSP    string
	now        func() time.Time

	// The operator API's: adminDigest is the SHA-256 of its token, nil when
	// none is configured (the operator API is disabled); q and river read
	// and redeliver (nil without WithDB and WithRiver).
	adminDigest *[32]byte
	authLimit   *authlimit.Limiter
	q           *store.Queries
	river       *river.Client[pgx.Tx]

	// console is the browser console served under /console; nil for none.
	console http.Handler

	// metricsElsewhere: /metrics is served on another listener, not here.
	metricsElsewhere bool

	// budget bounds the request bodies held in memory (WithBodyBudget);
	// shed counts the deliveries shed, by reason.
	budget *bodyBudget
	shed   *prometheus.CounterVec

	// fast attempts forwards right after the ingest COMMIT (WithFastPath);
	// nil for none: the relay moves every forward into River.
	fast FastPath

	// traffic counts deliveries for the console's charts (WithTraffic);
	// nil counts nothing.
	traffic *traffic.Recorder
}

// WithTraffic counts every delivery of a configured sender in rec, for the
// console's charts.
func WithTraffic(rec *traffic.Recorder) Option { return func(s *Server) { s.traffic = rec } }

// FastPath is the forward fast path (forward.Dispatcher): Lease is asked
// before the ingest transaction (a zero lease: none), Dispatch after its
// COMMIT, with the same lease.
type FastPath interface {
	Lease(targets, bodyBytes int) forward.Lease
	Dispatch(f *forward.Fast)
}

// WithFastPath makes the process attempt each accepted delivery's forwards
// itself right after COMMIT, through fp.
func WithFastPath(fp FastPath) Option { return func(s *Server) { s.fast = fp } }

var _ api.ServerInterface = (*Server)(nil)

// New returns a Server for the compiled senders, storing deliveries with
// ingest. Its metrics are registered on reg, which /metrics serves.
func New(senders *sender.Set, ingest *dedup.Store, ready ReadyFunc, reg *prometheus.Registry, log *slog.Logger, opts ...Option) *Server {
	s := &Server{
		senders:    senders,
		cfg:        senders.Config(),
		deliveries: ingest,
		ready:      ready,
		log:        log,
		metrics:    newMetrics(reg),
		gather:     reg,
		docs:       v5emb.New("hookgate API", "/openapi.yaml", "/docs"),
		authLimit:  authlimit.New(),
		now:        time.Now,
		budget:     newBodyBudget(0, 0),
	}
	s.docsCSP = docsPolicy(s.docs)
	s.shed = registerShedMetrics(reg, s)
	for _, o := range opts {
		o(s)
	}
	return s
}

// Router returns the HTTP handler serving every route of openapi.yaml, plus
// the API explorer's static assets under /docs/, and the console under
// /console when WithConsole gave one (it signs in with the admin token
// itself). Every request under /v1 (the operator API) must carry the admin
// token, whether or not a route matches it.
func (s *Server) Router() http.Handler {
	r := chi.NewRouter()
	r.Use(assignRequestID, securityHeaders(s.docsCSP), s.logRequests, s.recoverPanics, s.requireAdmin)
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
		r.Mount("/console", s.console)
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

// GetReadyz answers 200 when the database is reachable and migrated to head,
// 503 with Retry-After otherwise.
func (s *Server) GetReadyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := s.ready(ctx); err != nil {
		s.log.Warn("not ready", "err", err)
		_ = writeProblem(w, &problemError{typ: probUnavailable, detail: "The database is unreachable or its migrations are not at head.", cause: err})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// GetMetrics serves the Prometheus metrics, or 404 when they are served on
// an address of their own (WithMetricsElsewhere).
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

// WithMetricsElsewhere says that the metrics are served on an address of
// their own: the Server's routers then answer 404 at /metrics.
func WithMetricsElsewhere(elsewhere bool) Option {
	return func(s *Server) { s.metricsElsewhere = elsewhere }
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
