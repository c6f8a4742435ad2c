package forward

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/queue"
	"github.com/hookgate/hookgate/internal/signature"
	"github.com/hookgate/hookgate/internal/store"
)

// Backoff is the retry schedule of failed forwards: attempt n waits a random
// time between half of and the full Base·2^(n-1), at most Max (full jitter
// would let retries bunch up near zero; half keeps them spread and growing).
// A Retry-After waits at least what the target asked, up to
// WorkerConfig.RetryAfterMax (Worker.retryWait), whatever Max is.
type Backoff struct {
	Base time.Duration
	Max  time.Duration
}

// DefaultBackoff retries after about 1s, 2s, 4s, … up to an hour.
var DefaultBackoff = Backoff{Base: time.Second, Max: time.Hour}

// validate returns an error naming the field at fault, or nil.
func (b Backoff) validate() error {
	if b.Base <= 0 {
		return fmt.Errorf("forward backoff: Base %s: must be positive", b.Base)
	}
	if b.Max < b.Base {
		return fmt.Errorf("forward backoff: Max %s: must be at least Base (%s)", b.Max, b.Base)
	}
	return nil
}

// WorkerConfig configures a Worker. Zero means zero (docs/configuration.md):
// no field takes a default from a 0, and validate refuses one;
// DefaultWorkerConfig has the defaults.
type WorkerConfig struct {
	// Backoff is the retry schedule of failed forwards (DefaultBackoff):
	// Base positive, Max at least Base.
	Backoff Backoff
	// RetryAfterMax is the longest Retry-After honoured
	// (DefaultRetryAfterMax): a 429 or 503 with Retry-After pauses its
	// target for what it asks up to this, and a forward's retry after a
	// Retry-After (of a 408, 429 or 5xx) waits at least that long (at
	// least the backoff's delay). Positive.
	RetryAfterMax time.Duration
}

// DefaultRetryAfterMax is the longest Retry-After a worker honours by
// default: a target that asks for more (a day, or 99999999999999 seconds)
// is paused for five minutes, not for the backoff's hour.
const DefaultRetryAfterMax = 5 * time.Minute

// DefaultWorkerConfig returns the worker's defaults.
func DefaultWorkerConfig() WorkerConfig {
	return WorkerConfig{Backoff: DefaultBackoff, RetryAfterMax: DefaultRetryAfterMax}
}

// validate returns an error naming the field at fault, or nil.
func (c WorkerConfig) validate() error {
	if err := c.Backoff.validate(); err != nil {
		return err
	}
	if c.RetryAfterMax <= 0 {
		return fmt.Errorf("forward worker: RetryAfterMax %s: must be positive", c.RetryAfterMax)
	}
	return nil
}

// delay returns the wait before the retry that follows failed attempt n (1-based).
func (b Backoff) delay(attempt int) time.Duration {
	d := b.Max
	if attempt < 62 {
		if exp := b.Base << (attempt - 1); exp > 0 && exp < b.Max {
			d = exp
		}
	}
	return d/2 + rand.N(d/2+1)
}

// maxResponseBytes is how much of a target's response body is read (and
// discarded) so the connection can be reused.
const maxResponseBytes = 64 << 10

// Worker delivers forward jobs (the queue's ForwardWorker).
type Worker struct {
	cfg     *config.Config
	db      *pgxpool.Pool
	client  *http.Client
	backoff Backoff
	// retryAfterMax is WorkerConfig.RetryAfterMax.
	retryAfterMax time.Duration
	log           *slog.Logger
	metrics       *Metrics
	now           func() time.Time
	gate          *Gate

	// retryAfter holds, per job ID, a target's Retry-After between Work
	// returning and River asking NextRetry for the same job.
	retryAfter sync.Map
	// urls are the targets' URLs parsed (targetURL), by URL.
	urls sync.Map
	// rt is client's transport when send may use it directly.
	rt http.RoundTripper
}

// NewWorker returns a Worker that reads events from db and POSTs them with
// client (NewHTTPClient) to the targets in cfg, as gate admits them: a fair
// share of the process's capacity per target, at most each target's
// max_in_flight, holding back the forwards of a target whose circuit
// breaker is open or that asked for a pause (without using their
// attempts). A forward never follows a redirect: a client without a
// cookie jar or a timeout has its requests sent by its transport directly
// (Worker.send). wc tunes it (DefaultWorkerConfig); an error names the
// field when wc is invalid.
func NewWorker(cfg *config.Config, db *pgxpool.Pool, client *http.Client, gate *Gate, m *Metrics, log *slog.Logger, wc WorkerConfig) (*Worker, error) {
	if err := wc.validate(); err != nil {
		return nil, err
	}
	w := &Worker{cfg: cfg, db: db, client: client, backoff: wc.Backoff, retryAfterMax: wc.RetryAfterMax, metrics: m, log: log, now: time.Now, gate: gate}
	if client != nil && client.Transport != nil && client.Jar == nil && client.Timeout == 0 {
		w.rt = client.Transport
	}
	return w, nil
}

