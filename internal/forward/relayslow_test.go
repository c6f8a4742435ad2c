package forward_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/forward"
	"github.com/hookgate/hookgate/internal/testing/pgtest"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// lockOutbox takes forward_outbox in SHARE mode in a transaction of its
// own, as a LOCK TABLE of an operator or a migration would: the relay's
// look (a SELECT) goes on, its take (a DELETE) waits until release is
// called (or the test ends). Raw SQL: the lock is what the test examines.
func lockOutbox(t *testing.T, e *env) (release func()) {
	t.Helper()
	tx, err := e.pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(t.Context(), `LOCK TABLE forward_outbox IN SHARE MODE`); err != nil {
		t.Fatal(err)
	}
	done := false
	release = func() {
		if !done {
			done = true
			_ = tx.Rollback(context.WithoutCancel(t.Context()))
		}
	}
	t.Cleanup(release)
	return release
}

// slowRelay returns a relay of e's outbox whose statements time out after
// timeout and whose batches are slow after slowAfter, logging into buf and
// registering its metric on e's registry.
func slowRelay(t *testing.T, e *env, buf *testkit.LogBuffer, timeout, slowAfter time.Duration) *forward.Relay {
	t.Helper()
	rc := forward.DefaultRelayConfig()
	rc.Interval, rc.IdleInterval = 5*time.Millisecond, 5*time.Millisecond
	rc.StatementTimeout, rc.SlowAfter, rc.Registerer = timeout, slowAfter, e.reg
	rc.Pool, rc.Queue, rc.Senders, rc.Log = e.pool, e.river, e.cfg, buf.Logger()
	rc.Distributed = e.split
	r, err := forward.NewRelay(rc)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestRelayStatementTimeoutEndsAStuckTake: a take that cannot finish (here
// it waits for a table lock; a plan that walks the whole outbox is the
// other way, see internal/store's TestQueuePlansWhenStatisticsLie) is cut
// off by the relay's statement timeout, set in its transaction's BEGIN:
// the batch is logged at WARN as slow (sender, duration, nothing moved)
// and counted in hookgate_forward_relay_slow_total, the failure is logged,
// the rows stay in the outbox, and once the lock is gone the relay moves
// them all, each once.
func TestRelayStatementTimeoutEndsAStuckTake(t *testing.T) {
	t.Parallel()
	e := newEnv(t, twoTargets, envOpts{})
	events := e.deliverMany(deliveryIDs("stuck", 3))
	release := lockOutbox(t, e)
	var buf testkit.LogBuffer
	e.runRelay(slowRelay(t, e, &buf, 300*time.Millisecond, 200*time.Millisecond))

	slow := func() float64 { return e.counter("hookgate_forward_relay_slow_total", nil) }
	e.poll("the take to time out, logged and counted as slow", func() bool {
		s := buf.String()
		return slow() >= 1 && strings.Contains(s, "canceling statement due to statement timeout") &&
			strings.Contains(s, `msg="forward relay batch slow" sender=acme`) && strings.Contains(s, "moved=0")
	}, buf.String)
	if s := buf.String(); !strings.Contains(s, `level=WARN msg="forward relay failed; its outbox rows stay for the next try"`) {
		t.Errorf("the failure is not logged at WARN:\n%s", s)
	}
	if got := len(e.outbox()); got != 6 {
		t.Errorf("%d outbox rows while the take cannot finish, want all 6", got)
	}
	if got := len(e.jobs()); got != 0 {
		t.Errorf("%d jobs while the take cannot finish, want none", got)
	}

	release()
	e.poll("the relay to move every row once the lock is gone", func() bool { return len(e.outbox()) == 0 && len(e.jobs()) == 6 }, buf.String)
	want, deliveryOf := wantForwards(events)
	if got := e.forwardKeys(deliveryOf); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("forward jobs %v, want one per event and target %v", got, want)
	}
}

// TestRelayLogsASlowBatch: a batch that finishes, but later than the slow
// threshold (its take waited for a lock for longer), is logged at WARN
// with its sender, its duration and the rows it moved, and counted.
func TestRelayLogsASlowBatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t, twoTargets, envOpts{})
	e.deliverMany(deliveryIDs("slow", 2))
	release := lockOutbox(t, e)
	var buf testkit.LogBuffer
	const slowAfter = 100 * time.Millisecond
	e.runRelay(slowRelay(t, e, &buf, time.Minute, slowAfter))

	// The take has waited past the threshold: a session has waited for a
	// lock (on Citus, on a worker) since longer than slowAfter ago.
	var waiting time.Time
	e.poll("the take to wait for the lock past the slow threshold", func() bool {
		var n int
		if err := e.pool.QueryRow(t.Context(), pgtest.LockWaitersSQL()).Scan(&n); err != nil || n == 0 {
			return false
		}
		if waiting.IsZero() {
			waiting = time.Now()
		}
		return time.Since(waiting) > slowAfter
	}, buf.String)
	release()
	e.poll("the slow batch to move the 4 forwards and be logged", func() bool {
		return len(e.jobs()) == 4 && strings.Contains(buf.String(), `msg="forward relay batch slow" sender=acme`)
	}, buf.String)
	s := buf.String()
	if !strings.Contains(s, "level=WARN") || !strings.Contains(s, "moved=4") || strings.Contains(s, "relay failed") {
		t.Errorf("the slow batch is not logged at WARN with the 4 rows it moved (and no failure):\n%s", s)
	}
	if n := e.counter("hookgate_forward_relay_slow_total", nil); n < 1 {
		t.Errorf("hookgate_forward_relay_slow_total = %v, want the slow batch counted", n)
	}
}
