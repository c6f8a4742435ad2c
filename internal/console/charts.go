package console

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/hookgate/hookgate/internal/store"
)

// The overview's charts: bar charts drawn as inline SVG by the server (the
// CSP allows no script), from the per-minute counts of traffic_minutes
// (the last hour) and the per-hour counts of traffic_hours (the last day).
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
	// P50 and P95 are the bucket's estimated latency quantiles (targets
	// only), "" without attempts; rendered as data-p50-ms, data-p95-ms,
	// and drawn as ticks across the bar at heights P50Y and P95Y (so that
	// a lone bucket shows them too).
	P50, P95   string
	P50Y, P95Y float64
}

// chart is one span's bar chart of a sender or a target.
type chart struct {
	Span, Label string
	Kinds       []string // stacking order, bottom first (the legend)
	Bars        []bar
	Max         int64
	Total       map[string]int64
	// P50Line and P95Line are the polylines of the estimated latency
	// quantiles per bucket (targets only), "" when no bucket has
	// attempts; MaxLatencyMS is their top (the largest p95).
	P50Line, P95Line string
	MaxLatencyMS     int64
	// P50 and P95 are the quantiles of the whole span (latency.go).
	P50, P95 latency
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
func buildChart(sp chartSpan, now time.Time, counts []store.TrafficBucket, kinds []string, withLatency bool) chart {
	end := now.UTC().Truncate(sp.Width).Add(sp.Width) // the current bucket is the last
	start := end.Add(-time.Duration(sp.Count) * sp.Width)
	ch := chart{Span: sp.Name, Label: sp.Label, Kinds: kinds, Total: map[string]int64{}}
	ch.Bars = make([]bar, sp.Count)
	sumMS := make([]int64, sp.Count)
	hists := make([][]int64, sp.Count)
	spanHist := make([]int64, store.LatencyBuckets)
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
		if len(c.Hist) == store.LatencyBuckets {
			if hists[i] == nil {
				hists[i] = make([]int64, store.LatencyBuckets)
			}
			for j, n := range c.Hist {
				hists[i][j] += n
				spanHist[j] += n
			}
		}
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
	var (
		means = make([]int64, sp.Count)
		p50s  = make([]latency, sp.Count)
		p95s  = make([]latency, sp.Count)
	)
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
		if withLatency && b.Total > 0 {
			means[i] = sumMS[i] / b.Total
			p50s[i], p95s[i] = quantile(hists[i], 0.5), quantile(hists[i], 0.95)
			b.P50, b.P95 = p50s[i].String(), p95s[i].String()
			if b.P50 != "" {
				title += fmt.Sprintf(", latency p50 %s, p95 %s", p50s[i].Text(), p95s[i].Text())
			}
			title += fmt.Sprintf(", mean %d ms", means[i])
			if top := int64(math.Ceil(p95s[i].ms)); top > ch.MaxLatencyMS {
				ch.MaxLatencyMS = top
			}
		}
		b.Title = title
	}
	if withLatency {
		var p50Points, p95Points []string
		for i := range ch.Bars {
			if p50s[i].n == 0 {
				continue
			}
			x := ch.Bars[i].X + ch.Bars[i].W/2
			p50Points = append(p50Points, fmt.Sprintf("%.1f,%.1f", x, latencyY(p50s[i].ms, ch.MaxLatencyMS)))
			p95Points = append(p95Points, fmt.Sprintf("%.1f,%.1f", x, latencyY(p95s[i].ms, ch.MaxLatencyMS)))
		}
		ch.P50Line, ch.P95Line = strings.Join(p50Points, " "), strings.Join(p95Points, " ")
		for i := range ch.Bars {
			if p50s[i].n != 0 {
				ch.Bars[i].P50Y, ch.Bars[i].P95Y = latencyY(p50s[i].ms, ch.MaxLatencyMS), latencyY(p95s[i].ms, ch.MaxLatencyMS)
			}
		}
		ch.P50, ch.P95 = quantile(spanHist, 0.5), quantile(spanHist, 0.95)
	}
	return ch
}

// latencyY is the height of ms in a chart whose top is maxMS.
func latencyY(ms float64, maxMS int64) float64 {
	if maxMS <= 0 {
		return chartH
	}
	return chartH - ms*(chartH-chartTop)/float64(maxMS)
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
