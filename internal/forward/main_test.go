package forward_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/dedup"
	"github.com/hookgate/hookgate/internal/forward"
	"github.com/hookgate/hookgate/internal/forward/transport"
	"github.com/hookgate/hookgate/internal/handler"
	"github.com/hookgate/hookgate/internal/queue"
	"github.com/hookgate/hookgate/internal/sender"
	"github.com/hookgate/hookgate/internal/store"
	"github.com/hookgate/hookgate/internal/testing/pgtest"
	"github.com/hookgate/hookgate/internal/testing/queuetest"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(pgtest.M(m))
}

// Short schedules so that retries happen within the test's time. River
// refuses a FetchPollInterval below its FetchCooldown (100ms by default).
var (
	testBackoff   = forward.Backoff{Base: 10 * time.Millisecond, Max: 100 * time.Millisecond}
	testFetchPoll = 100 * time.Millisecond
	testProbe     = 20 * time.Millisecond
)

// waitTimeout bounds every wait for a job state: a guard against hangs, not
// a timed assertion, long enough for a busy machine.
const waitTimeout = 2 * time.Minute

// env is a database, a River client working forwards and a relay feeding it
// from the outbox (when started), and a hookgate ingest server writing the
// outbox, for one sender "acme" whose delivery ID is in X-Delivery-Id.
type env struct {
	t       *testing.T
	pool    *pgxpool.Pool
	dsnURL  string // the database's
	cfg     *config.Config
	river   *queue.River
	reg     *prometheus.Registry
	log     *slog.Logger
	gateway *httptest.Server
	// relayIdle and relayWake configure the env's relays (newRelay):
	// fastOptions.relayIdle and the fast path's signal.
	relayIdle time.Duration
	relayWake chan struct{}
	// split: the env's relays and recording run the split form
	// (envOpts.Split).
	split bool
	// pauses are the operators' pauses the env's gate holds (with
	// envOpts.Pauses), read every 50 ms.
	pauses *forward.Pauses
}

// newEnv parses the configuration (forwardYAML is the sender's forward list,
// indented as a YAML sequence under "forward:"), creates the database and the
// River client with opts (Backoff and FetchPollInterval default to the
// test's short ones), starts it when opts.Work, and starts the ingest
// server. The client is stopped when the test ends, before the targets are
// closed.
func newEnv(t *testing.T, forwardYAML string, opts envOpts) *env {
	t.Helper()
	return newEnvWith(t, forwardYAML, opts, nil)
}

// envOpts configure a test env's forwarding, as serve does from its
// settings: Work makes the env's River client work the forwards, with a
// Gate and a Worker of the env's own. A zero field is the test's short
// value or the package's default, as each says.
type envOpts struct {
	Work bool
	// MaxWorkers is the client's (queue.DefaultMaxWorkers when 0) and its
	// gate's (10 in an env with a fast path).
	MaxWorkers int
	// Backoff is the worker's (testBackoff when zero).
	Backoff forward.Backoff
	// RetryAfterMax is the worker's (forward.DefaultRetryAfterMax when 0).
	RetryAfterMax time.Duration
	// BreakerProbe and BreakerWindow tune the gate's breakers (testProbe
	// and forward.DefaultBreakerWindow when 0).
	BreakerProbe, BreakerWindow time.Duration
	// FetchPollInterval is the client's (testFetchPoll when 0).
	FetchPollInterval time.Duration
	// Transport, when set, is what the worker (and the fast path) send
	// forwards through instead of HTTP (WorkerConfig.Transport).
	Transport transport.Transport
	// Split runs the relay and the fast path's recording in the form for
	// a distributed outbox (RelayConfig.Distributed,
	// queue.ClientConfig.Distributed), as serve does on Citus: the records
	// first, the outbox rows deleted after. Always on Citus.
	Split bool
	// Setup, when set, runs on the env's database before its River client
	// starts (with Work).
	Setup func(pool *pgxpool.Pool)
	// AttemptsKept is the worker's (store.DefaultAttemptsKept when 0).
	AttemptsKept int
	// Pauses makes the gate hold the targets an operator paused
	// (forward.Pauses, read every 50 ms, waking the forwards of a pause
	// that ends with Work).
	Pauses bool
}

