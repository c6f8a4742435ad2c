package handler_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/dedup"
	"github.com/hookgate/hookgate/internal/handler"
	"github.com/hookgate/hookgate/internal/sender"
	"github.com/hookgate/hookgate/internal/sigtoken"
	"github.com/hookgate/hookgate/internal/testing/pgtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(pgtest.M(m))
}

// sendersYAML configures the senders every test server has: hdr carries its
// delivery ID in a header, ptr at the JSON pointer /id, and tiny in a header
// with a 16-byte body limit.
const sendersYAML = `
senders:
  - name: hdr
    preset: generic
    delivery_id: { header: X-Delivery-Id }
  - name: ptr
    preset: generic
    delivery_id: { json_pointer: /id }
  - name: tiny
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    max_body_bytes: 16
`

// options tune a test server; the zero value is a server with the senders
// of sendersYAML, whose in-flight wait is 10 s, always ready, logging
// nowhere.
type options struct {
	wait  time.Duration
	ready handler.ReadyFunc
	log   io.Writer
	// yaml, if not empty, replaces sendersYAML; env holds the variables
	// its ${VAR} references expand to (secrets, typically).
	yaml string
	env  map[string]string
	// config changes the handler's configuration (handler.DefaultConfig
	// when nil); store configures the ingest store (its InFlightWait is
	// wait).
	config func(*handler.Config)
	store  dedup.Config
}

// server is a hookgate handler behind a real HTTP server.
type server struct {
	t      *testing.T
	srv    *httptest.Server
	url    string
	client *http.Client
}

