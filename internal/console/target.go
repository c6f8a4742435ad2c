package console

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/hookgate/hookgate/internal/access"
	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/forward"
	"github.com/hookgate/hookgate/internal/queue"
	"github.com/hookgate/hookgate/internal/store"
)

// breakerShown is a target's breaker as its badge shows it. For says how
// long it has been open.
type breakerShown struct {
	store.BreakerState
	For string // "" when closed
}

// showBreaker is b's badge at now.
func showBreaker(b store.BreakerState, now time.Time) breakerShown {
	s := breakerShown{BreakerState: b}
	if b.State != store.BreakerClosed && !b.OpenedAt.IsZero() {
		s.For = roundDuration(now.Sub(b.OpenedAt))
	}
	return s
}

// heldBy returns [forward.Held]'s words as the console shows them, or ""
// when nothing holds the forwards.
func heldBy(b store.BreakerState, paused *store.TargetPause, now time.Time) (held, hint string) {
	held, hint = forward.Held(b, paused, now)
	if held != "" {
		held = "held: " + held
	}
	return held, hint
}

// shownHeld returns forward's words as the console shows them.
func shownHeld(held string) string {
	if held == "" {
		return ""
	}
	return "held: " + held
}

// heldByRate returns [forward.HeldByRate]'s words as the console shows
// them.
func heldByRate(t *config.Target) (held, hint string) {
	held, hint = forward.HeldByRate(t)
	if held != "" {
		held = "held: " + held
	}
	return held, hint
}

// roundDuration shows d to the second, or to the minute past an hour. It
// is at least "0s".
func roundDuration(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d >= time.Hour:
		return d.Round(time.Minute).String()
	}
	return d.Round(time.Second).String()
}

// bulkRedeliver redelivers a target's forwards in the form's state since
// the form's time, as POST …/targets/{target}/redeliver does. The state is
// failed by default. A running or retrying forward gets a new forward
// queued after it. The target's page then says how many matched.
func (c *Console) bulkRedeliver(w http.ResponseWriter, r *http.Request) {
	sd, target, ok := c.formTarget(w, r)
	if !ok {
		return
	}
	sender := sd.Name
	since, err := parseTime(r.PostFormValue("since"))
	if err != nil {
		c.render(w, r, http.StatusBadRequest, "error", page{Title: "Redeliver", Message: "Since: " + err.Error() + "."})
		return
	}
	if c.opts.Redeliverer == nil {
		c.fail(w, r, errors.New("console: no redelivery (console.Config.Redeliverer)"))
		return
	}
	state := queue.StateFailed
	switch st := queue.State(r.PostFormValue("state")); st {
	case "", queue.StateFailed:
	case queue.StateRunning, queue.StateRetrying:
		state = st
	default:
		c.render(w, r, http.StatusBadRequest, "error", page{Title: "Redeliver", Message: "State: failed, running or retrying."})
		return
	}
	res, err := c.opts.Redeliverer.BulkRedeliver(r.Context(), queue.BulkRequest{Sender: sd, Target: target, State: state, Since: since})
	if err != nil {
		c.fail(w, r, err)
		return
	}
	to := targetURL(sender, target) + "?matched=" + strconv.FormatInt(res.Matched, 10)
	if res.AfterCurrent {
		to += "&state=" + string(state)
	}
	http.Redirect(w, r, to, http.StatusSeeOther)
}

// targetURL returns the address of a target's page.
func targetURL(sender, target string) string {
	return Prefix + "/senders/" + url.PathEscape(sender) + "/targets/" + url.PathEscape(target) + "/failed"
}

