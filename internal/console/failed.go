package console

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/hookgate/hookgate/internal/forward"
	"github.com/hookgate/hookgate/internal/queue"
	"github.com/hookgate/hookgate/internal/redact"
	"github.com/hookgate/hookgate/internal/store"
)

// maxFailedShown is how many failed forwards the target page lists.
const maxFailedShown = 200

// maxBlockedShown is how many blocked ordering keys a target's page shows.
const maxBlockedShown = 100

// blockedKey is an ordering key a failed forward holds, as shown.
type blockedKey struct {
	store.BlockedKey
	Summary string
}

// failedForward is a failed forward of the target page: FailedAt is when
// it was given up.
type failedForward struct {
	queue.TargetForward
	FailedAt time.Time
}

// failedView is the target page's data.
type failedView struct {
	Sender, Target, URL string
	Breaker             breakerShown
	// Held counts the pending and retrying forwards that are held. HeldBy
	// says what holds them, and HeldHint when they go.
	Held             int64
	HeldBy, HeldHint string
	// Paused is the operator's pause in force, or nil. Without one the
	// page offers to pause.
	Paused *store.TargetPause
	// Ordered: the target has ordering. Blocked are its keys that a
	// failed forward holds, oldest first, at most maxBlockedShown.
	Ordered bool
	Blocked []blockedKey
	Failed  []failedForward
	Max     int
	Charts  []chart // forwards delivered and failed, and latency: last hour, last day
	History breakerView
}

// failed is a target's page: its state, charts, breaker history and
// failed forwards.
func (c *Console) failed(w http.ResponseWriter, r *http.Request) {
	sender, target := param(r, "sender"), param(r, "target")
	sd, ok := c.config().Sender(sender)
	if !ok {
		c.notFound(w, r, "No sender with this name is configured.")
		return
	}
	t, ok := sd.Target(target)
	if !ok {
		c.notFound(w, r, "This sender has no target with this name.")
		return
	}
	breakers, err := c.q.Breakers(r.Context(), sender)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	b, ok := breakers[target]
	if !ok {
		b = store.BreakerState{State: store.BreakerClosed}
	}
	pauses, err := c.q.TargetPausesOf(r.Context(), sender)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	// As GET …/forwards?state=failed lists them: a forward redelivered
	// since is no longer failed.
	pg, err := c.forwards.ListTargetForwards(r.Context(), queue.Filter{Sender: sender, Target: target, State: queue.StateFailed}, maxFailedShown, nil)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	// An operator's pause, a breaker that is not closed, or a pause the
	// target asked for holds the unfinished forwards. Running ones, the
	// probes, are not held.
	now := c.opts.Now()
	paused := forward.ActivePause(pauses, target, now)
	heldText, heldHint := heldBy(b, paused, now)
	byRate := false
	if heldText == "" {
		heldText, heldHint = heldByRate(t)
		byRate = heldText != ""
	}
	var held int64
	if heldText != "" {
		counts, err := c.forwards.CountForwards(r.Context(), sender, false)
		if err != nil {
			c.fail(w, r, err)
			return
		}
		held = counts[target].Pending + counts[target].Retrying
	}
	if byRate && held == 0 {
		heldText, heldHint = "", "" // none waits for a turn
	}
	var blocked []blockedKey
	if t.Ordering != nil {
		keys, err := c.q.BlockedKeys(r.Context(), sender, target, maxBlockedShown)
		if err != nil {
			c.fail(w, r, err)
			return
		}
		for _, k := range keys {
			blocked = append(blocked, blockedKey{BlockedKey: k, Summary: k.Summary()})
		}
	}
	fs := make([]failedForward, 0, len(pg.Forwards))
	for _, f := range pg.Forwards {
		f.LastError = redact.URLInText(f.LastError, t.URL, t.SecretPath)
		fs = append(fs, failedForward{TargetForward: f, FailedAt: f.FinishedAt})
	}
	// The list is by failure time, newest first, as the API pages it. A
	// forward retried for hours fails long after newer ones.
	_, targetCharts, err := c.senderCharts(r.Context(), sender, now)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	history, err := c.breakerHistory(r.Context(), sender, target, b, now, func(s string) string { return redact.URLInText(s, t.URL, t.SecretPath) })
	if err != nil {
		c.fail(w, r, err)
		return
	}
	msg := ""
	switch {
	case r.URL.Query().Has("paused") && paused != nil:
		msg = "Paused: the target's forwards are held in every process within about a second, until it is resumed."
	case r.URL.Query().Has("skipped"):
		msg = "Skipped: the forward stays failed, and its key's next forward is released in every process (" + r.URL.Query().Get("skipped") + " were waiting)."
	case r.URL.Query().Has("resumed") && paused == nil:
		msg = "Resumed: the held forwards are released, in the order they were accepted."
	}
	if n, err := strconv.ParseInt(r.URL.Query().Get("matched"), 10, 64); err == nil && n >= 0 {
		switch st := queue.State(r.URL.Query().Get("state")); st {
		case queue.StateRunning, queue.StateRetrying:
			msg = fmt.Sprintf("%d %s forwards get a new attempt: a new forward is queued after each current one, and is sent once that one has ended (delivered or failed).", n, st)
		default:
			msg = fmt.Sprintf("%d failed forwards are being sent again, in batches, by the worker processes.", n)
		}
	}
	c.render(w, r, http.StatusOK, "failed", page{Title: "Target " + target + " of " + sender, Notice: msg,
		Data: failedView{Sender: sender, Target: target, URL: redact.URL(t.URL, t.SecretPath), Breaker: showBreaker(b, now), Held: held, HeldBy: heldText, HeldHint: heldHint,
			Paused: paused, Failed: fs, Max: maxFailedShown, Ordered: t.Ordering != nil, Blocked: blocked,
			Charts: targetCharts[target], History: history}})
}
