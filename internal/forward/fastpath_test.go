package forward_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/hookgate/hookgate/internal/queue"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// The fast path alone (no River worker, no relay) delivers each forward
// once and records it durably (a forward_delivered row, read like a
// completed River job) with its status and time: attempt 1, the outbox row
// gone, and List shows it delivered.
func TestFastPathDeliversAndRecords(t *testing.T) {
	t.Parallel()
	tg := testkit.NewTarget(t, testkit.Always(http.StatusOK))
	e := newFastEnv(t, "      - name: orders\n        url: "+tg.URL+"\n", envOpts{}, fastOptions{})
	const n = 20
	ids := map[string]bool{}
	for i := range n {
		d := e.deliver("fast-"+string(rune('a'+i)), []byte(`{"n":1}`), "application/json")
		ids[d.eventID] = true
	}
	js := e.waitJobs(n)
	for _, j := range js {
		if j.State != "completed" || j.Attempt != 1 || !ids[j.EventID] || j.Target != "orders" {
			t.Errorf("job %+v: want completed at attempt 1, target orders, one of the delivered events", j)
		}
		var out queue.Output
		if err := json.Unmarshal([]byte(j.Output), &out); err != nil || out.Status != http.StatusOK || out.DeliveredAt.IsZero() {
			t.Errorf("job %d output %q: want status 200 and delivered_at", j.ID, j.Output)
		}
	}
	if got := len(tg.Hits()); got != n {
		t.Errorf("target received %d requests, want %d", got, n)
	}
	// The outbox rows go with the records (on Citus, in the transaction
	// right after theirs: the split form): none is left once recorded.
	var ob []string
	deadline := time.Now().Add(waitTimeout)
	for ob = e.outbox(); len(ob) != 0 && time.Now().Before(deadline); ob = e.outbox() {
		time.Sleep(5 * time.Millisecond)
	}
	if len(ob) != 0 {
		t.Errorf("outbox after the fast path: %v, want empty", ob)
	}
	st, err := queue.NewJobs(e.pool).EventForwards(context.Background(), "acme", uuid.MustParse(js[0].EventID))
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != 1 || st[0].State != queue.StateDelivered || st[0].LastStatus != http.StatusOK || st[0].DeliveredAt.IsZero() || st[0].Attempts != 1 {
		t.Errorf("List: %+v, want one delivered forward, status 200, attempt 1, delivered_at set", st)
	}
	if got := e.counter("hookgate_forward_attempts_total", map[string]string{"outcome": "delivered"}); got != n {
		t.Errorf("hookgate_forward_attempts_total{outcome=delivered} = %v, want %d", got, n)
	}
	if got := e.counter("hookgate_forward_fast_path_total", map[string]string{"result": "delivered"}); got != n {
		t.Errorf("hookgate_forward_fast_path_total{result=delivered} = %v, want %d", got, n)
	}
}

// A fast-path attempt that fails with a retryable status is recorded as
// River's first attempt (retryable, its error kept), and River's worker
// delivers it at the second attempt, with the same Idempotency-Key.
func TestFastPathFailureIsRetriedByRiver(t *testing.T) {
	t.Parallel()
	tg := testkit.NewTarget(t, testkit.FailFirst(1, http.StatusServiceUnavailable))
	e := newFastEnv(t, "      - name: orders\n        url: "+tg.URL+"\n        max_attempts: 5\n", envOpts{Work: true}, fastOptions{})
	d := e.deliver("retry-1", []byte(`{}`), "application/json")
	js := e.waitJobs(1)
	j := js[0]
	if j.State != "completed" || j.Attempt != 2 || len(j.Errors) != 1 || j.Errors[0] != "target answered 503" {
		t.Errorf("job %+v: want completed at attempt 2 after one error \"target answered 503\"", j)
	}
	if got := tg.HitsFor(d.eventID); len(got) != 2 {
		t.Errorf("target got %d requests with the event's Idempotency-Key, want 2", len(got))
	}
}

// A 4xx other than 408 and 429 fails a fast-path forward at once: a
// cancelled job with the status in its error, no retry.
func TestFastPathClientErrorFails(t *testing.T) {
	t.Parallel()
	tg := testkit.NewTarget(t, testkit.Always(http.StatusUnprocessableEntity))
	e := newFastEnv(t, "      - name: orders\n        url: "+tg.URL+"\n", envOpts{Work: true}, fastOptions{})
	d := e.deliver("fail-1", []byte(`{}`), "application/json")
	js := e.waitJobs(1)
	if js[0].State != "cancelled" || js[0].Attempt != 1 || len(js[0].Errors) != 1 {
		t.Errorf("job %+v: want cancelled at attempt 1 with one error", js[0])
	}
	st, err := queue.NewJobs(e.pool).EventForwards(context.Background(), "acme", uuid.MustParse(d.eventID))
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != 1 || st[0].State != queue.StateFailed || st[0].LastStatus != http.StatusUnprocessableEntity {
		t.Errorf("List: %+v, want one failed forward with last status 422", st)
	}
	if got := len(tg.Hits()); got != 1 {
		t.Errorf("target received %d requests, want 1", got)
	}
}

