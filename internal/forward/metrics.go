package forward

import "github.com/prometheus/client_golang/prometheus"

// Outcomes of a forward attempt, the values of the outcome label.
const (
	outcomeDelivered = "delivered"
	outcomeRetry     = "retry"
	outcomeFailed    = "failed"
)

// Metrics are the forwarding metrics.
type Metrics struct {
	attempts *prometheus.CounterVec
	latency  *prometheus.HistogramVec
}

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
	reg.MustRegister(m.attempts, m.latency)
	return m
}

func (m *Metrics) attempt(sender, target, outcome string) {
	m.attempts.WithLabelValues(sender, target, outcome).Inc()
}
