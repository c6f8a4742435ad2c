package main

import (
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// poolCollector exports the database pool's use.
type poolCollector struct {
	pool                                   *pgxpool.Pool
	acquired, idle, total, max, waitsTotal *prometheus.Desc
}

// newPoolCollector returns the collector of pool's metrics.
func newPoolCollector(pool *pgxpool.Pool) *poolCollector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("hookgate_db_pool_"+name, help, nil, nil)
	}
	return &poolCollector{
		pool:       pool,
		acquired:   d("acquired_connections", "Connections in use."),
		idle:       d("idle_connections", "Idle connections."),
		total:      d("total_connections", "Open connections."),
		max:        d("max_connections", "The pool's limit."),
		waitsTotal: d("empty_acquire_total", "Acquisitions that had to wait for a connection."),
	}
}

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.acquired, c.idle, c.total, c.max, c.waitsTotal} {
		ch <- d
	}
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.pool.Stat()
	ch <- prometheus.MustNewConstMetric(c.acquired, prometheus.GaugeValue, float64(s.AcquiredConns()))
	ch <- prometheus.MustNewConstMetric(c.idle, prometheus.GaugeValue, float64(s.IdleConns()))
	ch <- prometheus.MustNewConstMetric(c.total, prometheus.GaugeValue, float64(s.TotalConns()))
	ch <- prometheus.MustNewConstMetric(c.max, prometheus.GaugeValue, float64(s.MaxConns()))
	ch <- prometheus.MustNewConstMetric(c.waitsTotal, prometheus.CounterValue, float64(s.EmptyAcquireCount()))
}
