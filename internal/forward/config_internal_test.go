package forward

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/forward/transport"
	"github.com/hookgate/hookgate/internal/queue"
	"github.com/hookgate/hookgate/internal/store"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// Dependencies no test statement runs on, for the Configs' validation.
var (
	noPool = new(pgxpool.Pool)
	noJobs = queue.NewJobs(noPool)
	noLog  = slog.New(slog.DiscardHandler)
)

// gateDeps returns c with its dependencies.
func gateDeps(c GateConfig) GateConfig {
	c.DB, c.Jobs, c.Metrics, c.Log = noPool, noJobs, NewMetrics(prometheus.NewRegistry()), noLog
	return c
}

// workerDeps returns c with its dependencies (an HTTP client, no
// Transport) for the senders of cfg.
func workerDeps(t *testing.T, c WorkerConfig, cfg *config.Config) WorkerConfig {
	t.Helper()
	gate, err := NewGate(gateDeps(DefaultGateConfig()))
	if err != nil {
		t.Fatal(err)
	}
	c.Senders, c.DB, c.Jobs, c.Gate, c.Metrics, c.Log, c.Client = cfg, noPool, noJobs, gate, NewMetrics(prometheus.NewRegistry()), noLog, http.DefaultClient
	return c
}

// recordNothing is a FirstAttemptRecorder that records nothing.
type recordNothing struct{}

func (recordNothing) RecordFirstAttempts(context.Context, []queue.FirstAttempt) ([]store.HandedOff, error) {
	return nil, nil
}

// TestConfigsValidate: the defaults of the worker, the gate, the breakers
// and the fast path are valid, and every nonsense value (a zero or
// negative duration or count, a backoff whose max is below its base) is
// refused by validate and by the constructor, with an error naming the
// field; so is a missing dependency.
func TestConfigsValidate(t *testing.T) {
	t.Parallel()
	cfg := testkit.ParseConfig(t, `senders:
  - name: acme
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    forward:
      - { name: t, url: "http://127.0.0.1:1/a", timeout: 10s }
`)
	if wc := DefaultWorkerConfig(); wc != (WorkerConfig{Backoff: DefaultBackoff, RetryAfterMax: DefaultRetryAfterMax, AttemptsKept: 20}) || wc.RetryAfterMax != 5*time.Minute {
		t.Errorf("DefaultWorkerConfig = %+v, want DefaultBackoff and a RetryAfterMax of 5m", wc)
	}
	if err := workerDeps(t, DefaultWorkerConfig(), cfg).validate(); err != nil {
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
		wc := workerDeps(t, WorkerConfig{Backoff: tc.b, RetryAfterMax: DefaultRetryAfterMax, AttemptsKept: 1}, cfg)
		wantErr(tc.name, wc.validate(), tc.field)
		_, err := NewWorker(wc)
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
		wc := workerDeps(t, DefaultWorkerConfig(), cfg)
		wc.RetryAfterMax = tc.max
		wantErr(tc.name, wc.validate(), tc.field)
		_, err := NewWorker(wc)
		wantErr("NewWorker with "+tc.name, err, tc.field)
	}
	if _, err := NewWorker(workerDeps(t, DefaultWorkerConfig(), cfg)); err != nil {
		t.Errorf("NewWorker with the defaults: %v", err)
	}
	withTransport := workerDeps(t, DefaultWorkerConfig(), cfg)
	withTransport.Client, withTransport.Transport = nil, transport.NewHTTP(http.DefaultClient, time.Now)
	if _, err := NewWorker(withTransport); err != nil {
		t.Errorf("NewWorker with a Transport and no Client: %v", err)
	}
	for _, tc := range []struct {
		apply func(*WorkerConfig)
		field string
	}{
		{func(c *WorkerConfig) { c.Senders = nil }, "Senders: nil"},
		{func(c *WorkerConfig) { c.DB = nil }, "DB: nil"},
		{func(c *WorkerConfig) { c.Jobs = nil }, "Jobs: nil"},
		{func(c *WorkerConfig) { c.Gate = nil }, "Gate: nil"},
		{func(c *WorkerConfig) { c.Metrics = nil }, "Metrics: nil"},
		{func(c *WorkerConfig) { c.Log = nil }, "Log: nil"},
		{func(c *WorkerConfig) { c.Client = nil }, "Client: nil"}, // and no Transport
	} {
		wc := workerDeps(t, DefaultWorkerConfig(), cfg)
		tc.apply(&wc)
		_, err := NewWorker(wc)
		wantErr("NewWorker without "+tc.field, err, tc.field)
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
		_, err := NewGate(gateDeps(GateConfig{Capacity: 10, Breakers: tc.bc}))
		wantErr("NewGate with "+tc.name, err, tc.field)
	}
	if gc := DefaultGateConfig(); gc.Capacity != queue.DefaultMaxWorkers || gc.Breakers != DefaultBreakerConfig() ||
		gc.DB != nil || gc.Jobs != nil || gc.Metrics != nil || gc.Log != nil || gc.Now != nil {
		t.Errorf("DefaultGateConfig = %+v, want the River client's default capacity and the default breakers", gc)
	}
	if _, err := NewGate(gateDeps(DefaultGateConfig())); err != nil {
		t.Errorf("NewGate with the defaults: %v", err)
	}
	noDB := gateDeps(DefaultGateConfig())
	noDB.DB = nil
	if _, err := NewGate(noDB); err != nil {
		t.Errorf("NewGate without a DB (optional): %v", err)
	}
	for _, tc := range []struct {
		name  string
		apply func(*GateConfig)
		field string
	}{
		{"capacity 0", func(c *GateConfig) { c.Capacity = 0 }, "Capacity 0"},
		{"no metrics", func(c *GateConfig) { c.Metrics = nil }, "Metrics: nil"},
		{"no log", func(c *GateConfig) { c.Log = nil }, "Log: nil"},
	} {
		gc := gateDeps(DefaultGateConfig())
		tc.apply(&gc)
		wantErr(tc.name, gc.validate(), tc.field)
		_, err := NewGate(gc)
		wantErr("NewGate with "+tc.name, err, tc.field)
	}
	// The fast path: zero means zero (but for FixedLease, whose zero is
	// "each target's timeout + LeaseMargin"); the defaults are
	// DefaultDispatcherConfig's.
	dc := DefaultDispatcherConfig()
	if dc != (DispatcherConfig{LeaseMargin: DefaultLeaseMargin, Workers: DefaultDispatchWorkers, Queue: DefaultDispatchQueue, MaxBytes: DefaultDispatchBytes}) {
		t.Errorf("DefaultDispatcherConfig = %+v", dc)
	}
	w, err := NewWorker(workerDeps(t, DefaultWorkerConfig(), cfg))
	if err != nil {
		t.Fatal(err)
	}
	dispatcherDeps := func(c DispatcherConfig) DispatcherConfig {
		c.Worker, c.Recorder, c.Registerer, c.Log = w, recordNothing{}, prometheus.NewRegistry(), noLog
		return c
	}
	if err := dispatcherDeps(dc).validate(); err != nil {
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
		{"no worker", func(c *DispatcherConfig) { c.Worker = nil }, "Worker: nil"},
		{"no recorder", func(c *DispatcherConfig) { c.Recorder = nil }, "Recorder: nil"},
		{"no registerer", func(c *DispatcherConfig) { c.Registerer = nil }, "Registerer: nil"},
		{"no log", func(c *DispatcherConfig) { c.Log = nil }, "Log: nil"},
	} {
		dc := dispatcherDeps(DefaultDispatcherConfig())
		tc.apply(&dc)
		wantErr(tc.name, dc.validate(), tc.field)
		d, err := NewDispatcher(dc)
		if d != nil {
			_ = d.Close(context.Background())
		}
		wantErr("NewDispatcher with "+tc.name, err, tc.field)
	}
}

