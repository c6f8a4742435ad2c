package forward

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/forward/transport"
	"github.com/hookgate/hookgate/internal/queue"
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

// WorkerConfig configures a Worker (NewWorker): its settings and its
// dependencies. Zero means zero (docs/configuration.md): no setting takes
// a default from a 0, and validate refuses one; DefaultWorkerConfig has the
// defaults. Senders, DB, Jobs, Gate, Metrics and Log are required, and Client
// unless Transport is given.
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

	// Senders is the senders' configuration: the targets the worker sends
	// to, read at each attempt (a *config.Config, or the process's
	// sender.Live: a reload applies to the attempts that follow).
	Senders config.Source
	// DB is where the events are read from.
	DB *pgxpool.Pool
	// Jobs orders a redelivery after the forwards under way.
	Jobs Sequence
	// Gate admits the forwards (NewGate): one per process, shared by
	// everything in it that sends forwards (the fast path's Dispatcher
	// takes the Worker's).
	Gate *Gate
	// Metrics counts the attempts (NewMetrics; the Gate's).
	Metrics *Metrics
	// Log is where what fails beside a forward's attempt is logged.
	Log *slog.Logger
	// Transport sends the forwards of the worker and of the fast path that
	// shares it; nil: an HTTPTransport over Client.
	Transport transport.Transport
	// Client is the HTTP client of the HTTPTransport when Transport is nil
	// (NewGuardedHTTPClient, with as many idle connections per host as the
	// Gate's Capacity); required then.
	Client *http.Client
}

// DefaultRetryAfterMax is the longest Retry-After a worker honours by
// default: a target that asks for more (a day, or 99999999999999 seconds)
// is paused for five minutes, not for the backoff's hour.
const DefaultRetryAfterMax = 5 * time.Minute

// DefaultWorkerConfig returns the worker's defaults (and no dependencies:
// the caller gives them).
func DefaultWorkerConfig() WorkerConfig {
	return WorkerConfig{Backoff: DefaultBackoff, RetryAfterMax: DefaultRetryAfterMax}
}

