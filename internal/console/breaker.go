package console

import (
	"context"
	"fmt"
	"time"

	"github.com/hookgate/hookgate/internal/store"
)

// A target's page shows its breaker history as inline SVG drawn on the
// server: one timeline per chart span, and a table of the latest
// transitions. Each worker process has its own breaker. Their transitions
// share one timeline in time order, and the table names their processes.

const (
	// minSegment is the narrowest segment drawn, in SVG units of a
	// 600-wide span. Narrower ones merge into a neighbour, which shows the
	// worse state.
	minSegment = 1.0
	// maxTransitions bounds the transitions read for one timeline, and
	// recentTransitions the table's.
	maxTransitions    = 5000
	recentTransitions = 50
)

// segment is a stretch of a timeline in one state.
type segment struct {
	X, W     float64
	State    string
	From, To time.Time
}

// DrawW is the segment's drawn width. It is at least minSegment, so that
// a short opening shows.
func (s segment) DrawW() float64 { return max(s.W, minSegment) }

// Title says what the segment shows, on hover.
func (s segment) Title() string {
	return fmt.Sprintf("%s from %s to %s UTC", s.State, s.From.UTC().Format("Jan 2 15:04:05"), s.To.UTC().Format("Jan 2 15:04:05"))
}

// mark is a transition drawn on a timeline: an opening or a closing.
type mark struct {
	X     float64
	State string
	Title string
}

// timeline is one span of a breaker's history.
type timeline struct {
	Span, Label string
	Segments    []segment
	Marks       []mark
	// Detail says which transitions are drawn. The hour draws every one.
	// The day draws openings and closings, and the probes between show as
	// open.
	Detail string
	// Truncated is set when the span had more than maxTransitions. Only
	// the newest are drawn, and the rest of the span stays blank.
	Truncated bool
}

// stateRank orders the states by how bad they are, for merging.
var stateRank = map[string]int{store.BreakerClosed: 0, store.BreakerHalfOpen: 1, store.BreakerOpen: 2}

// buildTimeline draws trs, oldest first, over sp ending with the charts'
// last bucket. The first transition may precede the span and give the
// state at its start. current is the breaker's state now.
func buildTimeline(sp chartSpan, now time.Time, trs []store.BreakerTransition, current string, openClose, truncated bool) timeline {
	end := now.UTC().Truncate(sp.Width).Add(sp.Width)
	start := end.Add(-time.Duration(sp.Count) * sp.Width)
	tl := timeline{Span: sp.Name, Label: "Last " + sp.Name, Detail: "every transition", Truncated: truncated}
	if openClose {
		tl.Detail = "openings and closings"
	}
	x := func(t time.Time) float64 {
		return float64(t.Sub(start)) / float64(end.Sub(start)) * chartW
	}
	// The state at the start of the span.
	state, from := current, start
	switch {
	case len(trs) > 0 && trs[0].At.Before(start):
		state = trs[0].State
		trs = trs[1:]
	case len(trs) > 0:
		state = trs[0].From
	}
	if truncated && len(trs) > 0 {
		from = trs[0].At // unknown before
		state = trs[0].From
	}
	if openClose && state == store.BreakerHalfOpen {
		state = store.BreakerOpen
	}
	var raw []segment
	lastMark := map[string]float64{}
	for _, tr := range trs {
		at := tr.At
		if at.Before(from) {
			at = from
		}
		if at.After(now) {
			at = now
		}
		if at.After(from) {
			raw = append(raw, segment{X: x(from), W: x(at) - x(from), State: state, From: from, To: at})
		}
		state, from = tr.State, at
		if openClose && state == store.BreakerHalfOpen {
			state = store.BreakerOpen
		}
		if tr.From == store.BreakerClosed || tr.State == store.BreakerClosed {
			mx := x(at)
			if last, ok := lastMark[tr.State]; !ok || mx-last >= minSegment {
				lastMark[tr.State] = mx
				tl.Marks = append(tl.Marks, mark{X: mx, State: tr.State,
					Title: fmt.Sprintf("%s UTC: %s → %s: %s", tr.At.UTC().Format("Jan 2 15:04:05.000"), tr.From, tr.State, tr.Reason)})
			}
		}
	}
	if now.After(from) {
		raw = append(raw, segment{X: x(from), W: x(now) - x(from), State: state, From: from, To: now})
	}
	// Runs of segments narrower than minSegment, such as a breaker's
	// probes, become one segment of their worst state. Wider segments
	// stay, and so does the last one, the state now.
	for i, sg := range raw {
		n := len(tl.Segments)
		if n > 0 {
			last := &tl.Segments[n-1]
			if last.State == sg.State || last.W < minSegment && sg.W < minSegment && i < len(raw)-1 {
				if stateRank[sg.State] > stateRank[last.State] {
					last.State = sg.State
				}
				last.W = sg.X + sg.W - last.X
				last.To = sg.To
				continue
			}
		}
		tl.Segments = append(tl.Segments, sg)
	}
	// Neighbours that ended up in the same state are one segment.
	merged := tl.Segments[:0]
	for _, sg := range tl.Segments {
		if n := len(merged); n > 0 && merged[n-1].State == sg.State {
			merged[n-1].W = sg.X + sg.W - merged[n-1].X
			merged[n-1].To = sg.To
			continue
		}
		merged = append(merged, sg)
	}
	tl.Segments = merged
	return tl
}

