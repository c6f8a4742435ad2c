package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/queue"
	"github.com/hookgate/hookgate/internal/testing/pgtest"
	"github.com/hookgate/hookgate/internal/testing/queuetest"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// forwardConfig is the hookgate.yaml of the forwarding tests: the sender acme
// of senderConfig, forwarding to url.
func forwardConfig(url, timeout string, maxAttempts int) string {
	return senderConfig + fmt.Sprintf(`    forward:
      - name: t1
        url: %s
        timeout: %s
        max_attempts: %d
`, url, timeout, maxAttempts)
}

// fastForwardFlags make forwards retry and get picked up quickly.
var fastForwardFlags = []string{
	"--forward-backoff-base", "50ms",
	"--forward-backoff-max", "500ms",
	"--forward-poll-interval", "100ms", // River refuses less than its 100ms fetch cooldown
}

// block holds every request until the client goes away or the test ends.
func block(int, *http.Request) testkit.Answer { return testkit.Answer{Block: true} }

// forwardJobs returns every forward job, oldest first.
func forwardJobs(t *testing.T, pool *pgxpool.Pool) []queuetest.ForwardJob {
	t.Helper()
	jobs, err := queuetest.New(pool).ForwardJobs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return jobs
}

// jobStates counts the forward jobs by state.
func jobStates(t *testing.T, pool *pgxpool.Pool) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, j := range forwardJobs(t, pool) {
		out[string(j.State)]++
	}
	return out
}

// outboxRows counts the forwards in the outbox, not yet relayed into River.
func outboxRows(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM forward_outbox`).Scan(&n); err != nil {
		t.Fatalf("read forward_outbox: %v", err)
	}
	return n
}

// jobsPerEvent counts the forward jobs of each event.
func jobsPerEvent(t *testing.T, pool *pgxpool.Pool) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, j := range forwardJobs(t, pool) {
		out[j.EventID]++
	}
	return out
}

// acceptedEvents returns the event of every accepted delivery of acme.
func acceptedEvents(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT event_id::text FROM processed_messages WHERE sender = 'acme' ORDER BY 1`)
	if err != nil {
		t.Fatalf("read processed_messages: %v", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("read processed_messages: %v", err)
	}
	return out
}

// checkEveryEventForwarded waits until the target has answered 2xx to a
// forward of every event in events, and then checks that the outbox is
// empty and that every event has exactly one forward job, completed. It
// waits up to stallTimeout, and logs how long the wait took.
func checkEveryEventForwarded(t *testing.T, pool *pgxpool.Pool, tg *testkit.Target, events []string) {
	t.Helper()
	start := time.Now()
	missing := func() []string {
		got := tg.Delivered()
		var out []string
		for _, ev := range events {
			if got[ev] == 0 {
				out = append(out, ev)
			}
		}
		return out
	}
	testkit.Poll(t, stallTimeout, "every accepted event to reach the target", func() bool { return len(missing()) == 0 }, func() string {
		m := missing()
		return fmt.Sprintf("%d of %d never arrived (e.g. %v); outbox rows %d, jobs %v", len(m), len(events), m[:min(5, len(m))], outboxRows(t, pool), jobStates(t, pool))
	})
	testkit.Poll(t, stallTimeout, "every forward job to be completed", func() bool {
		return jobStates(t, pool)["completed"] == len(events)
	})
	t.Logf("every one of %d events at the target and its job completed %v after the check began", len(events), time.Since(start).Round(100*time.Millisecond))
	if n := outboxRows(t, pool); n != 0 {
		t.Errorf("%d forwards left in the outbox, want none", n)
	}
	per := jobsPerEvent(t, pool)
	if len(per) != len(events) {
		t.Errorf("forward jobs of %d events, want %d", len(per), len(events))
	}
	bad := 0
	for _, ev := range events {
		if per[ev] != 1 {
			if bad++; bad <= 5 {
				t.Errorf("event %s has %d forward jobs, want 1", ev, per[ev])
			}
		}
	}
}