// A forward the dispatcher has no room for is handed to the relay: with one
// dispatch worker held by a target that blocks, and a queue of one, later
// deliveries are leased no more (or released) and River delivers them.
func TestFastPathFullHandsOverToRelay(t *testing.T) {
	t.Parallel()
	e := handOverToRelay(t, 0)
	if got := e.counter("hookgate_forward_fast_path_total", map[string]string{"result": "handed_over"}); got < 1 {
		t.Errorf("hookgate_forward_fast_path_total{result=handed_over} = %v, want at least 1", got)
	}
}

// TestFastPathHandOverWakesTheRelay: the forwards the fast path has no room
// for are left to the relay, which it wakes: with the relay's idle interval
// an hour (as in TestFastPathFullHandsOverToRelay otherwise), River still
// delivers them all.
func TestFastPathHandOverWakesTheRelay(t *testing.T) {
	t.Parallel()
	handOverToRelay(t, time.Hour)
}

// handOverToRelay runs the scenario of TestFastPathFullHandsOverToRelay
// (fastOptions.relayIdle being relayIdle) and checks that every forward
// is delivered; it returns the env.
func handOverToRelay(t *testing.T, relayIdle time.Duration) *env {
	t.Helper()
	slow := testkit.NewTarget(t, func(n int, r *http.Request) testkit.Answer {
		if r.Header.Get("X-Hookgate-Delivery-Id") == "block" && n == 1 {
			return testkit.Answer{Delay: 2 * time.Second, Status: http.StatusOK}
		}
		return testkit.Answer{Status: http.StatusOK}
	})
	e := newFastEnv(t, "      - name: orders\n        url: "+slow.URL+"\n", envOpts{Work: true}, fastOptions{workers: 1, queue: 1, relayIdle: relayIdle})
	e.deliver("block", []byte(`{}`), "application/json")
	testkit.Poll(t, waitTimeout, "the blocking forward to arrive", func() bool { return len(slow.Hits()) == 1 }, nil)
	for _, id := range []string{"x1", "x2", "x3", "x4"} {
		e.deliver(id, []byte(`{}`), "application/json")
	}
	for _, j := range e.waitJobs(5) {
		if j.State != "completed" {
			t.Errorf("job %+v: want completed", j)
		}
	}
	return e
}

