package handler

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookgate/hookgate/internal/forward"
)

// Ingest outcomes, the values of the outcome label.
const (
	outcomeAccepted = "accepted"
	outcomeReplayed = "replayed"
	outcomeMismatch = "mismatch"
	outcomeInFlight = "in_flight"
	outcomeInvalid  = "invalid"
	outcomeRejected = "rejected_signature"
	// outcomeURLVerification is a handshake answered (Slack's url_verification,
	// Zoom's url_validation, Twitch's verification, Discord's PING, Meta's GET
	// subscription check); the label keeps its first name.
	outcomeURLVerification = "url_verification"
	outcomeError           = "error"
	// outcomeShed is a delivery answered 503 at once by the overload gate.
	outcomeShed = "shed"
)

// outcomeFor returns the outcome label of a failed ingest.
func outcomeFor(pe *problemError) string {
	switch pe.typ {
	case probMismatch:
		return outcomeMismatch
	case probInFlight:
		return outcomeInFlight
	case probSignature, probVerifyToken:
		return outcomeRejected
	case probOverloaded:
		return outcomeShed
	}
	if pe.typ.status >= 500 {
		return outcomeError
	}
	return outcomeInvalid
}

type metrics struct {
	deliveries *prometheus.CounterVec
	latency    *prometheus.HistogramVec
	// ruleErrors counts the filters that failed to evaluate, in the series
	// the forwards count the transforms' in.
	ruleErrors *forward.RuleErrors
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookgate_deliveries_total",
			Help: "Webhook deliveries received, by sender, outcome and event type (bounded: a type named in some target's event_types, the prefix pattern it matches, other or none; empty when refused before the type was read).",
		}, []string{"sender", "outcome", "event_type"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "hookgate_ingest_duration_seconds",
			Help:    "Time to answer a webhook delivery, by outcome.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"outcome"}),
	}
	reg.MustRegister(m.deliveries, m.latency)
	m.ruleErrors = forward.NewRuleErrors(reg)
	return m
}

// observe counts one delivery and its latency. eventType is the label value
// of sender.Sender.EventTypeLabel, from a set bounded by the configuration.
func (m *metrics) observe(sender, outcome, eventType string, d time.Duration) {
	m.deliveries.WithLabelValues(sender, outcome, eventType).Inc()
	m.latency.WithLabelValues(outcome).Observe(d.Seconds())
}