// startBinaryWith is startBinary with extra serve flags.
func startBinaryWith(t *testing.T, bin, dsn, addr, cfg string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"serve", "--addr", addr, "--config", cfg}, args...)...)
	cmd.Env = []string{"DATABASE_URL=" + dsn, "HOOKGATE_LOG_FORMAT=json"}
	p := &proc{cmd: cmd, log: newLogSink(), done: make(chan struct{})}
	cmd.Stdout = p.log
	cmd.Stderr = p.log
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("log of process %d (%s) (tail):\n%s", cmd.Process.Pid, strings.Join(args, " "), p.log.tail(40))
		}
	})
	return p
}

// deliverAll delivers every ID once and returns the event IDs, failing the
// test on anything but a 202.
func deliverAll(t *testing.T, c *http.Client, base string, ids []string) []string {
	t.Helper()
	events := make([]string, len(ids))
	for i, id := range ids {
		r, err := deliver(t.Context(), c, base, id, bodyFor(id))
		if err != nil {
			t.Fatalf("deliver %s: %v", id, err)
		}
		a, err := parseAccepted(r, id)
		if err != nil {
			t.Fatalf("deliver %s: %v", id, err)
		}
		events[i] = a.EventID
	}
	return events
}

// TestForwardsSurviveSIGKILL: the real binary accepts deliveries whose
// forwards cannot get through (the target holds every request), and is
// killed with SIGKILL while forwards are running. Once the target answers
// again and the binary is restarted, every event reaches the target with a
// 2xx: the outbox lost nothing. With the default settings, the jobs that
// were running at the kill are taken over by the restarted process once
// the killed one's heartbeat is stale (5 s), not rescued by River after
// its rescue horizon: the restarted process counts each of them in
// hookgate_forward_taken_over_total. The time from the restart to the
// last event is logged, not bounded: a bound of the target's timeout +
// 10 s fails on a busy machine.
func TestForwardsSurviveSIGKILL(t *testing.T) {
	testkit.Slow(t, "kills the server with forwards in flight")
	t.Parallel()
	bin := buildBinary(t)
	pool, dsn := pgtest.NewDB(t)
	tg := testkit.NewTarget(t, block)
	// A lone target's fair share is half the workers (max_in_flight does
	// not raise it): that many hold a forward each. Each attempt ends at
	// the 1s timeout and the job is tried again at once, so the workers
	// keep the target's share busy, as long as the breaker stays closed:
	// an open breaker lets one probe through at a time, and on a busy
	// machine it could open before that many were ever in flight at once
	// (the test then waited for them in vain). The breaker is not what
	// this test is about: its threshold is out of reach.
	cfg := writeConfig(t, forwardConfig(tg.URL, "1s", 100)+"        max_in_flight: 10\n        breaker_threshold: 1000\n")
	addr := freeAddr(t)
	base := "http://" + addr
	c := newClient(t)
	const (
		n       = 50
		workers = 10
	)
	// The forwards are River's jobs from the start, without the fast path
	// (TestFastPathSIGKILL kills that): the requests the target holds are
	// running jobs then, never only first attempts of the fast path, whose
	// forwards River does not know of yet (a kill there left no job running,
	// and nothing for the rescuer to do).
	flags := append([]string{"--forward-workers", fmt.Sprint(workers), "--forward-fast-path=false"}, fastForwardFlags...)

	// The first process's connections carry a name of their own, so that
	// the test can wait for PostgreSQL to end them after the kill.
	first := startBinaryWith(t, bin, withParam(dsn, "application_name=hookgate-killed"), addr, cfg, flags...)
	waitHealthy(t, c, base, first)
	events := deliverAll(t, c, base, makeIDs("kill-fwd", n))

	// Kill while the workers are busy: every slot the target may hold holds a request.
	testkit.Poll(t, 30*time.Second, "the worker to have all its forwards in flight", func() bool {
		in, _ := tg.InFlight()
		return in >= workers/2
	})
	if err := first.cmd.Process.Kill(); err != nil {
		t.Fatalf("SIGKILL: %v", err)
	}
	select {
	case <-first.done:
	case <-time.After(time.Minute):
		t.Fatal("the killed process did not exit within a minute")
	}
	var exitErr *exec.ExitError
	if !errors.As(first.err, &exitErr) || exitErr.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the first process ended with %v, want killed by SIGKILL", first.err)
	}
	// A statement the killed process had sent (River's completer writing
	// the outcomes of attempts that timed out) runs to its end, and
	// commits: the jobs' states at the kill are those once PostgreSQL has
	// ended every connection of the killed process. On a busy machine that
	// took long enough for 7 of 12 running jobs to become retryable after
	// the test had counted them.
	testkit.Poll(t, 30*time.Second, "PostgreSQL to end the killed process's connections", func() bool {
		var left int
		err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity WHERE application_name = 'hookgate-killed'`).Scan(&left)
		return err == nil && left == 0
	})
	before := jobStates(t, pool)
	if before["running"] == 0 {
		t.Fatalf("no forward job was running at the kill (%v): the test did not exercise the rescue", before)
	}
	if got := len(tg.Delivered()); got != 0 {
		t.Fatalf("%d events were delivered before the kill, want 0 (the target held every request)", got)
	}
	t.Logf("at the kill: jobs %v", before)

	tg.SetDecide(testkit.Always(http.StatusOK))
	restarted := time.Now()
	second := startBinaryWith(t, bin, dsn, addr, cfg, flags...)
	waitHealthy(t, c, base, second)

	// River's rescuer would need a leader (after a kill the new process
	// waits for the dead leader's term to expire, up to ~20 s), then
	// --forward-rescue-after (the timeout + 5 s + a minute by default), at
	// its next run (every 30 s). The takeover needs neither, and counts
	// the jobs it takes.
	testkit.Poll(t, stallTimeout, "the jobs running at the kill to be taken over and every event delivered", func() bool { return len(tg.Delivered()) >= n }, func() string {
		return fmt.Sprintf("%v after the restart with default settings, %d of %d events delivered; jobs %v",
			time.Since(restarted).Round(time.Second), len(tg.Delivered()), n, jobStates(t, pool))
	})
	t.Logf("all %d events delivered %v after the restart", n, time.Since(restarted).Round(100*time.Millisecond))
	taken := scrape(t, c, base, "hookgate_forward_taken_over_total")
	t.Logf("the restarted process took over %v jobs", taken)
	if taken < float64(before["running"]) {
		t.Errorf("the restarted process took over %v jobs, want the %d running at the kill", taken, before["running"])
	}
	got := tg.Delivered()
	if len(got) != n {
		t.Errorf("%d distinct Idempotency-Keys delivered, want %d", len(got), n)
	}
	checkEveryEventForwarded(t, pool, tg, events)
}

// TestForwardsByWorkerProcesses: one --role api process accepts deliveries
// and only writes their forwards to the outbox; two --role worker processes
// on the same database relay them into River and work them. Each event
// reaches the target once in this run (nothing crashes, so nothing is
// repeated), and both workers take part. The workers' metrics name the
// target by its name: its URL, with a password and a query token, appears
// nowhere in /metrics.
func TestForwardsByWorkerProcesses(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	pool, dsn := pgtest.NewDB(t)
	// Until two forwards have been in flight at once, every forward is held
	// until a second one arrives: with one forward at a time per worker,
	// that needs both workers. Holding every forward until then, not only
	// the first, matters: a worker that sends its first forward late (a
	// busy machine) would otherwise find the other worker done with all
	// the rest, and its forward would wait for a partner that never comes.
	var tg *testkit.Target
	tg = testkit.NewTarget(t, func(_ int, r *http.Request) testkit.Answer {
		if _, most := tg.InFlight(); most < 2 && !tg.AwaitInFlight(r.Context(), 2) {
			return testkit.Answer{Block: true} // the client gave up or the test ended first: no answer
		}
		return testkit.Answer{Status: http.StatusOK}
	})
	const (
		urlPassword = "url-pw-41d7c2"
		urlToken    = "qtok-9b03e5"
	)
	// The password is in the path, marked secret (a URL with a password is
	// refused at start-up).
	targetURL := tg.URL + "/" + urlPassword + "?token=" + urlToken
	cfg := writeConfig(t, forwardConfig(targetURL, "30s", 5)+"        secret_path: true\n")
	c := newClient(t)
	const n = 40

	apiAddr := freeAddr(t)
	api := startBinaryWith(t, bin, dsn, apiAddr, cfg, append([]string{"--role", "api"}, fastForwardFlags...)...)
	waitHealthy(t, c, "http://"+apiAddr, api)
	events := deliverAll(t, c, "http://"+apiAddr, makeIDs("workers", n))

	// The api process neither relays nor works forwards: it never started
	// River, so there is no leader, no queue, no job, every forward is in
	// the outbox, and the target saw nothing.
	var leaders, queues int
	if err := pool.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM river_leader), (SELECT count(*) FROM river_queue)`).Scan(&leaders, &queues); err != nil {
		t.Fatal(err)
	}
	if leaders != 0 || queues != 0 {
		t.Errorf("with only the api process running: %d River leaders, %d queues; want none", leaders, queues)
	}
	if st := jobStates(t, pool); len(st) != 0 {
		t.Errorf("with only the api process running, jobs %v; want none (the forwards wait in the outbox)", st)
	}
	if got := outboxRows(t, pool); got != n {
		t.Errorf("with only the api process running, %d forwards in the outbox, want %d", got, n)
	}
	if hits := tg.Hits(); len(hits) != 0 {
		t.Errorf("the target received %d requests with only the api process running, want 0", len(hits))
	}

	var workers []string
	for range 2 {
		addr := freeAddr(t)
		w := startBinaryWith(t, bin, dsn, addr, cfg, append([]string{"--role", "worker", "--forward-workers", "1"}, fastForwardFlags...)...)
		waitHealthy(t, c, "http://"+addr, w)
		workers = append(workers, "http://"+addr)
	}
	testkit.Poll(t, 45*time.Second, "every forward job to be completed", func() bool {
		return jobStates(t, pool)["completed"] == n
	})
	if got := outboxRows(t, pool); got != 0 {
		t.Errorf("%d forwards left in the outbox, want none", got)
	}

	hits := tg.Hits()
	_, maxIn := tg.InFlight()
	got := tg.Delivered()
	if len(hits) != n || len(got) != n {
		t.Errorf("the target received %d requests with %d distinct Idempotency-Keys, want exactly %d and %d", len(hits), len(got), n, n)
	}
	for _, ev := range events {
		if got[ev] != 1 {
			t.Errorf("event %s was delivered %d times, want once", ev, got[ev])
		}
	}
	if maxIn < 2 {
		t.Errorf("at most %d forwards were in flight at once; with one per worker, both workers should have taken part", maxIn)
	}
	byClient := map[string]int{}
	for _, j := range forwardJobs(t, pool) {
		last := "" // the client of the attempt that finished the job
		if len(j.AttemptedBy) > 0 {
			last = j.AttemptedBy[len(j.AttemptedBy)-1]
		}
		byClient[last]++
	}
	if len(byClient) != 2 {
		t.Errorf("jobs were worked by %d River clients (%v), want the 2 workers", len(byClient), byClient)
	}
	t.Logf("jobs per worker: %v", byClient)

	// Metrics: the delivered attempts, by target name, add up to n.
	const attempts = `hookgate_forward_attempts_total{outcome="delivered",sender="acme",target="t1"} `
	total := 0
	for _, w := range workers {
		r, err := get(t.Context(), c, w+"/metrics")
		if err != nil || r.status != http.StatusOK {
			t.Fatalf("GET %s/metrics: %v %v", w, r, err)
		}
		body := string(r.body)
		for _, leak := range []string{tg.Server(), strings.TrimPrefix(tg.Server(), "http://"), "/hooks", urlPassword, urlToken, "token="} {
			if strings.Contains(body, leak) {
				t.Errorf("GET %s/metrics contains %q of the target's URL", w, leak)
			}
		}
		for _, line := range strings.Split(body, "\n") {
			if v, ok := strings.CutPrefix(line, attempts); ok {
				var k int
				if _, err := fmt.Sscan(v, &k); err != nil {
					t.Errorf("metric line %q: %v", line, err)
				}
				total += k
			}
		}
	}
	if total != n {
		t.Errorf("the workers' %s… add up to %d, want %d", attempts, total, n)
	}
}

