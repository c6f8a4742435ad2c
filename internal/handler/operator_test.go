package handler_test

import (
	"bytes"
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river/rivertype"

	"github.com/hookgate/hookgate/api"
	"github.com/hookgate/hookgate/internal/access"
	"github.com/hookgate/hookgate/internal/authlimit"
	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/console"
	"github.com/hookgate/hookgate/internal/dedup"
	"github.com/hookgate/hookgate/internal/forward"
	"github.com/hookgate/hookgate/internal/forward/transport"
	"github.com/hookgate/hookgate/internal/handler"
	"github.com/hookgate/hookgate/internal/queue"
	"github.com/hookgate/hookgate/internal/sender"
	"github.com/hookgate/hookgate/internal/sigtoken"
	"github.com/hookgate/hookgate/internal/store"
	"github.com/hookgate/hookgate/internal/testing/pgtest"
	"github.com/hookgate/hookgate/internal/testing/queuetest"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// testToken is the admin token of operator test servers.
const testToken = "op-token-5f1c9a7e2b-0d4e8a6c3b91f27e"

// opOptions tune an operator test server.
type opOptions struct {
	// yaml is the configuration (sendersYAML when empty); env holds what
	// its ${VAR} references expand to.
	yaml string
	env  map[string]string
	// edit, when set, changes the parsed configuration: for what start-up
	// refuses now and an older version took.
	edit func(*config.Config)
	// noToken leaves the admin token out (the operator API is disabled);
	// otherwise it is testToken.
	noToken bool
	// work starts a River client that works forwards, with retries after
	// backoff (10 ms to 100 ms when zero), and a relay of the outbox into
	// it. Without it, forwards stay in the outbox (the api role with no
	// worker running).
	work    bool
	backoff forward.Backoff
	// noDB leaves handler.Config.Queries nil.
	noDB bool
	// limiter replaces the server's own wrong-token limiter.
	limiter *authlimit.Limiter
	// console serves the console under /console, signed in with testToken.
	console bool
	// readTokens are the server's read tokens.
	readTokens []access.Token
	// reloader reloads for POST /v1/config/reload (none when nil).
	reloader handler.ConfigReloader
	// log receives the server's log lines (none when nil).
	log io.Writer
}

// opServer is a hookgate server with its operator API enabled, on its own
// database.
type opServer struct {
	*server
	pool   *pgxpool.Pool
	router http.Handler
	cfg    *config.Config
	live   *sender.Live // what the API reads; the River client keeps cfg
	river  *queue.River
	log    *slog.Logger
}

// newOpServer starts a server as cmd/server wires it: forwards written to
// the outbox in the ingest transaction, and a River client that redelivers
// and, with o.work, works the forwards the relay moves into it from the
// outbox (both are stopped when the test ends, before the database is
// dropped and after the server is closed).
func newOpServer(t *testing.T, o opOptions) *opServer {
	t.Helper()
	pool, _ := pgtest.NewDB(t)
	yaml := sendersYAML
	if o.yaml != "" {
		yaml = o.yaml
	}
	cfg, err := config.Parse([]byte(yaml), func(k string) (string, bool) { v, ok := o.env[k]; return v, ok })
	if err != nil {
		t.Fatalf("config.Parse: %v", err)
	}
	if o.edit != nil {
		o.edit(cfg)
	}
	log := slog.New(slog.NewTextHandler(cmp.Or[io.Writer](o.log, io.Discard), nil))
	if o.backoff == (forward.Backoff{}) {
		o.backoff = forward.Backoff{Base: 10 * time.Millisecond, Max: 100 * time.Millisecond}
	}
	cc := queue.DefaultClientConfig(cfg)
	cc.MaxWorkers, cc.FetchPollInterval = 4, 100*time.Millisecond
	cc.Pool, cc.Senders, cc.Log = pool, cfg, log
	if o.work { // otherwise the client inserts only
		m := forward.NewMetrics(prometheus.NewRegistry())
		gate, err := forward.NewGate(forward.GateConfig{Capacity: cc.MaxWorkers, Breakers: forward.DefaultBreakerConfig(), DB: pool, Jobs: queue.NewJobs(pool), Metrics: m, Log: log})
		if err != nil {
			t.Fatal(err)
		}
		worker, err := forward.NewWorker(forward.WorkerConfig{Backoff: o.backoff, RetryAfterMax: forward.DefaultRetryAfterMax, AttemptsKept: store.DefaultAttemptsKept,
			Senders: cfg, DB: pool, Jobs: queue.NewJobs(pool), Client: transport.NewHTTPClient(cc.MaxWorkers), Gate: gate, Metrics: m, Log: log})
		if err != nil {
			t.Fatal(err)
		}
		cc.Worker = worker
	}
	client, err := queue.New(cc)
	if err != nil {
		t.Fatal(err)
	}
	if o.work {
		if err := client.Start(context.Background()); err != nil {
			t.Fatalf("start River: %v", err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := client.Stop(ctx); err != nil {
				t.Errorf("stop River: %v", err)
			}
		})
	}
	if o.work {
		rc := forward.DefaultRelayConfig()
		rc.Pool, rc.Queue, rc.Senders, rc.Log = pool, client, cfg, log
		rc.Distributed = pgtest.Citus()
		relay, err := forward.NewRelay(rc)
		if err != nil {
			t.Fatal(err)
		}
		relayCtx, stopRelay := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			relay.Run(relayCtx)
		}()
		t.Cleanup(func() { stopRelay(); <-done })
	}
	hc := handler.DefaultConfig()
	hc.Redeliverer, hc.AuthLimiter, hc.Tokens = client, o.limiter, sigtoken.New(pool)
	if !o.noToken {
		hc.AdminToken = testToken
	}
	hc.ReadTokens, hc.Reloader = o.readTokens, o.reloader
	if !o.noDB {
		hc.Queries, hc.Forwards = store.New(pool), queue.NewJobs(pool)
	}
	if o.console {
		cons, err := console.New(console.Config{Senders: cfg, Queries: store.New(pool), Forwards: queue.NewJobs(pool), Log: log, AdminToken: testToken, ReadTokens: o.readTokens, SessionTTL: console.DefaultSessionTTL, Redeliverer: hc.Redeliverer})
		if err != nil {
			t.Fatal(err)
		}
		hc.Console = cons
	}
	ingest, err := dedup.New(dedup.Config{Pool: pool, InFlightWait: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// The API reads the configuration from live, as a gateway's does: a
	// test reloads by swapping it.
	live := sender.NewLive(sender.MustCompile(cfg).Snapshot())
	hc.Senders, hc.Ingest, hc.Ready, hc.Registry, hc.Log = live, ingest, func(context.Context) error { return nil }, prometheus.NewRegistry(), log
	h, err := handler.New(hc)
	if err != nil {
		t.Fatal(err)
	}
	router := h.Router()
	srv := httptest.NewServer(router)
	t.Cleanup(srv.Close)
	return &opServer{server: &server{t: t, srv: srv, url: srv.URL, client: srv.Client()}, pool: pool, router: router, cfg: cfg, live: live, river: client, log: log}
}

// relayOnce moves the outbox into River once, as a worker's relay does,
// and returns how many forwards it moved.
func (s *opServer) relayOnce() int {
	s.t.Helper()
	rc := forward.DefaultRelayConfig()
	rc.Pool, rc.Queue, rc.Senders, rc.Log = s.pool, s.river, s.cfg, s.log
	rc.Distributed = pgtest.Citus()
	relay, err := forward.NewRelay(rc)
	if err != nil {
		s.t.Fatal(err)
	}
	n, err := relay.Once(s.t.Context())
	if err != nil {
		s.t.Fatalf("relay: %v", err)
	}
	return n
}

// call sends an operator request with the admin token and reads the reply.
func (s *opServer) call(method, path string) reply {
	s.t.Helper()
	return s.do(s.opRequest(method, path, "Bearer "+testToken))
}

// opRequest returns a request with the Authorization header auth (none
// when auth is "").
func (s *opServer) opRequest(method, path, auth string) *http.Request {
	s.t.Helper()
	req := s.newRequest(method, path, nil)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	return req
}

// decode checks that r has status and a JSON body valid under the
// operation's response schema in openapi.yaml, and decodes the body into v.
func decode(t *testing.T, r reply, status int, method, route string, v any) {
	t.Helper()
	if r.status != status {
		t.Fatalf("%s %s: status %d, want %d; response: %s", method, route, r.status, status, r)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s %s: Content-Type %q, want application/json", method, route, ct)
	}
	wantSpecBody(t, r, method, route)
	dec := json.NewDecoder(bytes.NewReader(r.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s %s: body %s: %v", method, route, r.body, err)
	}
}

// specDoc is openapi.yaml loaded once for every test of the package (loading
// it takes about 0.2 s under -race, and wantSpecBody runs hundreds of times).
// The tests only read it.
var specDoc = sync.OnceValues(func() (*openapi3.T, error) {
	return openapi3.NewLoader().LoadFromData(api.Spec)
})

// wantSpecBody checks r's body against the schema openapi.yaml declares for
// the operation at route, r's status and r's Content-Type.
func wantSpecBody(t *testing.T, r reply, method, route string) {
	t.Helper()
	doc, err := specDoc()
	if err != nil {
		t.Fatal(err)
	}
	item := doc.Paths.Find(route)
	if item == nil || item.GetOperation(method) == nil {
		t.Fatalf("openapi.yaml has no operation %s %s", method, route)
	}
	resp := item.GetOperation(method).Responses.Status(r.status)
	if resp == nil {
		t.Fatalf("openapi.yaml documents no %d for %s %s; response: %s", r.status, method, route, r)
	}
	mt := resp.Value.Content.Get(r.header.Get("Content-Type"))
	if mt == nil {
		t.Fatalf("openapi.yaml has no %s body for %d of %s %s", r.header.Get("Content-Type"), r.status, method, route)
	}
	var v any
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatalf("%s %s: body is not JSON: %v", method, route, err)
	}
	if err := mt.Schema.Value.VisitJSON(v, openapi3.VisitAsResponse(), openapi3.MultiErrors()); err != nil {
		t.Errorf("%s %s %d: body does not match openapi.yaml: %v\nbody: %s", method, route, r.status, err, r.body)
	}
}

// wantOpProblem is wantProblem for the operator API: the problem must also
// be documented for the operation.
func wantOpProblem(t *testing.T, r reply, status int, slug, method, route string) problem {
	t.Helper()
	p := wantProblem(t, r, status, slug)
	wantSpecBody(t, r, method, route)
	return p
}

// opRoute is an operator route and a path that reaches it.
type opRoute struct {
	method, pattern, path string
}

// operatorRoutes walks router for the routes under /v1 and fills their
// parameters with sender, deliveryID and eventID.
func operatorRoutes(t *testing.T, router http.Handler, sender, deliveryID string, eventID uuid.UUID) []opRoute {
	t.Helper()
	routes, ok := router.(chi.Routes)
	if !ok {
		t.Fatalf("Router() is a %T, not chi.Routes", router)
	}
	fill := strings.NewReplacer("{sender}", sender, "{delivery_id}", url.PathEscape(deliveryID), "{event_id}", eventID.String(), "{target}", "t")
	var out []opRoute
	err := chi.Walk(routes, func(method, pattern string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		if strings.HasPrefix(pattern, "/v1/") {
			out = append(out, opRoute{method, pattern, fill.Replace(pattern)})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 16 {
		t.Fatalf("router has %d operator routes, want 16: %v", len(out), out)
	}
	return out
}

// Response bodies, as the tests read them (decode rejects unknown fields).
type (
	sendersPage struct {
		Items []senderInfo `json:"items"`
	}
	senderInfo struct {
		Name       string            `json:"name"`
		Preset     string            `json:"preset"`
		DeliveryID map[string]string `json:"delivery_id"`
		Signature  struct {
			Scheme           string  `json:"scheme"`
			Header           *string `json:"header"`
			Encoding         *string `json:"encoding"`
			Prefix           *string `json:"prefix"`
			SecretCount      int     `json:"secret_count"`
			ToleranceSeconds float64 `json:"tolerance_seconds"`
		} `json:"signature"`
		RetentionSeconds float64 `json:"retention_seconds"`
		MaxBodyBytes     int64   `json:"max_body_bytes"`
		Forward          []struct {
			Name           string   `json:"name"`
			URL            string   `json:"url"`
			TimeoutSeconds float64  `json:"timeout_seconds"`
			MaxAttempts    int      `json:"max_attempts"`
			Signed         bool     `json:"signed"`
			HeaderNames    []string `json:"header_names"`
		} `json:"forward"`
	}
	deliveryPage struct {
		Items      []deliverySummary `json:"items"`
		NextCursor *string           `json:"next_cursor"`
	}
	deliverySummary struct {
		DeliveryID     string    `json:"delivery_id"`
		EventID        uuid.UUID `json:"event_id"`
		EventType      string    `json:"event_type"`
		ReceivedAt     time.Time `json:"received_at"`
		ExpiresAt      time.Time `json:"expires_at"`
		RequestSHA256  string    `json:"request_sha256"`
		ResponseStatus int       `json:"response_status"`
	}
	deliveryRecord struct {
		Sender        string    `json:"sender"`
		DeliveryID    string    `json:"delivery_id"`
		EventID       uuid.UUID `json:"event_id"`
		EventType     string    `json:"event_type"`
		ReceivedAt    time.Time `json:"received_at"`
		ExpiresAt     time.Time `json:"expires_at"`
		RequestSHA256 string    `json:"request_sha256"`
		Response      struct {
			Status       int             `json:"status"`
			ContentType  string          `json:"content_type"`
			BodyEncoding string          `json:"body_encoding"`
			Body         json.RawMessage `json:"body"`
		} `json:"response"`
		Forwards   []forwardState `json:"forwards"`
		RuleErrors []ruleError    `json:"rule_errors"`
	}
	ruleError struct {
		Target string `json:"target"`
		Rule   string `json:"rule"`
		Error  string `json:"error"`
	}
	forwardState struct {
		JobID       *int64     `json:"job_id"`
		Target      string     `json:"target"`
		URL         string     `json:"url"`
		State       string     `json:"state"`
		Held        *string    `json:"held"`
		Attempts    int        `json:"attempts"`
		MaxAttempts int        `json:"max_attempts"`
		LastStatus  *int       `json:"last_status"`
		LastError   *string    `json:"last_error"`
		DeliveredAt *time.Time `json:"delivered_at"`
		Ack         *string    `json:"ack"`
		CreatedAt   time.Time  `json:"created_at"`
	}
	eventRecord struct {
		EventID      uuid.UUID           `json:"event_id"`
		Sender       string              `json:"sender"`
		DeliveryID   string              `json:"delivery_id"`
		EventType    string              `json:"event_type"`
		ReceivedAt   time.Time           `json:"received_at"`
		Headers      map[string][]string `json:"headers"`
		BodyEncoding string              `json:"body_encoding"`
		Body         json.RawMessage     `json:"body"`
		RuleErrors   []ruleError         `json:"rule_errors"`
	}
	redelivery struct {
		EventID    uuid.UUID `json:"event_id"`
		Sender     string    `json:"sender"`
		DeliveryID string    `json:"delivery_id"`
		Forwards   []struct {
			JobID          int64  `json:"job_id"`
			Target         string `json:"target"`
			URL            string `json:"url"`
			AlreadyPending bool   `json:"already_pending"`
			AfterCurrent   bool   `json:"after_current"`
			CurrentJobID   *int64 `json:"current_job_id"`
		} `json:"forwards"`
	}
)

const (
	routeSenders      = "/v1/senders"
	routeDeliveries   = "/v1/senders/{sender}/deliveries"
	routeDelivery     = "/v1/senders/{sender}/deliveries/{delivery_id}"
	routeEvent        = "/v1/events/{event_id}"
	routeRedeliver    = "/v1/events/{event_id}/redeliver"
	routeAttempts     = "/v1/events/{event_id}/attempts"
	routeConfig       = "/v1/config"
	routeConfigReload = "/v1/config/reload"
	routeAudit        = "/v1/audit"
)

func (s *opServer) delivery(sender, id string) deliveryRecord {
	s.t.Helper()
	var d deliveryRecord
	decode(s.t, s.call(http.MethodGet, "/v1/senders/"+sender+"/deliveries/"+url.PathEscape(id)), http.StatusOK, http.MethodGet, routeDelivery, &d)
	return d
}

func (s *opServer) event(id string) eventRecord {
	s.t.Helper()
	var e eventRecord
	decode(s.t, s.call(http.MethodGet, "/v1/events/"+id), http.StatusOK, http.MethodGet, routeEvent, &e)
	return e
}

// accept delivers body to sender with id and returns the new event's ID.
func (s *opServer) accept(sender, id string, body []byte, mods ...func(*http.Request)) string {
	s.t.Helper()
	return wantAccepted(s.t, s.post(sender, id, body, mods...), sender, id).EventID
}

func TestOperatorAPIDisabledWithoutToken(t *testing.T) {
	t.Parallel()
	s := newOpServer(t, opOptions{noToken: true})
	first := s.post("hdr", "d1", []byte(`{}`))
	eventID := uuid.MustParse(wantAccepted(t, first, "hdr", "d1").EventID)

	paths := operatorRoutes(t, s.router, "hdr", "d1", eventID)
	paths = append(paths, opRoute{http.MethodGet, "(no route)", "/v1/no-such-thing"}, opRoute{http.MethodDelete, "(wrong method)", "/v1/senders"})
	for _, rt := range paths {
		for _, auth := range []string{"", "Bearer " + testToken, "Bearer "} {
			r := s.do(s.opRequest(rt.method, rt.path, auth))
			p := wantProblem(t, r, http.StatusForbidden, "operator-disabled")
			if !strings.Contains(p.Detail, "HOOKGATE_ADMIN_TOKEN") {
				t.Errorf("%s %s: detail %q does not say how to enable the operator API", rt.method, rt.path, p.Detail)
			}
			if rt.pattern[0] == '/' {
				wantSpecBody(t, r, rt.method, rt.pattern)
			}
		}
	}
	// The rest of the API is unaffected.
	if r := s.get("/healthz"); r.status != http.StatusOK {
		t.Errorf("/healthz: %s", r)
	}
	wantReplay(t, s.post("hdr", "d1", []byte(`{}`)), first)
}

func TestOperatorAPIAuth(t *testing.T) {
	t.Parallel()
	s := newOpServer(t, opOptions{})
	eventID := uuid.MustParse(s.accept("hdr", "d1", []byte(`{}`)))
	routes := operatorRoutes(t, s.router, "hdr", "d1", eventID)
	routes = append(routes, opRoute{http.MethodGet, "(no route)", "/v1/no-such-thing"})

	for i, tc := range []struct {
		name, auth, challenge string
	}{
		{"missing", "", `Bearer realm="hookgate"`},
		{"empty token", "Bearer ", `Bearer realm="hookgate"`},
		{"other scheme", "Basic " + base64.StdEncoding.EncodeToString([]byte("admin:"+testToken)), `Bearer realm="hookgate"`},
		{"token without scheme", testToken, `Bearer realm="hookgate"`},
		{"wrong token", "Bearer wrong-token", `Bearer realm="hookgate", error="invalid_token"`},
		{"prefix of the token", "Bearer " + testToken[:len(testToken)-1], `Bearer realm="hookgate", error="invalid_token"`},
		{"token and more", "Bearer " + testToken + "0", `Bearer realm="hookgate", error="invalid_token"`},
		{"token in another case", "Bearer " + strings.ToUpper(testToken), `Bearer realm="hookgate", error="invalid_token"`},
	} {
		// Each case and route from its own address: wrong tokens are
		// limited per client (a burst of 10).
		for j, rt := range routes {
			r := s.from(t, fmt.Sprintf("127.0.%d.%d", 10+i, 1+j)).do(s.opRequest(rt.method, rt.path, tc.auth))
			wantProblem(t, r, http.StatusUnauthorized, "unauthorized")
			if got := r.header.Get("WWW-Authenticate"); got != tc.challenge {
				t.Errorf("%s, %s %s: WWW-Authenticate %q, want %q", tc.name, rt.method, rt.path, got, tc.challenge)
			}
			if rt.pattern[0] == '/' {
				wantSpecBody(t, r, rt.method, rt.pattern)
			}
		}
	}
	// The ingest and service endpoints need no token.
	if r := s.get("/healthz"); r.status != http.StatusOK {
		t.Errorf("/healthz without a token: %s", r)
	}

	// The right token, with the scheme in any case, reaches every route.
	want := map[string]int{
		routeSenders: http.StatusOK, routeDeliveries: http.StatusOK, routeDelivery: http.StatusOK, routeEvent: http.StatusOK,
		routeAttempts:  http.StatusOK,
		routeRedeliver: http.StatusConflict, // hdr has no targets
		routeTargets:   http.StatusOK, routeTargetForwards: http.StatusNotFound, routeTargetRedeliver: http.StatusNotFound,
		routeTargetPause: http.StatusNotFound, routeTargetResume: http.StatusNotFound, // hdr has no target t
		routeTargetBlocked: http.StatusNotFound, routeForwardSkip: http.StatusNotFound,
		routeConfig: http.StatusOK, routeConfigReload: http.StatusServiceUnavailable, // the test server has no Reloader
		routeAudit: http.StatusOK,
	}
	for _, scheme := range []string{"Bearer", "bearer", "BEARER"} {
		for _, rt := range routes[:len(routes)-1] { // not the appended "(no route)"
			r := s.do(s.opRequest(rt.method, rt.path, scheme+" "+testToken))
			if r.status != want[rt.pattern] {
				t.Errorf("%s %s with %s token: %s, want status %d", rt.method, rt.path, scheme, r, want[rt.pattern])
			}
			wantSpecBody(t, r, rt.method, rt.pattern)
		}
	}
}

func TestOperatorInvalidParametersAre400(t *testing.T) {
	t.Parallel()
	s := newOpServer(t, opOptions{})
	eventID := s.accept("hdr", "d1", []byte(`{}`))
	for _, tc := range []struct {
		method, path, route, mention string
	}{
		{"GET", "/v1/senders/hdr/deliveries?limit=0", routeDeliveries, `limit must be a whole number from 1 to 500; got "0"`},
		{"GET", "/v1/senders/hdr/deliveries?limit=501", routeDeliveries, `got "501"`},
		{"GET", "/v1/senders/hdr/deliveries?limit=-1", routeDeliveries, `got "-1"`},
		{"GET", "/v1/senders/hdr/deliveries?limit=ten", routeDeliveries, `limit must be a whole number from 1 to 500; got "ten"`},
		{"GET", "/v1/senders/hdr/deliveries?limit=1.5", routeDeliveries, `got "1.5"`},
		{"GET", "/v1/senders/hdr/deliveries?limit=", routeDeliveries, `got ""`},
		{"GET", "/v1/senders/hdr/deliveries?limit=99999999999999999999", routeDeliveries, "limit"},
		{"GET", "/v1/senders/hdr/deliveries?limit=1&limit=2", routeDeliveries, "limit must be given at most once"},
		{"GET", "/v1/senders/hdr/deliveries?cursor=abc", routeDeliveries, "cursor is not a cursor this API returned"},
		{"GET", "/v1/senders/hdr/deliveries?cursor=" + base64.RawURLEncoding.EncodeToString([]byte(`{"t":1}`)), routeDeliveries, "cursor"},
		{"GET", "/v1/senders/hdr/deliveries?cursor=", routeDeliveries, "cursor"},
		{"GET", "/v1/events/42", routeEvent, `event_id must be a UUID such as 01a228ca-2a14-7c1e-9a3b-5d2f8e6a4c10; got "42"`},
		{"GET", "/v1/events/" + eventID + "x", routeEvent, "event_id must be a UUID"},
		{"GET", "/v1/events/" + strings.Repeat("a", 200), routeEvent, "event_id must be a UUID"},
		{"POST", "/v1/events/not-a-uuid/redeliver", routeRedeliver, `event_id must be a UUID such as 01a228ca-2a14-7c1e-9a3b-5d2f8e6a4c10; got "not-a-uuid"`},
		{"GET", "/v1/events/not-a-uuid/attempts", routeAttempts, `event_id must be a UUID such as 01a228ca-2a14-7c1e-9a3b-5d2f8e6a4c10; got "not-a-uuid"`},
	} {
		r := s.call(tc.method, tc.path)
		p := wantOpProblem(t, r, http.StatusBadRequest, "invalid-parameter", tc.method, tc.route)
		if !strings.Contains(p.Detail, tc.mention) {
			t.Errorf("%s %s: detail %q does not mention %q", tc.method, tc.path, p.Detail, tc.mention)
		}
		if len(p.Detail) > 300 {
			t.Errorf("%s %s: detail of %d bytes quotes too much of the request", tc.method, tc.path, len(p.Detail))
		}
	}
	// A valid limit and the first page without a cursor are fine.
	for _, q := range []string{"", "?limit=1", "?limit=500", "?limit=50&cursor=" + (store.Cursor{ReceivedAt: time.Now(), DeliveryID: "x"}).String()} {
		var page deliveryPage
		decode(t, s.call("GET", "/v1/senders/hdr/deliveries"+q), http.StatusOK, "GET", routeDeliveries, &page)
	}
}

func TestOperatorUnknownResourcesAre404(t *testing.T) {
	t.Parallel()
	s := newOpServer(t, opOptions{})
	s.accept("hdr", "d1", []byte(`{}`))
	unknown := uuid.Must(uuid.NewV7()).String()
	for _, tc := range []struct {
		method, path, route, slug, mention string
	}{
		{"GET", "/v1/senders/nobody/deliveries", routeDeliveries, "unknown-sender", `"nobody"`},
		{"GET", "/v1/senders/nobody/deliveries/d1", routeDelivery, "unknown-sender", `"nobody"`},
		{"GET", "/v1/senders/ptr/deliveries/d1", routeDelivery, "not-found", `"d1"`},
		{"GET", "/v1/senders/hdr/deliveries/d2", routeDelivery, "not-found", `"d2"`},
		{"GET", "/v1/events/" + unknown, routeEvent, "not-found", unknown},
		{"POST", "/v1/events/" + unknown + "/redeliver", routeRedeliver, "not-found", unknown},
		{"GET", "/v1/events/" + unknown + "/attempts", routeAttempts, "not-found", unknown},
	} {
		p := wantOpProblem(t, s.call(tc.method, tc.path), http.StatusNotFound, tc.slug, tc.method, tc.route)
		if !strings.Contains(p.Detail, tc.mention) {
			t.Errorf("%s %s: detail %q does not mention %s", tc.method, tc.path, p.Detail, tc.mention)
		}
	}
}

func TestOperatorWithoutDatabaseIs503(t *testing.T) {
	t.Parallel()
	s := newOpServer(t, opOptions{noDB: true})
	eventID := s.accept("hdr", "d1", []byte(`{}`))
	for _, tc := range []struct{ method, path, route string }{
		{"GET", "/v1/senders/hdr/deliveries/d1", routeDelivery},
		{"GET", "/v1/events/" + eventID, routeEvent},
		{"POST", "/v1/events/" + eventID + "/redeliver", routeRedeliver},
		{"GET", "/v1/events/" + eventID + "/attempts", routeAttempts},
	} {
		r := s.call(tc.method, tc.path)
		wantOpProblem(t, r, http.StatusServiceUnavailable, "unavailable", tc.method, tc.route)
		wantRetryAfter(t, r)
	}
}

func TestOperatorListSenders(t *testing.T) {
	t.Parallel()
	s := newOpServer(t, opOptions{
		yaml: `
senders:
  - name: gh
    preset: github
    secret: ${GH}
    retention: 36h
  - name: hm
    preset: generic
    delivery_id: { json_pointer: /data/id }
    signature: { scheme: hmac-sha256, header: X-Signature, encoding: base64, prefix: "v1=", secret: "${HM1}" }
    secrets: [ "${HM2}" ]
    tolerance: 90s
    max_body_bytes: 4096
    forward:
      - name: t1
        url: https://orders.internal:9000/hooks/${PW}?x=1
        secret_path: true
        timeout: 1500ms
        max_attempts: 3
        signing_secret: ${SIGN}
        headers: { X-Api-Key: "${KEY}", Authorization: "${KEY}" }
      - name: t2
        url: http://ledger.internal/webhooks
  - name: plain
    preset: generic
    delivery_id: { header: X-Delivery-Id }
`,
		env: map[string]string{"GH": "gh-secret-0123456789", "HM1": "hm-secret-1-0123456789", "HM2": "hm-secret-2-0123456789", "PW": "url-password", "SIGN": "whsec_" + base64.StdEncoding.EncodeToString([]byte("signing-key-32-bytes-long-......")), "KEY": "header-value"},
	})
	var got sendersPage
	decode(t, s.call("GET", "/v1/senders"), http.StatusOK, "GET", routeSenders, &got)
	if len(got.Items) != 3 {
		t.Fatalf("%d senders, want 3: %+v", len(got.Items), got)
	}
	gh, hm, plain := got.Items[0], got.Items[1], got.Items[2]
	if gh.Name != "gh" || gh.Preset != "github" || gh.DeliveryID["header"] != "X-GitHub-Delivery" || len(gh.DeliveryID) != 1 ||
		gh.Signature.Scheme != "github" || gh.Signature.SecretCount != 1 || gh.Signature.ToleranceSeconds != 300 ||
		gh.Signature.Header != nil || gh.Signature.Encoding != nil || gh.Signature.Prefix != nil ||
		gh.RetentionSeconds != 36*3600 || gh.MaxBodyBytes != 1<<20 || gh.Forward == nil || len(gh.Forward) != 0 {
		t.Errorf("gh = %+v", gh)
	}
	if hm.Name != "hm" || hm.Preset != "generic" || hm.DeliveryID["json_pointer"] != "/data/id" || len(hm.DeliveryID) != 1 ||
		hm.Signature.Scheme != "hmac-sha256" || hm.Signature.SecretCount != 2 || hm.Signature.ToleranceSeconds != 90 ||
		hm.Signature.Header == nil || *hm.Signature.Header != "X-Signature" || hm.Signature.Encoding == nil || *hm.Signature.Encoding != "base64" ||
		hm.Signature.Prefix == nil || *hm.Signature.Prefix != "v1=" || hm.RetentionSeconds != 7*24*3600 || hm.MaxBodyBytes != 4096 {
		t.Errorf("hm = %+v", hm)
	}
	if len(hm.Forward) != 2 {
		t.Fatalf("hm has %d targets, want 2: %+v", len(hm.Forward), hm.Forward)
	}
	if f := hm.Forward[0]; f.Name != "t1" || f.URL != "https://orders.internal:9000/xxxxx/xxxxx?x=xxxxx" || f.TimeoutSeconds != 1.5 || f.MaxAttempts != 3 ||
		!f.Signed || !slices.Equal(f.HeaderNames, []string{"Authorization", "X-Api-Key"}) {
		t.Errorf("hm target 0 = %+v", f)
	}
	if f := hm.Forward[1]; f.Name != "t2" || f.URL != "http://ledger.internal/webhooks" || f.TimeoutSeconds != 10 || f.MaxAttempts != 20 ||
		f.Signed || f.HeaderNames == nil || len(f.HeaderNames) != 0 {
		t.Errorf("hm target 1 = %+v", f)
	}
	if plain.Signature.Scheme != "none" || plain.Signature.SecretCount != 0 || plain.DeliveryID["header"] != "X-Delivery-Id" {
		t.Errorf("plain = %+v", plain)
	}
	if leak := containsAny(string(s.call("GET", "/v1/senders").body), "gh-secret", "hm-secret", "url-password", "whsec_", "header-value"); leak != "" {
		t.Errorf("GET /v1/senders contains the secret %q", leak)
	}
}

// TestOperatorPaginationWhileDeliveriesArrive walks a sender's deliveries
// page by page while a goroutine keeps delivering new ones (at least one
// between any two pages): the walk must visit every delivery that existed
// when it started exactly once, newest first, never one twice, and of the
// new ones only those that arrived before its first page (the newest).
func TestOperatorPaginationWhileDeliveriesArrive(t *testing.T) {
	t.Parallel()
	s := newOpServer(t, opOptions{})
	const initial, limit = 61, 7
	existing := map[string]bool{}
	for i := range initial {
		id := fmt.Sprintf("old-%03d", i)
		s.accept("hdr", id, fmt.Appendf(nil, `{"n":%d}`, i))
		existing[id] = true
	}
	s.accept("ptr", "old-000", []byte(`{"id":"old-000"}`)) // another sender's: never listed

	var (
		posted atomic.Int64
		stop   = make(chan struct{})
		wg     sync.WaitGroup
		errs   = make(chan error, 1)
	)
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			r, err := s.send(s.postRequest("hdr", fmt.Sprintf("new-%04d", i), []byte(`{}`)))
			if err == nil && r.status != http.StatusAccepted {
				err = fmt.Errorf("new delivery %d: %s", i, r)
			}
			if err != nil {
				errs <- err
				return
			}
			posted.Add(1)
		}
	})
	defer func() {
		close(stop)
		wg.Wait()
		select {
		case err := <-errs:
			t.Errorf("delivering during the walk: %v", err)
		default:
		}
	}()

	seen := map[string]int{}
	var (
		walked []deliverySummary
		cursor string
		pages  int
		// postedBeforeFirst bounds the new deliveries the walk may see:
		// those acknowledged when its first page had been read, and at
		// most the one then in flight.
		postedBeforeFirst int64
	)
	for {
		// Let at least one more delivery arrive before each page.
		before := posted.Load()
		testkit.Poll(t, pollTimeout, "a new delivery", func() bool { return posted.Load() > before || len(errs) > 0 })
		path := fmt.Sprintf("/v1/senders/hdr/deliveries?limit=%d", limit)
		if cursor != "" {
			path += "&cursor=" + url.QueryEscape(cursor)
		}
		var page deliveryPage
		decode(t, s.call("GET", path), http.StatusOK, "GET", routeDeliveries, &page)
		pages++
		if pages == 1 {
			postedBeforeFirst = posted.Load()
		}
		for _, d := range page.Items {
			seen[d.DeliveryID]++
		}
		walked = append(walked, page.Items...)
		if page.NextCursor == nil {
			break
		}
		if len(page.Items) != limit {
			t.Errorf("page %d has %d items and a next page; want %d", pages, len(page.Items), limit)
		}
		cursor = *page.NextCursor
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("the walk saw %s %d times", id, n)
		}
	}
	for id := range existing {
		if seen[id] != 1 {
			t.Errorf("the walk saw %s %d times, want once", id, seen[id])
		}
	}
	// New deliveries seen: new-0000 up to some new-k, all newer than every
	// old one, none after the walk's first page.
	newSeen := 0
	for i, d := range walked {
		if existing[d.DeliveryID] {
			continue
		}
		newSeen++
		if i >= len(seen)-initial {
			t.Errorf("new delivery %s is listed after old ones", d.DeliveryID)
		}
	}
	for i := range newSeen {
		if id := fmt.Sprintf("new-%04d", i); seen[id] != 1 {
			t.Errorf("the walk saw %d new deliveries but not %s", newSeen, id)
		}
	}
	if int64(newSeen) > postedBeforeFirst+1 {
		t.Errorf("the walk saw %d new deliveries; only %d (and one in flight) had arrived by its first page", newSeen, postedBeforeFirst)
	}
	if posted.Load() < int64(pages) {
		t.Errorf("%d deliveries arrived during a walk of %d pages; want one before each page", posted.Load(), pages)
	}
	for i := 1; i < len(walked); i++ {
		a, b := walked[i-1], walked[i]
		if b.ReceivedAt.After(a.ReceivedAt) || (b.ReceivedAt.Equal(a.ReceivedAt) && b.DeliveryID >= a.DeliveryID) {
			t.Errorf("item %d (%s, %s) follows (%s, %s): not newest first", i, b.ReceivedAt, b.DeliveryID, a.ReceivedAt, a.DeliveryID)
		}
	}
	if minPages := (initial + limit - 1) / limit; pages < minPages {
		t.Errorf("the walk took %d pages, want at least %d", pages, minPages)
	}
	// The items carry the stored record.
	first := walked[len(walked)-1] // the oldest: old-000
	sum := sha256.Sum256([]byte(`{"n":0}`))
	if first.DeliveryID != "old-000" || first.ResponseStatus != http.StatusAccepted || first.RequestSHA256 != hex.EncodeToString(sum[:]) ||
		!first.ExpiresAt.Equal(first.ReceivedAt.Add(config.DefaultRetention)) || first.EventID == uuid.Nil {
		t.Errorf("oldest item = %+v", first)
	}
}

// forwardsOf returns d's forwards to the target named target, as listed
// (those still in the outbox first, then the jobs, oldest first).
func forwardsOf(d deliveryRecord, target string) []forwardState {
	var out []forwardState
	for _, f := range d.Forwards {
		if f.Target == target {
			out = append(out, f)
		}
	}
	return out
}

// jobID returns f's job ID, 0 when it has none (it is still in the outbox).
func jobID(f forwardState) int64 {
	if f.JobID == nil {
		return 0
	}
	return *f.JobID
}

// settled reports whether every forward of d is delivered or failed.
func settled(d deliveryRecord) bool {
	for _, f := range d.Forwards {
		if f.State != "delivered" && f.State != "failed" {
			return false
		}
	}
	return true
}

func TestOperatorDeliveryShowsForwardsAndRedelivers(t *testing.T) {
	t.Parallel()
	ok := testkit.NewTarget(t, testkit.Sequence(http.StatusOK))
	bad := testkit.NewTarget(t, testkit.Sequence(http.StatusBadRequest))
	flaky := testkit.NewTarget(t, testkit.Sequence(http.StatusServiceUnavailable, http.StatusNoContent))
	s := newOpServer(t, opOptions{work: true, yaml: fmt.Sprintf(`
senders:
  - name: fwd
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    forward:
      - name: t3
        url: %s/ok
        max_attempts: 5
      - name: t4
        url: %s/bad
        max_attempts: 5
      - name: t5
        url: %s/flaky
        max_attempts: 4
`, ok.Server(), bad.Server(), flaky.Server())})
	body := []byte(`{"order":42,"status":"paid"}`)
	eventID := s.accept("fwd", "d-1", body)

	var d deliveryRecord
	testkit.Poll(t, pollTimeout, "the forwards to settle", func() bool {
		d = s.delivery("fwd", "d-1")
		return len(d.Forwards) == 3 && settled(d)
	})
	sum := sha256.Sum256(body)
	if d.Sender != "fwd" || d.DeliveryID != "d-1" || d.EventID.String() != eventID || d.RequestSHA256 != hex.EncodeToString(sum[:]) ||
		!d.ExpiresAt.Equal(d.ReceivedAt.Add(config.DefaultRetention)) || d.ReceivedAt.Location() != time.UTC {
		t.Errorf("delivery = %+v", d)
	}
	var stored acceptedBody
	if d.Response.Status != http.StatusAccepted || d.Response.ContentType != "application/json" || d.Response.BodyEncoding != "json" ||
		json.Unmarshal(d.Response.Body, &stored) != nil || stored.EventID != eventID || stored.DeliveryID != "d-1" {
		t.Errorf("stored response = %+v (body %s), want the 202 JSON of event %s", d.Response, d.Response.Body, eventID)
	}

	urls := map[string]string{"t3": ok.Server() + "/ok", "t4": bad.Server() + "/bad", "t5": flaky.Server() + "/flaky"}
	check := func(f forwardState, state string, attempts, maxAttempts, lastStatus int, errMention string) {
		t.Helper()
		if f.State != state || f.Attempts != attempts || f.MaxAttempts != maxAttempts || f.LastStatus == nil || *f.LastStatus != lastStatus || jobID(f) == 0 || f.CreatedAt.IsZero() {
			t.Errorf("forward to %s = %+v; want %s after %d of %d attempts, last status %d", f.Target, f, state, attempts, maxAttempts, lastStatus)
		}
		if f.URL != urls[f.Target] {
			t.Errorf("forward to %s: url %q, want the target's %q", f.Target, f.URL, urls[f.Target])
		}
		if state == "delivered" && (f.DeliveredAt == nil || f.DeliveredAt.Before(f.CreatedAt) || f.LastError != nil) {
			t.Errorf("delivered forward to %s: delivered_at %v, last_error %v; want a time and no error", f.URL, f.DeliveredAt, f.LastError)
		}
		if state == "failed" && (f.DeliveredAt != nil || f.LastError == nil || !strings.Contains(*f.LastError, errMention)) {
			t.Errorf("failed forward to %s: delivered_at %v, last_error %v; want none and an error mentioning %q", f.URL, f.DeliveredAt, f.LastError, errMention)
		}
	}
	okF, badF, flakyF := forwardsOf(d, "t3"), forwardsOf(d, "t4"), forwardsOf(d, "t5")
	if len(okF) != 1 || len(badF) != 1 || len(flakyF) != 1 {
		t.Fatalf("forwards = %+v; want one per target", d.Forwards)
	}
	check(okF[0], "delivered", 1, 5, http.StatusOK, "")
	check(badF[0], "failed", 1, 5, http.StatusBadRequest, "target answered 400")
	check(flakyF[0], "delivered", 2, 4, http.StatusNoContent, "")
	if n := len(flaky.Hits()); n != 2 {
		t.Errorf("the flaky target got %d requests, want 2", n)
	}

	// Redeliver the delivered and failed forwards: one new job per target,
	// none already pending, worked like the first ones.
	var re redelivery
	decode(t, s.call("POST", "/v1/events/"+eventID+"/redeliver"), http.StatusAccepted, "POST", routeRedeliver, &re)
	if re.EventID.String() != eventID || re.Sender != "fwd" || re.DeliveryID != "d-1" || len(re.Forwards) != 3 {
		t.Fatalf("redelivery = %+v", re)
	}
	old := map[int64]bool{jobID(okF[0]): true, jobID(badF[0]): true, jobID(flakyF[0]): true}
	var targets []string
	for _, f := range re.Forwards {
		if old[f.JobID] || f.JobID == 0 || f.AlreadyPending {
			t.Errorf("redelivery job %d to %s (already pending %v) is not new", f.JobID, f.Target, f.AlreadyPending)
		}
		if f.URL != urls[f.Target] {
			t.Errorf("redelivery to %s: url %q, want %q", f.Target, f.URL, urls[f.Target])
		}
		targets = append(targets, f.Target)
	}
	slices.Sort(targets)
	if want := []string{"t3", "t4", "t5"}; !slices.Equal(targets, want) {
		t.Errorf("redelivery targets %v, want %v", targets, want)
	}
	testkit.Poll(t, pollTimeout, "the redelivered forwards to settle", func() bool {
		d = s.delivery("fwd", "d-1")
		return len(d.Forwards) == 6 && settled(d)
	})
	okF = forwardsOf(d, "t3")
	if len(okF) != 2 || jobID(okF[0]) >= jobID(okF[1]) {
		t.Fatalf("forwards to ok = %+v; want the first and the redelivery, oldest first", okF)
	}
	check(okF[1], "delivered", 1, 5, http.StatusOK, "")
	check(forwardsOf(d, "t4")[1], "failed", 1, 5, http.StatusBadRequest, "target answered 400")
	check(forwardsOf(d, "t5")[1], "delivered", 1, 4, http.StatusNoContent, "")
	for name, tg := range map[string]*testkit.Target{"ok": ok, "flaky": flaky} {
		reqs := tg.Hits()
		if want := map[string]int{"ok": 2, "flaky": 3}[name]; len(reqs) != want {
			t.Fatalf("the %s target got %d requests, want %d (the forward's attempts and the redelivery)", name, len(reqs), want)
		}
		for i, r := range reqs {
			if k := r.Header.Get("Idempotency-Key"); k != eventID {
				t.Errorf("request %d to the %s target: Idempotency-Key %q, want the event ID %s", i, name, k, eventID)
			}
		}
	}
}

// TestOperatorForwardStatesWhileWorking checks the states a forward shows
// before it settles: running while the target holds the request, retrying
// after a failed attempt whose retry is far off, and pending while no
// worker has taken it.
func TestOperatorForwardStatesWhileWorking(t *testing.T) {
	t.Parallel()
	slow := testkit.NewTarget(t, func(int, *http.Request) testkit.Answer { return testkit.Answer{Block: true} })
	down := testkit.NewTarget(t, testkit.Sequence(http.StatusBadGateway))
	yaml := fmt.Sprintf(`
senders:
  - name: fwd
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    forward:
      - name: t6
        url: %s/slow
      - name: t7
        url: %s/down
        max_attempts: 3
`, slow.Server(), down.Server())
	s := newOpServer(t, opOptions{work: true, yaml: yaml, backoff: forward.Backoff{Base: time.Hour, Max: time.Hour}})
	t.Cleanup(slow.Release) // before River stops
	s.accept("fwd", "d-1", []byte(`{}`))

	var d deliveryRecord
	testkit.Poll(t, pollTimeout, "one forward running and one retrying", func() bool {
		d = s.delivery("fwd", "d-1")
		sl, dn := forwardsOf(d, "t6"), forwardsOf(d, "t7")
		return len(sl) == 1 && len(dn) == 1 && sl[0].State == "running" && dn[0].State == "retrying"
	})
	sl, dn := forwardsOf(d, "t6")[0], forwardsOf(d, "t7")[0]
	if jobID(sl) == 0 || jobID(dn) == 0 || sl.URL != slow.Server()+"/slow" || dn.URL != down.Server()+"/down" {
		t.Errorf("forwards = %+v, %+v; want jobs to the configured URLs", sl, dn)
	}
	if sl.Attempts != 1 || sl.LastStatus != nil || sl.LastError != nil || sl.DeliveredAt != nil {
		t.Errorf("running forward = %+v; want attempt 1 and nothing finished", sl)
	}
	if dn.Attempts != 1 || dn.MaxAttempts != 3 || dn.LastStatus == nil || *dn.LastStatus != http.StatusBadGateway ||
		dn.LastError == nil || !strings.Contains(*dn.LastError, "target answered 502") || dn.DeliveredAt != nil {
		t.Errorf("retrying forward = %+v; want attempt 1 of 3 with last status 502", dn)
	}

	// A process that only ingests (role api), with no worker relaying its
	// outbox, leaves new forwards in the outbox: pending, with no job.
	idle := newOpServer(t, opOptions{yaml: yaml})
	idle.accept("fwd", "d-2", []byte(`{}`))
	d = idle.delivery("fwd", "d-2")
	if len(d.Forwards) != 2 || d.Forwards[0].Target != "t6" || d.Forwards[1].Target != "t7" {
		t.Fatalf("forwards = %+v, want one to t6 and one to t7", d.Forwards)
	}
	for _, f := range d.Forwards {
		if f.State != "pending" || f.JobID != nil || f.Attempts != 0 || f.LastStatus != nil || f.LastError != nil || f.DeliveredAt != nil || !f.CreatedAt.Equal(d.ReceivedAt) {
			t.Errorf("forward in the outbox = %+v; want pending, no job, no attempt, created when the delivery was received (%s)", f, d.ReceivedAt)
		}
		if want := map[string]int{"t6": config.DefaultForwardMaxAttempts, "t7": 3}[f.Target]; f.MaxAttempts != want {
			t.Errorf("forward in the outbox to %s: max_attempts %d, want the target's %d", f.Target, f.MaxAttempts, want)
		}
	}
}

// TestOperatorForwardInOutboxAndRedeliverWhilePending: with no relay
// running, a delivery's forwards are in the outbox and its record shows
// them pending with a null job_id and the target's name and (redacted)
// URL. Redelivering an event whose forwards are jobs still waiting enqueues
// nothing: the answer names the waiting jobs, already_pending. Redelivering
// an event whose forwards are still in the outbox enqueues them at once, and
// the relay that later moves the outbox rows adds no second job.
func TestOperatorForwardInOutboxAndRedeliverWhilePending(t *testing.T) {
	t.Parallel()
	s := newOpServer(t, opOptions{env: map[string]string{"PW": "pw-3f9a1c"}, yaml: `
senders:
  - name: fwd
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    forward:
      - name: orders
        url: http://orders.internal:9000/hooks/${PW}?token=tok-77e2
        secret_path: true
        max_attempts: 4
      - name: ledger
        url: http://ledger.internal/webhooks
`})
	urls := map[string]string{"orders": "http://orders.internal:9000/xxxxx/xxxxx?token=xxxxx", "ledger": "http://ledger.internal/webhooks"}
	maxAttempts := map[string]int{"orders": 4, "ledger": config.DefaultForwardMaxAttempts}
	jobsOf := func(eventID string) map[string]int64 {
		t.Helper()
		jobs, err := queuetest.New(s.pool).ForwardJobs(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int64{}
		for _, j := range jobs {
			if j.EventID != eventID {
				continue
			}
			if _, dup := out[j.Target]; dup {
				t.Errorf("event %s has two jobs to %s", eventID, j.Target)
			}
			out[j.Target] = j.ID
		}
		return out
	}

	ev1 := s.accept("fwd", "d-1", []byte(`{}`))
	d := s.delivery("fwd", "d-1")
	if len(d.Forwards) != 2 || d.Forwards[0].Target != "ledger" || d.Forwards[1].Target != "orders" {
		t.Fatalf("forwards = %+v, want one to ledger and one to orders", d.Forwards)
	}
	for _, f := range d.Forwards {
		if f.State != "pending" || f.JobID != nil || f.URL != urls[f.Target] || f.Attempts != 0 || f.MaxAttempts != maxAttempts[f.Target] ||
			f.LastStatus != nil || f.LastError != nil || f.DeliveredAt != nil || f.CreatedAt.IsZero() {
			t.Errorf("forward in the outbox = %+v; want pending, job_id null, url %q, no attempt of %d", f, urls[f.Target], maxAttempts[f.Target])
		}
	}
	if leak := containsAny(string(s.call("GET", "/v1/senders/fwd/deliveries/d-1").body), "pw-3f9a1c", "tok-77e2"); leak != "" {
		t.Errorf("the delivery record contains %q of the target's URL", leak)
	}

	// Relayed, the forwards are jobs waiting for a worker.
	if n := s.relayOnce(); n != 2 {
		t.Fatalf("relay moved %d forwards, want 2", n)
	}
	waiting := jobsOf(ev1)
	d = s.delivery("fwd", "d-1")
	if len(d.Forwards) != 2 || len(waiting) != 2 {
		t.Fatalf("forwards = %+v, jobs %v; want 2 of each", d.Forwards, waiting)
	}
	for _, f := range d.Forwards {
		if f.State != "pending" || jobID(f) == 0 || jobID(f) != waiting[f.Target] || f.MaxAttempts != maxAttempts[f.Target] {
			t.Errorf("relayed forward = %+v; want pending with job %d, %d attempts", f, waiting[f.Target], maxAttempts[f.Target])
		}
	}
	var re redelivery
	decode(t, s.call("POST", "/v1/events/"+ev1+"/redeliver"), http.StatusAccepted, "POST", routeRedeliver, &re)
	if len(re.Forwards) != 2 {
		t.Fatalf("redelivery = %+v, want both targets", re)
	}
	for _, f := range re.Forwards {
		if !f.AlreadyPending || f.JobID != waiting[f.Target] || f.URL != urls[f.Target] {
			t.Errorf("redelivery of a waiting forward = %+v; want already_pending, job %d, url %q", f, waiting[f.Target], urls[f.Target])
		}
	}
	if got := jobsOf(ev1); len(got) != 2 {
		t.Errorf("jobs after redelivering waiting forwards %v, want still the 2", got)
	}

	// Redelivered while still in the outbox: jobs at once, none added by the relay.
	ev2 := s.accept("fwd", "d-2", []byte(`{}`))
	decode(t, s.call("POST", "/v1/events/"+ev2+"/redeliver"), http.StatusAccepted, "POST", routeRedeliver, &re)
	enqueued := jobsOf(ev2)
	if len(re.Forwards) != 2 || len(enqueued) != 2 {
		t.Fatalf("redelivery = %+v, jobs %v; want 2 of each", re, enqueued)
	}
	for _, f := range re.Forwards {
		if f.AlreadyPending || f.JobID != enqueued[f.Target] {
			t.Errorf("redelivery of a forward in the outbox = %+v; want a new job (%d)", f, enqueued[f.Target])
		}
	}
	if n := s.relayOnce(); n != 2 {
		t.Fatalf("relay moved %d forwards, want the 2 outbox rows of d-2", n)
	}
	if got := jobsOf(ev2); !maps.Equal(got, enqueued) {
		t.Errorf("jobs after the relay %v, want still only the redelivered ones %v", got, enqueued)
	}
	d = s.delivery("fwd", "d-2")
	if len(d.Forwards) != 2 {
		t.Errorf("forwards of d-2 = %+v, want the 2 jobs and nothing left in the outbox", d.Forwards)
	}
}

// TestOperatorRedeliverWhileRunningQueuesAfter: redelivering an event
// whose forward to one target is running and to another retrying queues a
// new job after each (after_current, current_job_id naming it), beside the
// forward under way; a second redelivery while those new jobs wait queues
// nothing more (already_pending, the queued jobs named).
func TestOperatorRedeliverWhileRunningQueuesAfter(t *testing.T) {
	t.Parallel()
	s := newOpServer(t, opOptions{yaml: `
senders:
  - name: fwd
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    forward:
      - name: orders
        url: http://orders.internal/hooks
      - name: ledger
        url: http://ledger.internal/hooks
`})
	ev := s.accept("fwd", "run-1", []byte(`{}`))
	if n := s.relayOnce(); n != 2 {
		t.Fatalf("relay moved %d forwards, want 2", n)
	}
	q := store.New(s.pool)
	jobs, err := queuetest.New(s.pool).ForwardJobs(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	current := map[string]int64{}
	for _, j := range jobs {
		if j.EventID == ev {
			current[j.Target] = j.ID
		}
	}
	for target, state := range map[string]rivertype.JobState{"orders": rivertype.JobStateRunning, "ledger": rivertype.JobStateRetryable} {
		if err := queuetest.New(s.pool).SetForwardJob(t.Context(), current[target], queuetest.JobFixture{State: state, Attempt: 1}); err != nil {
			t.Fatalf("forward to %s: %v", target, err)
		}
	}
	var re redelivery
	decode(t, s.call("POST", "/v1/events/"+ev+"/redeliver"), http.StatusAccepted, "POST", routeRedeliver, &re)
	if len(re.Forwards) != 2 {
		t.Fatalf("redelivery = %+v, want both targets", re)
	}
	queued := map[string]int64{}
	for _, f := range re.Forwards {
		if !f.AfterCurrent || f.AlreadyPending || f.CurrentJobID == nil || *f.CurrentJobID != current[f.Target] || f.JobID == 0 || f.JobID == current[f.Target] {
			t.Errorf("redelivery of a forward under way = %+v; want a new job queued after job %d", f, current[f.Target])
		}
		queued[f.Target] = f.JobID
	}
	now, err := queue.NewJobs(q.DB()).CurrentForwards(t.Context(), "fwd", uuid.MustParse(ev), []string{"orders", "ledger"})
	if err != nil {
		t.Fatal(err)
	}
	for target, id := range queued {
		if c := now[target]; c.JobID != id || !c.Queued {
			t.Errorf("newest forward to %s: %+v; want job %d, queued after a forward", target, c, id)
		}
	}
	decode(t, s.call("POST", "/v1/events/"+ev+"/redeliver"), http.StatusAccepted, "POST", routeRedeliver, &re)
	for _, f := range re.Forwards {
		if !f.AlreadyPending || f.AfterCurrent || f.JobID != queued[f.Target] {
			t.Errorf("second redelivery = %+v; want already pending, the queued job %d", f, queued[f.Target])
		}
	}
}

func TestOperatorRedeliverWithoutTargetsIs409(t *testing.T) {
	t.Parallel()
	s := newOpServer(t, opOptions{})
	eventID := s.accept("hdr", "d1", []byte(`{}`))
	p := wantOpProblem(t, s.call("POST", "/v1/events/"+eventID+"/redeliver"), http.StatusConflict, "no-targets", "POST", routeRedeliver)
	if !strings.Contains(p.Detail, `"hdr"`) {
		t.Errorf("detail %q does not name the sender", p.Detail)
	}
	if jobs, err := queuetest.New(s.pool).CountJobs(t.Context(), ""); err != nil || jobs != 0 {
		t.Errorf("%d jobs (%v), want none", jobs, err)
	}
	if d := s.delivery("hdr", "d1"); d.Forwards == nil || len(d.Forwards) != 0 {
		t.Errorf("forwards of a sender without targets = %v, want []", d.Forwards)
	}
}

// TestOperatorEventBody checks that an event's body is shown as JSON
// exactly when its Content-Type mentions json and it is valid JSON, and as
// base64 of the raw bytes otherwise.
func TestOperatorEventBody(t *testing.T) {
	t.Parallel()
	s := newOpServer(t, opOptions{})
	for i, tc := range []struct {
		contentType string
		body        string
		asJSON      bool
	}{
		{"application/json", `{"id":"evt_1","amount":1.50,"tags":["a","<b>"],"nested":{"ok":true}}`, true},
		{"application/json; charset=utf-8", `[1,2,3]`, true},
		{"application/vnd.api+json", `"just a string"`, true},
		{"Application/JSON", `null`, true},
		{"application/json", `{"unterminated":`, false},
		{"application/json", ``, false},
		{"text/plain", `{"looks":"like json"}`, false},
		{"application/x-www-form-urlencoded", "order=42&status=paid", false},
		{"application/octet-stream", "\x00\x01\xfe\xff", false},
		{"", `{"no":"content type"}`, false},
	} {
		id := fmt.Sprintf("d%d", i)
		eventID := s.accept("hdr", id, []byte(tc.body), func(r *http.Request) {
			if tc.contentType == "" {
				r.Header.Del("Content-Type")
			} else {
				r.Header.Set("Content-Type", tc.contentType)
			}
			r.Header.Set("Authorization", "Bearer sender-credential")
			r.Header.Add("X-Multi", "one")
			r.Header.Add("X-Multi", "two")
		})
		e := s.event(eventID)
		if e.EventID.String() != eventID || e.Sender != "hdr" || e.DeliveryID != id || e.ReceivedAt.IsZero() {
			t.Errorf("%s: event = %+v", id, e)
		}
		if !slices.Equal(e.Headers["X-Multi"], []string{"one", "two"}) || e.Headers["X-Delivery-Id"][0] != id {
			t.Errorf("%s: headers = %v", id, e.Headers)
		}
		if _, ok := e.Headers["Authorization"]; ok {
			t.Errorf("%s: the event shows the request's Authorization header", id)
		}
		if tc.asJSON {
			if e.BodyEncoding != "json" {
				t.Errorf("%s (%s %q): body_encoding %q, want json", id, tc.contentType, tc.body, e.BodyEncoding)
				continue
			}
			var got, want any
			if err := json.Unmarshal(e.Body, &got); err != nil {
				t.Fatal(err)
			}
			_ = json.Unmarshal([]byte(tc.body), &want)
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("%s: body %s, want the JSON %s", id, e.Body, tc.body)
			}
			continue
		}
		var b64 string
		if e.BodyEncoding != "base64" || json.Unmarshal(e.Body, &b64) != nil {
			t.Errorf("%s (%s %q): body_encoding %q body %s, want a base64 string", id, tc.contentType, tc.body, e.BodyEncoding, e.Body)
			continue
		}
		if raw, err := base64.StdEncoding.DecodeString(b64); err != nil || string(raw) != tc.body {
			t.Errorf("%s: base64 body decodes to %q (%v), want %q", id, raw, err, tc.body)
		}
	}
}

// TestOperatorDeliveryIDInPath checks that a delivery ID with characters
// that must be escaped in a path reaches its delivery.
func TestOperatorDeliveryIDInPath(t *testing.T) {
	t.Parallel()
	s := newOpServer(t, opOptions{})
	for _, id := range []string{"a/b", "a%b", "a%2Fb", "a?b#c", "evt_1", "~!$&'()*+,;=:@", `"quoted"`} {
		eventID := s.accept("hdr", id, []byte(`{}`))
		d := s.delivery("hdr", id)
		if d.DeliveryID != id || d.EventID.String() != eventID {
			t.Errorf("delivery %q: got %q (event %s), want event %s", id, d.DeliveryID, d.EventID, eventID)
		}
	}
}

// TestOperatorResponsesHoldNoSecrets runs every operator endpoint, successes
// and errors, against senders and targets with secrets, and checks that no
// response body or header contains any of them.
func TestOperatorResponsesHoldNoSecrets(t *testing.T) {
	t.Parallel()
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	secrets := map[string]string{
		"GH":   "gh-secret-" + rand.Text(),
		"HM1":  "hm-old-" + rand.Text(),
		"HM2":  "hm-new-" + rand.Text(),
		"SIGN": "whsec_" + base64.StdEncoding.EncodeToString(key),
		"KEY":  "target-header-" + rand.Text(),
		"PW":   "url-pw-" + rand.Text(),
	}
	ok := testkit.NewTarget(t, testkit.Sequence(http.StatusOK))
	bad := testkit.NewTarget(t, testkit.Sequence(http.StatusGone))
	s := newOpServer(t, opOptions{work: true, env: secrets, yaml: fmt.Sprintf(`
senders:
  - name: gh
    preset: github
    secret: ${GH}
    forward:
      - name: t8
        url: %s/in/${PW}
        secret_path: true
        signing_secret: ${SIGN}
        headers: { X-Api-Key: "${KEY}" }
      - name: t9
        url: %s
      - name: t10
        url: http://127.0.0.1:1/unreachable/${PW}
        secret_path: true
        max_attempts: 2
        timeout: 1s
  - name: hm
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    signature: { scheme: hmac-sha256, header: X-Signature }
    secrets: [ "${HM1}", "${HM2}" ]
`, ok.Server(), bad.Server())})

	body := []byte(`{"action":"opened"}`)
	mac := hmac.New(sha256.New, []byte(secrets["GH"]))
	mac.Write(body)
	eventID := s.accept("gh", "72d3162e-cc78-11e3-81ab-4c9367dc0958", body, func(r *http.Request) {
		r.Header.Set("X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958")
		r.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac.Sum(nil)))
	})
	testkit.Poll(t, pollTimeout, "the forwards to settle", func() bool {
		d := s.delivery("gh", "72d3162e-cc78-11e3-81ab-4c9367dc0958")
		return len(d.Forwards) == 3 && settled(d)
	})
	if r := ok.Hits(); len(r) != 1 || r[0].Header.Get("X-Api-Key") != secrets["KEY"] || r[0].Header.Get("webhook-signature") == "" {
		t.Errorf("the target did not get the configured header and signature: %v", r)
	}

	var replies []reply
	for _, p := range []struct{ method, path string }{
		{"GET", "/v1/senders"},
		{"GET", "/v1/senders/gh/deliveries"},
		{"GET", "/v1/senders/gh/deliveries?limit=1"},
		{"GET", "/v1/senders/gh/deliveries/72d3162e-cc78-11e3-81ab-4c9367dc0958"},
		{"GET", "/v1/senders/gh/deliveries/nope"},
		{"GET", "/v1/senders/hm/deliveries"},
		{"GET", "/v1/events/" + eventID},
		{"POST", "/v1/events/" + eventID + "/redeliver"},
		{"GET", "/v1/events/nope"},
		{"GET", "/v1/senders/gh/deliveries?cursor=nope"},
	} {
		replies = append(replies, s.call(p.method, p.path))
	}
	replies = append(replies, s.do(s.opRequest("GET", "/v1/senders", "Bearer wrong")), s.do(s.opRequest("GET", "/v1/senders", "")))
	d := s.delivery("gh", "72d3162e-cc78-11e3-81ab-4c9367dc0958")
	unreachable := forwardsOf(d, "t10")
	if len(unreachable) != 2 || unreachable[0].State != "failed" || unreachable[0].LastError == nil || unreachable[0].URL != "http://127.0.0.1:1/xxxxx/xxxxx" {
		t.Errorf("forwards = %+v; want the unreachable target's first failed, with its error, and a redelivery", d.Forwards)
	}
	for _, r := range replies {
		var all strings.Builder
		all.Write(r.body)
		for k, vs := range r.header {
			all.WriteString(k + ": " + strings.Join(vs, ",") + "\n")
		}
		for name, secret := range secrets {
			if strings.Contains(all.String(), secret) {
				t.Errorf("a response contains the secret %s: %s", name, r)
			}
		}
		if strings.Contains(all.String(), strings.TrimPrefix(secrets["SIGN"], "whsec_")) {
			t.Errorf("a response contains the signing key: %s", r)
		}
	}
	if n := len(replies); n != 12 {
		t.Fatalf("checked %d responses", n)
	}
}

