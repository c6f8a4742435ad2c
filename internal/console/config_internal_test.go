package console

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/queue"
	"github.com/hookgate/hookgate/internal/store"
)

// withDeps returns c with the required dependencies, on no database.
func withDeps(c Config) Config {
	c.Senders, c.Queries, c.Forwards, c.Log = &config.Config{}, store.New(nil), queue.NewJobs(nil), slog.New(slog.DiscardHandler)
	return c
}

// TestConfigValidate: DefaultConfig with its dependencies is valid; a
// session TTL that is zero or negative is refused by validate and New with
// an error naming the field (never taken for the default), and so is a
// missing required dependency.
func TestConfigValidate(t *testing.T) {
	t.Parallel()
	if err := withDeps(DefaultConfig()).validate(); err != nil {
		t.Fatalf("DefaultConfig: %v", err)
	}
	for _, ttl := range []time.Duration{0, -time.Minute} {
		c := withDeps(DefaultConfig())
		c.SessionTTL = ttl
		if err := c.validate(); err == nil || !strings.Contains(err.Error(), "SessionTTL "+ttl.String()) {
			t.Errorf("SessionTTL %s: validate() = %v, want an error naming SessionTTL", ttl, err)
		}
		if _, err := New(c); err == nil {
			t.Errorf("SessionTTL %s: New accepted it", ttl)
		}
	}
	for _, tc := range []struct {
		name  string
		apply func(*Config)
		want  string
	}{
		{"no senders", func(c *Config) { c.Senders = nil }, "Senders: nil"},
		{"no queries", func(c *Config) { c.Queries = nil }, "Queries: nil"},
		{"no forwards", func(c *Config) { c.Forwards = nil }, "Forwards: nil"},
		{"no log", func(c *Config) { c.Log = nil }, "Log: nil"},
	} {
		c := withDeps(DefaultConfig())
		tc.apply(&c)
		if _, err := New(c); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: New = %v, want an error naming %q", tc.name, err, tc.want)
		}
	}
}