// TestWorkerRoleServesOnlyServiceEndpoints: a --role worker process answers
// /healthz, /readyz and /metrics, and 404 on the ingest and operator routes.
func TestWorkerRoleServesOnlyServiceEndpoints(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	_, dsn := pgtest.NewDB(t)
	tg := testkit.NewTarget(t, testkit.Always(http.StatusOK))
	cfg := writeConfig(t, forwardConfig(tg.URL, "1s", 5))
	addr := freeAddr(t)
	base := "http://" + addr
	c := newClient(t)
	w := startBinaryWith(t, bin, dsn, addr, cfg, append([]string{"--role", "worker"}, fastForwardFlags...)...)
	waitHealthy(t, c, base, w)

	// Readiness pings the database (2 s): on a saturated machine one ping
	// can time out, so wait for the worker to report ready before asking.
	testkit.Poll(t, time.Minute, "the worker's /readyz to answer 200", func() bool {
		r, err := get(t.Context(), c, base+"/readyz")
		return err == nil && r.status == http.StatusOK
	})
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		r, err := get(t.Context(), c, base+path)
		if err != nil {
			t.Fatal(err)
		}
		if r.status != http.StatusOK {
			t.Errorf("GET %s on a worker: %s, want 200", path, r)
		}
		if path == "/metrics" && !strings.Contains(string(r.body), "go_goroutines") {
			t.Errorf("GET /metrics on a worker has no go_goroutines metric")
		}
	}
	r, err := deliver(t.Context(), c, base, "to-a-worker", bodyFor("to-a-worker"))
	if err != nil {
		t.Fatal(err)
	}
	if r.status != http.StatusNotFound || r.header.Get("Content-Type") != "application/problem+json" {
		t.Errorf("POST /webhooks/acme on a worker: %s, want a 404 problem", r)
	}
	for _, path := range []string{"/webhooks/x", "/v1/senders", "/openapi.yaml", "/docs"} {
		r, err := get(t.Context(), c, base+path)
		if err != nil {
			t.Fatal(err)
		}
		if r.status != http.StatusNotFound {
			t.Errorf("GET %s on a worker: %s, want 404", path, r)
		}
	}
	// Nothing was recorded.
	if hits := tg.Hits(); len(hits) != 0 {
		t.Errorf("the target received %d requests, want 0", len(hits))
	}
}

