package forward

import (
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
	return m
}

// WaitTargetRemoved is the reason a forward waits for its target to be
// configured again.
const WaitTargetRemoved = "target_removed"

// waitReasons are the values of hookgate_forward_waits_total's reason label.
var waitReasons = []string{WaitOperator, "breaker", "paused", "rate", "busy", "after", WaitTargetRemoved}

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
		}
	}
}

func (m *Metrics) attempt(sender, target, outcome string) {
	m.attempts.WithLabelValues(sender, target, outcome).Inc()
}