// Redelivering an event whose forward is under way (the fast path's first
// attempt, held by the target) queues a new forward after it: the answer
// says so, the new job waits (without an attempt) while the first is held,
// and once the first is answered the target receives the event again, with
// the same Idempotency-Key. Redelivering again while that new job waits
// queues nothing more; once both are delivered, a redelivery is a plain new
// forward.
func TestRedeliverWhileRunningQueuesAfter(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	tg := testkit.NewTarget(t, func(n int, r *http.Request) testkit.Answer {
		if n == 1 {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		return testkit.Answer{Status: http.StatusOK}
	})
	e := newFastEnv(t, "      - name: orders\n        url: "+tg.URL+"\n        timeout: 20s\n", envOpts{Work: true}, fastOptions{lease: 40 * time.Second})
	d := e.deliver("again-1", []byte(`{}`), "application/json")
	testkit.Poll(t, waitTimeout, "the fast path's POST to reach the target", func() bool { return len(tg.Hits()) == 1 }, nil)

	acme, _ := e.cfg.Sender("acme")
	ev := uuid.MustParse(d.eventID)
	redeliver := func() queue.Enqueued {
		t.Helper()
		jobs, err := e.river.Redeliver(t.Context(), acme, ev, d.id)
		if err != nil || len(jobs) != 1 {
			t.Fatalf("Redeliver = %+v, %v; want one forward", jobs, err)
		}
		return jobs[0]
	}
	j := redeliver()
	if !j.AfterCurrent || j.AlreadyPending || j.JobID == 0 || j.CurrentJobID != 0 {
		t.Fatalf("redelivery while the fast path runs = %+v; want a new job queued after the current attempt (no job of it yet)", j)
	}
	if again := redeliver(); !again.AlreadyPending || again.JobID != j.JobID {
		t.Errorf("second redelivery while the first waits = %+v; want already pending, job %d", again, j.JobID)
	}
	testkit.Poll(t, waitTimeout, "the queued redelivery to wait for the forward under way", func() bool {
		return e.counter("hookgate_forward_waits_total", map[string]string{"reason": "after"}) >= 1
	}, nil)
	if n := len(tg.Hits()); n != 1 {
		t.Fatalf("the target received %d requests while the first forward was held, want 1", n)
	}
	close(release)
	js := e.waitJobs(2)
	for _, jb := range js {
		if jb.State != "completed" || jb.EventID != d.eventID {
			t.Errorf("job %+v: want completed, event %s", jb, d.eventID)
		}
	}
	hits := tg.HitsFor(d.eventID)
	if len(hits) != 2 || !hits[1].At.After(hits[0].AnswerAt) {
		t.Errorf("the target received %d requests for the event; want 2, the redelivery after the first was answered", len(hits))
	}
	if last := redeliver(); last.AfterCurrent || last.AlreadyPending || last.JobID == 0 {
		t.Errorf("redelivery once every forward is delivered = %+v; want a plain new job", last)
	}
}

// Bulk redelivery treats the fast path's delivered forwards like any
// other: a bulk redelivery of the target's delivered forwards matches each
// of them, its job sends each event again (a River job, with the same
// Idempotency-Key), and a second request matches each event once more,
// through its redelivery (now its newest forward), not its first attempt.
func TestBulkRedeliverFastPathDeliveries(t *testing.T) {
	t.Parallel()
	tg := testkit.NewTarget(t, testkit.Always(http.StatusOK))
	e := newFastEnv(t, "      - name: orders\n        url: "+tg.URL+"\n", envOpts{Work: true}, fastOptions{})
	const n = 3
	for i := range n {
		e.deliver("bulk-"+string(rune('a'+i)), []byte(`{}`), "application/json")
	}
	e.waitJobs(n)
	if got := e.counter("hookgate_forward_fast_path_total", map[string]string{"result": "delivered"}); got != n {
		t.Fatalf("hookgate_forward_fast_path_total{result=delivered} = %v, want %d (the fast path delivered each)", got, n)
	}
	acme, _ := e.cfg.Sender("acme")
	res, err := e.river.BulkRedeliver(t.Context(), queue.BulkRequest{Sender: acme, Target: "orders", State: queue.StateDelivered})
	if err != nil || res.Matched != n || res.AfterCurrent {
		t.Fatalf("BulkRedeliver(delivered) = %+v, %v; want %d matched, not after a current one", res, err, n)
	}
	js := e.waitJobs(2 * n)
	for _, j := range js {
		if j.State != "completed" {
			t.Errorf("job %+v: want completed", j)
		}
	}
	for key, hits := range tg.Delivered() {
		if hits != 2 {
			t.Errorf("event %s reached the target %d times, want 2 (the fast path's and the redelivery)", key, hits)
		}
	}
	if len(tg.Delivered()) != n {
		t.Errorf("%d events reached the target, want %d", len(tg.Delivered()), n)
	}
	if again, err := e.river.BulkRedeliver(t.Context(), queue.BulkRequest{Sender: acme, Target: "orders", State: queue.StateDelivered}); err != nil || again.Matched != n {
		t.Errorf("second BulkRedeliver(delivered) = %+v, %v; want the %d redeliveries (now the newest, delivered)", again, err, n)
	}
}

// A bulk redelivery of a target's running forwards treats the fast path's
// first attempts in flight as a single redelivery does: the request counts
// them (their outbox rows, leased), and its job queues a new forward after
// each, which the target receives once the attempt under way has been
// answered, with the same Idempotency-Key. A second request while the new
// forward waits matches nothing more.
func TestBulkRedeliverWhileFastPathRuns(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	tg := testkit.NewTarget(t, func(n int, r *http.Request) testkit.Answer {
		if n <= 2 {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		return testkit.Answer{Status: http.StatusOK}
	})
	e := newFastEnv(t, "      - name: orders\n        url: "+tg.URL+"\n        timeout: 20s\n", envOpts{Work: true}, fastOptions{lease: 40 * time.Second})
	d1 := e.deliver("bulk-run-1", []byte(`{}`), "application/json")
	d2 := e.deliver("bulk-run-2", []byte(`{}`), "application/json")
	testkit.Poll(t, waitTimeout, "the fast path's POSTs to reach the target", func() bool { return len(tg.Hits()) == 2 }, nil)

	acme, _ := e.cfg.Sender("acme")
	bulk := func() queue.Bulk {
		t.Helper()
		res, err := e.river.BulkRedeliver(t.Context(), queue.BulkRequest{Sender: acme, Target: "orders", State: queue.StateRunning})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := bulk(); res.Matched != 2 || !res.AfterCurrent {
		t.Fatalf("BulkRedeliver(running) while the fast path holds 2 attempts = %+v; want 2 matched, after the current ones", res)
	}
	testkit.Poll(t, waitTimeout, "the queued redeliveries to wait for the forwards under way", func() bool {
		return e.counter("hookgate_forward_waits_total", map[string]string{"reason": "after"}) >= 2
	}, nil)
	if res := bulk(); res.Matched != 0 {
		t.Errorf("second BulkRedeliver(running) while the redeliveries wait = %+v; want none matched", res)
	}
	if n := len(tg.Hits()); n != 2 {
		t.Fatalf("the target received %d requests while the first forwards were held, want 2", n)
	}
	close(release)
	for _, jb := range e.waitJobs(4) {
		if jb.State != "completed" {
			t.Errorf("job %+v: want completed", jb)
		}
	}
	for _, d := range []string{d1.eventID, d2.eventID} {
		hits := tg.HitsFor(d)
		if len(hits) != 2 || !hits[1].At.After(hits[0].AnswerAt) {
			t.Errorf("the target received %d requests for event %s; want 2, the redelivery after the first was answered", len(hits), d)
		}
	}
}
