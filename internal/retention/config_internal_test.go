package retention

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/queue"
)

// withDeps returns c with dependencies no test statement runs on.
func withDeps(c Config) Config {
	c.DB, c.Forwards, c.Senders, c.Log = new(pgxpool.Pool), queue.NewJobs(nil), &config.Config{}, slog.New(slog.DiscardHandler)
	return c
}

// TestConfigValidate: DefaultConfig with its dependencies is valid, and
// NewWorker's maintenance job runs every Interval for at most Timeout; a
// zero or negative interval, timeout or audit retention is refused by validate and
// NewWorker, with an error naming the field (never taken for the
// default); a missing dependency too, naming it. (That the queue refuses
// a maintenance job of a zero interval or timeout is queue's test.)
func TestConfigValidate(t *testing.T) {
	t.Parallel()
	if err := withDeps(DefaultConfig()).validate(); err != nil {
		t.Fatalf("DefaultConfig: %v", err)
	}
	w, err := NewWorker(withDeps(Config{Interval: time.Second, Timeout: time.Minute, AuditRetention: time.Hour}))
	if err != nil {
		t.Fatalf("NewWorker with a 1s interval and a 1m timeout: %v", err)
	}
	if m := w.Maintenance(); m.Interval != time.Second || m.Timeout != time.Minute || m.Run == nil {
		t.Errorf("NewWorker with a 1s interval and a 1m timeout: its maintenance job %+v; want it run every 1s, for at most 1m", m)
	}
	for _, tc := range []struct {
		name  string
		apply func(*Config)
		want  string
	}{
		{"no DB", func(c *Config) { c.DB = nil }, "DB: nil"},
		{"no forwards", func(c *Config) { c.Forwards = nil }, "Forwards: nil"},
		{"no senders", func(c *Config) { c.Senders = nil }, "Senders: nil"},
		{"no log", func(c *Config) { c.Log = nil }, "Log: nil"},
	} {
		c := withDeps(DefaultConfig())
		tc.apply(&c)
		if err := c.validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: validate() = %v, want an error naming %q", tc.name, err, tc.want)
		}
		if _, err := NewWorker(c); err == nil {
			t.Errorf("%s: NewWorker accepted it", tc.name)
		}
	}
	for _, tc := range []struct {
		name string
		c    Config
		want string
	}{
		{"zero interval", Config{Timeout: JobTimeout, AuditRetention: DefaultAuditRetention}, "Interval 0s"},
		{"negative interval", Config{Interval: -time.Second, Timeout: JobTimeout, AuditRetention: DefaultAuditRetention}, "Interval -1s"},
		{"zero timeout", Config{Interval: DefaultInterval, AuditRetention: DefaultAuditRetention}, "Timeout 0s"},
		{"zero audit retention", Config{Interval: DefaultInterval, Timeout: JobTimeout}, "AuditRetention 0s"},
	} {
		if err := withDeps(tc.c).validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: validate() = %v, want an error naming %q", tc.name, err, tc.want)
		}
		if _, err := NewWorker(withDeps(tc.c)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: NewWorker: %v, want an error naming %q", tc.name, err, tc.want)
		}
	}
}
