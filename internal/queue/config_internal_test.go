package queue

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/config"
)

// withDeps returns c with dependencies no test statement runs on.
func withDeps(c ClientConfig, cfg *config.Config) ClientConfig {
	c.Pool, c.Senders, c.Log = new(pgxpool.Pool), cfg, slog.New(slog.DiscardHandler)
	return c
}

// TestClientConfigValidate: the River client's defaults are valid, and
// every nonsense value (a zero or negative duration or count, a rescue
// horizon not above a forward's timeout, a maintenance job without a
// positive interval or timeout) is refused by validate and by New, with
// an error naming the field; so is a missing dependency, by New and
// NewBulkWorker.
func TestClientConfigValidate(t *testing.T) {
	t.Parallel()
	cfg, err := config.Parse([]byte(`senders:
  - name: acme
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    forward:
      - { name: t, url: "http://127.0.0.1:1/a", timeout: 10s }
`), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	if err := withDeps(DefaultClientConfig(cfg), cfg).validate(); err != nil {
		t.Errorf("DefaultClientConfig: %v", err)
	}
	if _, err := newHorizons(cfg, DefaultClientConfig(cfg).RescueAfter, 0); err != nil {
		t.Errorf("DefaultClientConfig's rescue horizon: %v", err)
	}
	wantErr := func(name string, err error, field string) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: %v, want an error naming %q", name, err, field)
		}
	}
	run := func(context.Context) error { return nil }
	for _, tc := range []struct {
		name  string
		apply func(*ClientConfig)
		field string
	}{
		{"zero workers", func(c *ClientConfig) { c.MaxWorkers = 0 }, "MaxWorkers 0"},
		{"zero rescue horizon", func(c *ClientConfig) { c.RescueAfter = 0 }, "RescueAfter 0s"},
		{"negative poll", func(c *ClientConfig) { c.FetchPollInterval = -time.Millisecond }, "FetchPollInterval -1ms"},
		{"zero retention", func(c *ClientConfig) { c.Retention = 0 }, "Retention 0s"},
		{"maintenance of a zero interval", func(c *ClientConfig) {
			c.Maintenance = Maintenance{Timeout: time.Minute, Run: run}
		}, "Maintenance.Interval 0s"},
		{"maintenance of a negative interval", func(c *ClientConfig) {
			c.Maintenance = Maintenance{Interval: -time.Second, Timeout: time.Minute, Run: run}
		}, "Maintenance.Interval -1s"},
		{"maintenance of a zero timeout", func(c *ClientConfig) {
			c.Maintenance = Maintenance{Interval: time.Minute, Run: run}
		}, "Maintenance.Timeout 0s"},
		{"no pool", func(c *ClientConfig) { c.Pool = nil }, "Pool: nil"},
		{"no senders", func(c *ClientConfig) { c.Senders = nil }, "Senders: nil"},
		{"no log", func(c *ClientConfig) { c.Log = nil }, "Log: nil"},
	} {
		cc := withDeps(DefaultClientConfig(cfg), cfg)
		tc.apply(&cc)
		wantErr(tc.name, cc.validate(), tc.field)
		_, err := New(cc)
		wantErr("New with "+tc.name, err, tc.field)
	}
	_, err = newHorizons(cfg, 15*time.Second, 0)
	wantErr("a rescue horizon not above a forward's timeout (15s)", err, "RescueAfter")

	// A zero Maintenance is none: nothing of it is checked.
	if err := withDeps(DefaultClientConfig(cfg), cfg).validate(); err != nil {
		t.Errorf("no maintenance job: %v", err)
	}
	bc := BulkWorkerConfig{Pool: new(pgxpool.Pool), Senders: cfg, Log: slog.New(slog.DiscardHandler)}
	if _, err := NewBulkWorker(bc); err != nil {
		t.Errorf("NewBulkWorker: %v", err)
	}
	for _, tc := range []struct {
		apply func(*BulkWorkerConfig)
		field string
	}{
		{func(c *BulkWorkerConfig) { c.Pool = nil }, "Pool: nil"},
		{func(c *BulkWorkerConfig) { c.Senders = nil }, "Senders: nil"},
		{func(c *BulkWorkerConfig) { c.Log = nil }, "Log: nil"},
	} {
		c := bc
		tc.apply(&c)
		_, err := NewBulkWorker(c)
		wantErr("NewBulkWorker without "+tc.field, err, tc.field)
	}
}
