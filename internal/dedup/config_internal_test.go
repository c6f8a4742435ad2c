package dedup

import (
	"strings"
	"testing"
	"time"
)

// TestConfigValidate: DefaultConfig with a Pool, and a Config with every
// feature off, are valid; a missing Pool and every nonsense value (a zero
// or negative duration or size, an in-flight wait past MaxInFlightWait, an
// unknown layout) are refused with an error naming the field.
func TestConfigValidate(t *testing.T) {
	t.Parallel()
	def := DefaultConfig()
	def.Pool = noPool
	if err := def.validate(); err != nil {
		t.Fatalf("DefaultConfig: %v", err)
	}
	if err := (Config{Pool: noPool, InFlightWait: time.Millisecond}).validate(); err != nil {
		t.Fatalf("every feature off: %v", err)
	}
	if err := (Config{Pool: noPool, InFlightWait: MaxInFlightWait, Layout: LayoutDistributed}).validate(); err != nil {
		t.Fatalf("the longest in-flight wait: %v", err)
	}
	for _, tc := range []struct {
		name  string
		apply func(*Config)
		want  string
	}{
		{"no pool", func(c *Config) { c.Pool = nil }, "Pool: nil"},
		{"zero in-flight wait", func(c *Config) { c.InFlightWait = 0 }, "InFlightWait 0s"},
		{"negative in-flight wait", func(c *Config) { c.InFlightWait = -time.Second }, "InFlightWait -1s"},
		{"in-flight wait too long", func(c *Config) { c.InFlightWait = 30 * 24 * time.Hour }, "InFlightWait 720h0m0s"},
		{"zero batch", func(c *Config) { c.Batching.MaxBatch = 0 }, "Batching.MaxBatch 0"},
		{"zero batches in flight", func(c *Config) { c.Batching.MaxInFlight = 0 }, "Batching.MaxInFlight 0"},
		{"negative overlap", func(c *Config) { c.Batching.OverlapAfter = -time.Millisecond }, "Batching.OverlapAfter -1ms"},
		{"zero cache size", func(c *Config) { c.ReplayCache.Size = 0 }, "ReplayCache.Size 0"},
		{"negative cache TTL", func(c *Config) { c.ReplayCache.TTL = -time.Second }, "ReplayCache.TTL -1s"},
		{"zero shed target", func(c *Config) { c.Shedding.Target = 0 }, "Shedding.Target 0s"},
		{"zero shed interval", func(c *Config) { c.Shedding.Interval = 0 }, "Shedding.Interval 0s"},
		{"negative max queue wait", func(c *Config) { c.Shedding.MaxWait = -time.Millisecond }, "Shedding.MaxWait -1ms"},
		{"unknown layout", func(c *Config) { c.Layout = 7 }, "Layout 7"},
	} {
		c := DefaultConfig()
		c.Pool = noPool
		tc.apply(&c)
		err := c.validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: validate() = %v, want an error naming %q", tc.name, err, tc.want)
		}
		if _, nerr := newStore(c); nerr == nil {
			t.Errorf("%s: newStore accepted the config", tc.name)
		}
	}
}
