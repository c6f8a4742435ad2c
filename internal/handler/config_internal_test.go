package handler

import (
	"strings"
	"testing"
	"time"
)

// TestConfigValidate: DefaultConfig is valid; a body budget or a wait for
// room that is zero or negative is refused with an error naming the field
// (never taken for the default).
func TestConfigValidate(t *testing.T) {
	t.Parallel()
	if err := DefaultConfig().validate(); err != nil {
		t.Fatalf("DefaultConfig: %v", err)
	}
	for _, tc := range []struct {
		name  string
		apply func(*Config)
		want  string
	}{
		{"zero budget", func(c *Config) { c.BodyBudget = 0 }, "BodyBudget 0"},
		{"negative budget", func(c *Config) { c.BodyBudget = -1 }, "BodyBudget -1"},
		{"zero wait", func(c *Config) { c.BodyBudgetWait = 0 }, "BodyBudgetWait 0s"},
		{"negative wait", func(c *Config) { c.BodyBudgetWait = -time.Second }, "BodyBudgetWait -1s"},
	} {
		c := DefaultConfig()
		tc.apply(&c)
		if err := c.validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: validate() = %v, want an error naming %q", tc.name, err, tc.want)
		}
		if _, err := New(nil, nil, nil, nil, nil, c); err == nil {
			t.Errorf("%s: New accepted it", tc.name)
		}
	}
}
