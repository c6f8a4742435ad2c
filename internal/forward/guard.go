package forward

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/config"
)

// Defaults of the per-target guard.
const (
	// DefaultProbeInterval is the first wait of an open breaker before it
	// lets one forward through as a probe; it doubles after each failed
	// probe, up to maxProbeInterval.
	DefaultProbeInterval = 5 * time.Second
	maxProbeInterval     = 5 * time.Minute
	// busySnooze is about how long a forward waits when its target already
	// has max_in_flight forwards under way in this process.
	busySnooze = 500 * time.Millisecond
)

// guards keeps, per target, what a worker process knows of it: how many of
// its forwards run now (at most max_in_flight), its circuit breaker, and a
// pause a 429 or 503 with Retry-After asked for. Each worker process has its
// own: max_in_flight holds per process, and each process's breaker opens on
// the failures it sees itself (the last transition is recorded in
// target_breakers for the operator API).
type guards struct {
	// share is the default max_in_flight: half of the process's workers.
	share   int
	db      *pgxpool.Pool
	log     *slog.Logger
	probe   time.Duration
	now     func() time.Time
	metrics *Metrics

	mu sync.Mutex
	m  map[[2]string]*guard
}

// guard is one target's state in this process.
type guard struct {
	sender, target string
	threshold      int
	limit          int

	mu          sync.Mutex
	running     int
	failures    int // consecutive retryable failures
	state       string
	openedAt    time.Time
	nextProbe   time.Time
	probeWait   time.Duration
	probing     bool
	pausedUntil time.Time

	// rec is the last transition, under mu: gen counts transitions, and
	// recorded (under recMu) is the gen last written out. Writes take recMu
	// and write the latest transition, so a slow write of an older one can
	// never land after a newer one.
	rec      transition
	recMu    sync.Mutex
	recorded uint64
}

// transition is a breaker transition to record.
type transition struct {
	gen      uint64
	state    string
	openedAt time.Time
	errText  string
}

func newGuards(db *pgxpool.Pool, workers int, probe time.Duration, m *Metrics, log *slog.Logger) *guards {
	if probe <= 0 {
		probe = DefaultProbeInterval
	}
	return &guards{share: max(workers/2, 1), db: db, log: log, probe: probe, now: time.Now, metrics: m, m: map[[2]string]*guard{}}
}

// get returns the guard of t, a target of sender.
func (g *guards) get(sender string, t *config.Target) *guard {
	k := [2]string{sender, t.Name}
	g.mu.Lock()
	defer g.mu.Unlock()
	gd, ok := g.m[k]
	if !ok {
		limit := t.MaxInFlight
		if limit <= 0 {
			limit = g.share
		}
		gd = &guard{sender: sender, target: t.Name, state: BreakerClosed,
			threshold: max(t.BreakerThreshold, 1), limit: limit}
		g.m[k] = gd
	}
	return gd
}

// admission is the outcome of enter.
type admission struct {
	ok    bool
	probe bool          // the forward is the breaker's probe
	wait  time.Duration // when !ok: snooze this long
	why   string        // when !ok: breaker, paused or busy
}

// enter decides whether a forward to gd's target may go now. When it may,
// the caller must call leave once the attempt is over.
func (g *guards) enter(gd *guard) admission {
	now := g.now()
	gd.mu.Lock()
	defer gd.mu.Unlock()
	if now.Before(gd.pausedUntil) {
		return admission{wait: jitter(gd.pausedUntil.Sub(now)), why: "paused"}
	}
	probe := false
	if gd.state != BreakerClosed {
		if gd.probing || now.Before(gd.nextProbe) {
			return admission{wait: jitter(max(gd.nextProbe.Sub(now), busySnooze)), why: "breaker"}
		}
		gd.probing, probe = true, true
		gd.state = BreakerHalfOpen
	}
	if gd.running >= gd.limit {
		if probe {
			gd.probing = false
			gd.state = BreakerOpen
		}
		return admission{wait: jitter(busySnooze), why: "busy"}
	}
	gd.running++
	return admission{ok: true, probe: probe}
}