// TestShutdownLetsRunningForwardFinish: run's context is cancelled while a
// forward is in flight (the target takes a second to answer). The forward
// completes — the target answered it, once, and the job is completed by the
// time run returns — and run returns nil.
func TestShutdownLetsRunningForwardFinish(t *testing.T) {
	t.Parallel()
	pool, dsn := pgtest.NewDB(t)
	tg := testkit.NewTarget(t, func(int, *http.Request) testkit.Answer {
		return testkit.Answer{Status: http.StatusOK, Delay: time.Second}
	})
	srv := startRunWith(t, dsn, forwardConfig(tg.URL, "10s", 5), fastForwardFlags...)
	c := newClient(t)
	ev := deliverAll(t, c, srv.base, []string{"shutdown-fwd"})[0]

	testkit.Poll(t, 30*time.Second, "the forward to be in flight", func() bool {
		in, _ := tg.InFlight()
		return in == 1
	})
	srv.cancel()
	if err := srv.wait(t); err != nil {
		t.Fatalf("run returned %v, want nil after a graceful shutdown", err)
	}
	// run has returned: the forward must be finished already.
	hits := tg.Hits()
	in, _ := tg.InFlight()
	if in != 0 || len(hits) != 1 || hits[0].Status != http.StatusOK || hits[0].Key() != ev {
		t.Fatalf("when run returned the target had %d requests in flight and received %+v; want exactly one, answered 200, for event %s", in, hits, ev)
	}
	jobs := forwardJobs(t, pool)
	if len(jobs) != 1 {
		t.Fatalf("%d forward jobs, want 1", len(jobs))
	}
	state, attempt := string(jobs[0].State), jobs[0].Attempt
	if state != "completed" || attempt != 1 {
		t.Errorf("after shutdown the job is %s at attempt %d, want completed at attempt 1", state, attempt)
	}
	// The attempt is in the console's charts: one delivered, taking the
	// target's second.
	var kinds string
	var sumMS int64
	if err := pool.QueryRow(t.Context(), `SELECT coalesce(string_agg(kind || '=' || n, ' ' ORDER BY kind), ''), coalesce(sum(sum_ms), 0)::bigint
FROM traffic_minutes WHERE target <> ''`).Scan(&kinds, &sumMS); err != nil {
		t.Fatal(err)
	}
	if kinds != "delivered=1" || sumMS < 1000 {
		t.Errorf("forward traffic stored: %q, %d ms; want delivered=1 taking at least 1000 ms", kinds, sumMS)
	}
}

