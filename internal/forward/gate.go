package forward

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/queue"
)

// Gate admits one process's forwards to their targets: none while an
// operator pauses the target (Pauses), a fair share of the process's
// capacity per target (fair.go), each target's max_in_flight, its circuit
// breaker and a pause its Retry-After asked for. Everything in the
// process that sends forwards takes them through one Gate, so these hold
// across all of it: River's worker does (Worker), and so should an
// in-process dispatcher of first attempts, which calls Acquire before it
// sends a forward and Ticket.Done after, and leaves a forward it is not admitted for to
// the relay and River.
type Gate struct {
	g *guards
}

// DefaultGateCapacity is a Gate's capacity by default: the River client's
// default of forwards run at once (queue.DefaultMaxWorkers), which it
// should equal.
const DefaultGateCapacity = queue.DefaultMaxWorkers

// GateConfig configures a Gate (NewGate): its settings and its
// dependencies. Zero means zero (docs/configuration.md): no setting takes
// a default from a 0, and validate refuses one; DefaultGateConfig has the
// defaults. Metrics and Log are required; DB is optional.
type GateConfig struct {
	// Capacity is how many forwards the process sends at once
	// (DefaultGateCapacity), at least 1: the River client's MaxWorkers
	// (queue.ClientConfig), which --forward-workers sets too.
	Capacity int
	// Breakers tunes the circuit breakers (DefaultBreakerConfig).
	Breakers BreakerConfig

	// DB is where breaker transitions are recorded (target_breakers), and
	// the forwards waiting for a breaker that closes are woken; nil (a
	// test of the gate alone): transitions are only logged, and the
	// waiting forwards come back when their wait ends.
	DB *pgxpool.Pool
	// Jobs wakes the forwards waiting for a breaker that closes. When nil,
	// they come back when their wait ends.
	Jobs Waker
	// Metrics shows the breakers' states (the Worker's: NewMetrics).
	Metrics *Metrics
	// Log is where breaker transitions and failures to record them are
	// logged.
	Log *slog.Logger
	// Now is the breakers' clock (time.Now when nil): a test's fixed clock
	// (the console's screenshots) sets it.
	Now func() time.Time
	// Pauses are the operators' pauses (NewPauses): none of a paused
	// target's forwards is admitted, by River's worker or the fast path;
	// nil: no target is ever paused.
	Pauses *Pauses
}

// DefaultGateConfig returns the gate's defaults (and no dependencies: the
// caller gives them).
func DefaultGateConfig() GateConfig {
	return GateConfig{Capacity: DefaultGateCapacity, Breakers: DefaultBreakerConfig()}
}

// validate returns an error naming the field at fault, or nil: the
// settings, and the dependencies NewGate requires.
func (c GateConfig) validate() error {
	var errs []error
	if c.Capacity < 1 {
		errs = append(errs, fmt.Errorf("forward gate config: Capacity %d: must be at least 1", c.Capacity))
	}
	if err := c.Breakers.validate(); err != nil {
		errs = append(errs, err)
	}
	if c.Metrics == nil {
		errs = append(errs, errors.New("forward gate config: Metrics: nil: the forward metrics are required"))
	}
	if c.Log == nil {
		errs = append(errs, errors.New("forward gate config: Log: nil: a logger is required"))
	}
	return errors.Join(errs...)
}

// NewGate returns the gate of a process that sends at most cfg.Capacity
// forwards at once, with breakers tuned by cfg.Breakers, recording their
// transitions in cfg.DB; an error naming the field when cfg is invalid or
// lacks a dependency.
func NewGate(cfg GateConfig) (*Gate, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	g := newGuards(cfg.DB, cfg.Capacity, cfg.Breakers, cfg.Metrics, cfg.Log)
	if cfg.Now != nil {
		g.now = cfg.Now
	}
	g.pauses = cfg.Pauses
	if jobs := cfg.Jobs; jobs != nil {
		g.wake = func(ctx context.Context, sender, target string) error { return wakeWaiting(ctx, jobs, sender, target) }
	}
	return &Gate{g: g}, nil
}

