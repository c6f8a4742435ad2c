package console_test

import (
	"cmp"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river/rivertype"
	"go.uber.org/goleak"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/console"
	"github.com/hookgate/hookgate/internal/dedup"
	"github.com/hookgate/hookgate/internal/forward"
	"github.com/hookgate/hookgate/internal/forward/transport"
	"github.com/hookgate/hookgate/internal/handler"
	"github.com/hookgate/hookgate/internal/idempotency"
	"github.com/hookgate/hookgate/internal/queue"
	"github.com/hookgate/hookgate/internal/sender"
	"github.com/hookgate/hookgate/internal/store"
	"github.com/hookgate/hookgate/internal/testing/pgtest"
	"github.com/hookgate/hookgate/internal/testing/queuetest"
	"github.com/hookgate/hookgate/internal/testing/storetest"
	"github.com/hookgate/hookgate/internal/traffic"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(pgtest.M(m))
}

// token is the admin token of the test servers.
const token = "console-test-token-0123456789abcdef"

// sendersYAML: orders has one forward target that nothing serves (its
// forwards are never worked: the test servers do not run workers).
const sendersYAML = `
senders:
  - name: orders
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    event_type: { header: X-Event-Type }
    forward:
      - name: orders-svc
        url: http://127.0.0.1:9/hooks/orders
        max_attempts: 3
  - name: billing
    preset: generic
    delivery_id: { json_pointer: /id }
`

// env is a hookgate API server with the console mounted, on a fresh
// database.
type env struct {
	t    testing.TB
	url  string
	pool *pgxpool.Pool
	srv  *httptest.Server
	opts console.Config
	cfg  *config.Config
	// live is the configuration the console and the API read (a reload
	// swaps it; the River client keeps cfg).
	live *sender.Live
	rc   *queue.River
	// traffic counts the server's deliveries for the overview's charts;
	// the test flushes it.
	traffic *traffic.Recorder
	// q are the console's queries.
	q *store.Queries
}

func newEnv(t testing.TB, opts console.Config) *env {
	t.Helper()
	return newEnvWith(t, sendersYAML, opts, workOpts{})
}

// workOpts make a test env's River client work the forwards (Work), with
// a Worker and Gate of the env's own tuned by the other fields; a zero
// field is the package's default (forward.DefaultBackoff,
// forward.DefaultBreakerConfig, forward.DefaultFetchPollInterval).
type workOpts struct {
	Work                                           bool
	Backoff                                        forward.Backoff
	BreakerProbe, BreakerWindow, FetchPollInterval time.Duration
	// BreakerMaxProbe is forward.BreakerConfig.MaxProbe.
	BreakerMaxProbe time.Duration
	// now is the gate's clock (the console's: newEnvWith sets it).
	now func() time.Time
}

