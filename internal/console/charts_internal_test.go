package console

import (
	"regexp"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/store"
)

// TestChartAxesAndRobustLatencyScale: an hour of attempts taking about
// 3 ms with one minute at about 1 s: the latency scale ends at a few
// times the usual p95 (not at the spike, which would flatten the other
// minutes into the baseline); the spike's minute is drawn at the top and
// marked. The time axis is labelled every 10 minutes (UTC), the bars'
// scale with round counts.
func TestChartAxesAndRobustLatencyScale(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 8, 30, 20, 0, time.UTC)
	end := now.Truncate(time.Minute).Add(time.Minute)
	var counts []store.TrafficBucket
	for i := range 60 {
		h := make([]int64, store.LatencyBuckets)
		ms := 3 * time.Millisecond
		if i == 30 {
			ms = time.Second
		}
		h[store.LatencyBucket(ms)] = 7
		counts = append(counts, store.TrafficBucket{Target: "t", Kind: store.TrafficDelivered, Start: end.Add(time.Duration(i-60) * time.Minute),
			N: 7, SumMS: 7 * ms.Milliseconds(), Hist: h})
	}
	ch := buildChart(chartSpans[0], now, counts, targetKinds, true)
	if ch.LatencyTopMS <= 0 || ch.LatencyTopMS > 20 {
		t.Errorf("the latency scale's top is %g ms, want a few times the usual 3 ms (not the 1 s spike)", ch.LatencyTopMS)
	}
	if len(ch.Clipped) != 1 {
		t.Errorf("%d buckets marked above the scale, want the spike's", len(ch.Clipped))
	}
	for i, b := range ch.Bars {
		if i != 30 && chartH-b.P50Y < 10 {
			t.Errorf("bucket %d: its p50 is drawn %.1f above the baseline: flattened", i, chartH-b.P50Y)
		}
	}
	if ch.Bars[30].P95Y != chartTop {
		t.Errorf("the spike's p95 is drawn at %.1f, want the top, %.1f", ch.Bars[30].P95Y, chartTop)
	}
	if ch.Top != 10 || len(ch.CountLabels) != 2 || ch.CountLabels[0].Text != "10" || ch.CountLabels[1].Text != "5" {
		t.Errorf("the bars' scale: top %d, labels %+v; want 10 (7 rounded up), labelled 10 and 5", ch.Top, ch.CountLabels)
	}
	hhmm := regexp.MustCompile(`^\d\d:\d0$`)
	if len(ch.TimeLabels) != 6 {
		t.Errorf("%d time labels, want 6 (every 10 minutes): %+v", len(ch.TimeLabels), ch.TimeLabels)
	}
	for _, l := range ch.TimeLabels {
		if !hhmm.MatchString(l.Text) {
			t.Errorf("time label %q, want HH:M0", l.Text)
		}
	}
	if len(ch.LatencyLabels) == 0 {
		t.Error("no latency scale labels")
	}
	// Without a spike there is no clipping: the scale holds every bucket.
	ch = buildChart(chartSpans[0], now, counts[:30], targetKinds, true)
	if len(ch.Clipped) != 0 || ch.LatencyTopMS < 3 {
		t.Errorf("without the spike: top %g ms, %d clipped; want no clipping", ch.LatencyTopMS, len(ch.Clipped))
	}
	// The day's axis: every 4 hours, midnight as its date.
	day := buildChart(chartSpans[1], now, nil, targetKinds, true)
	var texts []string
	for _, l := range day.TimeLabels {
		texts = append(texts, l.Text)
	}
	if got := len(texts); got != 6 {
		t.Errorf("day labels %q, want 6", texts)
	}
}