// TestShutdownRetriesForwardThatOutlastsGrace: a forward still running when
// the shutdown grace period ends (on the fast path) is cancelled and left to
// be retried — not lost, not failed — and the next process delivers it.
func TestShutdownRetriesForwardThatOutlastsGrace(t *testing.T) {
	t.Parallel()
	pool, dsn := pgtest.NewDB(t)
	tg := testkit.NewTarget(t, block)
	cfg := forwardConfig(tg.URL, "20s", 5)
	srv := startRunWith(t, dsn, cfg, append([]string{"--shutdown-timeout", "300ms"}, fastForwardFlags...)...)
	c := newClient(t)
	ev := deliverAll(t, c, srv.base, []string{"outlasts-grace"})[0]
	testkit.Poll(t, 30*time.Second, "the forward to be in flight", func() bool {
		in, _ := tg.InFlight()
		return in == 1
	})
	srv.cancel()
	if err := srv.wait(t); err != nil {
		t.Errorf("run returned %v, want nil (running forwards cancelled and left for retry)", err)
	}
	// Cut short on the fast path, the forward is back in the outbox, its
	// lease released for the next relay; cut short in River, its job waits
	// for a retry.
	var released int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM forward_outbox WHERE leased_until IS NULL`).Scan(&released); err != nil {
		t.Fatal(err)
	}
	if released != 1 {
		jobs := forwardJobs(t, pool)
		if len(jobs) != 1 {
			t.Fatalf("%d forward jobs and no released outbox row, want 1 of either", len(jobs))
		}
		state, attempt, errs := string(jobs[0].State), jobs[0].Attempt, jobs[0].Errors
		if state != "available" && state != "retryable" {
			t.Fatalf("after a shutdown that cut the forward short the job is %s at attempt %d (errors %q), want available or retryable", state, attempt, errs)
		}
	}

	tg.SetDecide(testkit.Always(http.StatusOK))
	next := startRunWith(t, dsn, cfg, fastForwardFlags...)
	testkit.Poll(t, 30*time.Second, "the forward to be delivered by the next process", func() bool {
		return tg.Delivered()[ev] == 1
	})
	testkit.Poll(t, 30*time.Second, "the job to be completed", func() bool {
		return jobStates(t, pool)["completed"] == 1
	})
	next.cancel()
	if err := next.wait(t); err != nil {
		t.Errorf("second run returned %v", err)
	}
	hits := tg.Hits()
	keys := make([]string, 0, len(hits))
	for _, h := range hits {
		keys = append(keys, h.Key())
	}
	sort.Strings(keys)
	if len(hits) != 2 {
		t.Errorf("the target received %d requests (%v), want 2: the cut-short one and the retry", len(hits), keys)
	}
}

// TestNoSecretInLogsOrMetrics runs a real worker whose target URL carries a
// secret path and a query token and whose forwards fail (connection
// refused, and a job naming, as older versions did, by a URL with a
// password, a target this process does not know): neither the process's
// log nor its /metrics contains the password, the token or the URL.
func TestNoSecretInLogsOrMetrics(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	pool, dsn := pgtest.NewDB(t)
	const (
		password = "pw-7f3e9a1c"
		token    = "tok-2b8d4e6f"
	)
	targetURL := "http://127.0.0.1:1/hook/hookuser/" + password + "?token=" + token
	// The breaker stays shut: every forward must fail (and be logged).
	cfg := writeConfig(t, forwardConfig(targetURL, "2s", 2)+"        breaker_threshold: 1000\n        secret_path: true\n")
	c := newClient(t)
	addr := freeAddr(t)
	p := startBinaryWith(t, bin, dsn, addr, cfg, fastForwardFlags...)
	waitHealthy(t, c, "http://"+addr, p)
	deliverAll(t, c, "http://"+addr, makeIDs("secret", 3))
	// A job of a target this process does not know, named by the URL as an
	// older version did: its error must not echo the URL either.
	if _, err := queuetest.New(pool).InsertForwardJobs(t.Context(), queue.ForwardQueue, queuetest.JobFixture{}, queuetest.NewForwardJob{
		Sender: "acme", DeliveryID: "old", URL: "http://old:" + password + "@127.0.0.1:1/?token=" + token, MaxAttempts: 2,
	}); err != nil {
		t.Fatal(err)
	}
	testkit.Poll(t, 45*time.Second, "every forward to fail", func() bool {
		st := jobStates(t, pool)
		return st["discarded"]+st["cancelled"] == 4
	})
	r, err := get(t.Context(), c, "http://"+addr+"/metrics")
	if err != nil || r.status != http.StatusOK {
		t.Fatalf("GET /metrics: %v %v", r, err)
	}
	logs := p.log.tail(1 << 20)
	if !strings.Contains(logs, "connection refused") {
		t.Fatalf("the log shows no failed forward, so this test checks nothing:\n%s", logs)
	}
	for what, text := range map[string]string{"the log": logs, "/metrics": string(r.body)} {
		for _, leak := range []string{password, token, "hookuser", "127.0.0.1:1/hook"} {
			if strings.Contains(text, leak) {
				t.Errorf("%s contains %q of the target's URL", what, leak)
			}
		}
	}
	var errs string
	for _, j := range forwardJobs(t, pool) {
		errs += strings.Join(j.ErrorRecords, " ") + " "
	}
	if strings.TrimSpace(errs) == "" {
		t.Fatal("no forward job recorded an error, so this test checks nothing")
	}
	for _, leak := range []string{password, token} {
		if strings.Contains(errs, leak) {
			t.Errorf("a forward's recorded error contains %q", leak)
		}
	}
}