// breakerView is the target page's breaker history.
type breakerView struct {
	Timelines []timeline
	Recent    []store.BreakerTransition // newest first
	// Opening is the transition that opened a breaker not closed yet. It
	// is pinned above Recent, which then leaves it out.
	Opening *store.BreakerTransition
}

// breakerHistory reads sender's target's breaker history for its page;
// clean redacts the target's URL from the reasons.
func (c *Console) breakerHistory(ctx context.Context, sender, target string, b store.BreakerState, now time.Time, clean func(string) string) (breakerView, error) {
	var v breakerView
	current := b.State
	for _, sp := range chartSpans {
		end := now.UTC().Truncate(sp.Width).Add(sp.Width)
		start := end.Add(-time.Duration(sp.Count) * sp.Width)
		openClose := sp.Name != "hour"
		trs, err := c.q.BreakerHistory(ctx, sender, target, start, now, maxTransitions, openClose)
		if err != nil {
			return v, err
		}
		for i := range trs {
			trs[i].Reason = clean(trs[i].Reason)
		}
		inSpan := len(trs)
		if inSpan > 0 && trs[0].At.Before(start) {
			inSpan--
		}
		v.Timelines = append(v.Timelines, buildTimeline(sp, now, trs, current, openClose, inSpan >= maxTransitions))
	}
	recent, err := c.q.BreakerHistory(ctx, sender, target, now.Add(-store.BreakerHistoryRetention), now, recentTransitions, false)
	if err != nil {
		return v, err
	}
	if len(recent) > 0 && recent[0].At.Before(now.Add(-store.BreakerHistoryRetention)) {
		recent = recent[1:]
	}
	if current != store.BreakerClosed {
		at := b.OpenedAt
		if at.IsZero() || at.After(now) {
			at = now
		}
		// opened_at is the opening transition's time. A millisecond more
		// leaves no doubt about rounding.
		tr, ok, err := c.q.BreakerOpening(ctx, sender, target, at.Add(time.Millisecond))
		if err != nil {
			return v, err
		}
		if ok {
			tr.Reason = clean(tr.Reason)
			v.Opening = &tr
		}
	}
	for i := len(recent) - 1; i >= 0; i-- {
		if o := v.Opening; o != nil && recent[i].At.Equal(o.At) && recent[i].Process == o.Process && recent[i].Seq == o.Seq {
			continue
		}
		recent[i].Reason = clean(recent[i].Reason)
		v.Recent = append(v.Recent, recent[i])
	}
	return v, nil
}