// Timeout is the target's timeout plus a margin to read the event: River
// cancels the job's context after it.
func (w *Worker) Timeout(job queue.Job) time.Duration {
	if t, ok := w.target(job.Args); ok {
		return time.Duration(t.Timeout) + 5*time.Second
	}
	return config.DefaultForwardTimeout
}

// NextRetry schedules the retry of a failed attempt (retryWait).
func (w *Worker) NextRetry(job queue.Job) time.Time {
	var retryAfter time.Duration
	if v, ok := w.retryAfter.LoadAndDelete(job.ID); ok {
		retryAfter = v.(time.Duration)
	}
	return w.now().Add(w.retryWait(job.Attempt, retryAfter))
}

// retryWait is how long the retry after failed attempt n (1-based) waits:
// the backoff's delay, or the target's Retry-After when that is longer, up
// to RetryAfterMax. Retry-After is a floor: a target asking for 1s during a
// long outage must not burn every attempt in seconds; and a bound: one
// asking for a day is tried again after RetryAfterMax. The River worker
// (NextRetry) and the fast path schedule retries with it.
func (w *Worker) retryWait(attempt int, retryAfter time.Duration) time.Duration {
	return max(w.backoff.delay(attempt), min(retryAfter, w.retryAfterMax))
}

func (w *Worker) target(a queue.Args) (*config.Target, bool) {
	s, ok := w.cfg.Sender(a.Sender)
	if !ok {
		return nil, false
	}
	if a.Target == "" && a.URL != "" { // a job of a version that named targets by URL
		return s.TargetByURL(a.URL)
	}
	return s.Target(a.Target)
}

// Work POSTs the event to the target. A 2xx completes the job; 408, 429,
// 5xx, timeouts and connection errors are retried; other 4xx and an event no
// longer stored cancel it (failed, no retries). A target this process does
// not know is retried too: during a rolling deploy another worker may know
// it; after max_attempts the forward has failed.
func (w *Worker) Work(ctx context.Context, job queue.Job) error {
	a := job.Args
	t, ok := w.target(a)
	if !ok {
		w.metrics.attempt(a.Sender, a.Target, outcomeRetry)
		return fmt.Errorf("target %q is not configured for sender %q in this process", a.Target, a.Sender)
	}
	a.Target = t.Name // a job of an older version may name it by URL only
	if a.After != 0 {
		// A redelivery queued after the forward under way: it waits for
		// that forward (and any earlier one) to finish.
		wait, err := queue.NewJobs(w.db).EarlierForwardUnfinished(ctx, a.Sender, a.Target, a.EventID, job.ID)
		if err != nil {
			return err
		}
		if wait {
			w.metrics.waits.WithLabelValues(a.Sender, a.Target, "after").Inc()
			return queue.Snooze(jitter(busySnooze))
		}
	}
	tk, ok, wait, why := w.gate.Acquire(a.Sender, t, job.Tried())
	if !ok {
		// The target is paused, its breaker is open, or it has its share of
		// this process's workers: wait without using an attempt (and give
		// the River worker back at once).
		w.metrics.waits.WithLabelValues(a.Sender, a.Target, why).Inc()
		return queue.Snooze(wait)
	}
	res, retryFor, err := w.attempt(ctx, job, t, a)
	if wait := tk.Done(ctx, res, retryFor, errText(err)); wait > 0 {
		// A failed probe: the breaker stays open, and this forward waits
		// with the others instead of spending its attempts on the outage.
		// No NextRetry follows a snooze: the Retry-After is not kept.
		if err := queue.MarkProbed(ctx); err != nil {
			w.log.Warn("mark a failed probe as attempted", "job_id", job.ID, "err", err)
		}
		w.metrics.waits.WithLabelValues(a.Sender, a.Target, "breaker").Inc()
		return queue.Snooze(wait)
	}
	var es *errStatus
	if errors.As(err, &es) && es.retryAfter > 0 && job.Attempt < job.MaxAttempts {
		// River asks NextRetry for this job only now that it returns the
		// error and another attempt follows.
		w.retryAfter.Store(job.ID, es.retryAfter)
	}
	return err
}

