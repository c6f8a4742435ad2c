package retention

import (
	"strings"
	"testing"
	"time"
)

// TestConfigValidate: DefaultConfig is valid; a zero or negative interval
// or timeout is refused by validate, NewWorker and PeriodicJob, with an
// error naming the field (never taken for the default).
func TestConfigValidate(t *testing.T) {
	t.Parallel()
	if err := DefaultConfig().validate(); err != nil {
		t.Fatalf("DefaultConfig: %v", err)
	}
	if w, err := NewWorker(nil, nil, nil, Config{Interval: time.Second, Timeout: time.Minute}); err != nil || w.Timeout(nil) != time.Minute {
		t.Fatalf("NewWorker with a 1m timeout: %v; want its runs to take at most 1m", err)
	}
	for _, tc := range []struct {
		name string
		c    Config
		want string
	}{
		{"zero interval", Config{Timeout: JobTimeout}, "Interval 0s"},
		{"negative interval", Config{Interval: -time.Second, Timeout: JobTimeout}, "Interval -1s"},
		{"zero timeout", Config{Interval: DefaultInterval}, "Timeout 0s"},
	} {
		if err := tc.c.validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: validate() = %v, want an error naming %q", tc.name, err, tc.want)
		}
		if _, err := NewWorker(nil, nil, nil, tc.c); err == nil {
			t.Errorf("%s: NewWorker accepted it", tc.name)
		}
		if _, err := PeriodicJob(tc.c); err == nil {
			t.Errorf("%s: PeriodicJob accepted it", tc.name)
		}
	}
}
