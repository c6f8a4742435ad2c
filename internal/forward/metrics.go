package forward

import (
	"errors"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/traffic"
)

// Outcomes of a forward attempt, the values of the outcome label.
const (
	outcomeDelivered = "delivered"
	outcomeRetry     = "retry"
	outcomeFailed    = "failed"
)

// Metrics are the forwarding metrics.
type Metrics struct {
	attempts      *prometheus.CounterVec
	latency       *prometheus.HistogramVec
	breakerOpen   *prometheus.GaugeVec
	breakerOpened *prometheus.GaugeVec
	waits         *prometheus.CounterVec
	// ruleErrors counts the transforms that failed to evaluate.
	ruleErrors *RuleErrors

	// traffic counts attempts for the console's charts.
	traffic *traffic.Recorder

	// byTarget caches each target's series, so that an attempt looks them
	// up once.
	mu       sync.RWMutex
	byTarget map[[2]string]*targetSeries
}

// targetSeries are one target's attempt and duration series.
type targetSeries struct {
	delivered, retry, failed prometheus.Counter
	latency                  prometheus.Observer
}

// series returns the series of sender's target.
func (m *Metrics) series(sender, target string) *targetSeries {
	k := [2]string{sender, target}
	m.mu.RLock()
	s := m.byTarget[k]
	m.mu.RUnlock()
	if s != nil {
		return s
	}
	s = &targetSeries{
		delivered: m.attempts.WithLabelValues(sender, target, outcomeDelivered),
		retry:     m.attempts.WithLabelValues(sender, target, outcomeRetry),
		failed:    m.attempts.WithLabelValues(sender, target, outcomeFailed),
		latency:   m.latency.WithLabelValues(sender, target),
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.byTarget == nil {
		m.byTarget = map[[2]string]*targetSeries{}
	}
	if old := m.byTarget[k]; old != nil {
		return old
	}
	m.byTarget[k] = s
	return s
}

// CountTraffic makes the attempts count in rec too, for the console's
// charts. Call it before the workers start.
func (m *Metrics) CountTraffic(rec *traffic.Recorder) { m.traffic = rec }

// NewMetrics registers the forwarding metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookgate_forward_attempts_total",
			Help: "Forward attempts, by sender, target name and outcome (delivered, retry, failed).",
		}, []string{"sender", "target", "outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "hookgate_forward_duration_seconds",
			Help:    "Time for a target to answer a forward, by sender and target name.",
			Buckets: prometheus.DefBuckets,
		}, []string{"sender", "target"}),
	}
	m.breakerOpen = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "hookgate_forward_breaker_open",
		Help: "1 while this process's circuit breaker of the target is open or probing, else 0.",
	}, []string{"sender", "target"})
	m.breakerOpened = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "hookgate_forward_breaker_opened_timestamp_seconds",
		Help: "When this process's circuit breaker of the target last opened (Unix time).",
	}, []string{"sender", "target"})
	m.waits = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hookgate_forward_waits_total",
		Help: "Forwards put back to wait without using an attempt, by sender, target and reason (operator: an operator paused the target; breaker, paused: a Retry-After, rate: waiting for a turn of the target's rate, busy; after: a redelivery waiting for the forward under way; target_removed: the target is not in the configuration in force).",
	}, []string{"sender", "target", "reason"})
	reg.MustRegister(m.attempts, m.latency, m.breakerOpen, m.breakerOpened, m.waits)
	m.ruleErrors = NewRuleErrors(reg)
	return m
}

// Rules, the values of hookgate_rule_errors_total's rule label.
const (
	RuleFilter    = "filter"
	RuleTransform = "transform"
)

// RuleErrors counts the targets' rules that failed to evaluate:
// hookgate_rule_errors_total, by sender, target and rule. Ingest counts
// the filters, the forwards the transforms. Its methods are safe for
// concurrent use.
type RuleErrors struct{ c *prometheus.CounterVec }

// NewRuleErrors registers hookgate_rule_errors_total on reg, or returns the
// one registered there already: ingest and the forwards of one process
// count in the same series.
func NewRuleErrors(reg prometheus.Registerer) *RuleErrors {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hookgate_rule_errors_total",
		Help: "Targets' rules that failed to evaluate, by sender, target and rule: filter (at ingest: the target got no forward, the event records the error) or transform (at a forward's send: the forward failed at once).",
	}, []string{"sender", "target", "rule"})
	if err := reg.Register(c); err != nil {
		are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err)
		if !ok {
			panic(err)
		}
		c = are.ExistingCollector.(*prometheus.CounterVec)
	}
	return &RuleErrors{c: c}
}

// Inc counts one error of sender's target's rule.
func (r *RuleErrors) Inc(sender, target, rule string) {
	r.c.WithLabelValues(sender, target, rule).Inc()
}

// init creates the series of the rules of sender's target t at zero.
func (r *RuleErrors) init(sender string, t *config.Target) {
	if t.Filter != nil {
		r.c.WithLabelValues(sender, t.Name, RuleFilter)
	}
	if t.Transform != nil {
		r.c.WithLabelValues(sender, t.Name, RuleTransform)
	}
}

// WaitTargetRemoved is the reason a forward waits for its target to be
// configured again.
const WaitTargetRemoved = "target_removed"

// WaitOrder is the reason an ordered forward waits for the forward before
// it in its key.
const WaitOrder = "order"

// waitReasons are the values of hookgate_forward_waits_total's reason label.
var waitReasons = []string{WaitOperator, "breaker", "paused", "rate", "busy", "after", WaitTargetRemoved, WaitOrder}

// Init creates the series of every target of cfg at zero, so that rates
// and alerts have a value from the start.
func (m *Metrics) Init(cfg *config.Config) {
	for i := range cfg.Senders {
		sd := &cfg.Senders[i]
		for _, t := range sd.Forward {
			for _, o := range []string{outcomeDelivered, outcomeRetry, outcomeFailed} {
				m.attempts.WithLabelValues(sd.Name, t.Name, o)
			}
			m.latency.WithLabelValues(sd.Name, t.Name)
			m.breakerOpen.WithLabelValues(sd.Name, t.Name).Set(0)
			for _, r := range waitReasons {
				m.waits.WithLabelValues(sd.Name, t.Name, r)
			}
			m.ruleErrors.init(sd.Name, &t)
		}
	}
}

func (m *Metrics) attempt(sender, target, outcome string) {
	m.attempts.WithLabelValues(sender, target, outcome).Inc()
}
