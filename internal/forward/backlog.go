package forward

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// backlogCollector reports the outbox backlog, counted when scraped.
type backlogCollector struct {
	db   *pgxpool.Pool
	desc *prometheus.Desc
}

// NewBacklogCollector returns a collector of hookgate_forward_backlog: the
// forwards not yet finished, by state: outbox (accepted, not yet relayed
// into the job queue) and River's available, scheduled, retryable, running
// and pending. A scrape during a database outage reports nothing.
func NewBacklogCollector(db *pgxpool.Pool) prometheus.Collector {
	return &backlogCollector{db: db, desc: prometheus.NewDesc(
		"hookgate_forward_backlog",
		"Forwards not yet delivered or failed, by state: outbox (not yet relayed into the job queue) or the job's state.",
		[]string{"state"}, nil)}
}

func (c *backlogCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *backlogCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	rows, err := c.db.Query(ctx, `SELECT state::text, count(*) FROM river_job
WHERE kind = $1 AND state IN ('available', 'scheduled', 'retryable', 'running', 'pending')
GROUP BY state
UNION ALL SELECT 'outbox', count(*) FROM forward_outbox`, Args{}.Kind())
	if err != nil {
		return
	}
	defer rows.Close()
	counts := map[string]float64{"outbox": 0, "available": 0, "scheduled": 0, "retryable": 0, "running": 0, "pending": 0}
	for rows.Next() {
		var (
			state string
			n     int64
		)
		if rows.Scan(&state, &n) == nil {
			counts[state] = float64(n)
		}
	}
	if rows.Err() != nil {
		return
	}
	for state, n := range counts {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, n, state)
	}
}