// fastOptions are the fast path's settings in a test env: each, when not
// zero, replaces forward.DefaultDispatcherConfig's.
type fastOptions struct {
	lease          time.Duration
	workers, queue int
	// relayIdle, when set, is the env's relay's IdleInterval, and the
	// fast path wakes the relay (as serve wires them); unset, the relay
	// looks every few milliseconds and is never woken.
	relayIdle time.Duration
}

// newFastEnv is newEnv with a fast path (forward.Dispatcher) in the ingest
// server, sharing the River client's worker, closed when the test ends.
func newFastEnv(t *testing.T, forwardYAML string, opts envOpts, fo fastOptions) *env {
	t.Helper()
	return newEnvWith(t, forwardYAML, opts, &fo)
}

func newEnvWith(t *testing.T, forwardYAML string, opts envOpts, fo *fastOptions) *env {
	t.Helper()
	yaml := `senders:
  - name: acme
    preset: generic
    delivery_id: { header: X-Delivery-Id }
`
	if forwardYAML != "" {
		yaml += "    forward:\n" + forwardYAML
	}
	cfg, err := config.Parse([]byte(yaml), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatalf("config.Parse: %v\n%s", err, yaml)
	}
	pool, dsn := pgtest.NewDB(t)
	if opts.Backoff == (forward.Backoff{}) {
		opts.Backoff = testBackoff
	}
	if opts.FetchPollInterval == 0 {
		opts.FetchPollInterval = testFetchPoll
	}
	if opts.RetryAfterMax == 0 {
		opts.RetryAfterMax = forward.DefaultRetryAfterMax
	}
	if opts.BreakerProbe == 0 {
		opts.BreakerProbe = testProbe
	}
	if opts.BreakerWindow == 0 {
		opts.BreakerWindow = forward.DefaultBreakerWindow
	}
	if opts.MaxWorkers == 0 {
		opts.MaxWorkers = queue.DefaultMaxWorkers
	}
	log := testkit.Logger(t)
	reg := prometheus.NewRegistry()
	m := forward.NewMetrics(reg)
	var (
		hc     = handler.DefaultConfig()
		worker *forward.Worker
		wake   chan struct{} // the fast path's signal to the relay (fastOptions.relayIdle)
		pauses *forward.Pauses
	)
	if opts.Pauses {
		pauses = startPauses(t, pool, cfg, reg, log, opts.Work)
		hc.Pauses = pauses
	}
	if opts.Work || fo != nil {
		capacity := opts.MaxWorkers
		if fo != nil {
			capacity = 10
		}
		gc := forward.GateConfig{Capacity: capacity, Breakers: forward.BreakerConfig{Probe: opts.BreakerProbe, Window: opts.BreakerWindow}}
		gc.DB, gc.Jobs, gc.Metrics, gc.Log, gc.Pauses = pool, queue.NewJobs(pool), m, log, pauses
		gate, err := forward.NewGate(gc)
		if err != nil {
			t.Fatal(err)
		}
		wc := forward.WorkerConfig{Backoff: opts.Backoff, RetryAfterMax: opts.RetryAfterMax, AttemptsKept: opts.AttemptsKept}
		if wc.AttemptsKept == 0 {
			wc.AttemptsKept = store.DefaultAttemptsKept
		}
		wc.Senders, wc.DB, wc.Jobs, wc.Gate, wc.Metrics, wc.Log = cfg, pool, queue.NewJobs(pool), gate, m, log
		wc.Client, wc.Transport = transport.NewHTTPClient(capacity), opts.Transport
		if worker, err = forward.NewWorker(wc); err != nil {
			t.Fatal(err)
		}
	}
	cc := queue.DefaultClientConfig(cfg)
	cc.MaxWorkers, cc.FetchPollInterval = opts.MaxWorkers, opts.FetchPollInterval
	cc.Pool, cc.Senders, cc.Log = pool, cfg, log
	cc.Distributed = opts.Split || pgtest.Citus()
	if opts.Work { // otherwise the client inserts only
		cc.Worker = worker
	}
	client, err := queue.New(cc)
	if err != nil {
		t.Fatalf("queue.New: %v", err)
	}
	if fo != nil {
		dc := forward.DefaultDispatcherConfig()
		dc.FixedLease = fo.lease
		if fo.workers != 0 {
			dc.Workers = fo.workers
		}
		if fo.queue != 0 {
			dc.Queue = fo.queue
		}
		if fo.relayIdle != 0 {
			wake = make(chan struct{}, 1)
			dc.HandedOver = wake
		}
		dc.Worker, dc.Recorder, dc.Registerer, dc.Log = worker, client, reg, log
		d, err := forward.NewDispatcher(dc)
		if err != nil {
			t.Fatal(err)
		}
		hc.FastPath = d
		t.Cleanup(func() {
			if err := d.Close(context.Background()); err != nil {
				t.Errorf("close the dispatcher: %v", err)
			}
		})
	}
	e := &env{t: t, pool: pool, dsnURL: dsn, cfg: cfg, river: client, reg: reg, log: log, relayWake: wake, split: cc.Distributed, pauses: pauses}
	if fo != nil {
		e.relayIdle = fo.relayIdle
	}
	if opts.Setup != nil {
		opts.Setup(pool)
	}
	if opts.Work {
		e.start()
	}
	// As hookgate serve on Citus: ingest through the delegated function
	// (unused on PostgreSQL, where the layout is plain), and the calls
	// straight to the workers, listed as --citus-worker-hosts lists them.
	ic := dedup.Config{Pool: pool, InFlightWait: 10 * time.Second, Delegated: handler.IngestFunction()}
	if pgtest.Citus() {
		r, err := dedup.NewRoutes(context.Background(), pool, dedup.RoutesConfig{Workers: pgtest.CitusWorkerHosts(t)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(r.Close)
		ic.Routes = r
	}
	ingest, err := dedup.New(ic)
	if err != nil {
		t.Fatal(err)
	}
	hc.Senders, hc.Ingest, hc.Ready, hc.Registry, hc.Log = sender.MustCompile(cfg), ingest, func(context.Context) error { return nil }, prometheus.NewRegistry(), log
	h, err := handler.New(hc)
	if err != nil {
		t.Fatal(err)
	}
	e.gateway = httptest.NewServer(h.Router())
	t.Cleanup(e.gateway.Close)
	return e
}

// startPauses reads the operators' pauses on pool every 50 ms (waking the
// forwards of a pause that ends when wake) until the test ends.
func startPauses(t *testing.T, pool *pgxpool.Pool, cfg *config.Config, reg prometheus.Registerer, log *slog.Logger, wake bool) *forward.Pauses {
	t.Helper()
	pc := forward.DefaultPausesConfig()
	pc.Every, pc.Wake, pc.DB, pc.Jobs, pc.Senders, pc.Registerer, pc.Log = 50*time.Millisecond, wake, pool, queue.NewJobs(pool), cfg, reg, log
	p, err := forward.NewPauses(pc)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return p
}

// start starts the River client and a relay of the outbox into it, as a
// worker process does; both are stopped when the test ends (the relay
// first).
func (e *env) start() {
	e.t.Helper()
	if err := e.river.Start(context.Background()); err != nil {
		e.t.Fatalf("start River: %v", err)
	}
	e.t.Cleanup(func() { stopRiver(e.t, e.river) })
	e.runRelay(e.newRelay(0))
}

// newRelay returns a relay of e's outbox into e's River client that moves
// up to batch rows per transaction (the default when 0) and looks again
// every 5ms once the outbox is drained (or, with fastOptions.relayIdle, at
// that idle interval unless the fast path wakes it).
func (e *env) newRelay(batch int) *forward.Relay {
	return e.newRelayWith(batch, nil)
}

// newRelayWith is newRelay with set, when not nil, changing the relay's
// configuration last.
func (e *env) newRelayWith(batch int, set func(*forward.RelayConfig)) *forward.Relay {
	rc := forward.DefaultRelayConfig()
	if batch > 0 {
		rc.Batch = batch
	}
	rc.Interval, rc.IdleInterval = 5*time.Millisecond, 5*time.Millisecond
	if e.relayIdle != 0 {
		rc.IdleInterval, rc.Wake = e.relayIdle, e.relayWake
	}
	rc.Pool, rc.Queue, rc.Senders, rc.Log = e.pool, e.river, e.cfg, e.log
	rc.Distributed = e.split
	if set != nil {
		set(&rc)
	}
	r, err := forward.NewRelay(rc)
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

// runRelay runs r.Run in the background until the test ends.
func (e *env) runRelay(r *forward.Relay) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Run(ctx)
	}()
	e.t.Cleanup(func() {
		cancel()
		<-done
	})
}

// outbox returns the rows of forward_outbox as "event_id/target", sorted.
func (e *env) outbox() []string {
	e.t.Helper()
	rows, err := e.pool.Query(context.Background(), `SELECT event_id::text || '/' || target FROM forward_outbox ORDER BY 1`)
	if err != nil {
		e.t.Fatalf("read forward_outbox: %v", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		e.t.Fatalf("read forward_outbox: %v", err)
	}
	return out
}

// stopRiver stops c gracefully, or cancels its jobs if that takes long.
func stopRiver(t *testing.T, c *queue.River) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.Stop(ctx); err != nil {
		t.Errorf("stop River: %v", err)
		cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer ccancel()
		if err := c.StopAndCancel(cctx); err != nil {
			t.Errorf("stop and cancel River: %v", err)
		}
	}
}

// delivery is what the ingest server answered a delivery with.
type delivery struct {
	id          string
	eventID     string
	body        []byte
	contentType string
	replayed    bool
}

// deliver POSTs body with Content-Type ct to /webhooks/acme with delivery ID
// id and returns the 202 (or replayed 202)'s event.
func (e *env) deliver(id string, body []byte, ct string) delivery {
	e.t.Helper()
	d, err := e.tryDeliver(id, body, ct)
	if err != nil {
		e.t.Fatal(err)
	}
	return d
}

// tryDeliver is deliver for any goroutine.
func (e *env) tryDeliver(id string, body []byte, ct string) (delivery, error) {
	req, err := http.NewRequest(http.MethodPost, e.gateway.URL+"/webhooks/acme", bytes.NewReader(body))
	if err != nil {
		return delivery{}, err
	}
	req.Header.Set("Content-Type", ct)
	req.Header.Set("Content-Encoding", "identity") // forwarded with the body, like Content-Type
	req.Header.Set("X-Delivery-Id", id)
	resp, err := e.gateway.Client().Do(req)
	if err != nil {
		return delivery{}, fmt.Errorf("deliver %s: %w", id, err)
	}
	defer resp.Body.Close()
	rb, err := io.ReadAll(resp.Body)
	if err != nil {
		return delivery{}, fmt.Errorf("deliver %s: read: %w", id, err)
	}
	if resp.StatusCode != http.StatusAccepted {
		return delivery{}, fmt.Errorf("deliver %s: status %d %s, want 202", id, resp.StatusCode, rb)
	}
	var a struct {
		EventID string `json:"event_id"`
	}
	if err := json.Unmarshal(rb, &a); err != nil || a.EventID == "" {
		return delivery{}, fmt.Errorf("deliver %s: body %q: %w", id, rb, err)
	}
	return delivery{id: id, eventID: a.EventID, body: body, contentType: ct,
		replayed: resp.Header.Get("Idempotent-Replayed") == "true"}, nil
}

// job is a forward job's row (queuetest.ForwardJob).
type job struct {
	ID          int64
	State       string
	Attempt     int
	MaxAttempts int
	ScheduledAt time.Time
	EventID     string
	Target      string // the target's name
	DeliveryID  string
	Errors      []string // the error of each failed attempt, in order
	Output      string   // the recorded output (JSON), "" if none
}

func (e *env) jobs() []job {
	e.t.Helper()
	js, err := readJobs(context.Background(), e.pool)
	if err != nil {
		e.t.Fatal(err)
	}
	return js
}

// readJobs reads every forward job, ordered by ID.
func readJobs(ctx context.Context, db store.DB) ([]job, error) {
	fjs, err := queuetest.New(db).ForwardJobs(ctx)
	if err != nil {
		return nil, err
	}
	var out []job
	for _, f := range fjs {
		out = append(out, job{ID: f.ID, State: string(f.State), Attempt: f.Attempt, MaxAttempts: f.MaxAttempts, ScheduledAt: f.ScheduledAt,
			EventID: f.EventID, Target: f.Target, DeliveryID: f.DeliveryID, Errors: f.Errors, Output: f.Output})
	}
	return out, nil
}

// finalStates are the states a job never leaves.
var finalStates = map[string]bool{"completed": true, "cancelled": true, "discarded": true}

// waitJobs polls until there are n forward jobs and every one is in a final
// state, and returns them.
func (e *env) waitJobs(n int) []job {
	e.t.Helper()
	var js []job
	e.poll(fmt.Sprintf("%d forward jobs to finish", n), func() bool {
		js = e.jobs()
		if len(js) != n {
			return false
		}
		for _, j := range js {
			if !finalStates[j.State] {
				return false
			}
		}
		return true
	}, func() string { return fmt.Sprintf("jobs: %+v", js) })
	return js
}

// poll calls cond every 10ms until it is true; it fails the test after
// waitTimeout, with state() describing what was seen.
func (e *env) poll(what string, cond func() bool, state func() string) {
	e.t.Helper()
	testkit.Poll(e.t, waitTimeout, what, cond, state)
}

// counter returns the value of the counter name with the given labels in
// e's registry (0 if absent).
func (e *env) counter(name string, labels map[string]string) float64 {
	e.t.Helper()
	return e.metric(name, labels, func(m *dto.Metric) float64 { return m.GetCounter().GetValue() })
}

// gauge returns the value of the gauge name with labels (0 when absent).
func (e *env) gauge(name string, labels map[string]string) float64 {
	e.t.Helper()
	return e.metric(name, labels, func(m *dto.Metric) float64 { return m.GetGauge().GetValue() })
}

// metric returns value of the first sample of name whose labels include
// labels (0 when there is none).
func (e *env) metric(name string, labels map[string]string, value func(*dto.Metric) float64) float64 {
	e.t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		e.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue metrics
				}
			}
			return value(m)
		}
	}
	return 0
}