// worker returns the forward worker of o, with a gate of
// queue.DefaultMaxWorkers forwards.
func (o workOpts) worker(t testing.TB, pool *pgxpool.Pool, cfg *config.Config, m *forward.Metrics, log *slog.Logger) *forward.Worker {
	t.Helper()
	bc := forward.DefaultBreakerConfig()
	bc.Probe, bc.Window, bc.MaxProbe = cmp.Or(o.BreakerProbe, bc.Probe), cmp.Or(o.BreakerWindow, bc.Window), o.BreakerMaxProbe
	gate, err := forward.NewGate(forward.GateConfig{Capacity: queue.DefaultMaxWorkers, Breakers: bc, DB: pool, Jobs: queue.NewJobs(pool), Metrics: m, Log: log, Now: o.now})
	if err != nil {
		t.Fatal(err)
	}
	wc := forward.DefaultWorkerConfig()
	if o.Backoff != (forward.Backoff{}) {
		wc.Backoff = o.Backoff
	}
	wc.Senders, wc.DB, wc.Jobs, wc.Client, wc.Gate, wc.Metrics, wc.Log = cfg, pool, queue.NewJobs(pool), transport.NewHTTPClient(queue.DefaultMaxWorkers), gate, m, log
	w, err := forward.NewWorker(wc)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// newEnvWith is newEnv with the senders of yaml and a River client made
// with fopts; with fopts.Work it works forwards (and the test starts it:
// startWorking), counting their attempts in the charts' recorder.
func newEnvWith(t testing.TB, yaml string, opts console.Config, fopts workOpts) *env {
	t.Helper()
	pool, _ := pgtest.NewDB(t)
	cfg, err := config.Parse([]byte(yaml), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	q := store.New(pool)
	// opts.Now (a fixed clock: the screenshots' shotClock) is the clock of
	// the whole server: ingest, the charts' counts, the breakers.
	tr, err := traffic.New(traffic.Config{Queries: q, Log: log, Now: opts.Now})
	if err != nil {
		t.Fatal(err)
	}
	m := forward.NewMetrics(prometheus.NewRegistry())
	m.CountTraffic(tr)
	cc := queue.DefaultClientConfig(cfg)
	cc.Pool, cc.Senders, cc.Log = pool, cfg, log
	if fopts.Work { // otherwise the client inserts only
		fopts.now = opts.Now
		cc.Worker = fopts.worker(t, pool, cfg, m, log)
		cc.FetchPollInterval = cmp.Or(fopts.FetchPollInterval, cc.FetchPollInterval)
	}
	rc, err := queue.New(cc)
	if err != nil {
		t.Fatal(err)
	}
	if opts.Redeliverer == nil {
		opts.Redeliverer = rc
	}
	if opts.SessionTTL == 0 { // the tests' literals leave it out
		opts.SessionTTL = console.DefaultSessionTTL
	}
	// The console and the API read the configuration from live, as a
	// gateway's do: a test reloads by swapping it.
	live := sender.NewLive(sender.MustCompile(cfg).Snapshot())
	opts.Senders, opts.Queries, opts.Forwards, opts.Log = live, q, queue.NewJobs(pool), log
	cons, err := console.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ingest, err := dedup.New(dedup.Config{Pool: pool, InFlightWait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	hc := handler.DefaultConfig()
	hc.AdminToken, hc.Queries, hc.Redeliverer, hc.Console, hc.Traffic, hc.Now = opts.AdminToken, q, rc, cons, tr, opts.Now
	hc.ReadTokens = opts.ReadTokens
	hc.Forwards = queue.NewJobs(pool)
	hc.Senders, hc.Ingest, hc.Ready, hc.Registry, hc.Log = live, ingest, func(context.Context) error { return nil }, prometheus.NewRegistry(), log
	h, err := handler.New(hc)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h.Router())
	t.Cleanup(srv.Close)
	return &env{t: t, url: srv.URL, pool: pool, srv: srv, opts: opts, cfg: cfg, live: live, rc: rc, q: q, traffic: tr}
}

// client returns a client with its own cookie jar that does not follow
// redirects.
func (e *env) client() *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// ingest posts a delivery of orders and fails the test unless it is 202.
func (e *env) ingest(id, contentType, body string) {
	e.t.Helper()
	e.ingestTyped(id, "", contentType, body)
}

// ingestTyped is ingest of a delivery with event type typ.
func (e *env) ingestTyped(id, typ, contentType, body string) {
	e.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, e.url+"/webhooks/orders", strings.NewReader(body))
	req.Header.Set("X-Delivery-Id", id)
	if typ != "" {
		req.Header.Set("X-Event-Type", typ)
	}
	req.Header.Set("Content-Type", contentType)
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		e.t.Fatalf("ingest %s: %d", id, resp.StatusCode)
	}
}

// page is a response read in full.
type page struct {
	status int
	header http.Header
	body   string
}

func (e *env) do(c *http.Client, method, path string, form url.Values, hdr map[string]string) page {
	e.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, e.url+path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return page{resp.StatusCode, resp.Header, string(b)}
}

// signIn signs c in and returns the CSRF token of its session.
func (e *env) signIn(c *http.Client) string {
	e.t.Helper()
	p := e.do(c, http.MethodPost, "/console/login", url.Values{"token": {token}}, nil)
	if p.status != http.StatusSeeOther {
		e.t.Fatalf("sign-in: %d %s", p.status, p.body)
	}
	return csrfOf(e.t, e.do(c, http.MethodGet, "/console/", nil, nil))
}

var csrfField = regexp.MustCompile(`name="csrf_token" value="([^"]+)"`)

func csrfOf(t testing.TB, p page) string {
	t.Helper()
	m := csrfField.FindStringSubmatch(p.body)
	if m == nil {
		t.Fatalf("no csrf_token in the page (%d): %.500s", p.status, p.body)
	}
	return m[1]
}

func newOptions() console.Config { return console.Config{AdminToken: token} }

// eventOf returns the event ID of the orders delivery id.
func (e *env) eventOf(id string) uuid.UUID {
	e.t.Helper()
	d, err := e.q.GetDelivery(e.t.Context(), idempotency.Key{Sender: "orders", DeliveryID: id})
	if err != nil {
		e.t.Fatal(err)
	}
	return d.EventID
}

// failForwards makes the forwards of the orders delivery id failed, as if
// its target had refused every attempt with errText: its outbox rows
// become River jobs, discarded.
func (e *env) failForwards(id, errText string) {
	e.t.Helper()
	ctx := e.t.Context()
	ev := e.eventOf(id)
	if _, err := storetest.DeleteOutboxOfEvent(ctx, e.q.DB(), "orders", ev); err != nil {
		e.t.Fatal(err)
	}
	sd, _ := e.cfg.Sender("orders")
	jobs, err := e.rc.Redeliver(ctx, sd, ev, id)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, j := range jobs {
		if err := queuetest.New(e.pool).SetForwardJob(ctx, j.JobID, queuetest.JobFixture{State: rivertype.JobStateDiscarded, Errors: []string{errText}}); err != nil {
			e.t.Fatal(err)
		}
	}
}
