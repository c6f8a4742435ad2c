package forward

import (
	"maps"
	"slices"
	"time"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/queue"
	"github.com/hookgate/hookgate/internal/redact"
	"github.com/hookgate/hookgate/internal/store"
)

// Shown is a forward as an operator sees it, in the API and the console.
// Its URL and last error are redacted.
type Shown struct {
	queue.Forward
	// URL is the target's URL, redacted, or "" when not known.
	URL string
	// Held is [HeldTargetRemoved] when the forward waits for its target to
	// be configured, or "".
	Held string
}

// HeldTargetRemoved says a forward waits because its target is not
// configured. It uses no attempt, and goes once the target is back.
const HeldTargetRemoved = "target removed from the configuration"

// Show returns f as an operator sees it. sender is nil when no longer
// configured. Every URL is redacted. A forward still in the outbox shows
// the max_attempts its job will get.
func Show(sender *config.Sender, f queue.Forward) Shown {
	var t *config.Target
	if sender != nil {
		if f.Target == "" && f.LegacyURL != "" {
			if lt, ok := sender.TargetByURL(f.LegacyURL); ok {
				f.Target = lt.Name
			}
		}
		t, _ = sender.Target(f.Target)
	}
	s := Shown{Forward: f}
	secretPath := t != nil && t.SecretPath
	if f.LegacyURL != "" { // errors recorded before targets had names may hold the URL
		s.URL = redact.URL(f.LegacyURL, secretPath)
		s.LastError = redact.URLInText(s.LastError, f.LegacyURL, secretPath)
	}
	if t != nil {
		s.URL = redact.URL(t.URL, t.SecretPath)
		s.LastError = redact.URLInText(s.LastError, t.URL, t.SecretPath)
		if f.JobID == 0 {
			s.MaxAttempts = t.MaxAttempts
		}
	}
	s.LegacyURL = ""
	if t == nil && f.State != queue.StateRunning && f.State.Unfinished() {
		s.Held = HeldTargetRemoved
	}
	if s.Held == "" {
		s.Held = f.Waiting
	}
	return s
}

// shownTime is how a time is shown in Held's words.
const shownTime = "2006-01-02 15:04:05.000 UTC"

// Held says why a target's waiting forwards wait though their attempt is
// due. It names an operator's pause, the breaker b, or a pause the target
// asked for. held is "" when nothing holds them. hint says when they go.
func Held(b store.BreakerState, paused *store.TargetPause, now time.Time) (held, hint string) {
	switch {
	case paused != nil:
		s := "paused by an operator since " + paused.Since.UTC().Format(shownTime)
		if paused.Reason != "" {
			s += " (" + paused.Reason + ")"
		}
		hint := "they go once the target is resumed"
		if !paused.Until.IsZero() {
			hint += ", or at " + paused.Until.UTC().Format(shownTime) + " when the pause ends"
		}
		return s, hint
	case b.State != store.BreakerClosed && b.State != "":
		s := "breaker " + b.State
		if !b.OpenedAt.IsZero() {
			s += " (open since " + b.OpenedAt.UTC().Format(shownTime) + ")"
		}
		return s, "a few go as each round of probes, the others once a probe is answered and the breaker closes"
	case b.PausedUntil.After(now):
		s := "paused until " + b.PausedUntil.UTC().Format(shownTime)
		if b.PauseReason != "" {
			s += " (" + b.PauseReason + ")"
		}
		return s, "the target asked for the pause with its Retry-After; they go once it ends"
	}
	return "", ""
}

// HeldByRate says a target's forwards wait for turns of its rate, as
// "rate 50/s", or "" when t has none. hint says when they go.
func HeldByRate(t *config.Target) (held, hint string) {
	if t == nil || t.Rate.IsZero() {
		return "", ""
	}
	return "rate " + t.Rate.String(), "they go in turn, no faster than the rate, which every process that forwards shares"
}

// ActivePause returns target's pause among pauses when it holds at now.
func ActivePause(pauses map[string]store.TargetPause, target string, now time.Time) *store.TargetPause {
	p, ok := pauses[target]
	if !ok || !p.Active(now) {
		return nil
	}
	return &p
}

// RemovedTargets returns the targets in counts that sd does not configure
// and that have unfinished forwards. Those forwards are held.
func RemovedTargets(sd *config.Sender, counts map[string]queue.Counts) []string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(counts)) {
		c := counts[name]
		if _, ok := sd.Target(name); !ok && c.Pending+c.Running+c.Retrying > 0 {
			out = append(out, name)
		}
	}
	return out
}
