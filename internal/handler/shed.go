package handler

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// DefaultShedFactor is how many ingest requests may wait for a database
// connection per connection of the pool, by default, before more are shed.
const DefaultShedFactor = 4

// WithShedding bounds the ingest requests that use or wait for one of the
// poolSize database connections: past poolSize+maxWaiting of them at once, a
// delivery is answered 503 with Retry-After at once, without touching the
// database (and counted in hookgate_ingest_shed_total). During an outage or
// overload, senders are told to retry later instead of piling up requests
// (and their bodies) in memory, each waiting out the ingest timeout.
// maxWaiting < 0 leaves ingestion unbounded (the default without this
// option).
func WithShedding(poolSize, maxWaiting int) Option {
	return func(s *Server) {
		if maxWaiting < 0 || poolSize <= 0 {
			s.gate = nil
			return
		}
		s.gate = &storeGate{limit: int64(poolSize + maxWaiting)}
	}
}

// storeGate counts the ingest requests between their first use of the
// database and their answer; nil lets every request in.
type storeGate struct {
	limit int64
	n     atomic.Int64
}

// enter takes a place, or returns false when all limit places are taken.
// A nil gate always has room.
func (g *storeGate) enter() bool {
	if g == nil {
		return true
	}
	if g.n.Add(1) > g.limit {
		g.n.Add(-1)
		return false
	}
	return true
}

// leave gives back a place enter took.
func (g *storeGate) leave() {
	if g != nil {
		g.n.Add(-1)
	}
}

// registerShedMetrics registers hookgate_ingest_shed_total, which it
// returns, and hookgate_ingest_in_store, the places of s's gate taken now.
func registerShedMetrics(reg prometheus.Registerer, s *Server) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "hookgate_ingest_shed_total",
		Help: "Deliveries answered 503 at once because too many were already waiting for a database connection.",
	})
	g := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "hookgate_ingest_in_store",
		Help: "Deliveries using or waiting for a database connection now (counted only with shedding on).",
	}, func() float64 {
		if s.gate == nil {
			return 0
		}
		return float64(s.gate.n.Load())
	})
	reg.MustRegister(c, g)
	return c
}
