package forward

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/store"
)

// Defaults of the per-target guard.
const (
	// DefaultProbeInterval is the first wait of an open breaker before it
	// lets a few probes through. It doubles after each failed round, up to
	// a few seconds, so delivery resumes soon after a target returns.
	DefaultProbeInterval = time.Second
	maxProbeInterval     = 3 * time.Second
	// DefaultBreakerWindow is the time over which a target's failure rate
	// is measured. The breaker opens when breakerRate of the attempts
	// failed, at least breaker_threshold of them, for half the window. A
	// flaky burst does not open it; a target that is down does.
	DefaultBreakerWindow = 10 * time.Second
	breakerRate          = 0.8
	// breakerProbes is how many forwards one round of probes lets through.
	// Forwards already attempted go first.
	breakerProbes = 3
	// maxBreakerWait bounds the snooze of a forward held by an open
	// breaker. A closing breaker wakes its forwards sooner.
	maxBreakerWait = 30 * time.Second
	// wakeTimeout bounds the wake of a target's forwards when its breaker
	// closes.
	wakeTimeout = 10 * time.Second
	// busySnooze is about how long a forward waits when its target is at
	// its limit and nothing better is known.
	busySnooze    = 500 * time.Millisecond
	minBusySnooze = 100 * time.Millisecond
	maxBusySnooze = 5 * time.Second
)

// BreakerConfig tunes the circuit breakers. A zero field is refused, not
// defaulted; [DefaultBreakerConfig] has the defaults.
type BreakerConfig struct {
	// Probe is the first wait of an open breaker before its probes. It
	// doubles after a failed round, up to MaxProbe.
	Probe time.Duration
	// MaxProbe is the longest wait between rounds of probes. Zero means 3s.
	MaxProbe time.Duration
	// Window is the time over which the failure rate is measured, at least
	// 10ms.
	Window time.Duration
}

// DefaultBreakerConfig returns the breakers' defaults.
func DefaultBreakerConfig() BreakerConfig {
	return BreakerConfig{Probe: DefaultProbeInterval, Window: DefaultBreakerWindow}
}

// validate returns an error naming the field at fault, or nil.
func (c BreakerConfig) validate() error {
	if c.Probe <= 0 {
		return fmt.Errorf("breaker config: Probe %s: must be positive", c.Probe)
	}
	if c.MaxProbe < 0 {
		return fmt.Errorf("breaker config: MaxProbe %s: must not be negative", c.MaxProbe)
	}
	if c.Window < windowBuckets*time.Millisecond {
		return fmt.Errorf("breaker config: Window %s: must be at least %s", c.Window, windowBuckets*time.Millisecond)
	}
	return nil
}

// guards keeps what a process knows of each target: the forwards under
// way, the circuit breaker, and a pause the target asked for. Each process
// has its own, so its breaker opens on the failures it sees. The last
// transition is recorded in target_breakers for operators.
type guards struct {
	db    *pgxpool.Pool
	log   *slog.Logger
	probe time.Duration
	// maxProbe bounds the wait between rounds of probes.
	maxProbe time.Duration
	window   time.Duration
	now      func() time.Time
	metrics  *Metrics
	// wake makes the waiting forwards of a target whose breaker closed
	// available now. When nil, they wait for their snooze to end.
	wake func(ctx context.Context, sender, target string) error
	// process names this process in the breakers' history.
	process string
	// pauses are the operators' pauses, asked first. nil means none.
	pauses *Pauses
	// released, when set, is called without locks after each attempt,
	// since a slot may have come free.
	released atomic.Pointer[func()]

	mu sync.Mutex
	m  map[[2]string]*guard
	// current is the configuration reconfigure applied last, under mu. A
	// new guard takes its target's settings from it.
	current *config.Config

	fair fair
}

