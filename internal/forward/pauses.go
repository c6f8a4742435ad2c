package forward

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/queue"
	"github.com/hookgate/hookgate/internal/store"
)

// Operator pauses. An operator pauses a target from the API or the
// console, which writes a row of paused_targets. Every process reads that
// table about once a second. While the pause holds, the [Gate] admits none
// of the target's forwards, and no attempt is used. A pause with an end
// stops holding at that end in every process; resume deletes the row.
// When a pause ends, each process that works forwards wakes the target's
// waiting forwards in the order they were accepted, and again a second
// later.

// Defaults of the operator pauses.
const (
	// DefaultPausePoll is how often a process reads the operator pauses.
	DefaultPausePoll = time.Second
	// maxPausedWait bounds the snooze of a forward held by a pause, in case
	// the wake at the pause's end fails.
	maxPausedWait = time.Minute
)

// WaitOperator is the reason given for a forward held by an operator's
// pause, by [Gate.Acquire] and in hookgate_forward_waits_total.
const WaitOperator = "operator"

// PausesConfig configures [Pauses]. DB, Jobs, Senders, Registerer and Log
// are required.
type PausesConfig struct {
	// Every is how often the pauses are read. It must be positive.
	Every time.Duration
	// Wake makes the process wake a target's forwards when its pause ends.
	// Set it in a process that works forwards.
	Wake bool

	// DB is where the pauses are read.
	DB *pgxpool.Pool
	// Jobs wakes the held forwards of a target whose pause ended.
	Jobs Waker
	// Senders are the configured targets, whose gauges start at 0.
	Senders *config.Config
	// Registerer receives hookgate_target_paused.
	Registerer prometheus.Registerer
	// Log receives the pauses seen and ended, and failed reads.
	Log *slog.Logger
	// Now is the clock; nil means [time.Now].
	Now func() time.Time
}

// DefaultPausesConfig returns the defaults, without dependencies.
func DefaultPausesConfig() PausesConfig { return PausesConfig{Every: DefaultPausePoll} }

// validate returns an error naming the fields at fault, or nil.
func (c PausesConfig) validate() error {
	var errs []error
	if c.Every <= 0 {
		errs = append(errs, fmt.Errorf("pauses config: Every %s: must be positive", c.Every))
	}
	for _, d := range []struct {
		name, what string
		missing    bool
	}{
		{"DB", "the database of the pauses", c.DB == nil},
		{"Jobs", "the forward jobs (queue.NewJobs)", c.Jobs == nil},
		{"Senders", "the senders' configuration", c.Senders == nil},
		{"Registerer", "a metrics registerer", c.Registerer == nil},
		{"Log", "a logger", c.Log == nil},
	} {
		if d.missing {
			errs = append(errs, fmt.Errorf("pauses config: %s: nil: %s is required", d.name, d.what))
		}
	}
	return errors.Join(errs...)
}

// Pauses is one process's view of the operator pauses. The [Gate] asks it
// about every forward. Its methods are safe for concurrent use.
type Pauses struct {
	db    *pgxpool.Pool
	jobs  Waker
	every time.Duration
	wake  bool
	log   *slog.Logger
	now   func() time.Time
	gauge *prometheus.GaugeVec

	// snap is the pauses last read, by sender and target.
	snap atomic.Pointer[map[[2]string]store.TargetPause]
	poke chan struct{}

	// mu allows one poll at a time. held are the pauses of the last poll,
	// shown the gauge's label pairs; failing says the last read failed.
	mu      sync.Mutex
	held    map[[2]string]bool
	shown   map[[2]string]bool
	failing bool
	// wakes are the wakes under way.
	wakes sync.WaitGroup
}

// NewPauses returns the operator pauses of a process, not read yet. It
// returns an error naming the field when cfg is invalid.
func NewPauses(cfg PausesConfig) (*Pauses, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	p := &Pauses{db: cfg.DB, jobs: cfg.Jobs, every: cfg.Every, wake: cfg.Wake, log: cfg.Log, now: cfg.Now,
		poke: make(chan struct{}, 1), held: map[[2]string]bool{}, shown: map[[2]string]bool{},
		gauge: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "hookgate_target_paused",
			Help: "1 while an operator's pause holds the target's forwards (as this process last read the pauses, about every second), else 0.",
		}, []string{"sender", "target"})}
	if p.now == nil {
		p.now = time.Now
	}
	cfg.Registerer.MustRegister(p.gauge)
	for i := range cfg.Senders.Senders {
		sd := &cfg.Senders.Senders[i]
		for _, t := range sd.Forward {
			k := [2]string{sd.Name, t.Name}
			p.shown[k] = true
			p.gauge.WithLabelValues(k[0], k[1]).Set(0)
		}
	}
	return p, nil
}

