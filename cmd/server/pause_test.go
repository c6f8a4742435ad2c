package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/testing/pgtest"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// pauseToken is the admin token of the pause tests' processes.
const pauseToken = "pause-test-token-6c1e0b9d47a2f3e85d10"

// pauseConfig is senderConfig with one target, held, at url.
func pauseConfig(url string) string {
	return senderConfig + fmt.Sprintf("    forward:\n      - name: held\n        url: %s\n        timeout: 10s\n        max_attempts: 5\n", url)
}

// operate POSTs body (none when "") to base's operator path with the admin
// token and returns the answer, failing the test unless it is 200.
func operate(t *testing.T, c *http.Client, base, path, body string) []byte {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+pauseToken)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	r, err := do(c, req)
	if err != nil || r.status != http.StatusOK {
		t.Fatalf("POST %s: %v %v", path, r, err)
	}
	return r.body
}

// scrape returns the sum of the samples of metric name whose labels
// include each of labels (`sender="acme"`) in base's /metrics.
func scrape(t *testing.T, c *http.Client, base, name string, labels ...string) float64 {
	t.Helper()
	r, err := get(t.Context(), c, base+"/metrics")
	if err != nil || r.status != http.StatusOK {
		t.Fatalf("GET %s/metrics: %v %v", base, r, err)
	}
	var sum float64
	sc := bufio.NewScanner(bytes.NewReader(r.body))
	sc.Buffer(nil, 1<<20)
lines:
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		series, value, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		for _, l := range labels {
			if !strings.Contains(series, l) {
				continue lines
			}
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			t.Fatalf("%s/metrics: %q: %v", base, line, err)
		}
		sum += v
	}
	return sum
}

// waitPaused waits until every process of bases reports the target held
// paused (want 1) or not (0) in hookgate_target_paused.
func waitPaused(t *testing.T, c *http.Client, bases []string, want float64) {
	t.Helper()
	for _, b := range bases {
		testkit.Poll(t, 30*time.Second, fmt.Sprintf("%s to report hookgate_target_paused %v", b, want), func() bool {
			return scrape(t, c, b, "hookgate_target_paused", `sender="acme"`, `target="held"`) == want
		})
	}
}

// heldJobs reads the forward jobs of target held: how many there are and
// how many are snoozed by the pause (River's state scheduled, no attempt
// used, no error).
func heldJobs(t *testing.T, pool *pgxpool.Pool) (all, snoozed int) {
	t.Helper()
	for _, j := range forwardJobs(t, pool) {
		if j.Target != "held" {
			continue
		}
		all++
		if j.State == "scheduled" && j.Attempt == 0 && len(j.Errors) == 0 {
			snoozed++
		}
	}
	return all, snoozed
}