// guard is one target's state in this process.
type guard struct {
	sender, target string
	threshold      int
	limit          int

	mu           sync.Mutex
	running      int
	win          window
	failingSince time.Time // since when the failure rate is at least breakerRate; zero when below
	state        string
	openedAt     time.Time
	nextProbe    time.Time // when the next round of probes may start
	probeWait    time.Duration
	lastErr      string // the failure that opened the breaker, or failed its last round of probes
	probes       int    // probes let through in this round
	probing      int    // probes under way
	reserved     int    // waiting forwards told to come back for the next round
	pausedUntil  time.Time
	// pauseShown is the end of the last pause recorded for operators.
	pauseShown time.Time
	epoch      time.Time     // when the guard was made
	startSum   time.Duration // sum of the start times of the attempts under way, from epoch
	latency    time.Duration // moving average of the time its attempts take

	// share is the target's use of the capacity, under fair.mu.
	share share

	// pending are the transitions not yet written, in order, under mu.
	// Writes hold recMu, so an older transition never lands after a newer.
	pending []transition
	seq     int64
	recMu   sync.Mutex
}

// transition is a breaker transition to record.
type transition struct {
	seq         int64
	at          time.Time
	from, state string
	openedAt    time.Time
	errText     string // the failure that opened it ("" when closed)
	reason      string
}

// maxPendingTransitions bounds the transitions kept while the database is
// down. Past it the oldest are dropped.
const maxPendingTransitions = 256

// transit moves gd's breaker to state and queues the transition to be
// recorded. Under gd.mu.
func (gd *guard) transit(now time.Time, state, reason, errText string) {
	from := gd.state
	gd.state = state
	if state == BreakerClosed {
		errText = ""
	}
	gd.seq++
	gd.pending = append(gd.pending, transition{seq: gd.seq, at: now, from: from, state: state,
		openedAt: gd.openedAt, errText: errText, reason: reason})
	if n := len(gd.pending) - maxPendingTransitions; n > 0 {
		gd.pending = append(gd.pending[:0], gd.pending[n:]...)
	}
}

// window counts a target's attempts and failures over a sliding window.
type window struct {
	b [windowBuckets]bucket
}

const windowBuckets = 10

type bucket struct {
	slot            int64
	attempts, fails int
}

func (w *window) add(slot int64, failed bool) {
	b := &w.b[slot%windowBuckets]
	if b.slot != slot {
		*b = bucket{slot: slot}
	}
	b.attempts++
	if failed {
		b.fails++
	}
}

func (w *window) counts(slot int64) (attempts, fails int) {
	for _, b := range w.b {
		if b.slot <= slot && slot-b.slot < windowBuckets {
			attempts += b.attempts
			fails += b.fails
		}
	}
	return attempts, fails
}

// newGuards returns the guards of a process. bc must be valid.
func newGuards(db *pgxpool.Pool, capacity int, bc BreakerConfig, m *Metrics, log *slog.Logger) *guards {
	return &guards{db: db, log: log, process: processName(),
		probe: bc.Probe, maxProbe: max(cmp.Or(bc.MaxProbe, maxProbeInterval), bc.Probe), window: bc.Window,
		now: time.Now, metrics: m, m: map[[2]string]*guard{}, fair: newFair(capacity)}
}

// processName names this process in the breakers' history: host/pid.
func processName() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	return host + "/" + strconv.Itoa(os.Getpid())
}

// get returns the guard of t, a target of sender.
func (g *guards) get(sender string, t *config.Target) *guard {
	k := [2]string{sender, t.Name}
	g.mu.Lock()
	defer g.mu.Unlock()
	gd, ok := g.m[k]
	if !ok {
		if cur, ok := g.current.Target(sender, t.Name); ok {
			t = cur
		}
		gd = &guard{sender: sender, target: t.Name, state: BreakerClosed, epoch: g.now()}
		gd.configure(t, g.fair.capacity)
		g.m[k] = gd
		g.fair.add(&gd.share)
	}
	return gd
}

// configure sets gd's limits from t's max_in_flight and breaker_threshold.
// Under gd.mu, or before gd is shared.
func (gd *guard) configure(t *config.Target, capacity int) {
	gd.limit = t.MaxInFlight
	if gd.limit <= 0 {
		gd.limit = capacity // only the fair share limits it
	}
	gd.threshold = max(t.BreakerThreshold, 1)
}

