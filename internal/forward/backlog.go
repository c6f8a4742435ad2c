package forward

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// backlogStates are the states hookgate_forward_backlog reports.
var backlogStates = []string{"outbox", "available", "scheduled", "retryable", "running", "pending"}

// backlogCollector reports the outbox backlog, counted when scraped.
type backlogCollector struct {
	db   *pgxpool.Pool
	desc *prometheus.Desc
	up   *prometheus.Desc

	mu   sync.Mutex
	last map[string]float64 // the last counts taken; nil before the first
}

// NewBacklogCollector returns a collector of hookgate_forward_backlog: the
// forwards not yet finished, by state: outbox (accepted, not yet relayed
// into the job queue) and River's available, scheduled, retryable, running
// and pending; and of hookgate_forward_backlog_up: 1 when this scrape
// counted them, 0 when it could not (a database outage). A scrape that
// cannot count reports the last counts taken (none before the first), so
// that the backlog does not vanish from the series during an outage.
func NewBacklogCollector(db *pgxpool.Pool) prometheus.Collector {
	return &backlogCollector{db: db,
		desc: prometheus.NewDesc(
			"hookgate_forward_backlog",
			"Forwards not yet delivered or failed, by state: outbox (not yet relayed into the job queue) or the job's state. When the database cannot be read, the last counts taken.",
			[]string{"state"}, nil),
		up: prometheus.NewDesc(
			"hookgate_forward_backlog_up",
			"1 when the last scrape counted the forward backlog in the database, 0 when it could not (hookgate_forward_backlog then repeats the last counts taken).",
			nil, nil),
	}
}

func (c *backlogCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.desc
	ch <- c.up
}

func (c *backlogCollector) Collect(ch chan<- prometheus.Metric) {
	counts, err := c.count()
	c.mu.Lock()
	if err == nil {
		c.last = counts
	}
	last := c.last
	c.mu.Unlock()
	up := 1.0
	if err != nil {
		up = 0
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, up)
	for _, state := range backlogStates {
		if n, ok := last[state]; ok {
			ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, n, state)
		}
	}
}

// count counts the backlog by state.
func (c *backlogCollector) count() (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	rows, err := c.db.Query(ctx, `SELECT state::text, count(*) FROM river_job
WHERE kind = $1 AND state IN ('available', 'scheduled', 'retryable', 'running', 'pending')
GROUP BY state
UNION ALL SELECT 'outbox', count(*) FROM forward_outbox`, Args{}.Kind())
	if err != nil {
		return nil, fmt.Errorf("count forward backlog: %w", err)
	}
	defer rows.Close()
	counts := make(map[string]float64, len(backlogStates))
	for _, state := range backlogStates {
		counts[state] = 0
	}
	for rows.Next() {
		var (
			state string
			n     int64
		)
		if err := rows.Scan(&state, &n); err != nil {
			return nil, fmt.Errorf("count forward backlog: %w", err)
		}
		counts[state] = float64(n)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count forward backlog: %w", err)
	}
	return counts, nil
}