// Paused returns the pause of sender's target when one holds at now. A nil
// Pauses holds nothing.
func (p *Pauses) Paused(sender, target string, now time.Time) (_ store.TargetPause, ok bool) {
	if p == nil {
		return store.TargetPause{}, false
	}
	m := p.snap.Load()
	if m == nil {
		return store.TargetPause{}, false
	}
	tp, ok := (*m)[[2]string{sender, target}]
	if !ok || !tp.Active(now) {
		return store.TargetPause{}, false
	}
	return tp, true
}

// heldFor reports whether a pause holds sender's target at now, and how
// long a forward then waits.
func (p *Pauses) heldFor(sender, target string, now time.Time) (time.Duration, bool) {
	tp, ok := p.Paused(sender, target, now)
	if !ok {
		return 0, false
	}
	wait := maxPausedWait
	if !tp.Until.IsZero() {
		wait = min(wait, tp.Until.Sub(now))
	}
	return jitter(wait), true
}

// Poke makes Run read the pauses at once, without blocking. Call it after
// this process writes a pause or a resume.
func (p *Pauses) Poke() {
	select {
	case p.poke <- struct{}{}:
	default: // a read is pending already
	}
}

// Load reads the pauses once. Call it before the process forwards, so that
// a pause holds from the first forward on.
func (p *Pauses) Load(ctx context.Context) error {
	_, err := p.poll(ctx)
	return err
}

// Run reads the pauses every [PausesConfig.Every] and when poked, until
// ctx is done. A failed read keeps the pauses last read, and is logged
// once until a read succeeds.
func (p *Pauses) Run(ctx context.Context) {
	defer p.wakes.Wait()
	tick := time.NewTicker(p.every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-p.poke:
		}
		pctx, cancel := context.WithTimeout(ctx, max(5*p.every, 5*time.Second))
		ended, err := p.poll(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		for _, k := range ended {
			if p.wake {
				p.wakes.Add(1)
				go func() {
					defer p.wakes.Done()
					p.release(ctx, k[0], k[1])
				}()
			}
		}
		p.mu.Lock()
		switch {
		case err != nil && !p.failing:
			p.failing = true
			p.log.Warn("read the operators' target pauses; the pauses last read hold meanwhile, read again every "+p.every.String(), "err", err)
		case err == nil && p.failing:
			p.failing = false
			p.log.Info("reading the operators' target pauses works again")
		}
		p.mu.Unlock()
	}
}

// poll reads the pauses, shows them in the gauge and logs the changes. It
// returns the targets whose pause ended since the last read.
func (p *Pauses) poll(ctx context.Context) (ended [][2]string, err error) {
	rows, err := store.New(p.db).TargetPauses(ctx)
	if err != nil {
		return nil, err
	}
	now := p.now()
	m := make(map[[2]string]store.TargetPause, len(rows))
	held := make(map[[2]string]bool, len(rows))
	passed := false
	for _, tp := range rows {
		k := [2]string{tp.Sender, tp.Target}
		m[k] = tp
		if tp.Active(now) {
			held[k] = true
		} else {
			passed = true
		}
	}
	p.snap.Store(&m)

	p.mu.Lock()
	defer p.mu.Unlock()
	for k := range held {
		p.shown[k] = true
		if !p.held[k] {
			tp := m[k]
			p.log.Info("target paused by an operator: its forwards are held", "sender", k[0], "target", k[1],
				"since", tp.Since, "until", tp.Until, "reason", tp.Reason, "by", tp.By)
		}
	}
	for k := range p.shown {
		v := 0.0
		if held[k] {
			v = 1
		}
		p.gauge.WithLabelValues(k[0], k[1]).Set(v)
	}
	for k := range p.held {
		if held[k] {
			continue
		}
		how := "resumed"
		if _, ok := m[k]; ok {
			how = "its end passed"
		}
		p.log.Info("target's pause ended: its held forwards are released", "sender", k[0], "target", k[1], "how", how)
		ended = append(ended, k)
	}
	p.held = held
	if passed && p.wake { // a worker process deletes them (any would do)
		if _, err := store.New(p.db).DeleteEndedPauses(ctx); err != nil {
			p.log.Warn("delete the target pauses that ended; they hold nothing, and are deleted at the next read", "err", err)
		}
	}
	return ended, nil
}

// release wakes the forwards of a target whose pause ended, in the order
// they were accepted, and again a second later.
func (p *Pauses) release(ctx context.Context, sender, target string) {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), wakeTimeout)
	defer cancel()
	stop := context.AfterFunc(ctx, cancel) // the process is stopping: the others wake them
	defer stop()
	err := twice(wctx, func() error {
		_, err := p.jobs.WakeHeldForwards(wctx, queue.ForwardQueue, sender, target)
		return err
	})
	if err != nil && ctx.Err() == nil {
		p.log.Warn("wake the held forwards of a target whose pause ended; they come back when their wait ends (at most "+maxPausedWait.String()+")",
			"sender", sender, "target", target, "err", err)
	}
}
