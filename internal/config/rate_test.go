package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/config"
)

// rateSender is a sender forwarding to one target with the given extra
// lines (indented under the target).
func rateSender(extra ...string) string {
	s := "senders:\n" + sender("x", "delivery_id: { header: X-Id }",
		"forward:", "  - name: t1", "    url: http://orders.internal/hooks")
	for _, e := range extra {
		s += "        " + e + "\n"
	}
	return s
}

func TestParseRate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		yaml      string
		count     int
		per       time.Duration
		burst     int
		perSecond float64
	}{
		{"rate: 50/s", 50, time.Second, 5, 50},
		{"rate: 600/m", 600, time.Minute, 60, 10},
		{"rate: 3/m", 3, time.Minute, 1, 0.05},
		{"rate: 40/s\n        burst: 12", 40, time.Second, 12, 40},
	} {
		c := mustParse(t, rateSender(tc.yaml), noEnv)
		tg := c.Senders[0].Forward[0]
		if tg.Rate.Count != tc.count || tg.Rate.Per != tc.per {
			t.Errorf("%q: rate %+v, want %d per %s", tc.yaml, tg.Rate, tc.count, tc.per)
		}
		if got := tg.RateBurst(); got != tc.burst {
			t.Errorf("%q: burst %d, want %d", tc.yaml, got, tc.burst)
		}
		if got := tg.Rate.PerSecond(); got != tc.perSecond {
			t.Errorf("%q: %v per second, want %v", tc.yaml, got, tc.perSecond)
		}
		if s, _, _ := strings.Cut(tc.yaml, "\n"); "rate: "+tg.Rate.String() != s {
			t.Errorf("%q: written %q", tc.yaml, tg.Rate.String())
		}
	}
	c := mustParse(t, rateSender(), noEnv)
	if tg := c.Senders[0].Forward[0]; !tg.Rate.IsZero() || tg.RateBurst() != 0 || tg.Rate.String() != "" {
		t.Errorf("no rate: %+v, burst %d", tg.Rate, tg.RateBurst())
	}
}

func TestParseRateRefusesWhatIsNotOne(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		yaml string
		want []string
	}{
		{"rate: 50/h", []string{"line 8", "not a rate such as 50/s or 600/m"}},
		{"rate: 0/s", []string{"line 8", "not a rate"}},
		{"rate: -5/s", []string{"line 8", "not a rate"}},
		{"rate: 1.5/s", []string{"line 8", "not a rate"}},
		{"rate: 50", []string{"line 8", "not a rate"}},
		{"rate: 1000001/s", []string{"line 8", "not a rate"}},
		{"burst: 5", []string{"senders[0].forward[0].burst", "only used with rate"}},
		{"rate: 5/s\n        burst: -1", []string{"senders[0].forward[0].burst", "must be at least 0"}},
	} {
		_, err := config.Parse([]byte(rateSender(tc.yaml)), noEnv)
		if err == nil {
			t.Errorf("%q: accepted", tc.yaml)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%q: error %q does not contain %q", tc.yaml, err, w)
			}
		}
	}
}