// reconfigure makes the guards follow a reloaded configuration from their
// next admission. A guard whose target is gone keeps its state.
func (g *guards) reconfigure(cfg *config.Config) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.current = cfg
	for k, gd := range g.m {
		if t, ok := cfg.Target(k[0], k[1]); ok {
			gd.mu.Lock()
			gd.configure(t, g.fair.capacity)
			gd.mu.Unlock()
		}
	}
}

// slot is the window bucket of t.
func (g *guards) slot(t time.Time) int64 {
	return t.UnixNano() / int64(max(g.window/windowBuckets, time.Millisecond))
}

// admission is the outcome of enter.
type admission struct {
	ok    bool
	probe bool          // the forward is one of the breaker's probes
	wait  time.Duration // when !ok: snooze this long
	why   string        // when !ok: operator, breaker, paused or busy
	start time.Time     // when ok: when it was admitted
}

// enter decides whether a forward to gd's target may go now. When it may,
// the caller must call leave once the attempt is over.
func (g *guards) enter(gd *guard, tried bool) admission {
	a, probing := g.admit(gd, tried, false)
	if probing { // the first probe of a round: open → half-open
		g.record(context.Background(), gd)
	}
	return a
}

// admit is enter under gd.mu. probing reports that a round of probes
// began. noProbe refuses while the breaker is not closed, so that nothing
// needs recording.
func (g *guards) admit(gd *guard, tried, noProbe bool) (_ admission, probing bool) {
	now := g.now()
	if wait, held := g.pauses.heldFor(gd.sender, gd.target, now); held {
		return admission{wait: wait, why: WaitOperator}, false
	}
	gd.mu.Lock()
	defer gd.mu.Unlock()
	if now.Before(gd.pausedUntil) {
		return admission{wait: jitter(gd.pausedUntil.Sub(now)), why: "paused"}, false
	}
	probe := false
	if gd.state != BreakerClosed {
		if noProbe || now.Before(gd.nextProbe) || gd.probes >= min(breakerProbes, gd.limit) {
			return admission{wait: gd.waiting(now), why: "breaker"}, false
		}
		// A first attempt probes only after the round waited for a retry.
		if grace := gd.nextProbe.Add(gd.probeWait / 2); !tried && now.Before(grace) {
			return admission{wait: jitter(min(grace.Sub(now), busySnooze)), why: "breaker"}, false
		}
		probe = true
	}
	if gd.running >= gd.limit || !g.fair.acquire(&gd.share, now, gd.quick(now)) {
		return admission{wait: gd.busyWait(now), why: "busy"}, false
	}
	if probe {
		gd.probes++
		gd.probing++
		if gd.state != BreakerHalfOpen {
			probing = true
			gd.transit(now, BreakerHalfOpen, fmt.Sprintf("probing: up to %d forwards let through", min(breakerProbes, gd.limit)), gd.lastErr)
		}
	}
	gd.running++
	gd.startSum += now.Sub(gd.epoch)
	return admission{ok: true, probe: probe, start: now}, probing
}

// quick reports whether gd's attempts, done and under way, take less than
// quickLatency on average. Under gd.mu.
func (gd *guard) quick(now time.Time) bool {
	if gd.latency <= 0 || gd.latency >= quickLatency {
		return false
	}
	return gd.running == 0 || now.Sub(gd.epoch)-gd.startSum/time.Duration(gd.running) < quickLatency
}

// busyWait returns how long a forward waits when its target is at its
// limit: about as long as its attempts take. Under gd.mu.
func (gd *guard) busyWait(now time.Time) time.Duration {
	d := gd.latency
	if gd.running > 0 {
		d = max(d, now.Sub(gd.epoch)-gd.startSum/time.Duration(gd.running))
	}
	if d <= 0 {
		d = busySnooze
	}
	return jitter(min(max(d, minBusySnooze), maxBusySnooze))
}

// waiting returns how long a forward held by an open breaker waits. A few
// come back for the next probes; the others wait longer. Under gd.mu.
func (gd *guard) waiting(now time.Time) time.Duration {
	if gd.reserved < breakerProbes {
		gd.reserved++
		return jitter(max(gd.nextProbe.Sub(now), 10*time.Millisecond))
	}
	return jitter(min(max(now.Sub(gd.openedAt), gd.probeWait), maxBreakerWait))
}

