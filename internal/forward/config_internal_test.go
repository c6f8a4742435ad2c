package forward

import (
	"strings"
	"testing"
	"time"
)

// TestConfigsValidate: the defaults of the worker, the breakers and
// the fast path are valid, and every nonsense value (a zero or negative
// duration or count, a backoff whose max is below its base) is refused by validate and by the
// constructor, with an error naming the field.
func TestConfigsValidate(t *testing.T) {
	t.Parallel()
	cfg := parseConfig(t, `senders:
  - name: acme
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    forward:
      - { name: t, url: "http://127.0.0.1:1/a", timeout: 10s }
`)
	if wc := DefaultWorkerConfig(); wc != (WorkerConfig{Backoff: DefaultBackoff, RetryAfterMax: DefaultRetryAfterMax}) || wc.RetryAfterMax != 5*time.Minute {
		t.Errorf("DefaultWorkerConfig = %+v, want DefaultBackoff and a RetryAfterMax of 5m", wc)
	}
	if err := DefaultWorkerConfig().validate(); err != nil {
		t.Errorf("DefaultWorkerConfig: %v", err)
	}
	if err := DefaultBreakerConfig().validate(); err != nil {
		t.Errorf("DefaultBreakerConfig: %v", err)
	}
	wantErr := func(name string, err error, field string) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: %v, want an error naming %q", name, err, field)
		}
	}
	for _, tc := range []struct {
		name  string
		b     Backoff
		field string
	}{
		{"zero backoff", Backoff{}, "Base 0s"},
		{"negative base", Backoff{Base: -time.Second, Max: time.Minute}, "Base -1s"},
		{"max below base", Backoff{Base: time.Minute, Max: time.Second}, "Max 1s"},
	} {
		wc := WorkerConfig{Backoff: tc.b, RetryAfterMax: DefaultRetryAfterMax}
		wantErr(tc.name, wc.validate(), tc.field)
		_, err := NewWorker(cfg, nil, nil, nil, nil, nil, wc)
		wantErr("NewWorker with "+tc.name, err, tc.field)
	}
	for _, tc := range []struct {
		name  string
		max   time.Duration
		field string
	}{
		{"zero Retry-After max", 0, "RetryAfterMax 0s"},
		{"negative Retry-After max", -time.Second, "RetryAfterMax -1s"},
	} {
		wc := DefaultWorkerConfig()
		wc.RetryAfterMax = tc.max
		wantErr(tc.name, wc.validate(), tc.field)
		_, err := NewWorker(cfg, nil, nil, nil, nil, nil, wc)
		wantErr("NewWorker with "+tc.name, err, tc.field)
	}
	for _, tc := range []struct {
		name  string
		bc    BreakerConfig
		field string
	}{
		{"zero probe", BreakerConfig{Window: time.Second}, "Probe 0s"},
		{"negative probe", BreakerConfig{Probe: -time.Second, Window: time.Second}, "Probe -1s"},
		{"zero window", BreakerConfig{Probe: time.Second}, "Window 0s"},
		{"window under 10ms", BreakerConfig{Probe: time.Second, Window: 5 * time.Millisecond}, "Window 5ms"},
	} {
		wantErr(tc.name, tc.bc.validate(), tc.field)
		_, err := NewGate(nil, 10, nil, nil, tc.bc)
		wantErr("NewGate with "+tc.name, err, tc.field)
	}
	_, err := NewGate(nil, 0, nil, nil, DefaultBreakerConfig())
	wantErr("NewGate of capacity 0", err, "capacity 0")
	// The fast path: zero means zero (but for FixedLease, whose zero is
	// "each target's timeout + LeaseMargin"); the defaults are
	// DefaultDispatcherConfig's.
	dc := DefaultDispatcherConfig()
	if dc != (DispatcherConfig{LeaseMargin: DefaultLeaseMargin, Workers: DefaultDispatchWorkers, Queue: DefaultDispatchQueue, MaxBytes: DefaultDispatchBytes}) {
		t.Errorf("DefaultDispatcherConfig = %+v", dc)
	}
	if err := dc.validate(); err != nil {
		t.Errorf("DefaultDispatcherConfig: %v", err)
	}
	for _, tc := range []struct {
		name  string
		apply func(*DispatcherConfig)
		field string
	}{
		{"zero lease margin", func(c *DispatcherConfig) { c.LeaseMargin = 0 }, "LeaseMargin 0s"},
		{"negative fixed lease", func(c *DispatcherConfig) { c.FixedLease = -time.Second }, "FixedLease -1s"},
		{"zero workers", func(c *DispatcherConfig) { c.Workers = 0 }, "Workers 0"},
		{"zero queue", func(c *DispatcherConfig) { c.Queue = 0 }, "Queue 0"},
		{"zero bytes", func(c *DispatcherConfig) { c.MaxBytes = 0 }, "MaxBytes 0"},
	} {
		dc := DefaultDispatcherConfig()
		tc.apply(&dc)
		wantErr(tc.name, dc.validate(), tc.field)
		_, err := NewDispatcher(nil, nil, dc, nil, nil)
		wantErr("NewDispatcher with "+tc.name, err, tc.field)
	}
}
