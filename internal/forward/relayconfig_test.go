package forward_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/forward"
	"github.com/hookgate/hookgate/internal/queue"
)

// TestRelayConfigZeroIsRefused: zero means zero (docs/configuration.md): a
// relay batch, interval, statement timeout or slow threshold of 0 is
// refused, never taken as the default; the defaults are DefaultRelayConfig's.
// A missing dependency is refused too, naming it.
func TestRelayConfigZeroIsRefused(t *testing.T) {
	t.Parallel()
	def := forward.DefaultRelayConfig()
	if def.Batch != forward.DefaultRelayBatch || def.Interval != forward.DefaultRelayInterval {
		t.Fatalf("DefaultRelayConfig() = %+v", def)
	}
	// Dependencies no test statement runs on.
	withDeps := func(rc forward.RelayConfig) forward.RelayConfig {
		rc.Pool, rc.Queue, rc.Senders, rc.Log = new(pgxpool.Pool), &queue.River{}, &config.Config{}, slog.New(slog.DiscardHandler)
		return rc
	}
	noTimeout, notSlow := def, def
	noTimeout.StatementTimeout, notSlow.SlowAfter = 0, 0
	for _, rc := range []forward.RelayConfig{{}, {Batch: 0, Interval: time.Second}, {Batch: 10}, {Batch: -1, Interval: time.Second}, noTimeout, notSlow} {
		if _, err := forward.NewRelay(withDeps(rc)); err == nil {
			t.Errorf("NewRelay(%+v) = nil error, want it refused", rc)
		}
	}
	if _, err := forward.NewRelay(withDeps(def)); err != nil {
		t.Errorf("NewRelay(defaults): %v", err)
	}
	for _, tc := range []struct {
		apply func(*forward.RelayConfig)
		field string
	}{
		{func(c *forward.RelayConfig) { c.Pool = nil }, "Pool: nil"},
		{func(c *forward.RelayConfig) { c.Queue = nil }, "Queue: nil"},
		{func(c *forward.RelayConfig) { c.Senders = nil }, "Senders: nil"},
		{func(c *forward.RelayConfig) { c.Log = nil }, "Log: nil"},
	} {
		rc := withDeps(def)
		tc.apply(&rc)
		if _, err := forward.NewRelay(rc); err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("NewRelay without %s: %v, want an error naming it", tc.field, err)
		}
	}
}
