package forward_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/hookgate/hookgate/internal/queue"
	"github.com/hookgate/hookgate/internal/store"
	"github.com/hookgate/hookgate/internal/testing/pgtest"
)

// orderTarget is a target that records, per ordering key, every attempt it
// receives: which event, when it began and ended, and whether it answered
// 2xx. It fails a share of the attempts at random, and answers some late.
type orderTarget struct {
	srv      *httptest.Server
	failRate float64
	maxDelay time.Duration

	mu       sync.Mutex
	attempts map[string][]orderAttempt // by key
	inFlight map[string]int            // by key: attempts under way
	overlaps []string
	failing  map[string]bool // events that always fail (status 422)
}

type orderAttempt struct {
	n          int // the event's place in its key, from the body
	start, end time.Time
	ok         bool
}

func newOrderTarget(t *testing.T, failRate float64, maxDelay time.Duration) *orderTarget {
	ot := &orderTarget{failRate: failRate, maxDelay: maxDelay, attempts: map[string][]orderAttempt{}, inFlight: map[string]int{}, failing: map[string]bool{}}
	ot.srv = httptest.NewServer(http.HandlerFunc(ot.serve))
	t.Cleanup(ot.srv.Close)
	return ot
}

func (ot *orderTarget) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var ev struct {
		Key string `json:"key"`
		N   int    `json:"n"`
	}
	if err := json.Unmarshal(body, &ev); err != nil {
		http.Error(w, "bad body", http.StatusBadRequest)
		return
	}
	a := orderAttempt{n: ev.N, start: time.Now()}
	ot.mu.Lock()
	if ot.inFlight[ev.Key] > 0 {
		ot.overlaps = append(ot.overlaps, fmt.Sprintf("key %s: event %d began while another attempt of the key was under way", ev.Key, ev.N))
	}
	ot.inFlight[ev.Key]++
	fail := rand.Float64() < ot.failRate
	failing := ot.failing[fmt.Sprintf("%s/%d", ev.Key, ev.N)]
	ot.mu.Unlock()
	if ot.maxDelay > 0 && rand.IntN(4) == 0 {
		time.Sleep(rand.N(ot.maxDelay))
	}
	status := http.StatusOK
	switch {
	case failing:
		status = http.StatusUnprocessableEntity
	case fail:
		status = http.StatusServiceUnavailable
	}
	ot.mu.Lock()
	ot.inFlight[ev.Key]--
	a.end, a.ok = time.Now(), status == http.StatusOK
	ot.attempts[ev.Key] = append(ot.attempts[ev.Key], a)
	ot.mu.Unlock()
	w.WriteHeader(status)
}

// check returns what breaks the order: for each key, the first successful
// attempt of each event must come in the events' order, and every event
// of want (by key: how many) must have succeeded.
func (ot *orderTarget) check(want map[string]int) []string {
	ot.mu.Lock()
	defer ot.mu.Unlock()
	problems := append([]string(nil), ot.overlaps...)
	for key, n := range want {
		as := append([]orderAttempt(nil), ot.attempts[key]...)
		sort.SliceStable(as, func(i, j int) bool { return as[i].start.Before(as[j].start) })
		next := 1
		for _, a := range as {
			if !a.ok || a.n < next {
				continue // a failure, or a repeat of an event delivered already
			}
			if a.n != next {
				problems = append(problems, fmt.Sprintf("key %s: event %d delivered first while %d was not", key, a.n, next))
			}
			next = a.n + 1
		}
		if next != n+1 {
			problems = append(problems, fmt.Sprintf("key %s: %d of %d events delivered", key, next-1, n))
		}
	}
	return problems
}

// successes returns the events of key whose attempts succeeded, in the
// order of the attempts' ends.
func (ot *orderTarget) successes(key string) []int {
	ot.mu.Lock()
	defer ot.mu.Unlock()
	var got []int
	for _, a := range ot.attempts[key] {
		if a.ok {
			got = append(got, a.n)
		}
	}
	return got
}

// delivered reports how many events of key have been delivered in order.
func (ot *orderTarget) delivered(key string) int {
	ot.mu.Lock()
	defer ot.mu.Unlock()
	next := 1
	for _, a := range ot.attempts[key] {
		if a.ok && a.n == next {
			next++
		}
	}
	return next - 1
}

func orderedYAML(url, onFailure string) string {
	return "      - name: orders\n        url: " + url + "\n        timeout: 2s\n        max_attempts: 3\n" +
		"        ordering: { json_pointer: /key" + onFailure + " }\n"
}

