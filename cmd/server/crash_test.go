package main

import (
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/hookgate/hookgate/internal/testing/pgtest"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// TestSIGKILLMidLoad runs the real binary (role all: it ingests, relays the
// outbox and forwards) under a load of senders that retry until they get a
// 2xx, kills it with SIGKILL in the middle of the load, starts it again on
// the same port, and checks that every delivery was accepted once (one key)
// and answered with one event_id, and that every accepted event reached
// the forward target, with one forward job each and nothing left in the
// outbox.
func TestSIGKILLMidLoad(t *testing.T) {
	testkit.Slow(t, "kills the server under load")
	t.Parallel()
	bin := buildBinary(t)
	pool, dsn := pgtest.NewDB(t)
	tg := testkit.NewTarget(t, testkit.Always(http.StatusOK))
	cfg := writeConfig(t, forwardConfig(tg.URL, "1s", 100))
	// Forwards running at the kill are rescued after 7s (more than the 1s
	// target timeout + 5s) rather than the default minute and more.
	flags := append([]string{"--forward-rescue-after", "7s"}, fastForwardFlags...)
	addr := freeAddr(t)
	base := "http://" + addr
	c := newClient(t)

	const (
		deliveries = 300
		senders    = 16
		killAfter  = 100 // 2xx answers before the kill
	)
	ids := makeIDs("crash", deliveries)

	first := startBinaryWith(t, bin, dsn, addr, cfg, flags...)
	waitHealthy(t, c, base, first)

	var (
		ok2xx      atomic.Int64 // 2xx answers so far
		killed     atomic.Bool  // the first process has been sent SIGKILL
		firstGone  atomic.Bool  // the first process has exited
		afterKill  atomic.Int64 // 2xx answers received after the kill
		fromSecond atomic.Int64 // 2xx answers received once the first process was gone
		connErrs   atomic.Int64 // requests without an answer after the kill
		killOnce   sync.Once
		killErr    error
		killedCh   = make(chan struct{})
	)
	l := &load{
		client: c, base: base, ids: ids, senders: senders, backoff: 20 * time.Millisecond,
		observe: func(r reply, err error) {
			if err != nil {
				if killed.Load() {
					connErrs.Add(1)
				}
				return
			}
			if r.status < 200 || r.status > 299 {
				return
			}
			if killed.Load() {
				afterKill.Add(1)
			}
			if firstGone.Load() {
				fromSecond.Add(1)
			}
			if ok2xx.Add(1) == killAfter {
				killOnce.Do(func() {
					killErr = first.cmd.Process.Kill()
					killed.Store(true)
					close(killedCh)
				})
			}
		},
	}
	rl := l.start(t)

	select {
	case <-killedCh:
	case <-rl.done:
		t.Fatalf("the load ended after %d 2xx answers without reaching the kill at %d", ok2xx.Load(), killAfter)
	}
	if killErr != nil {
		t.Fatalf("SIGKILL: %v", killErr)
	}
	select {
	case <-first.done:
	case <-time.After(time.Minute):
		t.Fatal("the killed process did not exit within a minute")
	}
	firstGone.Store(true)
	var exitErr *exec.ExitError
	if !errors.As(first.err, &exitErr) || !exitErr.Sys().(syscall.WaitStatus).Signaled() ||
		exitErr.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the first process ended with %v, want killed by SIGKILL", first.err)
	}

	second := startBinaryWith(t, bin, dsn, addr, cfg, flags...)
	waitHealthy(t, c, base, second)

	select {
	case <-rl.done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the load did not end within two minutes")
	}
	reportLoad(t, rl.st)
	t.Logf("SIGKILL after %d 2xx answers; afterwards %d 2xx answers (%d from the restarted process) and %d requests without an answer",
		killAfter, afterKill.Load(), fromSecond.Load(), connErrs.Load())
	// Guard: the kill happened in the middle of the load, not after it.
	if afterKill.Load() == 0 || (connErrs.Load() == 0 && fromSecond.Load() == 0) {
		t.Fatalf("the kill did not interrupt the load: %d 2xx answers after it, %d from the restarted process, %d requests without an answer",
			afterKill.Load(), fromSecond.Load(), connErrs.Load())
	}

	replayAll(t, c, base, ids, rl.st)
	checkStored(t, pool, ids, rl.st)
	events := acceptedEvents(t, pool)
	if len(events) != deliveries {
		t.Fatalf("%d accepted events, want %d", len(events), deliveries)
	}
	checkEveryEventForwarded(t, pool, tg, events)

	// The restarted process shuts down cleanly on SIGTERM.
	if err := second.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-second.done:
	case <-time.After(time.Minute):
		t.Fatal("the restarted process did not exit within a minute of SIGTERM")
	}
	if second.err != nil {
		t.Errorf("after SIGTERM the process exited with %v, want status 0", second.err)
	}
	if second.log.count("stopped") != 1 {
		t.Errorf("after SIGTERM the process did not log \"stopped\"")
	}
}

