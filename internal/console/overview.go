package console

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

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

// overviewPage is the most senders one overview page shows. Each costs the
// page about half a dozen statements, some 20 ms and 60 KB of charts: a
// configuration of 500 senders made one page of 32 MB that took 2.5 s.
const overviewPage = 10

// overviewView is one page of the overview: the senders from position
// From to To (1-based) of Total, in the configuration's order, and the
// links to the pages before and after it.
type overviewView struct {
	Senders          []senderView
	From, To, Total  int
	Page, Pages      int
	Prev, Next, Last string
	// Back is where a refused page's link goes: the first page, or the
	// last one.
	Back string
}

// overviewLink is the address of the overview's page n.
func overviewLink(n int) string {
	if n <= 1 {
		return "/console/"
	}
	return "/console/?page=" + strconv.Itoa(n)
}

// overview shows each sender's deliveries and the state of its targets,
// overviewPage senders a page (?page=N). ?sender=NAME goes to the page
// that shows that sender, at its section.
func (c *Console) overview(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	now := c.opts.Now()
	cfg := c.config()
	v := overviewView{Total: len(cfg.Senders), Page: 1, Pages: max(1, (len(cfg.Senders)+overviewPage-1)/overviewPage)}
	if name := strings.TrimSpace(r.URL.Query().Get("sender")); name != "" {
		// The form on a page of many: to the page that shows the sender.
		i := slices.IndexFunc(cfg.Senders, func(s config.Sender) bool { return s.Name == name })
		if i < 0 {
			v.Back = overviewLink(1)
			c.render(w, r, http.StatusNotFound, "overview", page{Title: "Overview", Message: fmt.Sprintf("No sender is named %q.", name), Data: v})
			return
		}
		http.Redirect(w, r, overviewLink(i/overviewPage+1)+"#sender-"+name, http.StatusSeeOther)
		return
	}
	if q := r.URL.Query().Get("page"); q != "" {
		n, err := strconv.Atoi(q)
		if err != nil || n < 1 {
			v.Back = overviewLink(1)
			c.render(w, r, http.StatusBadRequest, "overview", page{Title: "Overview", Message: "Page: a whole number from 1.", Data: v})
			return
		}
		if n > v.Pages {
			v.Back = overviewLink(v.Pages)
			c.render(w, r, http.StatusNotFound, "overview", page{Title: "Overview",
				Message: fmt.Sprintf("There is no page %d: %d senders make %d pages of %d.", n, v.Total, v.Pages, overviewPage), Data: v})
			return
		}
		v.Page = n
	}
	first := (v.Page - 1) * overviewPage
	last := min(first+overviewPage, v.Total)
	if v.Total > 0 {
		v.From, v.To = first+1, last
	}
	if v.Page > 1 {
		v.Prev = overviewLink(v.Page - 1)
	}
	if v.Page < v.Pages {
		v.Next, v.Last = overviewLink(v.Page+1), overviewLink(v.Pages)
	}
	out := make([]senderView, 0, last-first)
	for i := first; i < last; i++ {
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
	v.Senders = out
	c.render(w, r, http.StatusOK, "overview", page{Title: "Overview", Data: v})
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