// result is how an attempt went, for the guard.
type result int

const (
	resultNone      result = iota // no answer from the target to judge it by
	resultDelivered               // 2xx
	resultRetryable               // connection error, timeout, 408, 429, 5xx
	resultOther                   // any other answer: the forward's own problem
)

// leave records the attempt's outcome: retryFor > 0 pauses the target (a 429
// or 503 with Retry-After). When the attempt was a probe that failed it
// returns how long the forward should wait for the next probe (the caller
// snoozes it rather than use its attempt); otherwise 0.
func (g *guards) leave(ctx context.Context, gd *guard, a admission, res result, retryFor time.Duration, errText string) (snooze time.Duration) {
	now := g.now()
	gd.mu.Lock()
	gd.running--
	if retryFor > 0 {
		gd.pausedUntil = now.Add(retryFor)
	}
	changed := ""
	switch res {
	case resultNone:
		if a.probe { // no verdict: let the next forward probe
			gd.probing = false
			gd.state = BreakerOpen
		}
	case resultDelivered, resultOther:
		gd.failures = 0
		if gd.state != BreakerClosed && (a.probe || res == resultDelivered) {
			gd.state, gd.probing, gd.probeWait = BreakerClosed, false, 0
			changed = BreakerClosed
		}
	case resultRetryable:
		gd.failures++
		switch {
		case a.probe:
			gd.probing = false
			gd.state = BreakerOpen
			gd.probeWait = min(gd.probeWait*2, maxProbeInterval)
			gd.nextProbe = now.Add(gd.probeWait)
			snooze = jitter(gd.probeWait)
			changed = BreakerOpen
		case gd.state == BreakerClosed && gd.failures >= gd.threshold:
			gd.state, gd.openedAt = BreakerOpen, now
			gd.probeWait = g.probe
			gd.nextProbe = now.Add(gd.probeWait)
			changed = BreakerOpen
		}
	}
	if changed != "" {
		if changed == BreakerClosed {
			errText = ""
		}
		gd.rec = transition{gen: gd.rec.gen + 1, state: changed, openedAt: gd.openedAt, errText: errText}
	}
	gd.mu.Unlock()
	if changed != "" {
		g.record(ctx, gd)
	}
	return snooze
}

// record exports gd's latest breaker transition as metrics and into
// target_breakers, unless it is written already. Writes are serialised per
// target and each writes the latest transition at the time it runs, so the
// last write is always the breaker's latest state, whatever order the
// attempts that caused the transitions end in. A failed write is logged:
// the breaker works without it.
func (g *guards) record(ctx context.Context, gd *guard) {
	gd.recMu.Lock()
	defer gd.recMu.Unlock()
	gd.mu.Lock()
	tr := gd.rec
	gd.mu.Unlock()
	if tr.gen == gd.recorded {
		return // a write that started after this transition has written it
	}
	gd.recorded = tr.gen
	state, openedAt, errText := tr.state, tr.openedAt, tr.errText
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
		g.log.Info("forward target circuit breaker", "sender", gd.sender, "target", gd.target, "state", state, "last_error", errText)
	}
	if g.db == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_, err := g.db.Exec(ctx, `INSERT INTO target_breakers (sender, target, state, opened_at, updated_at, last_error)
VALUES ($1, $2, $3, $4, now(), $5)
ON CONFLICT ON CONSTRAINT target_breakers_pkey DO UPDATE
SET state = excluded.state, opened_at = excluded.opened_at, updated_at = excluded.updated_at, last_error = excluded.last_error`,
		gd.sender, gd.target, state, opened, errText)
	if err != nil && g.log != nil {
		g.log.Warn("record circuit breaker state", "sender", gd.sender, "target", gd.target, "err", err)
	}
}

// jitter returns d plus up to half of it at random, at least 10ms, so that
// waiting forwards do not come back all at once.
func jitter(d time.Duration) time.Duration {
	d = max(d, 10*time.Millisecond)
	return d + rand.N(d/2+1)
}
