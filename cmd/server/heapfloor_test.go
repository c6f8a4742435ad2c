package main

import (
	"net/http"
	"strconv"
	"testing"

	"github.com/hookgate/hookgate/internal/testing/pgtest"
)

// TestHeapFloorInForce: a hookgate process (GOGC unset) runs under the
// heap floor: after 300 deliveries its /metrics shows a GC percent
// (go_gc_gogc_percent) above GOGC's 100, its live heap being far below
// half the default floor; with --heap-floor=0 it shows GOGC's 100.
func TestHeapFloorInForce(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	_, dsn := pgtest.NewDB(t)
	cfg := writeConfig(t, senderConfig)
	c := newClient(t)
	for _, tc := range []struct {
		args []string
		over bool // the percent is above 100
	}{
		{nil, true},
		{[]string{"--heap-floor", "0"}, false},
	} {
		addr := freeAddr(t)
		p := startBinaryWith(t, bin, dsn, addr, cfg, tc.args...)
		base := "http://" + addr
		waitHealthy(t, c, base, p)
		for _, id := range makeIDs("floor-"+strconv.Itoa(len(tc.args))+"-", 300) {
			if r, err := deliver(t.Context(), c, base, id, bodyFor(id)); err != nil || r.status != http.StatusAccepted {
				t.Fatalf("deliver %s: %v %v", id, r, err)
			}
		}
		percent := metricValue(t, metricsBody(t, c, base), "go_gc_gogc_percent")
		if over := percent > 100; over != tc.over {
			t.Errorf("serve %v: go_gc_gogc_percent %v, want above 100: %v", tc.args, percent, tc.over)
		}
		if !tc.over && percent != 100 {
			t.Errorf("serve %v: go_gc_gogc_percent %v, want GOGC's 100", tc.args, percent)
		}
	}
}