func orderedBody(key string, n int) []byte {
	return fmt.Appendf(nil, `{"key":%q,"n":%d}`, key, n)
}

// Keys sent concurrently, each key's events in sequence, to a target that
// fails a fifth of the attempts and answers some late: for each key, every
// event reaches the target, the first delivery of each in the order
// hookgate accepted them, and no two attempts of one key overlap, through
// the fast path, the relay and River's retries.
func TestOrderedDeliveryPerKey(t *testing.T) {
	t.Parallel()
	ot := newOrderTarget(t, 0.2, 20*time.Millisecond)
	// max_attempts 3 with 20% failures: a forward that fails three times
	// would block its key; skip keeps this test about the order.
	e := newFastEnv(t, strings.Replace(orderedYAML(ot.srv.URL, ", on_failure: skip"), "max_attempts: 3", "max_attempts: 50", 1), envOpts{Work: true}, fastOptions{})
	const keys, events = 10, 20
	want := map[string]int{}
	var g errgroup.Group
	for k := range keys {
		key := fmt.Sprintf("k%02d", k)
		want[key] = events
		g.Go(func() error {
			for n := 1; n <= events; n++ {
				if _, err := e.tryDeliver(fmt.Sprintf("%s-%d", key, n), orderedBody(key, n), "application/json"); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	e.poll("every event delivered", func() bool {
		for key, n := range want {
			if ot.delivered(key) < n {
				return false
			}
		}
		return true
	}, func() string { return fmt.Sprint(ot.check(want)) })
	for _, p := range ot.check(want) {
		t.Error(p)
	}
	// Nothing is left to send: every key's head moves past its last
	// forward once that forward's outcome is recorded.
	var waiting int
	e.poll("every key's head past its last forward", func() bool {
		err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM forward_keys WHERE head_seq <= last_seq`).Scan(&waiting)
		return err == nil && waiting == 0
	}, func() string { return fmt.Sprintf("%d keys with forwards to send", waiting) })
}

// A forward that fails for good holds its key (on_failure: hold, the
// default): the key's later events wait, other keys go on, and the key is
// shown blocked with the number waiting. Skipping the forward releases the
// key, and its later events arrive in order.
func TestOrderedBlockedKeySkipped(t *testing.T) {
	t.Parallel()
	ot := newOrderTarget(t, 0, 0)
	ot.failing["a/2"] = true
	e := newFastEnv(t, orderedYAML(ot.srv.URL, ""), envOpts{Work: true}, fastOptions{})
	ids := map[int]string{}
	for n := 1; n <= 4; n++ {
		d := e.deliver(fmt.Sprintf("a-%d", n), orderedBody("a", n), "application/json")
		ids[n] = d.eventID
	}
	for n := 1; n <= 2; n++ {
		e.deliver(fmt.Sprintf("b-%d", n), orderedBody("b", n), "application/json")
	}
	q := store.New(e.pool)
	var blocked []store.BlockedKey
	e.poll("key a blocked by its second event", func() bool {
		var err error
		blocked, err = q.BlockedKeys(context.Background(), "acme", "orders", 10)
		return err == nil && len(blocked) == 1
	}, func() string { return fmt.Sprintf("%+v", blocked) })
	if b := blocked[0]; b.Key != "a" || b.EventID.String() != ids[2] || b.Waiting != 2 {
		t.Errorf("blocked key %+v, want a, blocked by %s with 2 waiting", b, ids[2])
	}
	e.poll("key b delivered", func() bool { return ot.delivered("b") == 2 }, nil)
	if got := ot.delivered("a"); got != 1 {
		t.Errorf("key a: %d events delivered while blocked, want 1", got)
	}
	if _, err := q.SkipBlocked(context.Background(), "acme", "orders", uuid.MustParse(ids[1])); !errors.Is(err, store.ErrNotBlocked) {
		t.Errorf("skip a forward that blocks nothing: %v, want ErrNotBlocked", err)
	}
	k, err := q.SkipBlocked(context.Background(), "acme", "orders", uuid.MustParse(ids[2]))
	if err != nil {
		t.Fatal(err)
	}
	if k.Key != "a" || k.Waiting != 2 {
		t.Errorf("skipped %+v, want key a with 2 waiting", k)
	}
	e.poll("key a's last events delivered", func() bool {
		ot.mu.Lock()
		defer ot.mu.Unlock()
		n := 0
		for _, a := range ot.attempts["a"] {
			if a.ok && a.n > 2 {
				n++
			}
		}
		return n >= 2
	}, nil)
	got := ot.successes("a")
	if fmt.Sprint(got) != "[1 3 4]" {
		t.Errorf("key a delivered %v, want [1 3 4]", got)
	}
	if len(ot.overlaps) > 0 {
		t.Error(ot.overlaps)
	}
}

// Redelivering the forward that holds its key tries it again in its place:
// it is delivered, and the key's waiting forwards follow in order.
// Redelivering an event of the key delivered long ago sends it after the
// key's queue.
func TestOrderedRedelivery(t *testing.T) {
	t.Parallel()
	ot := newOrderTarget(t, 0, 0)
	ot.failing["a/2"] = true
	e := newFastEnv(t, orderedYAML(ot.srv.URL, ""), envOpts{Work: true}, fastOptions{})
	ids := map[int]string{}
	for n := 1; n <= 3; n++ {
		ids[n] = e.deliver(fmt.Sprintf("a-%d", n), orderedBody("a", n), "application/json").eventID
	}
	q := store.New(e.pool)
	e.poll("key a blocked by its second event", func() bool {
		_, ok, err := q.BlockedBy(context.Background(), "acme", "orders", uuid.MustParse(ids[2]))
		return err == nil && ok
	}, nil)
	ot.mu.Lock()
	ot.failing["a/2"] = false
	ot.mu.Unlock()
	sd, _ := e.cfg.Sender("acme")
	redeliver := func(n int) queue.Enqueued {
		t.Helper()
		got, err := e.river.Redeliver(context.Background(), sd, uuid.MustParse(ids[n]), fmt.Sprintf("a-%d", n))
		if err != nil || len(got) != 1 {
			t.Fatalf("redeliver event %d: %+v, %v", n, got, err)
		}
		return got[0]
	}
	if r := redeliver(2); !r.InPlace || r.AlreadyPending || r.OrderKey != "a" || r.JobID == 0 {
		t.Errorf("redelivery of the blocking forward: %+v, want in place, key a, a job", r)
	}
	e.poll("key a's three events delivered", func() bool { return ot.delivered("a") == 3 }, func() string { return orderedState(e) })
	e.poll("key a's head past its last forward", func() bool {
		turn, err := q.OrderedTurnOf(context.Background(), "acme", "orders", "a", 3)
		return err == nil && turn == store.TurnPast
	}, nil)
	if r := redeliver(1); r.InPlace || r.AlreadyPending || r.OrderKey != "a" || r.QueuedBehind != 0 {
		t.Errorf("redelivery of a delivered event: %+v, want queued after the key's (none waiting)", r)
	}
	e.poll("event 1 delivered again", func() bool {
		ot.mu.Lock()
		defer ot.mu.Unlock()
		as := ot.attempts["a"]
		return len(as) > 0 && as[len(as)-1].ok && as[len(as)-1].n == 1
	}, nil)
	got := ot.successes("a")
	if fmt.Sprint(got) != "[1 2 3 1]" {
		t.Errorf("key a delivered %v, want [1 2 3 1]", got)
	}
}

// orderedState describes the keys, outbox rows and jobs of e, for a test
// that waited in vain.
func orderedState(e *env) string {
	var b strings.Builder
	ctx := context.Background()
	for _, q := range []string{
		`SELECT concat_ws(' ', target, order_key, last_seq, head_seq, blocked_event) FROM forward_keys`,
		`SELECT concat_ws(' ', event_id, target, order_key, seq, leased_until) FROM forward_outbox`,
		`SELECT concat_ws(' ', id, state, attempt, args::text) FROM river_job ORDER BY id`,
	} {
		rows, err := e.pool.Query(ctx, q)
		if err != nil {
			return err.Error()
		}
		for rows.Next() {
			var line string
			_ = rows.Scan(&line)
			b.WriteString(line + "\n")
		}
		if err := rows.Err(); err != nil {
			return err.Error()
		}
	}
	return b.String()
}

// A bulk redelivery of an ordered target's failed forwards sends each
// after its key's queue, in the order they are matched, and leaves the
// key's order: here a target that skips failures got events 2 and 3 of key
// a failed, then delivered 4; redelivered, 2 and 3 come after 4.
func TestOrderedBulkRedelivery(t *testing.T) {
	t.Parallel()
	ot := newOrderTarget(t, 0, 0)
	ot.failing["a/2"], ot.failing["a/3"] = true, true
	e := newFastEnv(t, orderedYAML(ot.srv.URL, ", on_failure: skip"), envOpts{Work: true}, fastOptions{})
	for n := 1; n <= 4; n++ {
		e.deliver(fmt.Sprintf("a-%d", n), orderedBody("a", n), "application/json")
	}
	q := store.New(e.pool)
	e.poll("key a's head past its four forwards", func() bool {
		turn, err := q.OrderedTurnOf(context.Background(), "acme", "orders", "a", 4)
		return err == nil && turn == store.TurnPast
	}, func() string { return orderedState(e) })
	ot.mu.Lock()
	ot.failing["a/2"], ot.failing["a/3"] = false, false
	ot.mu.Unlock()
	acme, _ := e.cfg.Sender("acme")
	e.poll("both failures recorded", func() bool {
		var n int
		err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM river_job WHERE state IN ('cancelled', 'discarded')`).Scan(&n)
		return err == nil && n == 2
	}, func() string { return orderedState(e) })
	res, err := e.river.BulkRedeliver(context.Background(), queue.BulkRequest{Sender: acme, Target: "orders", State: queue.StateFailed})
	if err != nil || res.Matched != 2 {
		t.Fatalf("bulk redelivery: %+v, %v; want 2 matched", res, err)
	}
	e.poll("events 2 and 3 delivered again", func() bool {
		ot.mu.Lock()
		defer ot.mu.Unlock()
		n := 0
		for _, a := range ot.attempts["a"] {
			if a.ok {
				n++
			}
		}
		return n == 4
	}, func() string { return orderedState(e) })
	got := ot.successes("a")
	if fmt.Sprint(got) != "[1 4 2 3]" {
		t.Errorf("key a delivered %v, want [1 4 2 3]", got)
	}
}

// keyHolder is a transaction that holds ordering keys' rows, as an ingest
// or a recording does, taken after the database's count of deadlocks.
type keyHolder struct {
	t      *testing.T
	e      *env
	tx     pgx.Tx
	before int64
}

func newKeyHolder(t *testing.T, e *env) *keyHolder {
	t.Helper()
	h := &keyHolder{t: t, e: e, before: dbDeadlocks(t, e)}
	tx, err := e.pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	if _, err := tx.Exec(t.Context(), `SET LOCAL lock_timeout = '30s'`); err != nil {
		t.Fatal(err)
	}
	h.tx = tx
	return h
}

// hold locks acme's key of target as a writer of the key does.
func (h *keyHolder) hold(target, key string) error {
	tag, err := h.tx.Exec(h.t.Context(), `UPDATE forward_keys SET updated_at = updated_at WHERE sender = 'acme' AND target = $1 AND order_key = $2`, target, key)
	if err == nil && tag.RowsAffected() != 1 {
		err = fmt.Errorf("%d rows of %s's key %s", tag.RowsAffected(), target, key)
	}
	return err
}

// waitForWaiter waits until a statement of the database waits for a lock
// (on Citus, on a worker).
func (h *keyHolder) waitForWaiter(what string) {
	h.t.Helper()
	h.e.poll(what, func() bool {
		var n int
		err := h.e.pool.QueryRow(h.t.Context(), pgtest.LockWaitersSQL()).Scan(&n)
		return err == nil && n > 0
	}, func() string { return orderedState(h.e) })
}

// commit ends the transaction; checkNoDeadlock then reads the count.
func (h *keyHolder) commit() {
	h.t.Helper()
	if err := h.tx.Commit(h.t.Context()); err != nil {
		h.t.Errorf("commit: %v", err)
	}
}

func (h *keyHolder) checkNoDeadlock() {
	h.t.Helper()
	if n := dbDeadlocks(h.t, h.e) - h.before; n != 0 {
		h.t.Errorf("%d deadlocks, want none", n)
	}
}

func dbDeadlocks(t *testing.T, e *env) (n int64) {
	t.Helper()
	if err := e.pool.QueryRow(t.Context(), pgtest.DeadlocksSQL()).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// failedForwards returns a condition: n forwards failed for good.
func failedForwards(e *env, n int) func() bool {
	return func() bool {
		var got int
		err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM river_job WHERE state IN ('cancelled', 'discarded')`).Scan(&got)
		return err == nil && got == n
	}
}

// A bulk redelivery of an ordered target takes its keys in the order that
// every other writer of forward_keys does (target, then key), not in the
// order it matched the forwards: here key b's forward failed before key
// a's. While another transaction holds key a, as a recording that advances
// keys a and b does, the bulk waits for a holding nothing, so that
// transaction takes b at once; in the matched order, the bulk would hold b
// and wait for a, and PostgreSQL would abort one of the two as a deadlock.
func TestOrderedBulkRedeliveryTakesKeysInOrder(t *testing.T) {
	t.Parallel()
	ot := newOrderTarget(t, 0, 0)
	ot.failing["b/1"], ot.failing["a/1"] = true, true
	e := newFastEnv(t, orderedYAML(ot.srv.URL, ", on_failure: skip"), envOpts{Work: true}, fastOptions{})
	e.deliver("b-1", orderedBody("b", 1), "application/json")
	e.poll("key b's forward failed", failedForwards(e, 1), func() string { return orderedState(e) })
	e.deliver("a-1", orderedBody("a", 1), "application/json")
	e.poll("key a's forward failed", failedForwards(e, 2), func() string { return orderedState(e) })
	ot.mu.Lock()
	ot.failing["b/1"], ot.failing["a/1"] = false, false
	ot.mu.Unlock()

	h := newKeyHolder(t, e)
	if err := h.hold("orders", "a"); err != nil {
		t.Fatal(err)
	}
	acme, _ := e.cfg.Sender("acme")
	res, err := e.river.BulkRedeliver(context.Background(), queue.BulkRequest{Sender: acme, Target: "orders", State: queue.StateFailed})
	if err != nil || res.Matched != 2 {
		t.Fatalf("bulk redelivery: %+v, %v; want 2 matched", res, err)
	}
	h.waitForWaiter("the bulk redelivery waiting for key a")
	if err := h.hold("orders", "b"); err != nil {
		t.Errorf("key b, after key a, while the bulk redelivery waits: %v", err)
	}
	h.commit()
	e.poll("both delivered again", func() bool {
		return len(ot.successes("a")) == 1 && len(ot.successes("b")) == 1
	}, func() string { return orderedState(e) })
	h.checkNoDeadlock()
}

// A redelivery of an event to two ordered targets takes their keys in the
// order every other writer of forward_keys does (target, then key), not in
// the configuration's: here z-orders comes first. While another
// transaction holds a-orders' key, as an ingest of the key's next event to
// both targets does, the redelivery waits for it holding nothing, so that
// transaction takes z-orders' key at once, and nothing deadlocks.
func TestOrderedRedeliveryTakesKeysInOrder(t *testing.T) {
	t.Parallel()
	ot := newOrderTarget(t, 0, 0)
	ot.failing["k/1"] = true
	yaml := strings.Replace(orderedYAML(ot.srv.URL, ", on_failure: skip"), "name: orders", "name: z-orders", 1) +
		strings.Replace(orderedYAML(ot.srv.URL, ", on_failure: skip"), "name: orders", "name: a-orders", 1)
	e := newFastEnv(t, yaml, envOpts{Work: true}, fastOptions{})
	id := e.deliver("k-1", orderedBody("k", 1), "application/json").eventID
	e.poll("both forwards failed", failedForwards(e, 2), func() string { return orderedState(e) })
	ot.mu.Lock()
	ot.failing["k/1"] = false
	ot.mu.Unlock()

	h := newKeyHolder(t, e)
	if err := h.hold("a-orders", "k"); err != nil {
		t.Fatal(err)
	}
	sd, _ := e.cfg.Sender("acme")
	type result struct {
		got []queue.Enqueued
		err error
	}
	done := make(chan result, 1)
	go func() {
		got, err := e.river.Redeliver(context.Background(), sd, uuid.MustParse(id), "k-1")
		done <- result{got, err}
	}()
	h.waitForWaiter("the redelivery waiting for a-orders' key")
	if err := h.hold("z-orders", "k"); err != nil {
		t.Errorf("z-orders' key, after a-orders', while the redelivery waits: %v", err)
	}
	h.commit()
	if r := <-done; r.err != nil || len(r.got) != 2 {
		t.Fatalf("redelivery: %+v, %v; want both targets", r.got, r.err)
	}
	e.poll("delivered again to both targets", func() bool { return len(ot.successes("k")) == 2 }, func() string { return orderedState(e) })
	h.checkNoDeadlock()
}
