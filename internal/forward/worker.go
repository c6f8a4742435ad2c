package forward

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/forward/transport"
	"github.com/hookgate/hookgate/internal/queue"
	"github.com/hookgate/hookgate/internal/redact"
	"github.com/hookgate/hookgate/internal/rules"
	"github.com/hookgate/hookgate/internal/store"
)

// Backoff is the retry schedule of failed forwards. Attempt n waits a
// random time between half of and the full Base·2^(n-1), at most Max. Half
// jitter keeps retries spread out and growing.
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

// WorkerConfig configures a [Worker]. A zero setting is refused, not
// defaulted; [DefaultWorkerConfig] has the defaults. Senders, DB, Jobs,
// Gate, Metrics and Log are required, and Client unless Transport is set.
type WorkerConfig struct {
	// Backoff is the retry schedule of failed forwards.
	Backoff Backoff
	// RetryAfterMax is the longest Retry-After honoured. A 429 or 503
	// pauses its target for up to this long. A retry waits at least the
	// Retry-After, up to this long.
	RetryAfterMax time.Duration

	// Senders is the configuration in force, read at each attempt.
	Senders config.Source
	// DB is where the events are read from.
	DB *pgxpool.Pool
	// Jobs orders a redelivery after the forwards under way.
	Jobs Sequence
	// Gate admits the forwards. One Gate serves the whole process.
	Gate *Gate
	// Metrics counts the attempts. It is the Gate's.
	Metrics *Metrics
	// Log is where what fails beside a forward's attempt is logged.
	Log *slog.Logger
	// Transport sends the forwards of the worker and of the fast path.
	// When nil, a [transport.HTTP] over Client does.
	Transport transport.Transport
	// Client is the HTTP client used when Transport is nil.
	Client *http.Client
	// AttemptsKept is how many attempts of a forward are kept, the
	// newest. River's worker deletes older ones as it records each.
	AttemptsKept int
	// Released, when not nil, is signalled without blocking when an
	// ordered forward's end released the next forward of its key to the
	// relay. The process's relay then looks at once.
	Released chan<- struct{}
}

// DefaultRetryAfterMax is the longest Retry-After a worker honours by
// default.
const DefaultRetryAfterMax = 5 * time.Minute

// DefaultWorkerConfig returns the worker's defaults, without dependencies.
func DefaultWorkerConfig() WorkerConfig {
	return WorkerConfig{Backoff: DefaultBackoff, RetryAfterMax: DefaultRetryAfterMax, AttemptsKept: store.DefaultAttemptsKept}
}