// TestWorkerSIGKILLWhileRelaying: a --role api process accepts a load of
// deliveries (senders retrying until they get a 2xx) and writes their
// forwards to the outbox, while a --role worker process relays them into
// River and works them. The worker is killed with SIGKILL in the middle of
// the load, while it relays, and another worker is started once forwards
// pile up in the outbox. Every accepted event reaches the target, with
// exactly one forward job, and the outbox ends empty: whatever relay
// transaction the kill cut short lost nothing.
func TestWorkerSIGKILLWhileRelaying(t *testing.T) {
	testkit.Slow(t, "kills a worker process")
	t.Parallel()
	bin := buildBinary(t)
	pool, dsn := pgtest.NewDB(t)
	tg := testkit.NewTarget(t, testkit.Always(http.StatusOK))
	cfg := writeConfig(t, forwardConfig(tg.URL, "1s", 100))
	flags := append([]string{"--forward-rescue-after", "7s"}, fastForwardFlags...)
	c := newClient(t)
	const (
		deliveries = 600
		senders    = 16
		killAfter  = 200 // 2xx answers before the kill
	)
	ids := makeIDs("relay-kill", deliveries)

	apiAddr := freeAddr(t)
	base := "http://" + apiAddr
	api := startBinaryWith(t, bin, dsn, apiAddr, cfg, append([]string{"--role", "api"}, flags...)...)
	waitHealthy(t, c, base, api)
	startWorker := func() *proc {
		addr := freeAddr(t)
		w := startBinaryWith(t, bin, dsn, addr, cfg, append([]string{"--role", "worker"}, flags...)...)
		waitHealthy(t, c, "http://"+addr, w)
		return w
	}
	worker := startWorker()

	var (
		ok2xx    atomic.Int64
		killOnce sync.Once
		killNow  = make(chan struct{})
	)
	l := &load{
		client: c, base: base, ids: ids, senders: senders, backoff: 20 * time.Millisecond,
		observe: func(r reply, err error) {
			if err == nil && r.status >= 200 && r.status < 300 && ok2xx.Add(1) == killAfter {
				killOnce.Do(func() { close(killNow) })
			}
		},
	}
	rl := l.start(t)
	select {
	case <-killNow:
	case <-rl.done:
		t.Fatalf("the load ended after %d 2xx answers without reaching the kill at %d", ok2xx.Load(), killAfter)
	}
	// Kill it while it relays: once it has moved some forwards (a slow
	// machine may start it late), with the load still running.
	testkit.Poll(t, 30*time.Second, "the worker to relay some forwards", func() bool { return len(jobStates(t, pool)) > 0 })
	if err := worker.cmd.Process.Kill(); err != nil {
		t.Fatalf("SIGKILL: %v", err)
	}
	select {
	case <-worker.done:
	case <-time.After(time.Minute):
		t.Fatal("the killed worker did not exit within a minute")
	}
	var exitErr *exec.ExitError
	if !errors.As(worker.err, &exitErr) || exitErr.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the worker ended with %v, want killed by SIGKILL", worker.err)
	}
	atKill := jobStates(t, pool)
	relayed := 0
	for _, k := range atKill {
		relayed += k
	}
	// Guard: the worker had been relaying before the kill.
	if relayed == 0 {
		t.Fatalf("no forward job existed at the kill (outbox %d rows): the worker relayed nothing", outboxRows(t, pool))
	}
	t.Logf("at the kill: %d 2xx answers, jobs %v, outbox %d rows", ok2xx.Load(), atKill, outboxRows(t, pool))
	// With no worker, the api process's forwards wait in the outbox.
	testkit.Poll(t, 30*time.Second, "forwards to wait in the outbox", func() bool { return outboxRows(t, pool) > 0 })
	startWorker()

	select {
	case <-rl.done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the load did not end within two minutes")
	}
	reportLoad(t, rl.st)
	checkStored(t, pool, ids, rl.st)
	events := acceptedEvents(t, pool)
	if len(events) != deliveries {
		t.Fatalf("%d accepted events, want %d", len(events), deliveries)
	}
	checkEveryEventForwarded(t, pool, tg, events)
}