// pauseTarget pauses a target, as POST …/targets/{target}/pause does. The
// form gives the reason and the end in UTC, empty until resumed. The
// target's page then says so.
func (c *Console) pauseTarget(w http.ResponseWriter, r *http.Request) {
	sd, target, ok := c.formTarget(w, r)
	if !ok {
		return
	}
	sender := sd.Name
	until, err := parseTime(r.PostFormValue("until"))
	if err != nil {
		c.render(w, r, http.StatusBadRequest, "error", page{Title: "Pause", Message: "Until: " + err.Error() + "."})
		return
	}
	p := store.TargetPause{Sender: sender, Target: target, Until: until, Reason: strings.TrimSpace(r.PostFormValue("reason")),
		By: store.PausedBy(access.Name(r.Context()), "console", c.opts.Limiter.ClientOf(r))}
	if why := store.CheckPause(p.Reason, p.Until, c.opts.Now()); why != "" {
		c.render(w, r, http.StatusBadRequest, "error", page{Title: "Pause", Message: "The pause's " + why + "."})
		return
	}
	if p, err = c.q.PauseTarget(r.Context(), p); err != nil {
		c.fail(w, r, err)
		return
	}
	if c.opts.Pauses != nil {
		c.opts.Pauses.Poke()
	}
	c.log.Info("target paused by an operator", "sender", sender, "target", target, "until", p.Until, "reason", p.Reason, "by", p.By)
	http.Redirect(w, r, targetURL(sender, target)+"?paused=1", http.StatusSeeOther)
}

// resumeTarget ends a target's pause, as POST …/targets/{target}/resume
// does. The target's page then says so.
func (c *Console) resumeTarget(w http.ResponseWriter, r *http.Request) {
	sd, target, ok := c.formTarget(w, r)
	if !ok {
		return
	}
	sender := sd.Name
	p, was, err := c.q.ResumeTarget(r.Context(), sender, target)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	if c.opts.Pauses != nil {
		c.opts.Pauses.Poke()
	}
	if was {
		c.log.Info("target resumed by an operator", "sender", sender, "target", target, "paused_since", p.Since, "reason", p.Reason,
			"by", store.PausedBy(access.Name(r.Context()), "console", c.opts.Limiter.ClientOf(r)))
	}
	http.Redirect(w, r, targetURL(sender, target)+"?resumed=1", http.StatusSeeOther)
}

// skipForward skips the failed forward (the form's event_id) that holds
// its ordering key, as POST …/forwards/{event_id}/skip does. The target's
// page then says so, or why not.
func (c *Console) skipForward(w http.ResponseWriter, r *http.Request) {
	sd, target, ok := c.formTarget(w, r)
	if !ok {
		return
	}
	id, err := uuid.Parse(r.PostFormValue("event_id"))
	if err != nil {
		c.render(w, r, http.StatusBadRequest, "error", page{Title: "Skip", Message: "The form names no event to skip."})
		return
	}
	k, err := c.q.SkipBlocked(r.Context(), sd.Name, target, id)
	if errors.Is(err, store.ErrNotBlocked) {
		c.render(w, r, http.StatusConflict, "error", page{Title: "Skip", Message: "This forward does not hold its ordering key (any more): only a forward that failed for good can be skipped."})
		return
	}
	if err != nil {
		c.fail(w, r, err)
		return
	}
	c.log.Info("ordered forward skipped by an operator", "sender", sd.Name, "target", target, "event_id", id, "released", k.Waiting)
	http.Redirect(w, r, targetURL(sd.Name, target)+"?skipped="+strconv.FormatInt(k.Waiting, 10), http.StatusSeeOther)
}

// formTarget returns the configured sender and target a form was posted
// for. When either is missing, it has answered 404 and ok is false.
func (c *Console) formTarget(w http.ResponseWriter, r *http.Request) (sd *config.Sender, target string, ok bool) {
	sender, target := param(r, "sender"), param(r, "target")
	sd, ok = c.config().Sender(sender)
	if !ok {
		c.notFound(w, r, "No sender with this name is configured.")
		return nil, "", false
	}
	if _, ok := sd.Target(target); !ok {
		c.notFound(w, r, "This sender has no target with this name.")
		return nil, "", false
	}
	return sd, target, true
}
