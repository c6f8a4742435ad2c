package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/hookgate/hookgate/internal/store"
	"github.com/hookgate/hookgate/internal/testing/pgtest"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// orderTarget is a target that records, per ordering key, every attempt it
// receives: which event (n, from the body), when it began and ended, and
// whether it answered 2xx. It fails a share of the attempts at random with
// 503, and makes a quarter of them wait a random time up to maxDelay.
type orderTarget struct {
	srv      *httptest.Server
	failRate float64
	maxDelay time.Duration
	// failing are the events ("key/n") that always get 422.
	failing map[string]bool
	// slow are the events ("key/n") whose attempts take this long.
	slow map[string]time.Duration

	mu       sync.Mutex
	attempts map[string][]orderAttempt // by key
	inFlight map[string]int            // by key: attempts under way
	overlaps []string
	firsts   int // events delivered for the first time
	done     map[string]map[int]bool
}

type orderAttempt struct {
	n          int
	start, end time.Time
	ok         bool
}

func newOrderTarget(t *testing.T, failRate float64, maxDelay time.Duration) *orderTarget {
	ot := &orderTarget{failRate: failRate, maxDelay: maxDelay, failing: map[string]bool{}, slow: map[string]time.Duration{},
		attempts: map[string][]orderAttempt{}, inFlight: map[string]int{}, done: map[string]map[int]bool{}}
	ot.srv = httptest.NewServer(http.HandlerFunc(ot.serve))
	t.Cleanup(ot.srv.Close)
	return ot
}

func (ot *orderTarget) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	var ev struct {
		Key string `json:"key"`
		N   int    `json:"n"`
	}
	if err != nil || json.Unmarshal(body, &ev) != nil || ev.Key == "" {
		http.Error(w, "bad body", http.StatusBadRequest)
		return
	}
	a := orderAttempt{n: ev.N, start: time.Now()}
	ot.mu.Lock()
	if ot.inFlight[ev.Key] > 0 {
		ot.overlaps = append(ot.overlaps, fmt.Sprintf("key %s: an attempt of event %d began at %s while another attempt of the key was under way",
			ev.Key, ev.N, a.start.Format("15:04:05.000")))
	}
	ot.inFlight[ev.Key]++
	ot.mu.Unlock()
	// The delay, whether the attempt fails: both at random, and the
	// attempt is under way all along.
	if ot.maxDelay > 0 && rand.IntN(4) == 0 {
		time.Sleep(rand.N(ot.maxDelay))
	}
	time.Sleep(ot.slow[fmt.Sprintf("%s/%d", ev.Key, ev.N)])
	status := http.StatusOK
	switch {
	case ot.failing[fmt.Sprintf("%s/%d", ev.Key, ev.N)]:
		status = http.StatusUnprocessableEntity
	case rand.Float64() < ot.failRate:
		status = http.StatusServiceUnavailable
	}
	ot.mu.Lock()
	ot.inFlight[ev.Key]--
	a.end, a.ok = time.Now(), status == http.StatusOK
	ot.attempts[ev.Key] = append(ot.attempts[ev.Key], a)
	if a.ok {
		if ot.done[ev.Key] == nil {
			ot.done[ev.Key] = map[int]bool{}
		}
		if !ot.done[ev.Key][ev.N] {
			ot.done[ev.Key][ev.N] = true
			ot.firsts++
		}
	}
	ot.mu.Unlock()
	w.WriteHeader(status)
}

// delivered returns how many distinct events have been answered 2xx.
func (ot *orderTarget) delivered() int {
	ot.mu.Lock()
	defer ot.mu.Unlock()
	return ot.firsts
}

// missing returns how many events of want (by key: their numbers, in
// acceptance order) the target has not answered 2xx.
func (ot *orderTarget) missing(want map[string][]int) int {
	ot.mu.Lock()
	defer ot.mu.Unlock()
	m := 0
	for key, ns := range want {
		for _, n := range ns {
			if !ot.done[key][n] {
				m++
			}
		}
	}
	return m
}