// Result is how an attempt went, for the gate.
type Result int

const (
	ResultNone      Result = iota // no answer from the target to judge it by
	ResultDelivered               // 2xx
	ResultRetryable               // connection error, timeout, 408, 429, 5xx
	ResultOther                   // any other answer: the forward's own problem
)

// leave records the attempt's outcome. A positive retryFor pauses the
// target. After a failed probe it returns how long the forward waits for
// the next round; otherwise 0.
func (g *guards) leave(ctx context.Context, gd *guard, a admission, res Result, retryFor time.Duration, errText string) (snooze time.Duration) {
	now := g.now()
	slot := g.slot(now)
	gd.mu.Lock()
	gd.running--
	gd.startSum -= a.start.Sub(gd.epoch)
	g.fair.release(&gd.share)
	if res != ResultNone {
		took := max(now.Sub(a.start), 0)
		if gd.latency == 0 {
			gd.latency = took
		} else {
			gd.latency += (took - gd.latency) / 8
		}
	}
	if a.probe {
		gd.probing--
	}
	var showPause time.Time // a pause to record for operators (recordPause)
	if retryFor > 0 {
		gd.pausedUntil = now.Add(retryFor)
		if gd.pausedUntil.Sub(gd.pauseShown) > pauseShownSlack {
			gd.pauseShown, showPause = gd.pausedUntil, gd.pausedUntil
		}
	}
	changed := ""
	switch res {
	case ResultNone: // no verdict: the probe's place goes to another forward
		if a.probe {
			gd.probes--
		}
	case ResultDelivered, ResultOther: // the target answers: it is alive
		gd.win.add(slot, false)
		gd.rate(slot, now)
		if gd.state != BreakerClosed {
			how := "a probe was answered"
			if !a.probe {
				how = "an attempt was answered"
			}
			if res == ResultDelivered {
				how += " (delivered)"
			} else {
				how += " (not 2xx, not to be retried: the target is up)"
			}
			gd.transit(now, BreakerClosed, how, "")
			gd.probes, gd.reserved = 0, 0
			gd.win, gd.failingSince = window{}, time.Time{}
			changed = BreakerClosed
		}
	case ResultRetryable:
		gd.win.add(slot, true)
		failing := gd.rate(slot, now)
		switch {
		case gd.state == BreakerClosed && failing && now.Sub(gd.failingSince) >= g.window/2:
			attempts, fails := gd.win.counts(slot)
			gd.openedAt = now
			gd.lastErr = errText
			gd.transit(now, BreakerOpen, fmt.Sprintf("%d of %d attempts failed in %s, for %s: %s",
				fails, attempts, g.window, now.Sub(gd.failingSince).Round(time.Millisecond), errText), errText)
			gd.probeWait = g.probe
			gd.nextProbe = now.Add(gd.probeWait)
			gd.probes, gd.reserved = 0, 0
			changed = BreakerOpen
		case a.probe:
			if gd.probing == 0 { // the round is over and no probe succeeded
				gd.probeWait = min(gd.probeWait*2, g.maxProbe)
				gd.nextProbe = now.Add(gd.probeWait)
				gd.probes, gd.reserved = 0, 0
				if gd.state != BreakerOpen {
					gd.lastErr = errText
					gd.transit(now, BreakerOpen, fmt.Sprintf("no probe was answered: %s; next probes in %s", errText, gd.probeWait), errText)
					changed = BreakerOpen
				}
			}
			snooze = jitter(max(gd.nextProbe.Sub(now), gd.probeWait))
		}
	}
	gd.mu.Unlock()
	if f := g.released.Load(); f != nil {
		(*f)()
	}
	if changed != "" {
		g.record(ctx, gd)
	}
	if !showPause.IsZero() {
		g.recordPause(ctx, gd, showPause, retryFor, errText)
	}
	if changed == BreakerClosed && g.wake != nil {
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), wakeTimeout)
		defer cancel()
		if err := g.wake(wctx, gd.sender, gd.target); err != nil && g.log != nil {
			g.log.Warn("wake forwards of a target whose breaker closed; they come back when their wait ends",
				"sender", gd.sender, "target", gd.target, "err", err)
		}
	}
	return snooze
}

