package console

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/hookgate/hookgate/internal/store"
)

// The overview's charts: bar charts drawn as inline SVG by the server (the
// CSP allows no script), from the per-minute counts of traffic_minutes.
// Each bar carries its counts in data-* attributes and a <title> (shown
// on hover), so that a reader and a test see the same numbers.

// Chart geometry, in SVG user units (the SVG scales to its box).
const (
	chartW, chartH = 600.0, 120.0
	chartTop       = 4.0 // room above the tallest bar
)

// chartSpan is one of the two spans a chart shows.
type chartSpan struct {
	Name   string // "hour" or "day", in data-span
	Label  string
	Width  time.Duration
	Count  int
	Layout string // of a bucket's start in its title
}

var chartSpans = []chartSpan{
	{Name: "hour", Label: "Last hour, per minute", Width: time.Minute, Count: 60, Layout: "15:04"},
	{Name: "day", Label: "Last day, per hour", Width: time.Hour, Count: 24, Layout: "Jan 2 15:04"},
}

// barPart is one coloured segment of a bar.
type barPart struct {
	Class     string
	Y, Height float64
}

// bar is one bucket.
type bar struct {
	X, W  float64
	Title string
	Data  map[string]int64 // kind → count; rendered as data-<kind>
	Parts []barPart
	Total int64
}

// chart is one span's bar chart of a sender or a target.
type chart struct {
	Span, Label string
	Kinds       []string // stacking order, bottom first (the legend)
	Bars        []bar
	Max         int64
	Total       map[string]int64
	// Latency is the polyline of the mean latency per bucket (targets
	// only), "" when no bucket has one; MaxLatencyMS its top.
	Latency      string
	MaxLatencyMS int64
}

// DataAttrs renders the bar's counts as data-* attributes.
func (b bar) DataAttrs(kinds []string) []dataAttr {
	out := make([]dataAttr, 0, len(kinds))
	for _, k := range kinds {
		out = append(out, dataAttr{Name: k, Value: b.Data[k]})
	}
	return out
}

type dataAttr struct {
	Name  string
	Value int64
}

// buildChart draws the buckets of one span ending at now from counts
// (of one target, "" for the sender's deliveries), stacking kinds.
func buildChart(sp chartSpan, now time.Time, counts []store.TrafficBucket, kinds []string, latency bool) chart {
	end := now.UTC().Truncate(sp.Width).Add(sp.Width) // the current bucket is the last
	start := end.Add(-time.Duration(sp.Count) * sp.Width)
	ch := chart{Span: sp.Name, Label: sp.Label, Kinds: kinds, Total: map[string]int64{}}
	ch.Bars = make([]bar, sp.Count)
	sumMS := make([]int64, sp.Count)
	slot := chartW / float64(sp.Count)
	for i := range ch.Bars {
		ch.Bars[i] = bar{X: float64(i)*slot + slot*0.1, W: slot * 0.8, Data: map[string]int64{}}
	}
	for _, c := range counts {
		i := int(c.Start.Sub(start) / sp.Width)
		if c.Start.Before(start) || i >= sp.Count {
			continue
		}
		ch.Bars[i].Data[c.Kind] += c.N
		ch.Bars[i].Total += c.N
		ch.Total[c.Kind] += c.N
		sumMS[i] += c.SumMS
	}
	for i := range ch.Bars {
		if ch.Bars[i].Total > ch.Max {
			ch.Max = ch.Bars[i].Total
		}
	}
	scale := 0.0
	if ch.Max > 0 {
		scale = (chartH - chartTop) / float64(ch.Max)
	}
	var points []string
	means := make([]int64, sp.Count)
	for i := range ch.Bars {
		b := &ch.Bars[i]
		at := start.Add(time.Duration(i) * sp.Width)
		y := chartH
		var parts []string
		for _, k := range kinds {
			n := b.Data[k]
			parts = append(parts, fmt.Sprintf("%s %d", k, n))
			if n == 0 {
				continue
			}
			h := float64(n) * scale
			y -= h
			b.Parts = append(b.Parts, barPart{Class: "bar-" + k, Y: y, Height: h})
		}
		title := at.Format(sp.Layout) + " UTC: " + strings.Join(parts, ", ")
		if latency && b.Total > 0 {
			means[i] = sumMS[i] / b.Total
			title += fmt.Sprintf(", mean latency %d ms", means[i])
			if means[i] > ch.MaxLatencyMS {
				ch.MaxLatencyMS = means[i]
			}
		}
		b.Title = title
	}
	if latency {
		for i := range ch.Bars {
			if ch.Bars[i].Total == 0 {
				continue
			}
			y := chartH
			if ch.MaxLatencyMS > 0 {
				y = chartH - float64(means[i])*(chartH-chartTop)/float64(ch.MaxLatencyMS)
			}
			points = append(points, fmt.Sprintf("%.1f,%.1f", ch.Bars[i].X+ch.Bars[i].W/2, y))
		}
		if len(points) > 0 {
			ch.Latency = strings.Join(points, " ")
		}
	}
	return ch
}

// Kinds of the two charts, in stacking order.
var (
	senderKinds = []string{store.TrafficAccepted, store.TrafficReplayed, store.TrafficRefused}
	targetKinds = []string{store.TrafficDelivered, store.TrafficFailed}
)

// senderCharts reads a sender's last day of counts and returns its charts
// (hour, day) and each of its targets' charts, by target name.
func (c *Console) senderCharts(ctx context.Context, sender string, now time.Time) ([]chart, map[string][]chart, error) {
	var senderOut []chart
	targets := map[string][]chart{}
	for _, sp := range chartSpans {
		end := now.UTC().Truncate(sp.Width).Add(sp.Width)
		counts, err := c.q.Traffic(ctx, sender, end.Add(-time.Duration(sp.Count)*sp.Width), end, sp.Width)
		if err != nil {
			return nil, nil, err
		}
		byTarget := map[string][]store.TrafficBucket{}
		for _, b := range counts {
			byTarget[b.Target] = append(byTarget[b.Target], b)
		}
		senderOut = append(senderOut, buildChart(sp, now, byTarget[""], senderKinds, false))
		for _, t := range c.senderTargets(sender) {
			targets[t] = append(targets[t], buildChart(sp, now, byTarget[t], targetKinds, true))
		}
	}
	return senderOut, targets, nil
}

// senderTargets returns the names of sender's forward targets.
func (c *Console) senderTargets(sender string) []string {
	for i := range c.cfg.Senders {
		if c.cfg.Senders[i].Name == sender {
			var out []string
			for _, t := range c.cfg.Senders[i].Forward {
				out = append(out, t.Name)
			}
			return out
		}
	}
	return nil
}