// check returns what breaks the guarantee, violations: two attempts of
// one key under way at once, or the first successful delivery of an event
// of a key coming before that of an event accepted before it; and missing:
// the keys with events of want not delivered. want holds, by key, the
// events' numbers in acceptance order. It also returns the number of
// attempts and of failed ones.
func (ot *orderTarget) check(want map[string][]int) (violations, missing []string, attempts, failed int) {
	ot.mu.Lock()
	defer ot.mu.Unlock()
	violations = append(violations, ot.overlaps...)
	keys := make([]string, 0, len(want))
	for key := range want {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	for _, key := range keys {
		place := map[int]int{} // event number -> place in acceptance order
		for i, n := range want[key] {
			place[n] = i
		}
		as := append([]orderAttempt(nil), ot.attempts[key]...)
		sort.SliceStable(as, func(i, j int) bool { return as[i].start.Before(as[j].start) })
		// The attempts' intervals, as the target saw them: each must end
		// before the next begins.
		for i := 1; i < len(as); i++ {
			if as[i].start.Before(as[i-1].end) {
				violations = append(violations, fmt.Sprintf("key %s: attempt of event %d (%s–%s) overlaps that of event %d (%s–%s)", key,
					as[i].n, as[i].start.Format("15:04:05.000"), as[i].end.Format("15:04:05.000"),
					as[i-1].n, as[i-1].start.Format("15:04:05.000"), as[i-1].end.Format("15:04:05.000")))
			}
		}
		var firsts []int // events in the order of their first success
		seen := map[int]bool{}
		for _, a := range as {
			attempts++
			if !a.ok {
				failed++
				continue
			}
			if !seen[a.n] {
				seen[a.n] = true
				firsts = append(firsts, a.n)
			}
		}
		for i := 1; i < len(firsts); i++ {
			if place[firsts[i]] < place[firsts[i-1]] {
				violations = append(violations, fmt.Sprintf("key %s: event %d first delivered after event %d, accepted after it (first deliveries %v)",
					key, firsts[i], firsts[i-1], firsts))
				break
			}
		}
		if len(firsts) != len(want[key]) {
			missing = append(missing, fmt.Sprintf("key %s: %d of %d events delivered (%v)", key, len(firsts), len(want[key]), firsts))
		}
	}
	return violations, missing, attempts, failed
}

// longestWait returns, over every key, the longest time between the end of
// one attempt and the start of the next, with its key and the event
// attempted next, and the most attempts one event got: figures to tell a
// stall from the backoff of an event failed several times.
func (ot *orderTarget) longestWait() string {
	ot.mu.Lock()
	defer ot.mu.Unlock()
	var (
		gap      time.Duration
		gapAt    string
		most     int
		mostAt   string
		lastDone time.Time
		lastKey  string
	)
	for key, as := range ot.attempts {
		as = append([]orderAttempt(nil), as...)
		sort.SliceStable(as, func(i, j int) bool { return as[i].start.Before(as[j].start) })
		tries := map[int]int{}
		for i, a := range as {
			if tries[a.n]++; tries[a.n] > most {
				most, mostAt = tries[a.n], fmt.Sprintf("%s/%d", key, a.n)
			}
			if i > 0 {
				if g := a.start.Sub(as[i-1].end); g > gap {
					gap, gapAt = g, fmt.Sprintf("key %s before an attempt of event %d (attempt %d of it) at %s", key, a.n, tries[a.n], a.start.Format("15:04:05.000"))
				}
			}
			if a.ok && a.end.After(lastDone) {
				lastDone, lastKey = a.end, key
			}
		}
	}
	return fmt.Sprintf("longest wait between two attempts of a key %v (%s); most attempts of one event %d (%s); last success at %s (key %s)",
		gap.Round(10*time.Millisecond), gapAt, most, mostAt, lastDone.Format("15:04:05.000"), lastKey)
}

// orderedConfig is senderConfig with the target orders at url, ordered by
// the body's /key, with the defaults otherwise (timeout, max_attempts,
// on_failure: hold).
func orderedConfig(url string) string {
	return senderConfig + fmt.Sprintf("    forward:\n      - name: orders\n        url: %s\n        ordering: { json_pointer: /key }\n", url)
}

// orderedBody is the body of event n of key.
func orderedBody(key string, n int) []byte {
	return fmt.Appendf(nil, `{"key":%q,"n":%d}`, key, n)
}

// killProc kills p with SIGKILL and waits for it to exit so.
func killProc(t *testing.T, p *proc) {
	t.Helper()
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatalf("SIGKILL: %v", err)
	}
	select {
	case <-p.done:
	case <-time.After(time.Minute):
		t.Fatal("the killed process did not exit within a minute")
	}
	var exitErr *exec.ExitError
	if !errors.As(p.err, &exitErr) || exitErr.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the process ended with %v, want killed by SIGKILL", p.err)
	}
}

