package console

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hookgate/hookgate/internal/store"
)

// The charts are bars drawn as inline SVG on the server, as the CSP allows
// no script. The last hour is drawn from per-minute counts, the last day
// from per-hour counts. Each bar carries its counts in data-* attributes
// and a <title>, so that a reader and a test see the same numbers.

// Chart geometry, in SVG user units. The SVG scales to its box.
const (
	chartW, chartH = 600.0, 120.0
	chartTop       = 4.0 // room above the tallest bar
	// chartAxisH is the band under the bars for the time labels. The SVG
	// scales uniformly, so its text is never stretched.
	chartAxisH = 16.0
)

// ViewH is the height of a chart's SVG (its viewBox).
func (chart) ViewH() float64 { return chartH + chartAxisH }

// chartSpan is one of the two spans a chart shows.
type chartSpan struct {
	Name   string // "hour" or "day", in data-span
	Label  string
	Width  time.Duration
	Count  int
	Layout string // of a bucket's start in its title
	// Every is how many buckets apart the time labels are, counted from
	// midnight UTC.
	Every int
}

// chartSpans are the spans each chart is drawn over.
var chartSpans = []chartSpan{
	{Name: "hour", Label: "Last hour, per minute", Width: time.Minute, Count: 60, Layout: "15:04", Every: 10},
	{Name: "day", Label: "Last day, per hour", Width: time.Hour, Count: 24, Layout: "Jan 2 15:04", Every: 4},
}

// axisLabel is a label of a chart's axis: a time under the bars, or a
// value at the height of its grid line.
type axisLabel struct {
	X, Y   float64
	Text   string
	Anchor string // text-anchor: start, middle or end
}

// clipMark marks a bucket whose latency is above the chart's scale. It is
// drawn at the top.
type clipMark struct {
	X     float64
	Title string
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
	// P50 and P95 are the bucket's estimated latency quantiles, "" without
	// attempts. They are rendered as data-p50-ms and data-p95-ms, and as
	// ticks across the bar at P50Y and P95Y, so a lone bucket shows them.
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
	// Top is the top of the count scale: Max rounded up to 1, 2 or 5
	// times a power of ten.
	Top int64
	// P50Line and P95Line are the latency quantiles' polylines, "" when no
	// bucket has attempts. LatencyTopMS is their scale's top. A bucket
	// above it is drawn at the top and marked in Clipped.
	P50Line, P95Line string
	LatencyTopMS     float64
	Clipped          []clipMark
	// TimeLabels are the time axis's labels in UTC. CountLabels are the
	// count scale's, on the left, and LatencyLabels the latency scale's.
	TimeLabels, CountLabels, LatencyLabels []axisLabel
	// P50 and P95 are the whole span's quantiles.
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

// dataAttr is a data-* attribute of a bar.
type dataAttr struct {
	Name  string
	Value int64
}

// buildChart draws the buckets of one span ending at now from counts,
// stacking kinds. The counts are one target's or the sender's.
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
	ch.Top = int64(niceCeil(float64(ch.Max)))
	scale := 0.0
	if ch.Top > 0 {
		scale = (chartH - chartTop) / float64(ch.Top)
		ch.CountLabels = valueLabels(float64(ch.Top), 2, "start", func(v float64) string { return strconv.FormatInt(int64(v), 10) })
	}
	for i := 0; i < sp.Count; i++ {
		at := start.Add(time.Duration(i) * sp.Width)
		if n := at.Sub(at.Truncate(24*time.Hour)) / sp.Width; int(n)%sp.Every != 0 {
			continue
		}
		l := axisLabel{X: float64(i) * slot, Y: chartH + chartAxisH - 3, Text: at.Format("15:04"), Anchor: "middle"}
		if sp.Width >= time.Hour && at.Hour() == 0 {
			l.Text = at.Format("Jan 2")
		}
		switch {
		case l.X < 20:
			l.Anchor = "start"
		case l.X > chartW-20:
			l.Anchor = "end"
		}
		ch.TimeLabels = append(ch.TimeLabels, l)
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
			parts = append(parts, fmt.Sprintf("%s %d", kindLabel(k), n))
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
		}
		b.Title = title
	}
	if withLatency {
		ch.LatencyTopMS = latencyScale(p95s)
		if ch.LatencyTopMS > 0 {
			ch.LatencyLabels = valueLabels(ch.LatencyTopMS, 2, "end", formatMS)
		}
		var p50Points, p95Points []string
		for i := range ch.Bars {
			if p50s[i].n == 0 {
				continue
			}
			b := &ch.Bars[i]
			x := b.X + b.W/2
			b.P50Y, b.P95Y = latencyY(p50s[i].ms, ch.LatencyTopMS), latencyY(p95s[i].ms, ch.LatencyTopMS)
			p50Points = append(p50Points, fmt.Sprintf("%.1f,%.1f", x, b.P50Y))
			p95Points = append(p95Points, fmt.Sprintf("%.1f,%.1f", x, b.P95Y))
			if p95s[i].ms > ch.LatencyTopMS {
				ch.Clipped = append(ch.Clipped, clipMark{X: x, Title: fmt.Sprintf("%s UTC: latency p50 %s, p95 %s: above the scale's top, %s",
					start.Add(time.Duration(i)*sp.Width).Format(sp.Layout), p50s[i].Text(), p95s[i].Text(), formatMS(ch.LatencyTopMS))})
			}
		}
		ch.P50Line, ch.P95Line = strings.Join(p50Points, " "), strings.Join(p95Points, " ")
		ch.P50, ch.P95 = quantile(spanHist, 0.5), quantile(spanHist, 0.95)
	}
	return ch
}