// validate returns an error naming the field at fault, or nil.
func (c WorkerConfig) validate() error {
	if err := c.Backoff.validate(); err != nil {
		return err
	}
	if c.RetryAfterMax <= 0 {
		return fmt.Errorf("forward worker: RetryAfterMax %s: must be positive", c.RetryAfterMax)
	}
	if c.AttemptsKept < 1 {
		return fmt.Errorf("forward worker: AttemptsKept %d: must be at least 1", c.AttemptsKept)
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

// delay returns the wait before the retry after failed attempt n.
func (b Backoff) delay(attempt int) time.Duration {
	d := b.Max
	if attempt < 62 {
		if exp := b.Base << (attempt - 1); exp > 0 && exp < b.Max {
			d = exp
		}
	}
	return d/2 + rand.N(d/2+1)
}

// Worker delivers forward jobs. It is the queue's [queue.ForwardWorker].
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
	// attempts records the attempts, WorkerConfig.AttemptsKept of each
	// forward kept.
	attempts *attemptLog

	transport transport.Transport

	// retryAfter holds a job's Retry-After until River asks NextRetry.
	retryAfter sync.Map
	// released is WorkerConfig.Released.
	released chan<- struct{}
	// fast is the process's fast path, if any ([NewDispatcher] sets it).
	// An ordered forward's end hands the key's next forward to it.
	fast atomic.Pointer[Dispatcher]
}

// NewWorker returns a Worker that sends forwards as cfg.Gate admits them.
// It returns an error naming the field when cfg is invalid.
func NewWorker(cfg WorkerConfig) (*Worker, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	w := &Worker{senders: cfg.Senders, db: cfg.DB, jobs: cfg.Jobs, backoff: cfg.Backoff, retryAfterMax: cfg.RetryAfterMax, metrics: cfg.Metrics, log: cfg.Log,
		now: time.Now, gate: cfg.Gate, transport: cfg.Transport, released: cfg.Released}
	w.attempts = &attemptLog{db: cfg.DB, keep: cfg.AttemptsKept, log: cfg.Log}
	if w.transport == nil {
		w.transport = transport.NewHTTP(cfg.Client, time.Now)
	}
	return w, nil
}

// Timeout is the target's timeout plus a margin to read the event.
func (w *Worker) Timeout(job queue.Job) time.Duration {
	if t, ok := w.target(job.Args); ok {
		return time.Duration(t.Timeout) + 5*time.Second
	}
	return config.DefaultForwardTimeout
}

// NextRetry schedules the retry of a failed attempt.
func (w *Worker) NextRetry(job queue.Job) time.Time {
	var retryAfter time.Duration
	if v, ok := w.retryAfter.LoadAndDelete(job.ID); ok {
		retryAfter = v.(time.Duration)
	}
	return w.now().Add(w.retryWait(job.Attempt, retryAfter))
}

// retryWait is how long the retry after failed attempt n waits. It is the
// backoff's delay, or the target's Retry-After up to RetryAfterMax when
// longer. A short Retry-After must not burn every attempt in an outage.
func (w *Worker) retryWait(attempt int, retryAfter time.Duration) time.Duration {
	return max(w.backoff.delay(attempt), min(retryAfter, w.retryAfterMax))
}

// target returns the target of a in the configuration in force.
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

// removedSnooze is about how long a forward of an unconfigured target waits
// before it looks again. A reload that configures the target wakes it
// sooner, with [WakeTarget].
const removedSnooze = time.Minute

// Work sends the event to the target once. A delivered forward completes
// the job. A retry waits at least the target's Retry-After. A failed
// forward, or one whose event is gone, cancels the job. A forward whose
// target is not configured is held without using an attempt, until the
// target comes back or retention deletes the event.
func (w *Worker) Work(ctx context.Context, job queue.Job) error {
	a := job.Args
	t, ok := w.target(a)
	if !ok {
		return w.hold(ctx, a)
	}
	a.Target = t.Name // a job of an older version may name it by URL only
	if a.After != 0 {
		// A redelivery waits for the earlier forwards of its event.
		wait, err := w.jobs.EarlierForwardUnfinished(ctx, a.Sender, a.Target, a.EventID, job.ID)
		if err != nil {
			return err
		}
		if wait {
			w.metrics.waits.WithLabelValues(a.Sender, a.Target, "after").Inc()
			return queue.Snooze(jitter(busySnooze))
		}
		// The forward it followed has ended. If it failed, this one
		// supersedes it.
		if err := w.jobs.MarkSupersededFailures(ctx, a.Sender, a.Target, a.EventID); err != nil {
			w.log.Warn("mark the forward a redelivery followed as superseded", "job_id", job.ID, "err", err)
		}
	}
	if a.OrderKey != "" {
		// An ordered forward goes only as its key's head. One whose turn
		// has passed was ended already, before a crash or by an operator.
		turn, err := store.New(w.db).OrderedTurnOf(ctx, a.Sender, a.Target, a.OrderKey, a.Seq)
		switch {
		case err != nil:
			w.log.Warn("read an ordered forward's turn", "job_id", job.ID, "err", err)
			return queue.Snooze(jitter(busySnooze))
		case turn == store.TurnPast:
			return nil
		case turn == store.TurnBlocked:
			// It failed for good and holds its key; a job of it that runs
			// again after a crash must not attempt it beside a skip.
			return queue.Cancel(errors.New("the forward failed for good and holds its ordering key: redeliver or skip it"))
		case turn == store.TurnLater:
			w.metrics.waits.WithLabelValues(a.Sender, a.Target, WaitOrder).Inc()
			return queue.Snooze(jitter(busySnooze))
		}
		if job.TakenOver && job.WaitedAfter != job.Attempt {
			// The attempt that its process's death cut short may still be
			// under way at the target: it ends within the target's
			// timeout. Wait that long once, without using an attempt, as
			// the fast path's lease does, so that no two attempts of the
			// key overlap.
			if err := queue.MarkWaitedAfterTakeover(ctx, job.Attempt); err == nil {
				w.metrics.waits.WithLabelValues(a.Sender, a.Target, WaitOrder).Inc()
				return queue.Snooze(time.Duration(t.Timeout) + time.Second)
			}
		}
	}
	tk, ok, wait, why := w.gate.Acquire(a.Sender, t, job.Tried())
	if !ok {
		// Wait without using an attempt.
		w.metrics.waits.WithLabelValues(a.Sender, a.Target, why).Inc()
		return queue.Snooze(wait)
	}
	res, retryFor, retryAfter, err := w.attempt(ctx, job, t, a)
	if over, ok := errors.AsType[overRate](err); ok {
		// Over the target's rate: wait for a turn without using an attempt.
		tk.Done(ctx, ResultNone, 0, "")
		w.metrics.waits.WithLabelValues(a.Sender, a.Target, "rate").Inc()
		return queue.Snooze(over.wait)
	}
	if wait := tk.Done(ctx, res, retryFor, errText(err)); wait > 0 {
		// A failed probe waits with the others instead of using attempts.
		if err := queue.MarkProbed(ctx); err != nil {
			w.log.Warn("mark a failed probe as attempted", "job_id", job.ID, "err", err)
		}
		w.metrics.waits.WithLabelValues(a.Sender, a.Target, "breaker").Inc()
		return queue.Snooze(wait)
	}
	if retryAfter > 0 && job.Attempt < job.MaxAttempts {
		// River asks NextRetry only when another attempt follows.
		w.retryAfter.Store(job.ID, retryAfter)
	}
	if a.OrderKey != "" {
		if res == ResultNone && err != nil && !queue.IsCancel(err) && ctx.Err() != nil {
			// Cut short, as the process stops: the request may still be
			// under way at the target. The key's next attempt waits the
			// target's timeout, without using an attempt.
			return queue.Snooze(time.Duration(t.Timeout) + time.Second)
		}
		return w.endOrdered(ctx, job, t, a, err)
	}
	return err
}

// endOrdered ends an ordered forward after its attempt, which returned
// err, when that was its last: delivered, failed for good, or its event
// gone. The key's head moves on, releasing the next forward, unless the
// forward failed and its target holds failures; then it blocks its key.
// The end is written in a transaction of its own, tried again for up to
// endPersist: a short database outage does not leave the key waiting. When
// it still cannot be written, River runs the job again (a delivered
// forward may then reach its target twice), so that the key does not
// stall.
func (w *Worker) endOrdered(ctx context.Context, job queue.Job, t *config.Target, a queue.Args, err error) error {
	// The job keeps an attempt in reserve (queue.OrderedMaxAttempts):
	// the forward ends after the one before it, unless a crash cut that
	// one short.
	last := err == nil || queue.IsCancel(err) || job.Attempt >= job.MaxAttempts-queue.OrderedReserve
	if !last {
		return err
	}
	e := store.OrderedEnd{Target: a.Target, Key: a.OrderKey, Seq: a.Seq, EventID: a.EventID}
	q := store.New(w.db)
	hold := err != nil && !errors.Is(err, errEventGone) && !t.Ordering.Skips()
	// The process's fast path, when it has room, takes the key's next
	// forward at once; otherwise the relay does.
	fast := w.fast.Load()
	var (
		handOff time.Duration
		handed  []store.HandedOff
		start   = time.Now()
	)
	if fast != nil && !hold {
		handOff = fast.handOffLease(a.Sender, t)
	}
	werr := persist(ctx, func(ctx context.Context) (err error) {
		if hold {
			return q.BlockOrdered(ctx, a.Sender, e)
		}
		_, handed, err = q.AdvanceOrdered(ctx, a.Sender, e, handOff)
		return err
	})
	if werr != nil {
		w.log.Warn("could not record an ordered forward's end; River runs it again", "job_id", job.ID, "err", werr)
		if err == nil || queue.IsCancel(err) {
			return fmt.Errorf("the forward's end could not be recorded for its ordering key: %w", werr)
		}
		return err // River runs it again, in the reserve if need be
	}
	if err != nil && !queue.IsCancel(err) {
		err = queue.Cancel(err) // no River retry: the reserve is for crashes
	}
	switch {
	case hold:
	case handOff > 0:
		// The next forward, if any, was leased to this process.
		fast.takeHandedOff(handed, start)
	case w.released != nil:
		select {
		case w.released <- struct{}{}:
		default: // a signal is pending already
		}
	}
	return err
}

// endPersist is how long the end of an ordered forward is tried again.
const endPersist = 15 * time.Second

// persist runs write until it succeeds, for up to endPersist, each try
// bounded by 5 s, waiting 100 ms, then longer, between tries. It goes on
// when ctx ends: the attempt is over, and its end must be written.
func persist(ctx context.Context, write func(context.Context) error) error {
	ctx = context.WithoutCancel(ctx)
	deadline := time.Now().Add(endPersist)
	for try := 0; ; try++ {
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := write(tctx)
		cancel()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(min(time.Duration(100<<min(try, 4))*time.Millisecond, time.Second))
	}
}

// errEventGone is why a forward whose event retention deleted fails.
var errEventGone = errors.New("the event is no longer stored")

// hold makes a forward of an unconfigured target wait without using an
// attempt. Once retention has deleted its event, it fails.
func (w *Worker) hold(ctx context.Context, a queue.Args) error {
	stored, err := store.New(w.db).EventTypes(ctx, a.Sender, []uuid.UUID{a.EventID})
	if _, ok := stored[a.EventID]; err == nil && !ok {
		w.metrics.attempt(a.Sender, a.Target, outcomeFailed)
		return queue.Cancel(fmt.Errorf("event %s: %w", a.EventID, errEventGone))
	}
	// The event is stored, or the database did not answer: hold.
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

// attempt reads the event, sends it to t once, and records the outcome.
// retryFor is how long the whole target waits; retryAfter is the forward's
// own Retry-After.
func (w *Worker) attempt(ctx context.Context, job queue.Job, t *config.Target, a queue.Args) (res Result, retryFor, retryAfter time.Duration, err error) {
	c, err := store.New(w.db).EventContent(ctx, a.Sender, a.EventID)
	if errors.Is(err, store.ErrNotFound) {
		w.metrics.attempt(a.Sender, a.Target, outcomeFailed)
		return ResultNone, 0, 0, queue.Cancel(fmt.Errorf("event %s: %w", a.EventID, errEventGone))
	}
	if err != nil {
		return ResultNone, 0, 0, fmt.Errorf("read event: %w", err)
	}
	if !t.Rate.IsZero() {
		// Take the turn once the event is read, to send as soon as it comes.
		if ok, wait := w.takeTurn(ctx, a.Sender, t); !ok {
			return ResultNone, 0, 0, overRate{wait}
		}
	}
	started := w.now().UTC()
	p := w.post(ctx, t, a, c.Type, c.Headers, c.Body, nil, 0)
	if p.status != 0 || p.res == ResultDelivered {
		// A broker's delivered forward has no status: its time and
		// acknowledgement are recorded all the same.
		w.record(ctx, job, p.output())
	}
	w.recordAttempt(ctx, job, p.answer(t, a, started, causeOf(job)))
	if p.final {
		return p.res, 0, 0, queue.Cancel(p.err)
	}
	return p.res, p.pause, p.retryAfter, p.err
}

// posted is how one send of a forward went.
type posted struct {
	res    Result
	status int   // the target's status; 0 without an answer
	err    error // why it was not delivered; nil when it was
	final  bool  // no other attempt can succeed
	// retryAfter is the forward's Retry-After; pause is how long the whole
	// target waits.
	retryAfter, pause time.Duration
	at                time.Time // when it was delivered
	// took is how long the send ran. header, body and ack are the
	// target's answer: see [transport.Sent].
	took   time.Duration
	header map[string][]string
	body   []byte
	ack    string
}

// output is what the attempt records on its job.
func (p posted) output() queue.Output {
	return queue.Output{Status: p.status, DeliveredAt: p.at, RetryAfter: p.retryAfter.Seconds(), Ack: p.ack}
}

// cause is why an attempt was made: a store.Cause constant, River's
// attempt number and who asked for a redelivery.
type cause struct {
	why     string
	attempt int
	actor   string
	jobID   int64
}

// causeOf is the cause of job's attempt under way.
func causeOf(job queue.Job) cause {
	c := cause{why: store.CauseFirst, attempt: job.Attempt, actor: job.By, jobID: job.ID}
	switch {
	case job.TakenOver:
		c.why = store.CauseTakeover
	case job.Attempt > 1:
		c.why = store.CauseRetry
	case job.By != "":
		c.why = store.CauseRedelivery
	}
	return c
}

// outcome is the outcome recorded for an attempt that went as p, or ""
// when it had none to record.
func (p posted) outcome() string {
	switch {
	case p.res == ResultDelivered:
		return "delivered"
	case p.final:
		return "failed"
	default:
		return "retry"
	}
}

// answer is the attempt's record: when and how it went, why it was made,
// and the target's answer, as [keptAnswer] keeps it.
func (p posted) answer(t *config.Target, a queue.Args, started time.Time, c cause) store.Attempt {
	h, body := keptAnswer(t, p.header, p.body)
	return store.Attempt{Sender: a.Sender, EventID: a.EventID, Target: a.Target, StartedAt: started, Took: p.took,
		Outcome: p.outcome(), Cause: c.why, Attempt: c.attempt, Actor: c.actor, JobID: c.jobID,
		Status: p.status, Ack: p.ack, Error: errText(p.err), Header: h, Body: body}
}

// Bounds of an answer's headers as an attempt keeps them.
const (
	maxKeptHeaderBytes = 8 << 10 // names and values together
	maxKeptHeaderValue = 1 << 10 // each value, cut with "…"
)

// keptAnswer is the target's answer as an attempt keeps it. Headers whose
// name may carry a credential are masked. What the answer echoes of the
// target's own secrets (its URL's user, query and secret path, its
// credential-like headers, its signing secret) is masked in the other
// headers and in the body. The headers, in name order, are kept up to
// 8 KiB, each value up to 1 KiB.
func keptAnswer(t *config.Target, h map[string][]string, body []byte) (map[string][]string, []byte) {
	var secrets []string
	if t != nil {
		secrets = t.AnswerSecrets()
	}
	if len(secrets) > 0 && len(body) > 0 {
		if b := redact.Text(string(body), secrets...); b != string(body) {
			body = []byte(b)
		}
	}
	if len(h) == 0 {
		return nil, body
	}
	out := make(map[string][]string, len(h))
	left := maxKeptHeaderBytes
	for _, k := range slices.Sorted(maps.Keys(h)) {
		vs := h[k]
		if redact.CredentialHeader(k) {
			vs = []string{redact.Mask}
		}
		for _, v := range vs {
			if len(v) > maxKeptHeaderValue {
				v = strings.ToValidUTF8(v[:maxKeptHeaderValue], "") + "…"
			}
			v = redact.Text(v, secrets...)
			if left -= len(k) + len(v); left < 0 {
				return out, body
			}
			out[k] = append(out[k], v)
		}
	}
	return out, body
}

// recordAttempt records an attempt of River's worker with its answer, and
// keeps the forward's newest attempts only. A failure is only logged.
func (w *Worker) recordAttempt(ctx context.Context, job queue.Job, a store.Attempt) {
	w.attempts.add(ctx, a)
}

// post sends the event to t once through the worker's transport, as t's
// transform, if any, makes it ([transform]; an error fails the forward at
// once). It counts the attempt and maps the verdict to the gate's [Result]. The
// queue's worker and the fast path both attempt through it. A positive
// limit bounds the attempt; see [transport.Message.Limit]. parsed, when not
// nil, is body as a filter parsed it.
func (w *Worker) post(ctx context.Context, t *config.Target, a queue.Args, eventType string, headers map[string][]string, body []byte, parsed *rules.Parsed, limit time.Duration) posted {
	m := transport.Message{Sender: a.Sender, Target: t, EventID: a.EventID, DeliveryID: a.DeliveryID, EventType: eventType, Headers: headers, Body: body, Limit: limit}
	series := w.metrics.series(a.Sender, a.Target)
	if t.Transform != nil {
		var err error
		if m, err = transform(m, t, parsed, w.maxTransformed(a.Sender)); err != nil {
			// It would fail again: the forward fails at once, and the
			// target, never reached, is not judged by it.
			w.metrics.ruleErrors.Inc(a.Sender, a.Target, RuleTransform)
			series.failed.Inc()
			return posted{res: ResultNone, err: err, final: true}
		}
	}
	s := w.transport.Send(ctx, m)
	ans := posted{took: s.Took, header: s.Header, body: s.Body, ack: s.Ack, status: s.Status}
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
		ans.res, ans.at = ResultDelivered, at
		return ans
	case transport.VerdictRetry:
		series.retry.Inc()
		var pause time.Duration
		if s.PausesTarget {
			pause = min(s.RetryAfter, w.retryAfterMax) // the whole target waits, not just this forward
		}
		ans.res, ans.err, ans.retryAfter, ans.pause = ResultRetryable, s.Err, s.RetryAfter, pause
		return ans
	case transport.VerdictFailed:
		series.failed.Inc()
		res := ResultOther // the target answered: the forward's own problem
		if s.Status == 0 { // never sent: nothing to judge the target by
			res = ResultNone
		}
		ans.res, ans.err, ans.final = res, s.Err, true
		return ans
	default: // cut short: the worker is stopping, not the target failing
		series.retry.Inc()
		ans.res, ans.err = ResultNone, s.Err
		return ans
	}
}

// record stores the attempt's status and Retry-After on the job, where
// operators read them. A failure is only logged.
func (w *Worker) record(ctx context.Context, job queue.Job, out queue.Output) {
	out.Attempt = job.Attempt
	if err := queue.RecordOutput(ctx, out); err != nil {
		w.log.Warn("record forward output", "job_id", job.ID, "err", err)
	}
}
