package console

import (
	"net/http"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/forward"
	"github.com/hookgate/hookgate/internal/queue"
	"github.com/hookgate/hookgate/internal/redact"
	"github.com/hookgate/hookgate/internal/store"
)

// senderView is a sender on the overview.
type senderView struct {
	Name    string
	Counts  []store.StatusCount
	Charts  []chart // deliveries: last hour, last day
	Targets []targetView
}

// targetView is a target on the overview.
type targetView struct {
	Name, URL string
	// Held is set when a reload removed the target and its unfinished
	// forwards wait for it. It is "" for a configured target.
	Held    string
	Breaker breakerShown
	// Paused is the operator's pause in force, or nil.
	Paused                             *store.TargetPause
	Pending, Running, Retrying, Failed int64
	Charts                             []chart // forwards: last hour, last day
	// P50 and P95 are the latency quantiles of the last hour's attempts.
	P50, P95 latency
}

// overview shows each sender's deliveries and the state of its targets.
func (c *Console) overview(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	now := c.opts.Now()
	var out []senderView
	cfg := c.config()
	for i := range cfg.Senders {
		sd := &cfg.Senders[i]
		counts, err := c.q.CountDeliveries(ctx, sd.Name, now)
		if err != nil {
			c.fail(w, r, err)
			return
		}
		charts, targetCharts, err := c.senderCharts(ctx, sd.Name, now)
		if err != nil {
			c.fail(w, r, err)
			return
		}
		sv := senderView{Name: sd.Name, Counts: counts, Charts: charts}
		// The counts of GET /v1/senders/{sender}/targets, without the
		// delivered ones.
		byTarget, err := c.forwards.CountForwards(ctx, sd.Name, false)
		if err != nil {
			c.fail(w, r, err)
			return
		}
		if len(sd.Forward) > 0 {
			breakers, err := c.q.Breakers(ctx, sd.Name)
			if err != nil {
				c.fail(w, r, err)
				return
			}
			pauses, err := c.q.TargetPausesOf(ctx, sd.Name)
			if err != nil {
				c.fail(w, r, err)
				return
			}
			for _, t := range sd.Forward {
				b, ok := breakers[t.Name]
				if !ok {
					b = store.BreakerState{State: store.BreakerClosed}
				}
				n := byTarget[t.Name]
				tv := targetView{Name: t.Name, URL: redact.URL(t.URL, t.SecretPath), Breaker: showBreaker(b, now), Paused: forward.ActivePause(pauses, t.Name, now),
					Pending: n.Pending, Running: n.Running, Retrying: n.Retrying, Failed: n.Failed, Charts: targetCharts[t.Name]}
				if len(tv.Charts) > 0 {
					tv.P50, tv.P95 = tv.Charts[0].P50, tv.Charts[0].P95
				}
				sv.Targets = append(sv.Targets, tv)
			}
		}
		// Removed targets whose forwards wait for them are shown as held.
		sv.Targets = append(sv.Targets, removedTargets(sd, byTarget)...)
		out = append(out, sv)
	}
	c.render(w, r, http.StatusOK, "overview", page{Title: "Overview", Data: out})
}

// removedTargets returns the targets that sd no longer has but that have
// unfinished forwards in counts. They are held until configured again.
func removedTargets(sd *config.Sender, counts map[string]queue.Counts) []targetView {
	var out []targetView
	for _, name := range forward.RemovedTargets(sd, counts) {
		n := counts[name]
		out = append(out, targetView{Name: name, Held: shownHeld(forward.HeldTargetRemoved),
			Pending: n.Pending, Running: n.Running, Retrying: n.Retrying, Failed: n.Failed})
	}
	return out
}
