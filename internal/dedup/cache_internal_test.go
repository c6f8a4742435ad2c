package dedup

import (
	"strings"
	"testing"
	"time"
)

// TestReplayCacheOffIsNil: the replay cache is off only when
// Config.ReplayCache is nil (hookgate serve's --replay-cache-size 0); a
// size or a TTL of 0 is refused, never taken for the default or for off.
func TestReplayCacheOffIsNil(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		rc      *ReplayCache
		on      bool
		wantErr string
	}{
		{nil, false, ""},
		{&ReplayCache{Size: 10, TTL: time.Minute}, true, ""},
		{&ReplayCache{Size: 0, TTL: time.Minute}, false, "ReplayCache.Size 0"},
		{&ReplayCache{Size: -1, TTL: time.Minute}, false, "ReplayCache.Size -1"},
		{&ReplayCache{Size: 10, TTL: 0}, false, "ReplayCache.TTL 0s"},
	} {
		s, err := newStore(Config{Pool: noPool, InFlightWait: time.Second, ReplayCache: tc.rc})
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ReplayCache %+v: err %v, want one naming %q", tc.rc, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("ReplayCache %+v: %v", tc.rc, err)
		}
		if on := s.cache != nil; on != tc.on {
			t.Errorf("ReplayCache %+v: cache on %v, want %v", tc.rc, on, tc.on)
		}
		if tc.on && (s.cache.Len() != 0 || s.cacheTTL != tc.rc.TTL) {
			t.Errorf("ReplayCache %+v: ttl %s", tc.rc, s.cacheTTL)
		}
	}
}
