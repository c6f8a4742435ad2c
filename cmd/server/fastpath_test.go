package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/testing/pgtest"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// stallTarget is a forward target that decides by delivery ID
// (X-Hookgate-Delivery-Id) while hold is set: "during-…" requests are held
// unanswered, "after-…" requests get 200 and the first bytes of a body, then
// are held (the target has answered 2xx; the gateway is still reading), and
// others are answered 200. Once hold is cleared, every request gets 200 at
// once. It records every request.
type stallTarget struct {
	srv     *httptest.Server
	release chan struct{}

	mu   sync.Mutex
	hold bool
	hits []stallHit
}

type stallHit struct {
	deliveryID, key string
	answered        bool // a 2xx status line was sent
}

func newStallTarget(t *testing.T) *stallTarget {
	t.Helper()
	st := &stallTarget{release: make(chan struct{}), hold: true}
	st.srv = httptest.NewServer(http.HandlerFunc(st.serve))
	t.Cleanup(st.srv.Close)
	t.Cleanup(func() { close(st.release) }) // before Close: unblocks held requests
	return st
}

func (st *stallTarget) serve(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	id := r.Header.Get("X-Hookgate-Delivery-Id")
	st.mu.Lock()
	hold := st.hold
	i := len(st.hits)
	st.hits = append(st.hits, stallHit{deliveryID: id, key: r.Header.Get("Idempotency-Key")})
	st.mu.Unlock()
	prefix := id[:min(len(id), 5)]
	switch {
	case hold && prefix == "durin":
		select {
		case <-r.Context().Done():
		case <-st.release:
		}
		return
	case hold && prefix == "after":
		w.Header().Set("Content-Length", "100")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("partial"))
		w.(http.Flusher).Flush()
		st.mu.Lock()
		st.hits[i].answered = true
		st.mu.Unlock()
		select {
		case <-r.Context().Done():
		case <-st.release:
		}
		return
	}
	st.mu.Lock()
	st.hits[i].answered = true
	st.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

// received returns the requests received so far for each delivery ID, and
// how many of them were answered 2xx.
func (st *stallTarget) received() (all, answered map[string]int, keys map[string]map[string]bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	all, answered, keys = map[string]int{}, map[string]int{}, map[string]map[string]bool{}
	for _, h := range st.hits {
		all[h.deliveryID]++
		if h.answered {
			answered[h.deliveryID]++
		}
		if keys[h.deliveryID] == nil {
			keys[h.deliveryID] = map[string]bool{}
		}
		keys[h.deliveryID][h.key] = true
	}
	return all, answered, keys
}

// TestFastPathSIGKILL kills the real binary (SIGKILL) while its fast path
// holds forwards at each point of their way: queued before the POST (the
// target has its fair share, two, of the four fast-path workers), during
// the POST (the target holds the request unanswered), and after the
// target's 2xx but before the outcome is recorded (the target sent 200 and
// holds the rest of its body). After a restart, the relay takes the leased
// outbox rows once their lease ends (the default: the target's timeout +
// 4 s) and River delivers every forward: none is lost, each event has one
// completed forward job, the forwards queued before the POST arrive
// exactly once, and the one already answered 2xx is the only kind
// repeated, with the same Idempotency-Key. The time from the restart to
// the last answer is logged, not bounded: a bound of the target's timeout
// + 10 s fails on a busy machine.
func TestFastPathSIGKILL(t *testing.T) {
	testkit.Slow(t, "kills the server with fast-path forwards in flight")
	t.Parallel()
	bin := buildBinary(t)
	pool, dsn := pgtest.NewDB(t)
	tg := newStallTarget(t)
	cfg := writeConfig(t, forwardConfig(tg.srv.URL+"/hooks", "5s", 10))
	addr := freeAddr(t)
	base := "http://" + addr
	c := newClient(t)
	flags := append([]string{"--forward-fast-path-workers", "4"}, fastForwardFlags...)

	first := startBinaryWith(t, bin, dsn, addr, cfg, flags...)
	waitHealthy(t, c, base, first)
	events := deliverAll(t, c, base, []string{"during-1", "after-1"})
	testkit.Poll(t, 30*time.Second, "the target to hold the forwards during-1 and after-1", func() bool {
		all, answered, _ := tg.received()
		return all["during-1"] == 1 && answered["after-1"] == 1
	})
	before := []string{"before-1", "before-2", "before-3"}
	events = append(events, deliverAll(t, c, base, before)...)
	// The target's two workers are held: the three forwards wait in its
	// queue, their outbox rows leased.
	var leased int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM forward_outbox WHERE leased_until > now()`).Scan(&leased); err != nil {
		t.Fatal(err)
	}
	if leased != len(events) {
		t.Fatalf("%d leased outbox rows before the kill, want %d (every forward held by the fast path)", leased, len(events))
	}
	if err := first.cmd.Process.Kill(); err != nil {
		t.Fatalf("SIGKILL: %v", err)
	}
	<-first.done
	var exitErr *exec.ExitError
	if !errors.As(first.err, &exitErr) || exitErr.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the first process ended with %v, want killed by SIGKILL", first.err)
	}
	all, _, _ := tg.received()
	for _, id := range before {
		if all[id] != 0 {
			t.Fatalf("the target received %s before the kill: the test did not kill before its POST", id)
		}
	}
	if got := jobStates(t, pool); len(got) != 0 {
		t.Fatalf("forward jobs before the restart: %v, want none (no outcome recorded)", got)
	}

	tg.mu.Lock()
	tg.hold = false
	tg.mu.Unlock()
	restarted := time.Now()
	second := startBinaryWith(t, bin, dsn, addr, cfg, flags...)
	waitHealthy(t, c, base, second)
	testkit.Poll(t, stallTimeout, "every event to be answered 2xx after the restart", func() bool {
		_, answered, _ := tg.received()
		for _, id := range []string{"during-1", "before-1", "before-2", "before-3"} {
			if answered[id] == 0 {
				return false
			}
		}
		return answered["after-1"] >= 2
	})
	t.Logf("every event answered 2xx %v after the restart", time.Since(restarted).Round(100*time.Millisecond))
	testkit.Poll(t, 30*time.Second, "every forward job to be completed", func() bool {
		return jobStates(t, pool)["completed"] == len(events)
	})
	if n := outboxRows(t, pool); n != 0 {
		t.Errorf("%d forwards left in the outbox, want none", n)
	}
	for ev, n := range jobsPerEvent(t, pool) {
		if n != 1 {
			t.Errorf("event %s has %d forward jobs, want 1", ev, n)
		}
	}
	all, answered, keys := tg.received()
	for _, id := range before {
		if all[id] != 1 {
			t.Errorf("%s (killed before its POST) reached the target %d times, want once", id, all[id])
		}
	}
	if answered["during-1"] != 1 {
		t.Errorf("during-1 (killed during its POST) was answered 2xx %d times, want once after the restart", answered["during-1"])
	}
	if answered["after-1"] != 2 || len(keys["after-1"]) != 1 {
		t.Errorf("after-1 (killed after the target's 2xx, before the outcome was recorded): answered %d times with keys %v, want twice with one Idempotency-Key",
			answered["after-1"], keys["after-1"])
	}
	for id, ks := range keys {
		if len(ks) != 1 {
			t.Errorf("%s was forwarded with %d Idempotency-Keys, want 1", id, len(ks))
		}
	}
	t.Logf("requests per delivery: %v", all)
}