// Reconfigure makes the gate follow cfg, a configuration reloaded: each
// target's max_in_flight and breaker_threshold apply from its next
// admission on (what the breakers know of the targets stays).
func (g *Gate) Reconfigure(cfg *config.Config) { g.g.reconfigure(cfg) }

// Ticket is an admitted forward: call Done once its attempt is over.
type Ticket struct {
	g  *guards
	gd *guard
	a  admission
}

// Probe reports whether the forward is one of its target's breaker probes.
func (tk Ticket) Probe() bool { return tk.a.probe }

// Acquire asks whether a forward to t, a target of sender, may be sent now;
// tried says whether it was sent before (an open breaker probes with those
// first). When it may not, wait is about how long to wait before asking
// again, and why is "operator" (an operator paused the target),
// "breaker", "paused" or "busy".
func (g *Gate) Acquire(sender string, t *config.Target, tried bool) (tk Ticket, ok bool, wait time.Duration, why string) {
	gd := g.g.get(sender, t)
	a := g.g.enter(gd, tried)
	if !a.ok {
		return Ticket{}, false, a.wait, a.why
	}
	return Ticket{g: g.g, gd: gd, a: a}, true, 0, ""
}

// AcquireFirst is Acquire for a forward never attempted that the caller
// would rather leave to River than let probe: while the target's breaker
// is open or probing it is refused ("breaker") and starts no round of
// probes. It therefore never writes to the database and does not block:
// the fast path's dispatcher calls it under its own lock.
func (g *Gate) AcquireFirst(sender string, t *config.Target) (tk Ticket, ok bool, wait time.Duration, why string) {
	gd := g.g.get(sender, t)
	a, _ := g.g.admit(gd, false, true)
	if !a.ok {
		return Ticket{}, false, a.wait, a.why
	}
	return Ticket{g: g.g, gd: gd, a: a}, true, 0, ""
}

// HeldBack reports whether t's forwards are held back now, whatever the
// load, and why: "operator" (an operator paused the target), "paused" (a
// Retry-After) or "breaker" (not closed). Such forwards wait in River
// without using attempts.
func (g *Gate) HeldBack(sender string, t *config.Target) (held bool, why string) {
	gd := g.g.get(sender, t)
	now := g.g.now()
	if _, ok := g.g.pauses.Paused(sender, t.Name, now); ok {
		return true, WaitOperator
	}
	gd.mu.Lock()
	defer gd.mu.Unlock()
	switch {
	case now.Before(gd.pausedUntil):
		return true, "paused"
	case gd.state != BreakerClosed:
		return true, "breaker"
	}
	return false, ""
}

// Quick reports whether t's attempts end quickly (guard.quick): the fast
// path's dispatcher shares its workers with the same rule as the gate.
func (g *Gate) Quick(sender string, t *config.Target) bool {
	gd := g.g.get(sender, t)
	now := g.g.now()
	gd.mu.Lock()
	defer gd.mu.Unlock()
	return gd.quick(now)
}

// OnRelease makes f be called, without locks held, after each attempt's
// Done: a slot of its target's, and of the process's, may have come free.
// f must not block; a later call replaces it.
func (g *Gate) OnRelease(f func()) { g.g.released.Store(&f) }

// Done records the outcome of the ticket's attempt: retryFor > 0 pauses the
// target (a 429 or 503 with Retry-After); errText is the failure, for the
// breaker's record (no URL in it). It returns how long a failed probe's
// forward should wait without using its attempt (0 otherwise).
func (tk Ticket) Done(ctx context.Context, res Result, retryFor time.Duration, errText string) time.Duration {
	return tk.g.leave(ctx, tk.gd, tk.a, res, retryFor, errText)
}
