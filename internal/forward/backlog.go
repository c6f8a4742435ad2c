package forward

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookgate/hookgate/internal/queue"
)

// backlogCollector reports the outbox backlog, counted when scraped.
type backlogCollector struct {
	q       BacklogCounter
	senders func() []string
	desc    *prometheus.Desc
	up      *prometheus.Desc
	blocked *prometheus.Desc

	mu   sync.Mutex
	last map[string]int64 // the last counts taken; nil before the first
}

// NewBacklogCollector returns a collector of hookgate_forward_backlog, the
// unfinished forwards by state, of hookgate_forward_blocked_keys, and of
// hookgate_forward_backlog_up. A
// scrape that cannot count reports the last counts taken, so the series
// stays during an outage. The outbox is counted for each sender senders
// returns.
func NewBacklogCollector(q BacklogCounter, senders func() []string) prometheus.Collector {
	return &backlogCollector{q: q, senders: senders,
		desc: prometheus.NewDesc(
			"hookgate_forward_backlog",
			"Forwards not yet delivered or failed, by state: outbox (not yet relayed into the job queue) or the job's state. When the database cannot be read, the last counts taken.",
			[]string{"state"}, nil),
		up: prometheus.NewDesc(
			"hookgate_forward_backlog_up",
			"1 when the last scrape counted the forward backlog in the database, 0 when it could not (hookgate_forward_backlog then repeats the last counts taken).",
			nil, nil),
		blocked: prometheus.NewDesc(
			"hookgate_forward_blocked_keys",
			"Ordering keys that a forward which failed for good holds (on_failure: hold): their later forwards wait until an operator redelivers or skips it. Counted with hookgate_forward_backlog.",
			nil, nil),
	}
}

func (c *backlogCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.desc
	ch <- c.up
	ch <- c.blocked
}

func (c *backlogCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	counts, err := c.q.Backlog(ctx, c.senders())
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
	if last == nil {
		return
	}
	for _, state := range queue.BacklogStates() {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(last[state]), state)
	}
	ch <- prometheus.MustNewConstMetric(c.blocked, prometheus.GaugeValue, float64(last[queue.BlockedKeys]))
}
