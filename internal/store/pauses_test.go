package store

import (
	"net/netip"
	"strings"
	"testing"
	"time"
)

// PauseTarget stores a pause; pausing again keeps when it began and takes
// the new end, reason and author, unless the first had ended; ResumeTarget
// deletes it and says whether it held; TargetPausesOf and TargetPauses
// read them; DeleteEndedPauses deletes those whose end passed.
func TestTargetPauses(t *testing.T) {
	t.Parallel()
	s, _ := store(t)
	ctx := t.Context()
	first, err := s.PauseTarget(ctx, TargetPause{Sender: "acme", Target: "orders", Reason: "migration", By: PausedBy("ops-reader", "console", netip.MustParseAddr("10.0.0.7"))})
	if err != nil {
		t.Fatal(err)
	}
	if first.Since.IsZero() || !first.Until.IsZero() || first.Reason != "migration" || first.By != "ops-reader via console (10.0.0.7)" || !first.Active(time.Now().Add(time.Hour)) {
		t.Errorf("first pause: %+v; want one since now, without an end, with its reason and author", first)
	}
	until := time.Now().Add(time.Hour).UTC().Truncate(time.Microsecond)
	again, err := s.PauseTarget(ctx, TargetPause{Sender: "acme", Target: "orders", Until: until, Reason: "longer", By: "operator API (::1)"})
	if err != nil {
		t.Fatal(err)
	}
	if !again.Since.Equal(first.Since) || !again.Until.Equal(until) || again.Reason != "longer" || again.By != "operator API (::1)" {
		t.Errorf("paused again: %+v; want since %s kept, until %s, the new reason and author", again, first.Since, until)
	}
	if _, err := s.PauseTarget(ctx, TargetPause{Sender: "acme", Target: "ledger", Until: time.Now().Add(-time.Second)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PauseTarget(ctx, TargetPause{Sender: "other", Target: "orders"}); err != nil {
		t.Fatal(err)
	}
	of, err := s.TargetPausesOf(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if len(of) != 2 || !of["orders"].Until.Equal(until) || of["ledger"].Active(time.Now()) {
		t.Errorf("acme's pauses: %+v; want orders (until %s) and ledger (ended)", of, until)
	}
	all, err := s.TargetPauses(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 3 {
		t.Errorf("every pause: %+v; want 3", all)
	}

	// A pause that had ended is a new one when paused again.
	ended, err := s.PauseTarget(ctx, TargetPause{Sender: "acme", Target: "ledger"})
	if err != nil {
		t.Fatal(err)
	}
	if !ended.Until.IsZero() || !ended.Since.After(first.Since) {
		t.Errorf("paused again after its end: %+v; want a new start, after %s, and no end", ended, first.Since)
	}
	if _, err := s.PauseTarget(ctx, TargetPause{Sender: "acme", Target: "ledger", Until: time.Now().Add(-time.Second)}); err != nil {
		t.Fatal(err)
	}
	if n, err := s.DeleteEndedPauses(ctx); err != nil || n != 1 {
		t.Errorf("DeleteEndedPauses: %d, %v; want 1 (ledger's)", n, err)
	}

	p, ok, err := s.ResumeTarget(ctx, "acme", "orders")
	if err != nil || !ok || p.Reason != "longer" {
		t.Errorf("resume: %+v, %v, %v; want the pause that held", p, ok, err)
	}
	if _, ok, err := s.ResumeTarget(ctx, "acme", "orders"); err != nil || ok {
		t.Errorf("resume again: %v, %v; want nothing to resume", ok, err)
	}
	if of, err := s.TargetPausesOf(ctx, "acme"); err != nil || len(of) != 0 {
		t.Errorf("acme's pauses after the resume: %+v, %v; want none", of, err)
	}
}

// CheckPause refuses a reason over MaxPauseReason characters, with a
// control character or not UTF-8, and an end that is not in the future.
func TestCheckPause(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 5, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		reason string
		until  time.Time
		bad    string
	}{
		{"", time.Time{}, ""},
		{strings.Repeat("é", MaxPauseReason), now.Add(time.Second), ""},
		{strings.Repeat("é", MaxPauseReason+1), time.Time{}, "201 characters"},
		{"two\nlines", time.Time{}, "control character"},
		{"\xff", time.Time{}, "UTF-8"},
		{"", now, "not in the future"},
		{"", now.Add(-time.Hour), "not in the future"},
	} {
		got := CheckPause(c.reason, c.until, now)
		if c.bad == "" && got != "" || c.bad != "" && !strings.Contains(got, c.bad) {
			t.Errorf("CheckPause(%q, %s) = %q; want %q", c.reason, c.until, got, c.bad)
		}
	}
}
