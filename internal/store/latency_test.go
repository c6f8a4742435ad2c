package store

import (
	"math"
	"testing"
	"time"
)

// TestLatencyQuantile: the estimate interpolates inside the bucket that
// holds the rank, says "at least" for the last bucket, and knows nothing
// of an empty histogram; LatencyBucket puts a bound's own value in its
// bucket and anything past the largest bound in the last one.
func TestLatencyQuantile(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		d    time.Duration
		want int
	}{{0, 0}, {500 * time.Microsecond, 0}, {time.Millisecond, 0}, {1001 * time.Microsecond, 1}, {50 * time.Millisecond, 6}, {51 * time.Millisecond, 7}, {time.Minute, len(LatencyBoundsMS) - 1}, {time.Hour, len(LatencyBoundsMS)}} {
		if got := LatencyBucket(c.d); got != c.want {
			t.Errorf("LatencyBucket(%s) = %d, want %d", c.d, got, c.want)
		}
	}
	hist := make([]int64, LatencyBuckets)
	if _, _, ok := LatencyQuantile(hist, 0.5); ok {
		t.Error("an empty histogram has a quantile")
	}
	// 10 attempts in (20, 35] ms, 10 in (50, 75] ms.
	hist[LatencyBucket(30*time.Millisecond)] = 10
	hist[LatencyBucket(60*time.Millisecond)] = 10
	for _, c := range []struct{ q, want float64 }{{0.5, 35}, {0.25, 27.5}, {0.75, 62.5}, {0.95, 72.5}, {1, 75}} {
		got, over, ok := LatencyQuantile(hist, c.q)
		if !ok || over || math.Abs(got-c.want) > 1e-9 {
			t.Errorf("q %v: %v (over %v, ok %v), want %v", c.q, got, over, ok, c.want)
		}
	}
	hist[len(hist)-1] = 100 // most took longer than a minute
	if got, over, ok := LatencyQuantile(hist, 0.95); !ok || !over || got != LatencyBoundsMS[len(LatencyBoundsMS)-1] {
		t.Errorf("p95 past the largest bound: %v (over %v, ok %v), want at least %v", got, over, ok, LatencyBoundsMS[len(LatencyBoundsMS)-1])
	}
}
