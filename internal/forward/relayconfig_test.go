package forward_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/forward"
)

// TestRelayConfigZeroIsRefused: zero means zero (docs/configuration.md): a
// relay batch, interval, statement timeout or slow threshold of 0 is
// refused, never taken as the default; the defaults are DefaultRelayConfig's.
func TestRelayConfigZeroIsRefused(t *testing.T) {
	t.Parallel()
	def := forward.DefaultRelayConfig()
	if def.Batch != forward.DefaultRelayBatch || def.Interval != forward.DefaultRelayInterval {
		t.Fatalf("DefaultRelayConfig() = %+v", def)
	}
	log := slog.New(slog.DiscardHandler)
	noTimeout, notSlow := def, def
	noTimeout.StatementTimeout, notSlow.SlowAfter = 0, 0
	for _, rc := range []forward.RelayConfig{{}, {Batch: 0, Interval: time.Second}, {Batch: 10}, {Batch: -1, Interval: time.Second}, noTimeout, notSlow} {
		if _, err := forward.NewRelay(nil, nil, nil, rc, log); err == nil {
			t.Errorf("NewRelay(%+v) = nil error, want it refused", rc)
		}
	}
	if _, err := forward.NewRelay(nil, nil, nil, def, log); err != nil {
		t.Errorf("NewRelay(defaults): %v", err)
	}
}
