package dedup

import (
	"errors"
	"testing"
	"time"
)

// The shedding rule, step by step on a fake clock: a burst whose queueing
// delays exceed the target for less than an interval sheds nothing; delays
// that stay above the target for an interval shed new deliveries at
// admission (reason queue_delay), until a delivery reaches the database
// below the target or the queue empties; a ticket past MaxWait is expired.
func TestShedderRule(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_000_000, 0)
	var observed []time.Duration
	s, err := newStore(Config{Pool: noPool, InFlightWait: time.Second, Shedding: &ShedPolicy{Target: 100 * time.Millisecond, Interval: time.Second, MaxWait: 3 * time.Second,
		Observe: func(d time.Duration) { observed = append(observed, d) }}})
	if err != nil {
		t.Fatal(err)
	}
	sh := s.shed
	sh.now = func() time.Time { return now }
	admit := func() *ticket {
		t.Helper()
		tk, err := sh.admit()
		if err != nil {
			t.Fatalf("admit at %s: %v, want admitted", now.Format(time.StampMilli), err)
		}
		return tk
	}
	wantShed := func() {
		t.Helper()
		_, err := sh.admit()
		var oe *OverloadError
		if !errors.As(err, &oe) || oe.Reason != ShedQueueDelay || !errors.Is(err, ErrOverloaded) {
			t.Fatalf("admit at %s: %v, want shed for queue_delay", now.Format(time.StampMilli), err)
		}
	}

	// A burst of 1,000 at once, drained over 0.9 s: every delay but the
	// first ones above the target, for less than an interval.
	burst := make([]*ticket, 1000)
	for i := range burst {
		burst[i] = admit()
	}
	if s.Queued() != 1000 {
		t.Errorf("Queued() = %d, want 1000", s.Queued())
	}
	start := now
	for i, tk := range burst {
		now = start.Add(time.Duration(i) * 900 * time.Microsecond)
		tk.leave()
		tk.leave() // a second leave does nothing
	}
	if s.Queued() != 0 || len(observed) != 1000 || observed[999] != 999*900*time.Microsecond {
		t.Fatalf("after the burst: Queued() = %d, %d observed (last %v)", s.Queued(), len(observed), observed[len(observed)-1])
	}
	// The queue is empty: admission goes on.
	a, b, c := admit(), admit(), admit()

	// A standing queue: three deliveries reach the database after waiting
	// above the target, the first and the last an interval apart.
	now = now.Add(200 * time.Millisecond)
	a.leave()
	now = now.Add(500 * time.Millisecond)
	d := admit() // above target for 0.5 s only: admitted
	b.leave()
	now = now.Add(600 * time.Millisecond)
	c.leave() // 1.1 s above the target
	wantShed()
	wantShed()
	// A delivery reaching the database below the target ends the shedding.
	d.enqueued = now.Add(-time.Millisecond)
	d.leave()
	f := admit()
	g := admit()
	// Above again for an interval, then the queue empties: admission
	// resumes even without a report below the target.
	now = now.Add(time.Second)
	f.leave()
	now = now.Add(time.Second)
	h := admit() // f's report alone is no interval yet
	g.leave()    // g: 2 s above, 1 s after f
	wantShed()
	h.leave()
	admit().leave()

	// MaxWait.
	tk := admit()
	if tk.expired() {
		t.Error("a ticket expired at once")
	}
	now = now.Add(3 * time.Second)
	if !tk.expired() {
		t.Error("a ticket did not expire after MaxWait")
	}
	tk.leave()
}