// TestOperatorRedactsTargetURLs: Discord's and Slack's path secrets (by
// host), one marked by secret_path, query values and a fragment never
// appear in /v1/senders nor in a delivery's forwards; what is not secret
// stays. (A URL with a user name or password is refused at start-up:
// config.)
func TestOperatorRedactsTargetURLs(t *testing.T) {
	t.Parallel()
	s := newOpServer(t, opOptions{yaml: `
senders:
  - name: hdr
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    forward:
      - name: discord
        url: https://discord.com/api/webhooks/4242/DISCORDTOKEN1
      - name: slack
        url: https://hooks.slack.com/services/T0001/B0001/SLACKPATHSECRET
      - name: marked
        url: https://chat.internal/services/T0002/B0002/MARKEDPATHSECRET
        secret_path: true
      - name: query
        url: https://svc.internal/q?token=QUERYSECRET1#FRAGSECRET1
`})
	s.accept("hdr", "d1", []byte(`{}`))
	leaks := []string{"DISCORDTOKEN1", "4242", "T0001", "B0001", "SLACKPATHSECRET", "T0002", "MARKEDPATHSECRET", "QUERYSECRET1", "FRAGSECRET1"}
	for _, path := range []string{"/v1/senders", "/v1/senders/hdr/deliveries/d1"} {
		r := s.call("GET", path)
		if r.status != http.StatusOK {
			t.Fatalf("GET %s: %s", path, r)
		}
		if leak := containsAny(string(r.body), leaks...); leak != "" {
			t.Errorf("GET %s shows %q: %s", path, leak, r.body)
		}
	}
	want := []string{
		"https://discord.com/xxxxx/xxxxx/xxxxx/xxxxx",
		"https://hooks.slack.com/xxxxx/xxxxx/xxxxx/xxxxx",
		"https://chat.internal/xxxxx/xxxxx/xxxxx/xxxxx",
		"https://svc.internal/q?token=xxxxx#xxxxx",
	}
	var got sendersPage
	decode(t, s.call("GET", "/v1/senders"), http.StatusOK, "GET", routeSenders, &got)
	for i, f := range got.Items[0].Forward {
		if f.URL != want[i] {
			t.Errorf("target %d shown as %q, want %q", i, f.URL, want[i])
		}
	}
	d := s.delivery("hdr", "d1")
	for i, name := range []string{"discord", "slack", "marked", "query"} {
		if fs := forwardsOf(d, name); len(fs) != 1 || fs[0].URL != want[i] {
			t.Errorf("forward to %s: %+v, want one shown with the URL %q", name, fs, want[i])
		}
	}
}
