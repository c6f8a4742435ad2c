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

// Gate admits one process's forwards to their targets. It holds back a
// target an operator paused, whose breaker is open, or that asked for a
// pause. It gives each target a fair share of the process's capacity, at
// most its max_in_flight. The queue's worker and the fast path share one
// Gate, so these limits hold across both. A caller calls [Gate.Acquire]
// before a send and [Ticket.Done] after.
type Gate struct {
	g *guards
}

// DefaultGateCapacity is a Gate's default capacity. It equals the queue's
// default number of workers.
const DefaultGateCapacity = queue.DefaultMaxWorkers

// GateConfig configures a [Gate]. A zero setting is refused, not
// defaulted; [DefaultGateConfig] has the defaults. Metrics and Log are
// required.
type GateConfig struct {
	// Capacity is how many forwards the process sends at once, at least 1.
	// It equals the queue's number of workers.
	Capacity int
	// Breakers tunes the circuit breakers.
	Breakers BreakerConfig

	// DB is where breaker transitions are recorded. When nil, they are
	// only logged.
	DB *pgxpool.Pool
	// Jobs wakes the forwards waiting for a breaker that closes. When nil,
	// they come back when their wait ends.
	Jobs Waker
	// Metrics shows the breakers' states. It is the Worker's.
	Metrics *Metrics
	// Log receives breaker transitions and failures to record them.
	Log *slog.Logger
	// Now is the breakers' clock; nil means [time.Now].
	Now func() time.Time
	// Pauses are the operators' pauses. When nil, no target is paused.
	Pauses *Pauses
}

// DefaultGateConfig returns the gate's defaults, without dependencies.
func DefaultGateConfig() GateConfig {
	return GateConfig{Capacity: DefaultGateCapacity, Breakers: DefaultBreakerConfig()}
}

// validate returns an error naming the field at fault, or nil.
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

// NewGate returns the gate of a process. It returns an error naming the
// field when cfg is invalid.
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

// Reconfigure makes the gate follow a reloaded configuration. The new
// limits apply from each target's next admission; the breakers' state
// stays.
func (g *Gate) Reconfigure(cfg *config.Config) { g.g.reconfigure(cfg) }

// Ticket is an admitted forward: call Done once its attempt is over.
type Ticket struct {
	g  *guards
	gd *guard
	a  admission
}

// Probe reports whether the forward is one of its target's breaker probes.
func (tk Ticket) Probe() bool { return tk.a.probe }

// Acquire asks whether a forward to t may be sent now. tried says whether
// it was sent before: an open breaker probes with those first. When it may
// not, wait is about how long to wait. why is "operator", "breaker",
// "paused" or "busy".
func (g *Gate) Acquire(sender string, t *config.Target, tried bool) (tk Ticket, ok bool, wait time.Duration, why string) {
	gd := g.g.get(sender, t)
	a := g.g.enter(gd, tried)
	if !a.ok {
		return Ticket{}, false, a.wait, a.why
	}
	return Ticket{g: g.g, gd: gd, a: a}, true, 0, ""
}

// AcquireFirst is [Gate.Acquire] for a first attempt that should not probe.
// It refuses while the breaker is not closed, and starts no probes. So it
// never writes to the database and never blocks.
func (g *Gate) AcquireFirst(sender string, t *config.Target) (tk Ticket, ok bool, wait time.Duration, why string) {
	gd := g.g.get(sender, t)
	a, _ := g.g.admit(gd, false, true)
	if !a.ok {
		return Ticket{}, false, a.wait, a.why
	}
	return Ticket{g: g.g, gd: gd, a: a}, true, 0, ""
}

// HeldBack reports whether t's forwards are held back now, whatever the
// load. why is "operator", "paused" or "breaker".
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

// Quick reports whether t's attempts end quickly. The fast path shares its
// workers by the same rule as the gate.
func (g *Gate) Quick(sender string, t *config.Target) bool {
	gd := g.g.get(sender, t)
	now := g.g.now()
	gd.mu.Lock()
	defer gd.mu.Unlock()
	return gd.quick(now)
}

// OnRelease makes f be called without locks after each [Ticket.Done], since
// a slot may have come free. f must not block; a later call replaces it.
func (g *Gate) OnRelease(f func()) { g.g.released.Store(&f) }

// Done records the outcome of the ticket's attempt. A positive retryFor
// pauses the target. errText is the failure, without URLs. After a failed
// probe it returns how long the forward should wait; otherwise 0.
func (tk Ticket) Done(ctx context.Context, res Result, retryFor time.Duration, errText string) time.Duration {
	return tk.g.leave(ctx, tk.gd, tk.a, res, retryFor, errText)
}