// TestSIGKILLWithSlowForwardsInFlight is the check with default
// settings: a --role all process forwards 100 deliveries, sent
// concurrently, to a target that answers after 1 s (timeout 5 s), and is
// killed with SIGKILL while they are in flight (in the fast path, and in
// River for those the fast path left to it); it is started again at once.
// Every event reaches the target, with one forward job each: the fast
// path's leased rows are the relay's when their lease (the timeout + 4 s)
// ends, and River's running jobs are taken over 5 s after the killed
// process's last heartbeat (the restarted process counts them in
// hookgate_forward_taken_over_total), not rescued by River a minute later.
// The time from the restart to the last event is logged, not bounded: a
// bound of the target's timeout + 10 s fails on a busy machine.
func TestSIGKILLWithSlowForwardsInFlight(t *testing.T) {
	testkit.Slow(t, "kills the server with forwards to a slow target in flight")
	t.Parallel()
	bin := buildBinary(t)
	pool, dsn := pgtest.NewDB(t)
	tg := testkit.NewTarget(t, func(int, *http.Request) testkit.Answer {
		return testkit.Answer{Status: http.StatusOK, Delay: time.Second}
	})
	cfg := writeConfig(t, forwardConfig(tg.URL, "5s", 10))
	addr := freeAddr(t)
	base := "http://" + addr
	c := newClient(t)
	first := startBinaryWith(t, bin, dsn, addr, cfg)
	waitHealthy(t, c, base, first)

	const n = 100
	var g errgroup.Group
	g.SetLimit(16)
	for i := range n {
		g.Go(func() error {
			_, err := deliverUntil2xx(t.Context(), c, base, fmt.Sprintf("slow-%03d", i))
			return err
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	testkit.Poll(t, 30*time.Second, "forwards to be in flight at the target", func() bool {
		in, _ := tg.InFlight()
		return in >= 10
	})
	if err := first.cmd.Process.Kill(); err != nil {
		t.Fatalf("SIGKILL: %v", err)
	}
	<-first.done
	var exitErr *exec.ExitError
	if !errors.As(first.err, &exitErr) || exitErr.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the first process ended with %v, want killed by SIGKILL", first.err)
	}
	atKill := jobStates(t, pool)
	t.Logf("at the kill: %d events answered, jobs %v, outbox rows %d", len(tg.Delivered()), atKill, outboxRows(t, pool))

	restarted := time.Now()
	second := startBinaryWith(t, bin, dsn, addr, cfg)
	waitHealthy(t, c, base, second)
	events := acceptedEvents(t, pool)
	if len(events) != n {
		t.Fatalf("%d accepted events, want %d", len(events), n)
	}
	missing := func() int {
		got, k := tg.Delivered(), 0
		for _, ev := range events {
			if got[ev] == 0 {
				k++
			}
		}
		return k
	}
	testkit.Poll(t, stallTimeout, "every event to reach the target after the restart",
		func() bool { return missing() == 0 }, func() string {
			return fmt.Sprintf("%d of %d missing %v after the restart; jobs %v, outbox rows %d", missing(), n,
				time.Since(restarted).Round(100*time.Millisecond), jobStates(t, pool), outboxRows(t, pool))
		})
	t.Logf("every event delivered %v after the restart", time.Since(restarted).Round(100*time.Millisecond))
	taken := scrape(t, c, base, "hookgate_forward_taken_over_total")
	t.Logf("the restarted process took over %v jobs", taken)
	if taken < float64(atKill["running"]) {
		t.Errorf("the restarted process took over %v jobs, want the %d running at the kill", taken, atKill["running"])
	}
	checkEveryEventForwarded(t, pool, tg, events)
}