// TestTakeoverConfigValidate: DefaultTakeoverConfig of a process ID, with
// its dependencies, is valid; an ID not of NewProcessID's form, a zero
// heartbeat interval, a stale time not above it and a missing dependency
// are refused by validate and NewTakeover, naming the field.
func TestTakeoverConfigValidate(t *testing.T) {
	t.Parallel()
	withDeps := func(c TakeoverConfig) TakeoverConfig {
		c.DB, c.Jobs, c.Registerer, c.Log = noPool, noJobs, prometheus.NewRegistry(), noLog
		return c
	}
	if _, err := NewTakeover(withDeps(DefaultTakeoverConfig(NewProcessID()))); err != nil {
		t.Errorf("DefaultTakeoverConfig: %v", err)
	}
	for _, tc := range []struct {
		apply func(*TakeoverConfig)
		field string
	}{
		{func(c *TakeoverConfig) { c.ID = "other:1" }, "ID \"other:1\""},
		{func(c *TakeoverConfig) { c.HeartbeatEvery = 0 }, "HeartbeatEvery 0s"},
		{func(c *TakeoverConfig) { c.Stale = c.HeartbeatEvery }, "Stale 1s"},
		{func(c *TakeoverConfig) { c.DB = nil }, "DB: nil"},
		{func(c *TakeoverConfig) { c.Jobs = nil }, "Jobs: nil"},
		{func(c *TakeoverConfig) { c.Registerer = nil }, "Registerer: nil"},
		{func(c *TakeoverConfig) { c.Log = nil }, "Log: nil"},
	} {
		c := withDeps(DefaultTakeoverConfig(NewProcessID()))
		tc.apply(&c)
		if err := c.validate(); err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("validate: %v, want an error naming %q", err, tc.field)
		}
		if _, err := NewTakeover(c); err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("NewTakeover: %v, want an error naming %q", err, tc.field)
		}
	}
}
