package queue

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/testing/testkit"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
)

// TestRescueHorizonExceedsEveryJobTimeout: River's rescuer takes over a job
// running longer than RescueStuckJobsAfter, so (River's documentation) it
// must exceed every job's timeout — a forward's (the longest target timeout
// + 5s), a bulk redelivery's (up to an hour) and the maintenance job's
// (retention: ten minutes) — or a long job is started again on another
// worker while it still runs. By default the horizon is a forward's timeout
// plus a minute, and the long kinds run in slices below it.
func TestRescueHorizonExceedsEveryJobTimeout(t *testing.T) {
	t.Parallel()
	cfg := testkit.ParseConfig(t, `senders:
  - name: acme
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    forward:
      - { name: fast, url: "http://127.0.0.1:1/a", timeout: 10s }
      - { name: slow, url: "http://127.0.0.1:1/b", timeout: 30s }
`)
	const maintenance = 10 * time.Minute // the retention job's timeout
	check := func(name string, rescueAfter time.Duration) horizons {
		t.Helper()
		h, err := newHorizons(cfg, rescueAfter, maintenance)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		bulk, err := NewBulkWorker(BulkWorkerConfig{Pool: new(pgxpool.Pool), Senders: cfg, Log: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		bulk.timeout = min(bulk.timeout, h.long)
		timeouts := map[string]time.Duration{
			"forward":         h.forward,
			"bulk redelivery": bulk.Timeout(&river.Job[BulkArgs]{}),
			"maintenance":     min(maintenance, h.long),
		}
		for kind, d := range timeouts {
			if d <= 0 || d >= h.rescue {
				t.Errorf("%s: the %s job's timeout %s is not below the rescue horizon %s: a run that long is rescued while it runs", name, kind, d, h.rescue)
			}
		}
		return h
	}
	if h := check("default", DefaultClientConfig(cfg).RescueAfter); h.rescue != 95*time.Second || h.long != 90*time.Second || h.forward != 35*time.Second {
		t.Errorf("default horizons %+v; want rescue 1m35s (a forward's 35s + 1m: a killed process's forwards are taken over that soon), long jobs in slices of 1m30s, forwards 35s", h)
	}
	if h := check("explicit 2m", 2*time.Minute); h.rescue != 2*time.Minute || h.long != 2*time.Minute-rescueMargin {
		t.Errorf("explicit 2m: horizons %+v; want rescue 2m and the long jobs cut to 1m55s", h)
	}
	if _, err := newHorizons(cfg, 35*time.Second, maintenance); err == nil || !strings.Contains(err.Error(), "rescue-after") {
		t.Errorf("a horizon not above the forwards' timeout: %v; want an error", err)
	}
}