// errText is err's text, "" for nil.
func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// attempt reads the event and POSTs it to t once, records the outcome as
// the job's output, and classifies it for the target's guard; retryFor is a
// Retry-After the target asked for with a 429 or 503.
func (w *Worker) attempt(ctx context.Context, job queue.Job, t *config.Target, a queue.Args) (Result, time.Duration, error) {
	headers, body, err := store.New(w.db).EventContent(ctx, a.Sender, a.EventID)
	if errors.Is(err, store.ErrNotFound) {
		w.metrics.attempt(a.Sender, a.Target, outcomeFailed)
		return ResultNone, 0, queue.Cancel(fmt.Errorf("event %s is no longer stored", a.EventID))
	}
	if err != nil {
		return ResultNone, 0, fmt.Errorf("read event: %w", err)
	}
	p := w.post(ctx, t, a, headers, body, 0)
	if p.status != 0 {
		w.record(ctx, job, p.output())
	}
	if p.final {
		return p.res, 0, queue.Cancel(p.err)
	}
	return p.res, p.pause, p.err
}

// posted is how one POST of a forward went.
type posted struct {
	res    Result
	status int   // the target's status; 0 without an answer
	err    error // why it was not delivered; nil when it was
	// final: no other attempt can succeed (another 4xx, a URL that does
	// not parse).
	final bool
	// retryAfter is the Retry-After of a 408, 429 or 5xx, as the target
	// asked (parseRetryAfter); pause is how long the whole target waits (a
	// 429 or 503's Retry-After, at most RetryAfterMax).
	retryAfter, pause time.Duration
	at                time.Time // when it was delivered
}

// output is what the attempt records on its job (its Attempt is set by
// the caller).
func (p posted) output() queue.Output {
	return queue.Output{Status: p.status, DeliveredAt: p.at, RetryAfter: p.retryAfter.Seconds()}
}

// post POSTs the event (its stored headers and body) to t once, within t's
// timeout, counts the attempt in the metrics and classifies the outcome.
// Both the River worker and the fast path (Dispatcher) attempt through it.
// limit, when positive, is how long the caller can let the attempt run
// (the fast path's lease): an attempt cut short by it, like one cut short
// by ctx, has no verdict (ResultNone), as if the process were stopping.
// One context and one timer bound the attempt either way.
func (w *Worker) post(ctx context.Context, t *config.Target, a queue.Args, headers map[string][]string, body []byte, limit time.Duration) posted {
	timeout, limited := time.Duration(t.Timeout), false
	if limit > 0 && limit < timeout {
		timeout, limited = limit, true
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	series := w.metrics.series(a.Sender, a.Target)
	req, err := w.request(rctx, t, a, headers, body)
	if err != nil {
		series.failed.Inc()
		return posted{res: ResultNone, err: err, final: true}
	}
	start := time.Now()
	resp, err := w.send(req)
	if err != nil {
		series.retry.Inc()
		stopping := ctx.Err() != nil || limited && rctx.Err() != nil
		if !stopping {
			w.metrics.traffic.Forward(a.Sender, a.Target, false, time.Since(start))
		}
		// *url.Error names the URL, which may hold credentials: keep only
		// what went wrong (it names the host and port at most).
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		err = fmt.Errorf("post to target %q: %w", a.Target, err)
		if stopping { // the worker is stopping, not the target failing
			return posted{res: ResultNone, err: err}
		}
		return posted{res: ResultRetryable, err: err}
	}
	if resp.Body != http.NoBody {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxResponseBytes))
	}
	_ = resp.Body.Close()
	took := time.Since(start)
	series.latency.Observe(took.Seconds())
	w.metrics.traffic.Forward(a.Sender, a.Target, resp.StatusCode >= 200 && resp.StatusCode < 300, took)

	switch code := resp.StatusCode; {
	case code >= 200 && code < 300:
		series.delivered.Inc()
		return posted{res: ResultDelivered, status: code, at: w.now().UTC()}
	case code == http.StatusRequestTimeout || code == http.StatusTooManyRequests || code >= 500:
		series.retry.Inc()
		e := &errStatus{status: code, retryAfter: parseRetryAfter(resp.Header.Get("Retry-After"), w.now())}
		var pause time.Duration
		if code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable {
			pause = min(e.retryAfter, w.retryAfterMax) // the whole target waits, not just this forward
		}
		return posted{res: ResultRetryable, status: code, err: e, retryAfter: e.retryAfter, pause: pause}
	default:
		series.failed.Inc()
		return posted{res: ResultOther, status: code, err: &errStatus{status: code}, final: true}
	}
}

// record records the outcome of the job's attempt as its output (the
// target's status and Retry-After: operators read them there, not from the
// error's text). A failure to record is logged: the forward works without.
func (w *Worker) record(ctx context.Context, job queue.Job, out queue.Output) {
	out.Attempt = job.Attempt
	if err := queue.RecordOutput(ctx, out); err != nil {
		w.log.Warn("record forward output", "job_id", job.ID, "err", err)
	}
}

