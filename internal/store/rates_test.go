package store

import (
	"slices"
	"sync"
	"testing"
	"time"
)

// TakeRate, asked by many goroutines at once (the forwards of several
// processes), grants turns that conform to the rate: no second of turns
// holds more than the rate plus its burst, whatever the demand; the
// forwards put back get turns an interval apart, none two alike; another target's rate is its own.
func TestTakeRateSharedByConcurrentCallers(t *testing.T) {
	t.Parallel()
	s, _ := store(t)
	ctx := t.Context()
	const (
		interval  = 10 * time.Millisecond // 100/s
		burst     = 5
		tolerance = (burst - 1) * interval
		ahead     = 50 * time.Millisecond
	)
	var (
		mu             sync.Mutex
		granted, later []time.Time
		wg             sync.WaitGroup
	)
	// The callers ask until 200 turns (2 s at the rate) were granted and
	// some put back, however long a busy machine takes to ask that often.
	enough := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(granted) >= 200 && len(later) > 0
	}
	stall := time.Now().Add(time.Minute)
	for range 16 {
		wg.Go(func() {
			for !enough() && time.Now().Before(stall) {
				turn, err := s.TakeRate(ctx, "acme", "legacy", interval, tolerance, ahead, time.Hour)
				if err != nil {
					t.Error(err)
					return
				}
				if turn.Granted && turn.In > ahead+5*time.Millisecond {
					t.Errorf("turn granted %s ahead, more than %s", turn.In, ahead)
				}
				mu.Lock()
				if turn.Granted {
					granted = append(granted, turn.At)
				} else {
					later = append(later, turn.At)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if !enough() {
		t.Fatalf("%d turns granted at 100/s and %d put back in a minute: want 200, and some put back", len(granted), len(later))
	}
	slices.SortFunc(granted, time.Time.Compare)
	most, j := 0, 0
	for i := range granted {
		for granted[i].Sub(granted[j]) >= time.Second {
			j++
		}
		most = max(most, i-j+1)
	}
	if most > 100+burst {
		t.Errorf("%d turns granted within one second; want at most %d (100/s, burst %d)", most, 100+burst, burst)
	}
	for i := 1; i < len(granted); i++ {
		if d := granted[i].Sub(granted[i-1]); d < 0 {
			t.Fatalf("turns out of order")
		}
	}
	slices.SortFunc(later, time.Time.Compare)
	for i := 1; i < len(later); i++ {
		if d := later[i].Sub(later[i-1]); d < interval-time.Microsecond {
			t.Fatalf("turns %d and %d of forwards put back are %s apart, want at least %s", i-1, i, d, interval)
		}
	}

	// Another target starts with its own burst. Its rate is slow, so that
	// no turn comes back while a busy machine asks for the burst.
	const slow = time.Minute
	for i := range burst {
		turn, err := s.TakeRate(ctx, "acme", "other", slow, (burst-1)*slow, 0, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if !turn.Granted || turn.In != 0 {
			t.Errorf("forward %d of a target never limited before: granted %v in %s, want at once", i, turn.Granted, turn.In)
		}
	}
	if turn, err := s.TakeRate(ctx, "acme", "other", slow, (burst-1)*slow, 0, time.Minute); err != nil || turn.Granted {
		t.Errorf("forward %d of a burst of %d: granted %v (%v), want put back", burst+1, burst, turn.Granted, err)
	}
}

// A forward put back is never given a turn further than maxWait: it asks
// again then.
func TestTakeRateWaitIsBounded(t *testing.T) {
	t.Parallel()
	s, _ := store(t)
	ctx := t.Context()
	var last RateTurn
	for range 30 {
		turn, err := s.TakeRate(ctx, "acme", "slow", time.Second, 0, 0, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		last = turn
	}
	if last.Granted || last.In > 5*time.Second || last.In < 4*time.Second {
		t.Errorf("the 30th forward at 1/s: granted %v, waits %s; want put back for at most 5s", last.Granted, last.In)
	}
}
