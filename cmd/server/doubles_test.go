package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/testing/pgtest"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// TestDoublesAfterSIGKILL measures the forwards a SIGKILL makes the target
// receive twice (docs/forwarding-crashes.md, "Forwards sent twice after a
// SIGKILL"): under a steady load, a process that forwards is killed, and
// every forward its target had answered 2xx before the kill whose outcome
// the process had not yet written is sent again by another process. The
// test logs how many there were, how long before the kill the target had
// answered them and how long after it they came again, beside the rate of
// 2xx answers just before the kill. It asserts only what must hold: every
// accepted event reaches the target at least once, and a forward sent
// again carries the same Idempotency-Key as the first (every request with
// an event's body has that event's key). The figures are logged, never
// asserted: they depend on the machine.
//
//   - worker: a --role api process ingests and two --role worker processes
//     relay and work the forwards (River); one worker is killed. Its
//     forwards whose completion River's completer had not written (it
//     writes completions in batches, every 250 ms or 100 jobs) are taken
//     over 5 s after its last heartbeat.
//   - all: two --role all processes ingest and forward (the fast path, and
//     River for what the fast path hands over); one is killed. Its
//     fast-path forwards whose outcome batch had not committed are the
//     relay's when their lease (the target's timeout + 4 s) ends; its River
//     jobs are taken over as above.
func TestDoublesAfterSIGKILL(t *testing.T) {
	testkit.Slow(t, "kills a worker and a --role all process under load")
	for _, role := range []string{"worker", "all"} {
		t.Run(role, func(t *testing.T) { doublesAfterSIGKILL(t, role) })
	}
}

// doublesAfterSIGKILL runs TestDoublesAfterSIGKILL's case for role.
func doublesAfterSIGKILL(t *testing.T, role string) {
	bin := buildBinary(t)
	pool, dsn := pgtest.NewDB(t)
	tg := testkit.NewTarget(t, testkit.Always(http.StatusOK))
	cfg := writeConfig(t, forwardConfig(tg.URL, "2s", 100))
	c := newClient(t)
	const (
		deliveries = 2400
		senders    = 8
		pause      = 20 * time.Millisecond // between a sender's deliveries: a steady load
		killAfter  = 600                   // forwards answered by the target before the kill
	)

	start := func(roleFlag string) (*proc, string) {
		addr := freeAddr(t)
		p := startBinaryWith(t, bin, dsn, addr, cfg, "--role", roleFlag)
		waitHealthy(t, c, "http://"+addr, p)
		return p, "http://" + addr
	}
	var victim *proc
	var bases []string // where the senders deliver, in turn
	if role == "worker" {
		_, api := start("api")
		victim, _ = start("worker")
		start("worker")
		bases = []string{api}
	} else {
		var a, b string
		victim, a = start("all")
		_, b = start("all")
		bases = []string{a, b}
	}

	// The load: each sender delivers the next ID, until a 2xx, to its
	// process, or to the next one when it gets no answer or a 5xx.
	var (
		next   atomic.Int64
		failed sync.Map // delivery ID -> error: a 4xx other than 409, or the context's end
		wg     sync.WaitGroup
	)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	for s := range senders {
		wg.Go(func() {
			j := s
			for {
				i := int(next.Add(1)) - 1
				if i >= deliveries {
					return
				}
				id := fmt.Sprintf("doubles-%s-%04d", role, i)
				for {
					r, err := deliver(ctx, c, bases[j%len(bases)], id, bodyFor(id))
					if err == nil && r.status >= 200 && r.status < 300 {
						break
					}
					if err == nil && r.status < 500 && r.status != http.StatusConflict {
						failed.Store(id, fmt.Errorf("%d %s", r.status, r.body))
						break
					}
					if ctx.Err() != nil {
						failed.Store(id, ctx.Err())
						return
					}
					j++
					time.Sleep(pause)
				}
				time.Sleep(pause)
			}
		})
	}

	answered := func() int {
		n := 0
		for _, h := range tg.Hits() {
			if h.Status >= 200 && h.Status < 300 {
				n++
			}
		}
		return n
	}
	testkit.Poll(t, 2*time.Minute, fmt.Sprintf("the target to answer %d forwards", killAfter), func() bool { return answered() >= killAfter })
	killedAt := time.Now()
	if err := victim.cmd.Process.Kill(); err != nil {
		t.Fatalf("SIGKILL: %v", err)
	}
	<-victim.done
	var exitErr *exec.ExitError
	if !errors.As(victim.err, &exitErr) || exitErr.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the %s process ended with %v, want killed by SIGKILL", role, victim.err)
	}
	// Guard: the kill happened under load, not after it.
	if sent := next.Load(); sent >= deliveries {
		t.Fatalf("every delivery had been sent before the kill: the load was not steady")
	}
	wg.Wait()
	failed.Range(func(id, err any) bool {
		t.Errorf("delivery %s: %v", id, err)
		return true
	})
	events := acceptedEvents(t, pool)
	if len(events) != deliveries {
		t.Fatalf("%d accepted events, want %d", len(events), deliveries)
	}
	checkEveryEventForwarded(t, pool, tg, events)

	// A forward sent again carries the event's Idempotency-Key: every
	// request with the same body has the same key.
	hits := tg.Hits()
	keyOf := map[string]string{}
	for _, h := range hits {
		b := string(h.Body)
		if k, ok := keyOf[b]; ok && k != h.Key() {
			t.Errorf("one event's body sent with Idempotency-Key %q and %q", k, h.Key())
		}
		keyOf[b] = h.Key()
	}

	// The figures: the forwards answered 2xx before the kill and sent
	// again after it.
	first := map[string]time.Time{} // key -> its first 2xx answer
	var (
		doubles       int
		answeredAgo   []time.Duration // the kill - the first 2xx answer, per double
		sentAgainIn   []time.Duration // the second request - the kill, per double
		lastSecondAns int             // 2xx answers in the second before the kill
	)
	for _, h := range hits {
		if h.Status < 200 || h.Status > 299 {
			continue
		}
		if h.AnswerAt.Before(killedAt) && !h.AnswerAt.Before(killedAt.Add(-time.Second)) {
			lastSecondAns++
		}
		f, seen := first[h.Key()]
		if !seen {
			first[h.Key()] = h.AnswerAt
			continue
		}
		if f.Before(killedAt) && h.At.After(killedAt) {
			doubles++
			answeredAgo = append(answeredAgo, killedAt.Sub(f))
			sentAgainIn = append(sentAgainIn, h.At.Sub(killedAt))
		}
	}
	span := func(ds []time.Duration) string {
		if len(ds) == 0 {
			return "-"
		}
		return fmt.Sprintf("%v–%v", slices.Min(ds).Round(time.Millisecond), slices.Max(ds).Round(time.Millisecond))
	}
	t.Logf("--role %s SIGKILL: %d forwards answered 2xx in the second before the kill (all processes); %d of the forwards answered before the kill sent again after it: answered %s before the kill, sent again %s after it; %d requests for %d events",
		role, lastSecondAns, doubles, span(answeredAgo), span(sentAgainIn), len(hits), len(events))
}
