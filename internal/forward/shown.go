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

// Shown is a forward as an operator sees it (the JSON API and the console
// alike): its target named, its URL and last error redacted.
type Shown struct {
	queue.Forward
	// URL is the target's URL as configured now, redacted; for a job of a
	// version that named targets by URL and whose target is gone, that URL
	// redacted; "" when neither is known.
	URL string
	// Held says why an unfinished forward that is not running waits
	// whatever its schedule: HeldTargetRemoved when its target is not
	// configured; "" otherwise (the breaker and pauses are the worker
	// processes', which the caller reads from the database).
	Held string
}

// HeldTargetRemoved is how an operator is told that a forward waits
// because its target is not in the configuration in force: removed by a
// reload (or not yet added to this process's). It waits with its attempts
// unused, and is sent once a target of that name is configured again.
const HeldTargetRemoved = "target removed from the configuration"

// Show returns f, a forward of an event of sender (nil when the sender is no
// longer configured), as an operator sees it: a job that named its target
// by URL gets the target's name; the URL and every URL in the last error are
// redacted (package redact); a forward still in the outbox gets the
// max_attempts its job will get from the relay; an unfinished one whose
// target is not configured is held (HeldTargetRemoved).
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
	return s
}

// shownTime is how a time is shown in Held's words.
const shownTime = "2006-01-02 15:04:05.000 UTC"

// Held says why the unfinished forwards of a target (but those running)
// wait though their attempt is due, for the JSON API and the console
// alike: an operator's pause of it (paused, nil when none holds), and
// since when; or its breaker b, and since when; or, while it is closed, a
// pause the target asked for (a 429 or 503 with Retry-After) that has not
// ended at now, and until when. held is "" when none holds them. A
// forward held that way stays pending (or retrying) with its attempts
// unused: the worker snoozes it until the operator resumes the target (or
// the pause's end), until a round of probes lets it through or a probe
// closes the breaker, or until the target's pause ends. hint says when
// held forwards go.
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

// HeldByRate says that the unfinished forwards of t (but those running)
// wait for their turns of its rate: "rate 50/s"; "" when t has none. hint
// says when they go.
func HeldByRate(t *config.Target) (held, hint string) {
	if t == nil || t.Rate.IsZero() {
		return "", ""
	}
	return "rate " + t.Rate.String(), "they go in turn, no faster than the rate, which every process that forwards shares"
}

// ActivePause returns the pause of target among pauses (by target name)
// when it holds at now, nil otherwise.
func ActivePause(pauses map[string]store.TargetPause, target string, now time.Time) *store.TargetPause {
	p, ok := pauses[target]
	if !ok || !p.Active(now) {
		return nil
	}
	return &p
}

// RemovedTargets returns, by name, the targets of counts (sd's forwards by
// target: queue.Jobs.CountForwards) that sd does not have and that have
// unfinished forwards: targets removed by a reload, whose forwards are held
// (HeldTargetRemoved) until a target of that name is configured again.
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
