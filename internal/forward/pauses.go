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

// Operator pauses (issue 44): an operator pauses a target (the API's POST
// …/pause, the console's Pause button), which writes a row of
// paused_targets (store.Queries.PauseTarget); every process reads that
// table about once a second (Pauses) and, while the pause holds, its Gate
// admits none of the target's forwards: River's worker snoozes them
// without using an attempt, and the fast path leases none (the relay moves
// them into River, which holds them the same way). The breaker is not
// touched: no attempt is made. A pause with an end (until) stops holding
// at that end in every process at once, by its own clock; resume deletes
// the row. A process that works forwards and sees a pause it held end
// (resumed, or its end passed) wakes the target's waiting forwards, as a
// closing breaker does, in the order they were accepted
// (queue.Jobs.WakeHeldForwards), and again a second later: each such
// process wakes what it may have snoozed, so none waits for its snooze to
// end.

// Defaults of the operator pauses.
const (
	// DefaultPausePoll is how often a process reads the operator pauses: a
	// pause holds in every process within about that long (plus the read).
	DefaultPausePoll = time.Second
	// maxPausedWait bounds the snooze of a forward held by an operator's
	// pause: the forwards are woken when the pause ends, so this bounds
	// how long one waits should that wake fail, and makes a long pause
	// fetch each held forward about once a minute.
	maxPausedWait = time.Minute
)

// WaitOperator is the reason (Gate.Acquire's why, and the reason label of
// hookgate_forward_waits_total) of a forward held by an operator's pause.
const WaitOperator = "operator"

// PausesConfig configures Pauses (NewPauses). DB, Jobs, Senders, Registerer
// and Log are required.
type PausesConfig struct {
	// Every is how often the pauses are read (DefaultPausePoll), positive.
	Every time.Duration
	// Wake makes the process wake a target's waiting forwards when a
	// pause it held ends: set it in a process that works forwards.
	Wake bool

	// DB is where the pauses are read (paused_targets), and the waiting
	// forwards woken.
	DB *pgxpool.Pool
	// Jobs wakes the held forwards of a target whose pause ended.
	Jobs Waker
	// Senders are the configured targets, whose hookgate_target_paused
	// series are there at 0 from the start.
	Senders *config.Config
	// Registerer receives hookgate_target_paused.
	Registerer prometheus.Registerer
	// Log is where pauses seen, ended, and failures to read them are
	// logged.
	Log *slog.Logger
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// DefaultPausesConfig returns the defaults (and no dependencies).
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

// Pauses is one process's view of the operator pauses: read from the
// database every PausesConfig.Every (Run), at once when poked (Poke), and
// asked by the process's Gate for every forward. Its methods are safe for
// concurrent use.
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

	// Under mu (one poll at a time): held are the pauses that held at the
	// last poll; shown the label pairs of the gauge; failing says the last
	// read failed (logged once until one succeeds).
	mu      sync.Mutex
	held    map[[2]string]bool
	shown   map[[2]string]bool
	failing bool
	// wakes are the wakes under way.
	wakes sync.WaitGroup
}

// NewPauses returns the operator pauses of a process, not read yet (Load,
// Run), with hookgate_target_paused registered at 0 for every configured
// target; an error naming the field when cfg is invalid.
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

// Paused returns the operator's pause of sender's target when one holds
// at now (as last read); ok is false otherwise. Nil Pauses hold nothing.
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

// heldFor returns how long a forward of sender's target waits at now when
// an operator's pause holds it (until the pause ends, at most
// maxPausedWait, jittered: it is woken when the pause ends), and whether
// one does.
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

// Poke makes Run read the pauses at once (a pause or a resume was just
// written by this process), without blocking.
func (p *Pauses) Poke() {
	select {
	case p.poke <- struct{}{}:
	default: // a read is pending already
	}
}

// Load reads the pauses once: call it before the process forwards, so that
// a pause holds from its first forward on.
func (p *Pauses) Load(ctx context.Context) error {
	_, err := p.poll(ctx)
	return err
}

// Run reads the pauses every PausesConfig.Every, and when poked, until ctx
// is done, then waits for the wakes it started (cut short by ctx). A read
// that fails keeps the pauses last read (a pause with an end still ends
// then), and is logged once until one succeeds.
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

// poll reads the pauses, shows them in the gauge, logs those that began or
// ended since the last read, deletes the pauses whose end has passed (with
// PausesConfig.Wake: in a worker process), and
// returns the targets whose pause held at the last read and no longer
// does.
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

// release wakes the waiting forwards of a target whose pause ended, in the
// order they were accepted, and again a second later (for a forward this
// process told to wait just before, whose snooze River writes after the
// first wake).
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
