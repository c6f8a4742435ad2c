package dedup

import (
	"testing"
	"time"
)

// TestReplayCacheZeroIsOff: zero means zero (docs/configuration.md): a
// replay cache of size 0 or ttl 0 is no cache, as --replay-cache-size 0
// is, never the default size.
func TestReplayCacheZeroIsOff(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		size int
		ttl  time.Duration
		on   bool
	}{
		{0, time.Minute, false},
		{-1, time.Minute, false},
		{10, 0, false},
		{10, time.Minute, true},
	} {
		s := newStore(nil, time.Second, []Option{WithReplayCache(tc.size, tc.ttl)})
		if on := s.cache != nil; on != tc.on {
			t.Errorf("WithReplayCache(%d, %s): cache on %v, want %v", tc.size, tc.ttl, on, tc.on)
		}
		if tc.on && (s.cache.Len() != 0 || s.cacheTTL != tc.ttl) {
			t.Errorf("WithReplayCache(%d, %s): ttl %s", tc.size, tc.ttl, s.cacheTTL)
		}
	}
}