// orderedKeys reads forward_keys: by key, its last and head positions and
// whether it is blocked.
func orderedKeys(t *testing.T, pool *pgxpool.Pool) map[string][3]int64 {
	t.Helper()
	rows, err := pool.Query(t.Context(), `SELECT order_key, last_seq, head_seq, (blocked_event IS NOT NULL)::int FROM forward_keys WHERE sender = 'acme' AND target = 'orders'`)
	if err != nil {
		t.Fatalf("read forward_keys: %v", err)
	}
	defer rows.Close()
	out := map[string][3]int64{}
	for rows.Next() {
		var (
			key string
			v   [3]int64
		)
		if err := rows.Scan(&key, &v[0], &v[1], &v[2]); err != nil {
			t.Fatalf("read forward_keys: %v", err)
		}
		out[key] = v
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("read forward_keys: %v", err)
	}
	return out
}

// unfinishedJobs counts the forward jobs not in a final state, by state.
func unfinishedJobs(t *testing.T, pool *pgxpool.Pool) map[string]int {
	t.Helper()
	out := map[string]int{}
	for s, n := range jobStates(t, pool) {
		if s != "completed" && s != "discarded" && s != "cancelled" {
			out[s] = n
		}
	}
	return out
}

// orderedDrain bounds the wait of TestOrderedDeliveryThroughCrashes for
// every event: a guard against a stall, long enough for the default
// backoff's rare long waits.
const orderedDrain = 8 * time.Minute