// TestPauseHoldsForwardsInEveryProcess: three real gateway processes on
// one database with default settings, --role api, worker and all. An
// operator pauses a target through the api process; once every process
// reports the pause (hookgate_target_paused), deliveries arrive at about
// 200/s for 3 s through the api and all processes. All are accepted;
// nothing reaches the target: the all process leases none to its fast
// path, and every forward waits in River, snoozed without using an
// attempt. The operator resumes through the all process: every event
// reaches the target once (by Idempotency-Key), at its first attempt.
func TestPauseHoldsForwardsInEveryProcess(t *testing.T) {
	testkit.Slow(t, "three gateway processes under load")
	t.Parallel()
	bin := buildBinary(t)
	pool, dsn := pgtest.NewDB(t)
	tg := testkit.NewTarget(t, testkit.Always(http.StatusOK))
	cfg := writeConfig(t, pauseConfig(tg.URL))
	c := newClient(t)
	bases := map[string]string{}
	for _, role := range []string{"api", "worker", "all"} {
		addr := freeAddr(t)
		p := startBinaryWith(t, bin, dsn, addr, cfg, "--role", role, "--admin-token", pauseToken)
		waitHealthy(t, c, "http://"+addr, p)
		bases[role] = "http://" + addr
	}
	all := []string{bases["api"], bases["worker"], bases["all"]}

	var paused struct {
		Paused bool   `json:"paused"`
		Reason string `json:"reason"`
		By     string `json:"by"`
	}
	if err := json.Unmarshal(operate(t, c, bases["api"], "/v1/senders/acme/targets/held/pause", `{"reason":"held is being migrated"}`), &paused); err != nil ||
		!paused.Paused || paused.Reason != "held is being migrated" || paused.By != "admin via operator API (127.0.0.1)" {
		t.Fatalf("pause answer: %+v, %v", paused, err)
	}
	waitPaused(t, c, all, 1)

	// About 200 deliveries a second for 3 s, alternately through the api
	// and the all process.
	const rate, n = 200, 600
	var (
		mu       sync.Mutex
		events   = map[string]string{} // delivery ID → event ID
		failures atomic.Int64
		wg       sync.WaitGroup
	)
	sem := make(chan struct{}, 64)
	tick := time.NewTicker(time.Second / rate)
	for i := range n {
		<-tick.C
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			id := fmt.Sprintf("pause-%03d", i)
			base := bases["api"]
			if i%2 == 1 {
				base = bases["all"]
			}
			r, err := deliver(context.Background(), c, base, id, bodyFor(id))
			a, perr := parseAccepted(r, id)
			if err != nil || perr != nil {
				if failures.Add(1) <= 5 {
					t.Errorf("deliver %s: %v %v", id, err, perr)
				}
				return
			}
			mu.Lock()
			events[id] = a.EventID
			mu.Unlock()
		})
	}
	tick.Stop()
	wg.Wait()
	if failures.Load() > 0 {
		t.Fatalf("%d of %d deliveries were not accepted", failures.Load(), n)
	}

	// Every forward is relayed into River, fetched, and snoozed by the
	// pause without an attempt; none reached the target.
	testkit.Poll(t, stallTimeout, "every held forward to be snoozed by the pause", func() bool {
		jobs, snoozed := heldJobs(t, pool)
		return jobs == n && snoozed == n && outboxRows(t, pool) == 0
	}, func() string {
		jobs, snoozed := heldJobs(t, pool)
		return fmt.Sprintf("%d jobs, %d snoozed, %d in the outbox, states %v", jobs, snoozed, outboxRows(t, pool), jobStates(t, pool))
	})
	if hits := tg.Hits(); len(hits) != 0 {
		t.Errorf("the paused target received %d requests (e.g. %s), want none", len(hits), hits[0].Key())
	}
	if got := scrape(t, c, bases["all"], "hookgate_forward_fast_path_total", `result="delivered"`); got != 0 {
		t.Errorf("the all process's fast path delivered %v forwards to the paused target, want none", got)
	}
	waits := scrape(t, c, bases["worker"], "hookgate_forward_waits_total", `target="held"`, `reason="operator"`) +
		scrape(t, c, bases["all"], "hookgate_forward_waits_total", `target="held"`, `reason="operator"`)
	if waits < n {
		t.Errorf("hookgate_forward_waits_total{reason=operator} of the working processes: %v, want at least %d", waits, n)
	}

	operate(t, c, bases["all"], "/v1/senders/acme/targets/held/resume", "")
	resumed := time.Now()
	testkit.Poll(t, stallTimeout, "every held forward to reach the resumed target", func() bool { return len(tg.Delivered()) == n },
		func() string {
			return fmt.Sprintf("%d of %d delivered; jobs %v", len(tg.Delivered()), n, jobStates(t, pool))
		})
	t.Logf("every held forward reached the target %v after the resume", time.Since(resumed).Round(100*time.Millisecond))
	waitPaused(t, c, all, 0)
	evs := make([]string, 0, n)
	for _, ev := range events {
		evs = append(evs, ev)
		if hits := tg.HitsFor(ev); len(hits) != 1 {
			t.Errorf("event %s reached the target %d times, want once", ev, len(hits))
		}
	}
	checkEveryEventForwarded(t, pool, tg, evs)
	for _, j := range forwardJobs(t, pool) {
		if j.Attempt != 1 {
			t.Errorf("job %d: completed at attempt %d, want its first (no attempt used while held)", j.ID, j.Attempt)
		}
	}
}

