package handler

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/dedup"
	"github.com/hookgate/hookgate/internal/sender"
)

// withDeps returns c with the required dependencies, none of which runs.
func withDeps(c Config) Config {
	c.Senders, c.Ingest, c.Ready = sender.MustCompile(&config.Config{}), new(dedup.Store), func(context.Context) error { return nil }
	c.Registry, c.Log = prometheus.NewRegistry(), slog.New(slog.DiscardHandler)
	return c
}

// TestConfigValidate: DefaultConfig is valid; a body budget, a wait for
// room or a body read timeout that is zero or negative, a negative minimum
// rate or grace, or a rate past MaxBodyMinRate is refused with an error
// naming the field (never taken for the default), and so is a missing
// required dependency. A minimum rate of 0 (none) and a grace of 0 are
// valid.
func TestConfigValidate(t *testing.T) {
	t.Parallel()
	if err := withDeps(DefaultConfig()).validate(); err != nil {
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
		{"negative min rate", func(c *Config) { c.BodyMinRate = -1 }, "BodyMinRate -1"},
		{"min rate too high", func(c *Config) { c.BodyMinRate = MaxBodyMinRate + 1 }, "BodyMinRate 1073741825"},
		{"negative grace", func(c *Config) { c.BodyMinRateGrace = -time.Second }, "BodyMinRateGrace -1s"},
		{"zero read timeout", func(c *Config) { c.BodyReadTimeout = 0 }, "BodyReadTimeout 0s"},
		{"no senders", func(c *Config) { c.Senders = nil }, "Senders: nil"},
		{"no ingest store", func(c *Config) { c.Ingest = nil }, "Ingest: nil"},
		{"no readiness check", func(c *Config) { c.Ready = nil }, "Ready: nil"},
		{"no registry", func(c *Config) { c.Registry = nil }, "Registry: nil"},
		{"no log", func(c *Config) { c.Log = nil }, "Log: nil"},
	} {
		c := withDeps(DefaultConfig())
		tc.apply(&c)
		if err := c.validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: validate() = %v, want an error naming %q", tc.name, err, tc.want)
		}
		if _, err := New(c); err == nil {
			t.Errorf("%s: New accepted it", tc.name)
		}
	}
}

// TestConfigValidateZeroes: no minimum rate (0) and no grace (0) are
// settings, not mistakes.
func TestConfigValidateZeroes(t *testing.T) {
	t.Parallel()
	c := withDeps(DefaultConfig())
	c.BodyMinRate, c.BodyMinRateGrace = 0, 0
	if err := c.validate(); err != nil {
		t.Errorf("no minimum rate and no grace: %v", err)
	}
}