// TestOrderedDeliveryThroughCrashes is issue 48's check with real
// processes: two gateway processes (--role all, the default settings) on one private
// PostgreSQL server, and a target ordered by the body's /key (on_failure:
// hold, the default) that fails a fifth of the attempts with 503 and
// answers a quarter of them late. 50 keys × 40 events: each key's events
// are sent in sequence, after a short random pause (the next once the
// last was answered 2xx, a delivery sent again on an error or no answer,
// to either process, as senders behind a load balancer do), the keys
// concurrently. During the run, one process is killed with SIGKILL and
// started again, PostgreSQL is killed and started again, and then the
// other process is killed and started again. At the target, for every
// key, the first successful delivery of each event comes in the order the
// events were accepted, no two attempts of one key overlap, and every
// event arrives; in the database, every key's head is past its last
// forward, none is blocked, no forward job is left unfinished and the
// outbox is empty. The times are logged, not bounded.
func TestOrderedDeliveryThroughCrashes(t *testing.T) {
	testkit.Slow(t, "kills the gateway twice and PostgreSQL once under ordered forwarding")
	t.Parallel()
	bin := buildBinary(t)
	cluster := pgtest.StartCluster(t)
	dsn := cluster.URL()
	ot := newOrderTarget(t, 0.2, 300*time.Millisecond)
	cfg := writeConfig(t, orderedConfig(ot.srv.URL))
	// The binary's defaults: jobs running at a kill are taken over a few
	// seconds after the killed process's last heartbeat, and the backoff
	// doubles from 1 s up to an hour. With a fifth of the attempts failing,
	// one event of the 2,000 fails 8 times in a row in about one run of
	// 200, and waits some 4 minutes before its 9th attempt with its key's
	// later events behind it: the wait for every event is a guard of
	// orderedDrain, not a bound.
	c := newClient(t)

	addrs := []string{freeAddr(t), freeAddr(t)}
	bases := []string{"http://" + addrs[0], "http://" + addrs[1]}
	procs := make([]*proc, 2)
	start := func(i int) {
		procs[i] = startBinaryWith(t, bin, dsn, addrs[i], cfg)
		waitHealthy(t, c, bases[i], procs[i])
	}
	start(0)
	start(1)
	pool, err := pgxpool.New(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)

	const keys, events = 50, 40
	const pace = 200 * time.Millisecond // the longest pause before a key's next event
	want := map[string][]int{}
	var (
		accepted atomic.Int64
		connErrs atomic.Int64
		statuses sync.Map // status -> *atomic.Int64
	)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	var load errgroup.Group
	began := time.Now()
	for k := range keys {
		key := fmt.Sprintf("k%02d", k)
		for n := 1; n <= events; n++ {
			want[key] = append(want[key], n)
		}
		load.Go(func() error {
			try := k
			for n := 1; n <= events; n++ {
				// Webhooks trickle in: a pause before each, so that the
				// fast path attempts the events whose key is idle.
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(rand.N(pace)):
				}
				id, body := fmt.Sprintf("%s-%02d", key, n), orderedBody(key, n)
				for {
					try++
					r, err := deliver(ctx, c, bases[try%2], id, body)
					if err == nil && r.status >= 200 && r.status < 300 {
						accepted.Add(1)
						break
					}
					if err == nil && r.status < 500 && r.status != http.StatusConflict {
						return fmt.Errorf("deliver %s: %s", id, r)
					}
					if err != nil {
						connErrs.Add(1)
					} else {
						v, _ := statuses.LoadOrStore(r.status, new(atomic.Int64))
						v.(*atomic.Int64).Add(1)
					}
					select {
					case <-ctx.Done():
						return fmt.Errorf("deliver %s: %w (last answer: %v)", id, errors.Join(ctx.Err(), err), r)
					case <-time.After(50 * time.Millisecond):
					}
				}
			}
			return nil
		})
	}
	loadDone := make(chan error, 1)
	go func() { loadDone <- load.Wait() }()
	total := keys * events
	progress := func() string {
		return fmt.Sprintf("%d of %d accepted, %d delivered, outbox %d rows, jobs %v",
			accepted.Load(), total, ot.delivered(), outboxRows(t, pool), jobStates(t, pool))
	}

	// The first kill, while deliveries arrive.
	testkit.Poll(t, 2*time.Minute, "400 deliveries accepted", func() bool { return accepted.Load() >= 400 })
	t.Logf("SIGKILL process 1: %s", progress())
	killProc(t, procs[0])
	start(0)

	// PostgreSQL killed and started again, while deliveries still arrive
	// if they do.
	testkit.Poll(t, 2*time.Minute, "1,000 deliveries accepted", func() bool { return accepted.Load() >= 1000 })
	t.Logf("PostgreSQL killed: %s", progress())
	cluster.Stop(t)
	<-time.After(3 * time.Second) // the outage's length, not a wait for a condition
	cluster.Start(t)
	up := time.Now()
	atUp := ot.delivered()

	// The second kill, once forwarding has gone on after the database came
	// back.
	testkit.Poll(t, 2*time.Minute, "100 more events delivered after the database's restart", func() bool { return ot.delivered() >= atUp+100 || ot.delivered() == total })
	atKill := ot.delivered()
	t.Logf("SIGKILL process 2 %v after the database's restart: %s", time.Since(up).Round(100*time.Millisecond), progress())
	killProc(t, procs[1])
	start(1)
	// Guard: the faults came during the run, not after it.
	if atKill >= total {
		t.Fatalf("every event was delivered before the second kill: the faults did not interrupt forwarding")
	}

	if err := <-loadDone; err != nil {
		t.Fatal(err)
	}
	var sts []string
	statuses.Range(func(k, v any) bool {
		sts = append(sts, fmt.Sprintf("%v: %d", k, v.(*atomic.Int64).Load()))
		return true
	})
	sort.Strings(sts)
	t.Logf("every delivery accepted %v after the start; %d sends without an answer, error statuses {%s}",
		time.Since(began).Round(100*time.Millisecond), connErrs.Load(), strings.Join(sts, ", "))

	// The wait ends early when the guarantee is broken.
	violated := func() bool { v, _, _, _ := ot.check(want); return len(v) > 0 }
	testkit.Poll(t, orderedDrain, "every event to reach the target", func() bool { return ot.missing(want) == 0 || violated() }, func() string {
		v, _, _, _ := ot.check(want)
		return fmt.Sprintf("%d events missing; %s; keys not done %v; %d violations of the order, e.g. %v",
			ot.missing(want), progress(), keysNotDone(t, pool), len(v), v[:min(len(v), 5)])
	})
	if v, _, _, _ := ot.check(want); len(v) > 0 {
		for i, p := range v {
			if i == 20 {
				t.Errorf("… %d violations in all", len(v))
				break
			}
			t.Error(p)
		}
		t.Fatalf("the order was broken: %s; keys not done %v", progress(), keysNotDone(t, pool))
	}
	t.Logf("every event delivered %v after the start; %s", time.Since(began).Round(100*time.Millisecond), ot.longestWait())
	testkit.Poll(t, stallTimeout, "every key's head past its last forward, the outbox empty and no job unfinished", func() bool {
		return len(keysNotDone(t, pool)) == 0 && outboxRows(t, pool) == 0 && len(unfinishedJobs(t, pool)) == 0
	}, func() string {
		return fmt.Sprintf("keys not done %v, outbox %d rows, unfinished jobs %v", keysNotDone(t, pool), outboxRows(t, pool), unfinishedJobs(t, pool))
	})
	if got := len(orderedKeys(t, pool)); got != keys {
		t.Errorf("%d rows in forward_keys, want %d", got, keys)
	}
	_, missing, attempts, failed := ot.check(want)
	for _, m := range missing {
		t.Error(m)
	}
	var fast int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM forward_delivered WHERE sender = 'acme' AND target = 'orders'`).Scan(&fast); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d attempts at the target, %d of them failed; %d events delivered by the fast path's attempt; jobs %v", attempts, failed, fast, jobStates(t, pool))
}

// keysNotDone returns the keys of forward_keys with forwards left (head
// at or before last) or blocked, with their last and head positions.
func keysNotDone(t *testing.T, pool *pgxpool.Pool) map[string]string {
	t.Helper()
	out := map[string]string{}
	for key, v := range orderedKeys(t, pool) {
		if v[1] <= v[0] || v[2] != 0 {
			out[key] = fmt.Sprintf("last %d head %d blocked %v", v[0], v[1], v[2] != 0)
		}
	}
	return out
}

// operatorCall sends method to base's path with the admin token
// pauseToken, and returns the answer.
func operatorCall(t *testing.T, c *http.Client, method, base, path string) reply {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+pauseToken)
	r, err := do(c, req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

// blockedKeys reads GET …/targets/orders/blocked through base.
func blockedKeys(t *testing.T, c *http.Client, base string) []blockedItem {
	t.Helper()
	r := operatorCall(t, c, http.MethodGet, base, "/v1/senders/acme/targets/orders/blocked")
	var out struct{ Items []blockedItem }
	if r.status != http.StatusOK || json.Unmarshal(r.body, &out) != nil || out.Items == nil {
		t.Fatalf("GET …/blocked: %s", r)
	}
	return out.Items
}

type blockedItem struct {
	Key       string    `json:"key"`
	EventID   string    `json:"event_id"`
	BlockedAt time.Time `json:"blocked_at"`
	Waiting   int64     `json:"waiting"`
	Summary   string    `json:"summary"`
}

// successes returns, in the order the target answered them 2xx, the events
// of key it delivered, and how many attempts event n got.
func (ot *orderTarget) successes(key string, n int) (ok []int, attemptsOfN int) {
	ot.mu.Lock()
	defer ot.mu.Unlock()
	for _, a := range ot.attempts[key] {
		if a.ok {
			ok = append(ok, a.n)
		}
		if a.n == n {
			attemptsOfN++
		}
	}
	return ok, attemptsOfN
}

// TestOrderedBlockedKeyReleasedByOperator: the real binary forwards to a
// target ordered by /key (on_failure: hold, the default) that answers 422
// to the second event of key a. That forward fails at once and blocks its
// key: GET …/targets/orders/blocked shows key a blocked by that event with
// its two later events waiting, which the target never sees, while key b,
// sent after the block, is delivered. Skipping a delivered forward is
// refused with 409 not-blocked. POST …/forwards/{event_id}/skip with the
// admin token releases the key: its later events arrive, in order, the
// listing is empty, the key's head is past its last forward, and the
// audit trail has the skip.
func TestOrderedBlockedKeyReleasedByOperator(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	pool, dsn := pgtest.NewDB(t)
	ot := newOrderTarget(t, 0, 0)
	ot.failing["a/2"] = true
	cfg := writeConfig(t, orderedConfig(ot.srv.URL))
	addr := freeAddr(t)
	base := "http://" + addr
	c := newClient(t)
	p := startBinaryWith(t, bin, dsn, addr, cfg, "--admin-token", pauseToken)
	waitHealthy(t, c, base, p)

	send := func(key string, n int) string {
		t.Helper()
		id := fmt.Sprintf("%s-%d", key, n)
		r, err := deliver(t.Context(), c, base, id, orderedBody(key, n))
		if err != nil {
			t.Fatalf("deliver %s: %v", id, err)
		}
		a, err := parseAccepted(r, id)
		if err != nil {
			t.Fatalf("deliver %s: %v", id, err)
		}
		return a.EventID
	}
	events := map[int]string{}
	for n := 1; n <= 4; n++ {
		events[n] = send("a", n)
	}
	var blocked []blockedItem
	testkit.Poll(t, time.Minute, "key a listed blocked", func() bool {
		blocked = blockedKeys(t, c, base)
		return len(blocked) > 0
	})
	if len(blocked) != 1 || blocked[0].Key != "a" || blocked[0].EventID != events[2] || blocked[0].Waiting != 2 ||
		blocked[0].Summary != "blocked by "+events[2]+" (2 waiting)" || blocked[0].BlockedAt.IsZero() {
		t.Fatalf("blocked keys %+v, want key a blocked by %s with 2 waiting", blocked, events[2])
	}
	// Another key goes on while a is blocked.
	for n := 1; n <= 3; n++ {
		send("b", n)
	}
	testkit.Poll(t, time.Minute, "key b delivered", func() bool {
		ok, _ := ot.successes("b", 0)
		return len(ok) == 3
	})
	if ok, _ := ot.successes("b", 0); fmt.Sprint(ok) != "[1 2 3]" {
		t.Errorf("key b delivered %v, want [1 2 3]", ok)
	}
	ok, tries := ot.successes("a", 2)
	if fmt.Sprint(ok) != "[1]" || tries != 1 {
		t.Fatalf("while key a is blocked the target got %v from it and %d attempts of event 2, want [1] and 1", ok, tries)
	}

	skip := func(n int) reply {
		return operatorCall(t, c, http.MethodPost, base, "/v1/senders/acme/targets/orders/forwards/"+events[n]+"/skip")
	}
	if r := skip(1); r.status != http.StatusConflict || !strings.Contains(string(r.body), "not-blocked") {
		t.Errorf("skip the delivered forward of event 1: %s, want 409 not-blocked", r)
	}
	r := skip(2)
	var skipped struct {
		Sender, Target, Key string
		EventID             string `json:"event_id"`
		Released            int64
	}
	if r.status != http.StatusOK || json.Unmarshal(r.body, &skipped) != nil {
		t.Fatalf("skip the forward of event 2: %s", r)
	}
	if skipped.Sender != "acme" || skipped.Target != "orders" || skipped.Key != "a" || skipped.EventID != events[2] || skipped.Released != 2 {
		t.Errorf("skip answered %s, want key a with 2 released", r.body)
	}
	testkit.Poll(t, time.Minute, "key a's last events delivered", func() bool {
		ok, _ := ot.successes("a", 0)
		return len(ok) >= 3
	})
	if ok, tries := ot.successes("a", 2); fmt.Sprint(ok) != "[1 3 4]" || tries != 1 {
		t.Errorf("key a delivered %v with %d attempts of event 2, want [1 3 4] and 1", ok, tries)
	}
	if b := blockedKeys(t, c, base); len(b) != 0 {
		t.Errorf("blocked keys %+v after the skip, want none", b)
	}
	if r := skip(2); r.status != http.StatusConflict {
		t.Errorf("skip the skipped forward again: %s, want 409", r)
	}
	testkit.Poll(t, time.Minute, "every key's head past its last forward", func() bool {
		return len(keysNotDone(t, pool)) == 0 && outboxRows(t, pool) == 0
	}, func() string {
		return fmt.Sprintf("keys %v, outbox %d rows", keysNotDone(t, pool), outboxRows(t, pool))
	})
	violations, missing, _, _ := ot.check(map[string][]int{"a": {1, 3, 4}, "b": {1, 2, 3}})
	for _, p := range append(violations, missing...) {
		t.Error(p)
	}
	a := operatorCall(t, c, http.MethodGet, base, "/v1/audit?action="+store.ActionSkip)
	var audit struct {
		Items []struct {
			Action, Outcome string
			EventID         *string `json:"event_id"`
		}
	}
	if a.status != http.StatusOK || json.Unmarshal(a.body, &audit) != nil {
		t.Fatalf("GET /v1/audit: %s", a)
	}
	done := 0
	for _, e := range audit.Items {
		if e.Action == store.ActionSkip && e.Outcome == store.OutcomeOK && e.EventID != nil && *e.EventID == events[2] {
			done++
		}
	}
	if done != 1 {
		t.Errorf("audit trail of skips %s, want one skip of %s that succeeded", a.body, events[2])
	}
}

// underWay reports whether an attempt of key is under way at the target.
func (ot *orderTarget) underWay(key string) bool {
	ot.mu.Lock()
	defer ot.mu.Unlock()
	return ot.inFlight[key] > 0
}

// TestOrderedLastAttemptKilled: River works an ordered forward's last
// attempt (max_attempts: 1, the fast path off) and the process is killed
// with SIGKILL while the target takes its time. The restarted process
// takes over the job left running; its attempts are used up. The key must
// not stall unseen: either the forward is ended (the key's next event
// arrives) or it holds the key (on_failure: hold) and GET …/blocked shows
// it, so that an operator can skip it. When it goes on, its next attempt
// does not overlap the one the kill cut short, which the target is still
// answering (for 8 s, within the 10 s timeout).
func TestOrderedLastAttemptKilled(t *testing.T) {
	testkit.Slow(t, "kills the server during an ordered forward's last attempt")
	t.Parallel()
	bin := buildBinary(t)
	pool, dsn := pgtest.NewDB(t)
	ot := newOrderTarget(t, 0, 0)
	ot.slow["a/1"] = 8 * time.Second
	cfg := writeConfig(t, senderConfig+fmt.Sprintf("    forward:\n      - name: orders\n        url: %s\n        max_attempts: 1\n        ordering: { json_pointer: /key }\n", ot.srv.URL))
	flags := []string{"--admin-token", pauseToken, "--forward-fast-path=false"}
	addr := freeAddr(t)
	base := "http://" + addr
	c := newClient(t)
	p := startBinaryWith(t, bin, dsn, addr, cfg, flags...)
	waitHealthy(t, c, base, p)
	var events []string
	for n := 1; n <= 2; n++ {
		id := fmt.Sprintf("a-%d", n)
		r, err := deliver(t.Context(), c, base, id, orderedBody("a", n))
		if err != nil {
			t.Fatal(err)
		}
		a, err := parseAccepted(r, id)
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, a.EventID)
	}
	testkit.Poll(t, time.Minute, "the attempt of event 1 under way at the target", func() bool { return ot.underWay("a") })
	killProc(t, p)
	p = startBinaryWith(t, bin, dsn, addr, cfg, flags...)
	waitHealthy(t, c, base, p)
	keyA := func() (head, last int64, blocked *string) {
		if err := pool.QueryRow(t.Context(), `SELECT head_seq, last_seq, blocked_event::text FROM forward_keys WHERE order_key = 'a'`).Scan(&head, &last, &blocked); err != nil {
			t.Fatalf("read forward_keys: %v", err)
		}
		return head, last, blocked
	}
	testkit.Poll(t, time.Minute, "key a to go on (event 2 delivered) or to be held by event 1", func() bool {
		ok, _ := ot.successes("a", 0)
		_, _, blocked := keyA()
		return slices.Contains(ok, 2) || blocked != nil
	}, func() string {
		head, last, blocked := keyA()
		var js []string
		for _, j := range forwardJobs(t, pool) {
			js = append(js, fmt.Sprintf("%s: %s attempt %d of %d", j.EventID, j.State, j.Attempt, j.MaxAttempts))
		}
		ok, _ := ot.successes("a", 0)
		skip := operatorCall(t, c, http.MethodPost, base, "/v1/senders/acme/targets/orders/forwards/"+events[0]+"/skip")
		return fmt.Sprintf("events %v; key a head %d last %d blocked_event %v; jobs %v; outbox %d rows; target delivered %v; "+
			"GET …/blocked %+v; skip event 1: %d %s; %d takeovers logged",
			events, head, last, blocked, js, outboxRows(t, pool), ok, blockedKeys(t, c, base), skip.status, skip.body,
			p.log.count("took over jobs left running by a process that is gone; they are attempted again now"))
	})
	if ok, _ := ot.successes("a", 0); !slices.Contains(ok, 2) {
		if b := blockedKeys(t, c, base); len(b) != 1 || b[0].EventID != events[0] {
			t.Errorf("key a held by event 1, but GET …/blocked shows %+v", b)
		}
		return
	}
	// The key went on: the attempt the kill cut short, still under way at
	// the target for its 8 s, was not overlapped by the next one.
	if violations, _, _, _ := ot.check(map[string][]int{"a": {1, 2}}); len(violations) > 0 {
		t.Errorf("key a: %v", violations)
	}
}