// request builds the forward's POST: the original body and Content-Type,
// the target's extra headers, and the identifying and signing headers. The
// target's URL is parsed once (Worker.targetURL), and the header map is
// filled with canonical keys and one backing array for its values.
func (w *Worker) request(ctx context.Context, t *config.Target, a queue.Args, stored map[string][]string, body []byte) (*http.Request, error) {
	u, err := w.targetURL(t.URL)
	if err != nil {
		return nil, fmt.Errorf("build request for target %q: the URL does not parse", a.Target)
	}
	// Up to 8 keys fit a map's first group; a larger hint allocates more.
	h := make(http.Header, 8)
	vals := make([]string, 0, 9)
	set := func(k, v string) { // k canonical
		vals = append(vals, v)
		h[k] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
	for _, k := range [...]string{"Content-Type", "Content-Encoding"} {
		if v := http.Header(stored).Get(k); v != "" {
			set(k, v)
		}
	}
	// The target's own headers win over anything taken from the sender.
	for k, v := range t.Headers {
		h.Set(k, v)
	}
	id := a.EventID.String()
	ts := w.now()
	set("User-Agent", "hookgate")
	set("Idempotency-Key", id)
	set("Webhook-Id", id)
	set("Webhook-Timestamp", strconv.FormatInt(ts.Unix(), 10))
	if t.SigningKey != nil {
		set("Webhook-Signature", signature.SignStandard(t.SigningKey, id, ts, body))
	}
	set("X-Hookgate-Sender", a.Sender)
	set("X-Hookgate-Delivery-Id", a.DeliveryID)
	req := &http.Request{
		Method:        http.MethodPost,
		URL:           u,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h,
		Body:          io.NopCloser(bytes.NewReader(body)),
		GetBody:       func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil },
		ContentLength: int64(len(body)),
		Host:          u.Host,
	}
	if len(body) == 0 {
		req.Body, req.GetBody = http.NoBody, func() (io.ReadCloser, error) { return http.NoBody, nil }
	}
	return req.WithContext(ctx), nil
}

// send sends a forward's request. Through the client's transport itself
// when the client adds nothing a forward needs: a forward follows no
// redirect (NewHTTPClient's CheckRedirect: a redirect is an answer), and
// has no cookie jar and no client timeout (its context bounds it), so
// http.Client.Do would only copy every request's header map for redirects
// it never follows (make bench's profile).
func (w *Worker) send(req *http.Request) (*http.Response, error) {
	if w.rt != nil {
		return w.rt.RoundTrip(req)
	}
	return w.client.Do(req)
}

// targetURL returns raw parsed, as http.NewRequest would parse it, from a
// cache: a target's URL is parsed once per process, not once per forward.
// The *url.URL returned is shared: nothing may modify it.
func (w *Worker) targetURL(raw string) (*url.URL, error) {
	if u, ok := w.urls.Load(raw); ok {
		return u.(*url.URL), nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, err
	}
	u.Host = strings.TrimSuffix(u.Host, ":") // as http.NewRequest does
	w.urls.Store(raw, u)
	return u, nil
}

// maxRetryAfter is the most parseRetryAfter returns: a year, far beyond
// any RetryAfterMax worth setting, and small enough that the value stays
// what it is through every conversion (seconds as a float64 in a job's
// recorded output, a time plus it).
const maxRetryAfter = 365 * 24 * time.Hour

// parseRetryAfter reads a Retry-After value (RFC 9110 §10.2.3): a number
// of seconds (digits only) or an HTTP date, from now. It saturates: a
// number or a date beyond maxRetryAfter (99999999999999 seconds, more
// digits than an int64 holds, the year 9999) is maxRetryAfter, never a
// product that overflowed into something negative or small. 0 when absent,
// 0 seconds, a date not after now, or unreadable (a sign, a fraction,
// garbage).
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if strings.Trim(v, "0123456789") == "" {
		s, err := strconv.ParseInt(v, 10, 64)
		if err != nil || s > int64(maxRetryAfter/time.Second) { // err: only ErrRange, digits past an int64
			return maxRetryAfter
		}
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return min(t.Sub(now), maxRetryAfter) // Sub saturates at the largest Duration
	}
	return 0
}

// errStatus is a target's answer other than 2xx.
type errStatus struct {
	status     int
	retryAfter time.Duration
}

func (e *errStatus) Error() string {
	if e.retryAfter > 0 {
		return fmt.Sprintf("target answered %d, Retry-After %s", e.status, e.retryAfter)
	}
	return fmt.Sprintf("target answered %d", e.status)
}