// validate returns an error naming the field at fault, or nil: the
// settings, and the dependencies NewWorker requires.
func (c WorkerConfig) validate() error {
	if err := c.Backoff.validate(); err != nil {
		return err
	}
	if c.RetryAfterMax <= 0 {
		return fmt.Errorf("forward worker: RetryAfterMax %s: must be positive", c.RetryAfterMax)
	}
	var errs []error
	for _, d := range []struct {
		name, what string
		missing    bool
	}{
		{"Senders", "the senders' configuration", c.Senders == nil},
		{"DB", "the database of events", c.DB == nil},
		{"Jobs", "the forward jobs (queue.NewJobs)", c.Jobs == nil},
		{"Gate", "the process's gate", c.Gate == nil},
		{"Metrics", "a Metrics (NewMetrics)", c.Metrics == nil},
		{"Log", "a logger", c.Log == nil},
		{"Client", "the HTTP client of forwards (without a Transport)", c.Transport == nil && c.Client == nil},
	} {
		if d.missing {
			errs = append(errs, fmt.Errorf("forward worker: %s: nil: %s is required", d.name, d.what))
		}
	}
	return errors.Join(errs...)
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

// Worker delivers forward jobs (the queue's ForwardWorker).
type Worker struct {
	senders config.Source
	db      *pgxpool.Pool
	jobs    Sequence
	backoff Backoff
	// retryAfterMax is WorkerConfig.RetryAfterMax.
	retryAfterMax time.Duration
	log           *slog.Logger
	metrics       *Metrics
	now           func() time.Time
	gate          *Gate

	// transport sends the forwards of the River worker and of the fast
	// path: WorkerConfig.Transport, or an HTTPTransport over its Client.
	transport transport.Transport

	// retryAfter holds, per job ID, a target's Retry-After between Work
	// returning and River asking NextRetry for the same job.
	retryAfter sync.Map
}

// NewWorker returns a Worker that reads events from cfg.DB and sends them
// to the targets in cfg.Senders through cfg.Transport (an HTTPTransport
// over cfg.Client when nil), as cfg.Gate admits them: a fair share of the
// process's capacity per target, at most each target's max_in_flight,
// holding back the forwards of a target whose circuit breaker is open or
// that asked for a pause (without using their attempts). A forward never
// follows a redirect (NewHTTPTransport). It returns an error naming the
// field when cfg is invalid or lacks a dependency.
func NewWorker(cfg WorkerConfig) (*Worker, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	w := &Worker{senders: cfg.Senders, db: cfg.DB, jobs: cfg.Jobs, backoff: cfg.Backoff, retryAfterMax: cfg.RetryAfterMax, metrics: cfg.Metrics, log: cfg.Log,
		now: time.Now, gate: cfg.Gate, transport: cfg.Transport}
	if w.transport == nil {
		w.transport = transport.NewHTTP(cfg.Client, time.Now)
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

// target returns the target of the forward a in the configuration in
// force, or false when it names none.
func (w *Worker) target(a queue.Args) (*config.Target, bool) {
	s, ok := w.senders.Current().Sender(a.Sender)
	if !ok {
		return nil, false
	}
	if a.Target == "" && a.URL != "" { // a job of a version that named targets by URL
		return s.TargetByURL(a.URL)
	}
	return s.Target(a.Target)
}

// removedSnooze is about how long a forward whose target this process's
// configuration does not have waits before it looks again: the reload that
// configures the target again wakes its forwards (WakeTarget), so this
// bounds the work of waiting, and how late a forward is when the target is
// configured by a process that does not wake them (a restart).
const removedSnooze = time.Minute

// Work sends the event to the target (Worker.post). Delivered (an HTTP
// target's 2xx) completes the job; a retry (408, 429, 5xx, timeouts and
// connection errors) is retried, no sooner than the target's Retry-After;
// failed (other 4xx) and an event no longer stored cancel it (failed, no
// retries). A forward whose target (or sender) the configuration in force
// does not have is held: it waits without using an attempt
// (hookgate_forward_waits_total's reason target_removed), and is sent once
// the target is configured again under its name (a reload that removed it
// and one that brings it back; during a rolling deploy, a worker that
// knows it already); held, it lasts as long as its event, and fails once
// retention has deleted that.
func (w *Worker) Work(ctx context.Context, job queue.Job) error {
	a := job.Args
	t, ok := w.target(a)
	if !ok {
		return w.hold(ctx, a)
	}
	a.Target = t.Name // a job of an older version may name it by URL only
	if a.After != 0 {
		// A redelivery queued after the forward under way: it waits for
		// that forward (and any earlier one) to finish.
		wait, err := w.jobs.EarlierForwardUnfinished(ctx, a.Sender, a.Target, a.EventID, job.ID)
		if err != nil {
			return err
		}
		if wait {
			w.metrics.waits.WithLabelValues(a.Sender, a.Target, "after").Inc()
			return queue.Snooze(jitter(busySnooze))
		}
		// The forward it followed has ended: if it failed, it is
		// superseded by this one (the redelivery could not mark it while
		// River held it). A failure here leaves it counted as failed, and
		// the forward goes ahead.
		if err := w.jobs.MarkSupersededFailures(ctx, a.Sender, a.Target, a.EventID); err != nil {
			w.log.Warn("mark the forward a redelivery followed as superseded", "job_id", job.ID, "err", err)
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
	res, retryFor, retryAfter, err := w.attempt(ctx, job, t, a)
	if over, ok := errors.AsType[overRate](err); ok {
		// Over the target's rate: wait for a turn without using an
		// attempt, and leave the breaker untouched (ResultNone).
		tk.Done(ctx, ResultNone, 0, "")
		w.metrics.waits.WithLabelValues(a.Sender, a.Target, "rate").Inc()
		return queue.Snooze(over.wait)
	}
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
	if retryAfter > 0 && job.Attempt < job.MaxAttempts {
		// River asks NextRetry for this job only now that it returns the
		// error and another attempt follows.
		w.retryAfter.Store(job.ID, retryAfter)
	}
	return err
}

// hold makes the forward a, whose target the configuration in force does
// not have, wait without using an attempt while its event is stored; one
// whose event retention has deleted fails (cancelled, as an attempt would
// find it gone).
func (w *Worker) hold(ctx context.Context, a queue.Args) error {
	stored, err := store.New(w.db).EventTypes(ctx, a.Sender, []uuid.UUID{a.EventID})
	if _, ok := stored[a.EventID]; err == nil && !ok {
		w.metrics.attempt(a.Sender, a.Target, outcomeFailed)
		return queue.Cancel(fmt.Errorf("event %s is no longer stored", a.EventID))
	}
	// Stored, or not known now (the database did not answer): held.
	w.metrics.waits.WithLabelValues(a.Sender, a.Target, WaitTargetRemoved).Inc()
	return queue.Snooze(jitter(removedSnooze))
}

// errText is err's text, "" for nil.
func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// attempt reads the event and sends it to t once (post), records the
// outcome as the job's output, and classifies it for the target's guard;
// retryFor is how long the whole target waits (a 429 or 503's
// Retry-After), retryAfter the Retry-After of a retried forward.
func (w *Worker) attempt(ctx context.Context, job queue.Job, t *config.Target, a queue.Args) (res Result, retryFor, retryAfter time.Duration, err error) {
	c, err := store.New(w.db).EventContent(ctx, a.Sender, a.EventID)
	if errors.Is(err, store.ErrNotFound) {
		w.metrics.attempt(a.Sender, a.Target, outcomeFailed)
		return ResultNone, 0, 0, queue.Cancel(fmt.Errorf("event %s is no longer stored", a.EventID))
	}
	if err != nil {
		return ResultNone, 0, 0, fmt.Errorf("read event: %w", err)
	}
	if !t.Rate.IsZero() {
		// The turn is taken once the event is read: the forward goes as
		// soon as its turn comes.
		if ok, wait := w.takeTurn(ctx, a.Sender, t); !ok {
			return ResultNone, 0, 0, overRate{wait}
		}
	}
	p := w.post(ctx, t, a, c.Type, c.Headers, c.Body, 0)
	if p.status != 0 {
		w.record(ctx, job, p.output())
	}
	if p.final {
		return p.res, 0, 0, queue.Cancel(p.err)
	}
	return p.res, p.pause, p.retryAfter, p.err
}

// posted is how one send of a forward went, for the River worker and the
// fast path.
type posted struct {
	res    Result
	status int   // the target's status; 0 without an answer
	err    error // why it was not delivered; nil when it was
	// final: no other attempt can succeed (VerdictFailed: another 4xx, a
	// URL that does not parse).
	final bool
	// retryAfter is the Retry-After of a retry (a 408, 429 or 5xx), as the
	// target asked (Sent.RetryAfter); pause is how long the whole target
	// waits (Sent.PausesTarget: a 429 or 503's Retry-After, at most
	// RetryAfterMax).
	retryAfter, pause time.Duration
	at                time.Time // when it was delivered
}

// output is what the attempt records on its job (its Attempt is set by
// the caller).
func (p posted) output() queue.Output {
	return queue.Output{Status: p.status, DeliveredAt: p.at, RetryAfter: p.retryAfter.Seconds()}
}

// post sends the event (its stored headers and body) to t once, through
// the worker's transport, counts the attempt in the metrics and maps the
// transport's verdict to the gate's Result. Both the River worker and the
// fast path (Dispatcher) attempt through it. limit, when positive, is how
// long the caller can let the attempt run (the fast path's lease,
// Message.Limit): an attempt cut short by it, like one cut short by ctx,
// has no verdict (ResultNone), as if the process were stopping.
//
// The attempt counts as delivered, retry or failed in
// hookgate_forward_attempts_total (one cut short counts as a retry); its
// latency is observed when the target answered, and the console's traffic
// counts it when it reached the target or failed to (not when it was cut
// short or could not be sent at all).
func (w *Worker) post(ctx context.Context, t *config.Target, a queue.Args, eventType string, headers map[string][]string, body []byte, limit time.Duration) posted {
	s := w.transport.Send(ctx, transport.Message{Sender: a.Sender, Target: t, EventID: a.EventID, DeliveryID: a.DeliveryID, EventType: eventType, Headers: headers, Body: body, Limit: limit})
	series := w.metrics.series(a.Sender, a.Target)
	answered := s.Answered()
	if answered {
		series.latency.Observe(s.Took.Seconds())
	}
	if s.Verdict != transport.VerdictNone && (answered || s.Verdict == transport.VerdictRetry) {
		w.metrics.traffic.Forward(a.Sender, a.Target, s.Verdict == transport.VerdictDelivered, s.Took)
	}
	if s.Err == nil && s.Verdict != transport.VerdictDelivered { // a transport that said no more
		s.Err = fmt.Errorf("forward to target %q: %s", a.Target, s.Verdict)
	}
	switch s.Verdict {
	case transport.VerdictDelivered:
		series.delivered.Inc()
		at := s.At
		if at.IsZero() {
			at = w.now().UTC()
		}
		return posted{res: ResultDelivered, status: s.Status, at: at}
	case transport.VerdictRetry:
		series.retry.Inc()
		var pause time.Duration
		if s.PausesTarget {
			pause = min(s.RetryAfter, w.retryAfterMax) // the whole target waits, not just this forward
		}
		return posted{res: ResultRetryable, status: s.Status, err: s.Err, retryAfter: s.RetryAfter, pause: pause}
	case transport.VerdictFailed:
		series.failed.Inc()
		res := ResultOther // the target answered: the forward's own problem
		if s.Status == 0 { // never sent: nothing to judge the target by
			res = ResultNone
		}
		return posted{res: res, status: s.Status, err: s.Err, final: true}
	default: // cut short: the worker is stopping, not the target failing
		series.retry.Inc()
		return posted{res: ResultNone, status: s.Status, err: s.Err}
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
