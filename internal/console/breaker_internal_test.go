package console

import (
	"strings"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/store"
)

// TestBuildTimeline: the state at the span's start comes from the
// transition before it; an hour of probe rounds every few seconds becomes
// one open segment (not hundreds of invisible ones) between wide closed
// ones; the segment of the current state is kept however short; the
// openings and closings get marks; the day draws half-open as open.
func TestBuildTimeline(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 8, 30, 0, 0, time.UTC)
	tr := func(at time.Time, from, to string) store.BreakerTransition {
		return store.BreakerTransition{At: at, From: from, State: to, Reason: from + " to " + to}
	}
	opened := now.Add(-40 * time.Minute)
	trs := []store.BreakerTransition{tr(now.Add(-3*time.Hour), "half-open", "closed"), tr(opened, "closed", "open")}
	at := opened
	for range 400 { // 20 minutes of failed rounds, 3s apart
		at = at.Add(1500 * time.Millisecond)
		trs = append(trs, tr(at, "open", "half-open"))
		at = at.Add(1500 * time.Millisecond)
		trs = append(trs, tr(at, "half-open", "open"))
	}
	trs = append(trs, tr(at.Add(time.Second), "open", "half-open"), tr(at.Add(time.Second+time.Millisecond), "half-open", "closed"),
		tr(now.Add(-2*time.Second), "closed", "open")) // opened again just now
	hour := buildTimeline(chartSpans[0], now, trs, store.BreakerOpen, false, false)
	var states []string
	for _, s := range hour.Segments {
		states = append(states, s.State)
	}
	if got := strings.Join(states, ","); got != "closed,open,closed,open" {
		t.Errorf("hour segments %s, want closed,open,closed,open", got)
	}
	if s := hour.Segments[1]; !s.From.Equal(opened) || s.To.Sub(opened) < 20*time.Minute {
		t.Errorf("the outage's segment runs %s to %s, want from %s for 20 minutes", s.From, s.To, opened)
	}
	if last := hour.Segments[3]; last.W >= minSegment || last.DrawW() != minSegment || !last.To.Equal(now) {
		t.Errorf("the current opening: %+v, want a short segment drawn %v wide, ending now", last, minSegment)
	}
	var marks []string
	for _, m := range hour.Marks {
		marks = append(marks, m.State)
	}
	if got := strings.Join(marks, ","); got != "open,closed,open" {
		t.Errorf("hour marks %s, want open,closed,open", got)
	}
	day := buildTimeline(chartSpans[1], now, []store.BreakerTransition{tr(opened, "closed", "open"), tr(at.Add(time.Second+time.Millisecond), "half-open", "closed")}, store.BreakerClosed, true, false)
	states = states[:0]
	for _, s := range day.Segments {
		states = append(states, s.State)
	}
	if got := strings.Join(states, ","); got != "closed,open,closed" {
		t.Errorf("day segments %s, want closed,open,closed", got)
	}
	if empty := buildTimeline(chartSpans[0], now, nil, store.BreakerOpen, false, false); len(empty.Segments) != 1 || empty.Segments[0].State != "open" {
		t.Errorf("no history, breaker open: %+v, want one open segment", empty.Segments)
	}
}
