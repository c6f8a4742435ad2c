package forward

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookgate/hookgate/internal/store"
)

// backlogCollector reports the outbox backlog, counted when scraped.
type backlogCollector struct {
	q    *store.Queries
	desc *prometheus.Desc
}

// NewBacklogCollector returns a collector of hookgate_forward_backlog: the
// forwards not yet finished, by state: outbox (accepted, not yet relayed
// into the job queue) and River's available, scheduled, retryable, running
// and pending. A scrape during a database outage reports nothing.
func NewBacklogCollector(q *store.Queries) prometheus.Collector {
	return &backlogCollector{q: q, desc: prometheus.NewDesc(
		"hookgate_forward_backlog",
		"Forwards not yet delivered or failed, by state: outbox (not yet relayed into the job queue) or the job's state.",
		[]string{"state"}, nil)}
}

func (c *backlogCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *backlogCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	counts, err := c.q.Backlog(ctx)
	if err != nil {
		return
	}
	for _, state := range store.BacklogStates() {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(counts[state]), state)
	}
}