// TestPauseSurvivesRestartAndEndsAtItsUntil: a pause taken through the
// API holds in a gateway process started after it (stopped and started
// again): a delivery is accepted and its forward held, the target gets
// nothing. The operator then gives the pause an end a few seconds away
// (pausing again keeps when it began): nothing reaches the target before
// it, every forward after it, without a resume.
func TestPauseSurvivesRestartAndEndsAtItsUntil(t *testing.T) {
	testkit.Slow(t, "restarts a gateway process")
	t.Parallel()
	bin := buildBinary(t)
	pool, dsn := pgtest.NewDB(t)
	tg := testkit.NewTarget(t, testkit.Always(http.StatusOK))
	cfg := writeConfig(t, pauseConfig(tg.URL))
	c := newClient(t)
	addr := freeAddr(t)
	base := "http://" + addr
	first := startBinaryWith(t, bin, dsn, addr, cfg, "--admin-token", pauseToken)
	waitHealthy(t, c, base, first)
	var p struct {
		Since time.Time `json:"since"`
	}
	if err := json.Unmarshal(operate(t, c, base, "/v1/senders/acme/targets/held/pause", `{"reason":"maintenance"}`), &p); err != nil {
		t.Fatal(err)
	}
	if err := first.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-first.done:
	case <-time.After(time.Minute):
		t.Fatal("the first process did not stop within a minute of SIGTERM")
	}

	second := startBinaryWith(t, bin, dsn, addr, cfg, "--admin-token", pauseToken)
	waitHealthy(t, c, base, second)
	if got := scrape(t, c, base, "hookgate_target_paused", `sender="acme"`, `target="held"`); got != 1 {
		t.Errorf("the restarted process: hookgate_target_paused %v, want 1 from the start", got)
	}
	const n = 10
	events := deliverAll(t, c, base, makeIDs("restart", n))
	testkit.Poll(t, 60*time.Second, "every forward to be snoozed by the pause", func() bool {
		jobs, snoozed := heldJobs(t, pool)
		return jobs == n && snoozed == n
	}, func() string { return fmt.Sprintf("jobs %v", jobStates(t, pool)) })
	if hits := tg.Hits(); len(hits) != 0 {
		t.Fatalf("the paused target received %d requests after the restart, want none", len(hits))
	}

	until := time.Now().Add(3 * time.Second).UTC()
	var again struct {
		Since time.Time  `json:"since"`
		Until *time.Time `json:"until"`
	}
	if err := json.Unmarshal(operate(t, c, base, "/v1/senders/acme/targets/held/pause", `{"until":"`+until.Format(time.RFC3339Nano)+`"}`), &again); err != nil {
		t.Fatal(err)
	}
	if !again.Since.Equal(p.Since) || again.Until == nil {
		t.Errorf("paused again with an end: %+v; want since %s kept, and the end", again, p.Since)
	}
	checkEveryEventForwarded(t, pool, tg, events)
	for _, h := range tg.Hits() {
		if h.At.Before(until) {
			t.Errorf("forward %s reached the target at %s, before the pause's end %s", h.Key(), h.At.Format(time.StampMilli), until.Format(time.StampMilli))
		}
	}
	testkit.Poll(t, 30*time.Second, "the process to report the pause ended", func() bool {
		return scrape(t, c, base, "hookgate_target_paused", `sender="acme"`, `target="held"`) == 0
	})
}
