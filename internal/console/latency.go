package console

import (
	"strconv"

	"github.com/hookgate/hookgate/internal/store"
)

// latency is a quantile estimated from a histogram of attempts, see
// [store.LatencyQuantile]. It is within a bucket of the true value, or at
// least ms when over is set.
type latency struct {
	ms   float64
	over bool
	n    int // 0: no attempts, nothing to estimate
}

// quantile estimates the q-quantile of hist, which is nil or
// [store.LatencyBuckets] long.
func quantile(hist []int64, q float64) latency {
	ms, over, ok := store.LatencyQuantile(hist, q)
	if !ok {
		return latency{}
	}
	return latency{ms: ms, over: over, n: 1}
}

// String is the estimate in milliseconds, as data-* attributes carry it:
// "12.5", ">60000" past the largest bound, "" without attempts.
func (l latency) String() string {
	if l.n == 0 {
		return ""
	}
	s := strconv.FormatFloat(l.ms, 'f', 1, 64)
	if l.over {
		return ">" + s
	}
	return s
}

// Text is the estimate for people: "≈ 12.5 ms", "> 60000 ms", "—".
func (l latency) Text() string {
	switch {
	case l.n == 0:
		return "—"
	case l.over:
		return "> " + strconv.FormatFloat(l.ms, 'f', 0, 64) + " ms"
	case l.ms < 10:
		return "≈ " + strconv.FormatFloat(l.ms, 'f', 1, 64) + " ms"
	default:
		return "≈ " + strconv.FormatFloat(l.ms, 'f', 0, 64) + " ms"
	}
}
