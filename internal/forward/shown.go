package forward

import (
	"maps"
	"slices"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/queue"
	"github.com/hookgate/hookgate/internal/redact"
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
const HeldTargetRemoved = "held: target removed from the configuration"

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