// kindLabel is how a chart names a kind of count. A target's counts are of
// attempts, not forwards, and say so.
func kindLabel(kind string) string {
	switch kind {
	case store.TrafficDelivered:
		return "delivered attempts"
	case store.TrafficFailed:
		return "failed attempts"
	}
	return kind
}

// latencyScale returns the top of a latency scale in ms from the buckets'
// p95s. It is the largest p95, capped at [latencySpike] times their 75th
// percentile. It is rounded up to 1, 2 or 5 times a power of ten, and is 0
// without attempts.
func latencyScale(p95s []latency) float64 {
	var vals []float64
	for _, l := range p95s {
		if l.n != 0 {
			vals = append(vals, l.ms)
		}
	}
	if len(vals) == 0 {
		return 0
	}
	slices.Sort(vals)
	top := vals[len(vals)-1]
	// The 75th percentile by nearest rank. With 3 buckets or fewer it is
	// the largest, and nothing is clipped.
	q := vals[int(math.Ceil(0.75*float64(len(vals))))-1]
	if bound := latencySpike * q; top > bound {
		top = bound
	}
	return niceCeil(top)
}

// latencySpike is how far above most buckets' p95 a latency scale goes
// before it clips. One slow bucket never flattens the others.
const latencySpike = 4

// niceCeil rounds v > 0 up to 1, 2 or 5 times a power of ten; 0 stays 0.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 0
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if n := m * p; n >= v*(1-1e-9) {
			return n
		}
	}
	return 10 * p
}

// valueLabels returns the labels of a scale from 0 to top, at each n-th of
// it, at the height of their grid lines.
func valueLabels(top float64, n int, anchor string, format func(float64) string) []axisLabel {
	x := 3.0
	if anchor == "end" {
		x = chartW - 3
	}
	var out []axisLabel
	for i := n; i >= 1; i-- {
		v := top * float64(i) / float64(n)
		if anchor == "start" && v != math.Trunc(v) { // counts are whole
			continue
		}
		y := chartH - v*(chartH-chartTop)/top
		out = append(out, axisLabel{X: x, Y: y, Text: format(v), Anchor: anchor})
	}
	return out
}

// formatMS shows a latency scale's value: "20 ms", "0.5 ms", "1.5 s".
func formatMS(ms float64) string {
	if ms >= 1000 {
		return strconv.FormatFloat(ms/1000, 'f', -1, 64) + " s"
	}
	return strconv.FormatFloat(ms, 'f', -1, 64) + " ms"
}

// latencyY is the height of ms in a chart whose latency scale's top is
// topMS; above it, the top.
func latencyY(ms, topMS float64) float64 {
	if topMS <= 0 {
		return chartH
	}
	return chartH - min(ms, topMS)*(chartH-chartTop)/topMS
}

// Kinds of the two charts, in stacking order.
var (
	senderKinds = []string{store.TrafficAccepted, store.TrafficReplayed, store.TrafficRefused}
	targetKinds = []string{store.TrafficDelivered, store.TrafficFailed}
)

// senderCharts reads a sender's last day of counts. It returns the
// sender's charts, hour then day, and each target's charts by name.
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
	cfg := c.config()
	for i := range cfg.Senders {
		if cfg.Senders[i].Name == sender {
			var out []string
			for _, t := range cfg.Senders[i].Forward {
				out = append(out, t.Name)
			}
			return out
		}
	}
	return nil
}