// newServer starts handler.New(…).Router() on an httptest server storing
// deliveries with db. The server is closed (after its in-flight requests
// finish, and before db's pool is closed) when the test ends.
func newServer(t *testing.T, db *pgxpool.Pool, o options) *server {
	t.Helper()
	yaml := sendersYAML
	if o.yaml != "" {
		yaml = o.yaml
	}
	cfg, err := config.Parse([]byte(yaml), func(k string) (string, bool) { v, ok := o.env[k]; return v, ok })
	if err != nil {
		t.Fatalf("config.Parse: %v", err)
	}
	if o.wait == 0 {
		o.wait = 10 * time.Second
	}
	if o.ready == nil {
		o.ready = func(context.Context) error { return nil }
	}
	if o.log == nil {
		o.log = io.Discard
	}
	log := slog.New(slog.NewTextHandler(o.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	o.store.Pool, o.store.InFlightWait = db, o.wait
	if o.store.Delegated == nil {
		// As hookgate serve on Citus: ingest through the delegated
		// function (unused on PostgreSQL, where the layout is plain).
		o.store.Delegated = handler.IngestFunction()
	}
	if pgtest.Citus() && o.store.Routes == nil {
		// As hookgate serve on Citus with --citus-worker-hosts: the calls
		// straight to the workers (not for the tests of a database that
		// cannot be reached, where serve would not start).
		if r, err := dedup.NewRoutes(context.Background(), db, dedup.RoutesConfig{Workers: pgtest.CitusWorkerHosts(t)}); err == nil {
			t.Cleanup(r.Close)
			o.store.Routes = r
		} else {
			t.Logf("no routes to the Citus workers: %v", err)
		}
	}
	ingest, err := dedup.New(o.store)
	if err != nil {
		t.Fatal(err)
	}
	hc := handler.DefaultConfig()
	hc.Tokens = sigtoken.New(db)
	if o.config != nil {
		o.config(&hc)
	}
	hc.Senders, hc.Ingest, hc.Ready, hc.Registry, hc.Log = sender.MustCompile(cfg), ingest, o.ready, prometheus.NewRegistry(), log
	h, err := handler.New(hc)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h.Router())
	t.Cleanup(srv.Close) // also closes the client's idle connections
	return &server{t: t, srv: srv, url: srv.URL, client: srv.Client()}
}

// newDBServer returns a fresh database and a server storing into it.
func newDBServer(t *testing.T, o options) (*server, *pgxpool.Pool) {
	t.Helper()
	pool, _ := pgtest.NewDB(t)
	return newServer(t, pool, o), pool
}

// reply is a response read in full.
type reply struct {
	status int
	header http.Header
	body   []byte
}

func (r reply) String() string {
	return strconv.Itoa(r.status) + " " + r.header.Get("Content-Type") + " " + string(r.body)
}

// replayed reports whether the reply carries Idempotent-Replayed: true.
func (r reply) replayed() bool {
	v := r.header.Values("Idempotent-Replayed")
	return len(v) == 1 && v[0] == "true"
}

// do sends req and reads the whole response.
func (s *server) do(req *http.Request) reply {
	s.t.Helper()
	r, err := s.send(req)
	if err != nil {
		s.t.Fatal(err)
	}
	return r
}

// send sends req and reads the whole response; unlike do, it may be called
// from any goroutine.
func (s *server) send(req *http.Request) (reply, error) {
	resp, err := s.client.Do(req)
	if err != nil {
		return reply{}, fmt.Errorf("%s %s: %w", req.Method, req.URL.Path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return reply{}, fmt.Errorf("%s %s: read body: %w", req.Method, req.URL.Path, err)
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: body}, nil
}

func (s *server) newRequest(method, path string, body []byte) *http.Request {
	s.t.Helper()
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(s.t.Context(), method, s.url+path, r)
	if err != nil {
		s.t.Fatal(err)
	}
	return req
}

func (s *server) get(path string) reply {
	s.t.Helper()
	return s.do(s.newRequest(http.MethodGet, path, nil))
}

// post delivers body to sender with the delivery ID id in X-Delivery-Id
// (no header when id is ""), after applying mods to the request.
func (s *server) post(sender, id string, body []byte, mods ...func(*http.Request)) reply {
	s.t.Helper()
	return s.do(s.postRequest(sender, id, body, mods...))
}

// postRequest returns the request post sends.
func (s *server) postRequest(sender, id string, body []byte, mods ...func(*http.Request)) *http.Request {
	s.t.Helper()
	req := s.newRequest(http.MethodPost, "/webhooks/"+sender, body)
	req.Header.Set("Content-Type", "application/json")
	if id != "" {
		req.Header.Set("X-Delivery-Id", id)
	}
	for _, m := range mods {
		m(req)
	}
	return req
}

// raw writes request bytes on a new connection to the server and returns the
// response, for requests http.Client refuses to send.
func (s *server) raw(request string) reply {
	s.t.Helper()
	conn, err := net.Dial("tcp", s.srv.Listener.Addr().String())
	if err != nil {
		s.t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, request); err != nil {
		s.t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		s.t.Fatalf("read response: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatal(err)
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: body}
}

// problem is an RFC 9457 problem document.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
}

// wantProblem checks that r is an application/problem+json response with
// status and problem type urn:hookgate:problem:<slug>, all four members set
// and its status member equal to the HTTP status.
func wantProblem(t *testing.T, r reply, status int, slug string) problem {
	t.Helper()
	if r.status != status {
		t.Fatalf("status = %d, want %d; response: %s", r.status, status, r)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type = %q, want application/problem+json", ct)
	}
	var p problem
	dec := json.NewDecoder(bytes.NewReader(r.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("problem body %q: %v", r.body, err)
	}
	if p.Status != status {
		t.Errorf("problem status = %d, HTTP status %d", p.Status, status)
	}
	if want := "urn:hookgate:problem:" + slug; p.Type != want {
		t.Errorf("problem type = %q, want %q", p.Type, want)
	}
	if p.Title == "" || p.Detail == "" {
		t.Errorf("problem title or detail is empty: %+v", p)
	}
	if r.replayed() {
		t.Errorf("an error response carries Idempotent-Replayed: %s", r)
	}
	return p
}

// wantRetryAfter checks that r has a Retry-After of a positive number of
// seconds.
func wantRetryAfter(t *testing.T, r reply) {
	t.Helper()
	v := r.header.Get("Retry-After")
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Errorf("Retry-After = %q, want a positive number of seconds", v)
	}
}

// counts returns the number of rows in processed_messages and webhook_events.
func counts(t *testing.T, pool *pgxpool.Pool) (keys, events int) {
	t.Helper()
	err := pool.QueryRow(t.Context(),
		`SELECT (SELECT count(*) FROM processed_messages), (SELECT count(*) FROM webhook_events)`).Scan(&keys, &events)
	if err != nil {
		t.Fatalf("count rows: %v", err)
	}
	return keys, events
}

// wantCounts checks the row counts of processed_messages and webhook_events.
func wantCounts(t *testing.T, pool *pgxpool.Pool, keys, events int) {
	t.Helper()
	k, e := counts(t, pool)
	if k != keys || e != events {
		t.Errorf("processed_messages has %d rows, webhook_events %d; want %d and %d", k, e, keys, events)
	}
}

// pollTimeout bounds every wait of these tests: a guard against a hang,
// not a timed assertion, long enough for a busy machine.
const pollTimeout = 2 * time.Minute

// lockWaiters returns how many sessions on pool's database wait on a lock.
func lockWaiters(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	err := pool.QueryRow(t.Context(), pgtest.LockWaitersSQL()).Scan(&n)
	if err != nil {
		t.Fatalf("count lock waiters: %v", err)
	}
	return n
}

// containsAny returns the first of subs that s contains, or "".
func containsAny(s string, subs ...string) string {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return sub
		}
	}
	return ""
}