// rate updates failingSince and reports whether the breaker may open.
// Under gd.mu.
func (gd *guard) rate(slot int64, now time.Time) bool {
	attempts, fails := gd.win.counts(slot)
	if attempts == 0 || float64(fails) < breakerRate*float64(attempts) {
		gd.failingSince = time.Time{}
		return false
	}
	if gd.failingSince.IsZero() {
		gd.failingSince = now
	}
	return fails >= gd.threshold
}

// record writes gd's pending breaker transitions in one transaction, in
// the order they happened. The latest also goes to the metrics. A failed
// write is logged, and its transitions are kept for the next.
func (g *guards) record(ctx context.Context, gd *guard) {
	gd.recMu.Lock()
	defer gd.recMu.Unlock()
	gd.mu.Lock()
	trs := gd.pending
	gd.pending = nil
	gd.mu.Unlock()
	if len(trs) == 0 {
		return // a write that started after these transitions has written them
	}
	last := trs[len(trs)-1]
	state, openedAt, errText := last.state, last.openedAt, last.errText
	open := 0.0
	if state != BreakerClosed {
		open = 1
		g.metrics.breakerOpened.WithLabelValues(gd.sender, gd.target).Set(float64(openedAt.Unix()))
	}
	g.metrics.breakerOpen.WithLabelValues(gd.sender, gd.target).Set(open)
	var opened *time.Time
	if state != BreakerClosed {
		opened = &openedAt
	}
	if g.log != nil {
		for _, tr := range trs {
			g.log.Info("forward target circuit breaker", "sender", gd.sender, "target", gd.target, "from", tr.from, "state", tr.state, "reason", tr.reason)
		}
	}
	if g.db == nil {
		return
	}
	out := make([]store.BreakerTransition, len(trs))
	for i, tr := range trs {
		out[i] = store.BreakerTransition{At: tr.at, Process: g.process, Seq: tr.seq, From: tr.from, State: tr.state, Reason: tr.reason}
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err := store.New(g.db).RecordBreakerTransitions(ctx, gd.sender, gd.target, out, opened, errText)
	if err != nil {
		if g.log != nil {
			g.log.Warn("record circuit breaker transitions; kept for the next write", "sender", gd.sender, "target", gd.target, "err", err)
		}
		gd.mu.Lock()
		gd.pending = append(trs, gd.pending...)
		if n := len(gd.pending) - maxPendingTransitions; n > 0 {
			gd.pending = append(gd.pending[:0], gd.pending[n:]...)
		}
		gd.mu.Unlock()
	}
}

// pauseShownSlack is how much later a pause must end to be recorded
// again. One pause's answers are then written once.
const pauseShownSlack = time.Second

// recordPause records for operators that gd's target is paused until
// until. A failed write is only logged.
func (g *guards) recordPause(ctx context.Context, gd *guard, until time.Time, retryFor time.Duration, errText string) {
	if g.log != nil {
		g.log.Info("forward target paused by its Retry-After", "sender", gd.sender, "target", gd.target, "until", until, "retry_after", retryFor)
	}
	if g.db == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	reason := errText // "target answered 503, Retry-After 30s"
	if !strings.Contains(reason, "Retry-After") {
		reason = strings.TrimPrefix(reason+", ", ", ") + fmt.Sprintf("Retry-After %s", retryFor.Round(time.Millisecond))
	}
	if err := store.New(g.db).RecordPause(ctx, gd.sender, gd.target, until, reason); err != nil && g.log != nil {
		g.log.Warn("record a target's pause; the pause holds its forwards all the same", "sender", gd.sender, "target", gd.target, "err", err)
	}
}

// jitter returns d plus up to half of it at random, at least 10ms.
func jitter(d time.Duration) time.Duration {
	d = max(d, 10*time.Millisecond)
	return d + rand.N(d/2+1)
}