// metricsText returns e's metrics as /metrics would serve them.
func (e *env) metricsText() string {
	e.t.Helper()
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(e.reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		e.t.Fatalf("metrics: status %d: %s", rec.Code, rec.Body)
	}
	return rec.Body.String()
}

// testSecret is a Standard Webhooks signing secret and its key.
var (
	testKey    = []byte("hookgate-forward-test-signing-key-32b")
	testSecret = "whsec_" + base64.StdEncoding.EncodeToString(testKey)
)

// verifyStandard checks a forward's Standard Webhooks signature with the
// test's own HMAC: webhook-signature must hold "v1,<base64 HMAC-SHA256 of
// "<webhook-id>.<webhook-timestamp>.<body>">" under key. It returns why not,
// or "".
func verifyStandard(key []byte, h http.Header, body []byte, receivedAt time.Time) string {
	id, ts, sigs := h.Get("webhook-id"), h.Get("webhook-timestamp"), h.Get("webhook-signature")
	if id == "" || ts == "" || sigs == "" {
		return fmt.Sprintf("missing webhook-id %q, webhook-timestamp %q or webhook-signature %q", id, ts, sigs)
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Sprintf("webhook-timestamp %q is not whole seconds", ts)
	}
	if d := receivedAt.Sub(time.Unix(sec, 0)); d < -5*time.Minute || d > 5*time.Minute {
		return fmt.Sprintf("webhook-timestamp %s is %v from the time the request arrived", ts, d)
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id + "." + ts + "."))
	m.Write(body)
	want := base64.StdEncoding.EncodeToString(m.Sum(nil))
	for _, s := range strings.Fields(sigs) {
		v, sig, ok := strings.Cut(s, ",")
		if ok && v == "v1" && hmac.Equal([]byte(sig), []byte(want)) {
			return ""
		}
	}
	return fmt.Sprintf("webhook-signature %q has no valid v1 signature (want v1,%s)", sigs, want)
}
