package heapfloor

import (
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

// The tests change the process's GC settings: none runs in parallel.

const mib = 1 << 20

// sink keeps the compiler from leaving out the allocations.
var sink []byte

// cycles returns how many GC cycles the process has run.
func cycles() uint64 {
	s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// garbage allocates n bytes that are unreachable at once, in 64 KiB
// pieces, and returns the GC cycles run meanwhile.
func garbage(n int) uint64 {
	before := cycles()
	for range n / (64 << 10) {
		sink = make([]byte, 64<<10)
	}
	sink = nil
	return cycles() - before
}

// withGOGC100 runs the test with GOGC=100 and no memory limit, whatever
// the environment says, and puts both back after.
func withGOGC100(t *testing.T) {
	t.Helper()
	old := debug.SetGCPercent(100)
	oldLimit := debug.SetMemoryLimit(math.MaxInt64)
	t.Cleanup(func() {
		debug.SetGCPercent(old)
		debug.SetMemoryLimit(oldLimit)
	})
}

// waitCleanups waits until the cleanups queued so far have run: the
// floor's callback runs after a cycle, on the runtime's cleanup goroutine.
func waitCleanups(t *testing.T) {
	t.Helper()
	s := []metrics.Sample{{Name: "/gc/cleanups/queued:cleanups"}, {Name: "/gc/cleanups/executed:cleanups"}}
	metrics.Read(s)
	queued := s[0].Value.Uint64()
	deadline := time.Now().Add(30 * time.Second) // a guard against a hang, not a timed assertion
	for s[1].Value.Uint64() < queued {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d cleanups ran", s[1].Value.Uint64(), queued)
		}
		time.Sleep(time.Millisecond)
		metrics.Read(s)
	}
}

// waitPercent waits until f has set a percent for which ok holds, after
// a cycle: the floor's callback runs after the cycle, on the runtime's
// cleanup goroutine.
func waitPercent(t *testing.T, f *floor, ok func(int) bool) int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second) // a guard against a hang, not a timed assertion
	for {
		runtime.GC()
		if p := f.Percent(); ok(p) {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("the floor's percent is still %d", f.Percent())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestFloorRunsFewerCycles: with 8 MiB live, a floor of 64 MiB makes
// 64 MiB the heap's goal (GOGC=100 alone: about twice the live heap, 20
// MiB or so), and 512 MiB of garbage then takes fewer cycles than without
// it, and at most about one per 28 MiB: about 9 against 60 on a quiet
// machine. On a busy one, what a slow cycle marks while the loop
// allocates counts as live, which raises the goal without the floor and
// narrows the gap (11 against 33 seen).
func TestFloorRunsFewerCycles(t *testing.T) { //nolint:paralleltest // changes the process's GC settings
	withGOGC100(t)
	live := make([]byte, 8*mib)
	runtime.GC()
	waitCleanups(t)
	if g := goal(); g >= 32*mib {
		t.Fatalf("the heap's goal without a floor is %d MiB with 8 MiB live, want about twice the live heap", g/mib)
	}
	without := garbage(512 * mib)

	f := start(64 * mib)
	if f == nil {
		t.Fatal("start returned no floor with GOGC=100")
	}
	defer f.stop()
	runtime.GC()
	waitCleanups(t) // the floor's callback has set the percent for the next cycle
	if g := goal(); g < 64*mib || g > 64*mib*21/20 {
		t.Errorf("the heap's goal under a floor of 64 MiB is %.1f MiB (percent %d), want the floor", float64(g)/mib, f.Percent())
	}
	with := garbage(512 * mib)
	t.Logf("cycles for 512 MiB of garbage: %d without a floor, %d with a floor of 64 MiB (percent %d)", without, with, f.Percent())
	if with >= without || with > 512/28+2 {
		t.Errorf("%d cycles without the floor and %d with it: want fewer with it, and at most %d", without, with, 512/28+2)
	}
	runtime.KeepAlive(live)
}

// goal returns the heap's goal for the cycle under way or the next.
func goal() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/goal:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// TestFloorYieldsToTheLiveHeap: the percent follows the live heap: with 8
// MiB live under a floor of 64 MiB, a cycle starts once the heap is near
// 64 MiB (percent about 700); with 48 MiB live, twice the live heap is
// above the floor and GOGC's percent stands. The floor never lowers it.
// stop puts back GOGC's percent.
func TestFloorYieldsToTheLiveHeap(t *testing.T) { //nolint:paralleltest // changes the process's GC settings
	withGOGC100(t)
	f := start(64 * mib)
	if f == nil {
		t.Fatal("start returned no floor with GOGC=100")
	}
	defer f.stop()

	live := make([]byte, 8*mib)
	p := waitPercent(t, f, func(p int) bool { return p >= 500 && p <= 800 })
	t.Logf("8 MiB live: percent %d", p)

	live = append(live, make([]byte, 40*mib)...) // 48 MiB live
	p = waitPercent(t, f, func(p int) bool { return p <= 100 })
	if p != 100 {
		t.Errorf("48 MiB live under a floor of 64 MiB: percent %d, want GOGC's 100", p)
	}
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("the runtime's percent is %d, want 100", got)
	}
	runtime.KeepAlive(live)

	f.stop()
	debug.SetGCPercent(300) // what stop leaves is no longer the floor's business
	garbage(64 * mib)
	runtime.GC()
	waitCleanups(t) // the callback armed last has run
	if got := debug.SetGCPercent(100); got != 300 {
		t.Errorf("after stop, the percent is %d, want the 300 set since: the floor's callback still changed it", got)
	}
}

// TestFloorOffOrCapped: no floor when it is 0 or the collector is off;
// under a memory limit, the floor is at most half of it.
func TestFloorOffOrCapped(t *testing.T) { //nolint:paralleltest // changes the process's GC settings
	withGOGC100(t)
	if f := start(0); f != nil {
		f.stop()
		t.Error("start(0) returned a floor")
	}
	debug.SetGCPercent(-1)
	if f := start(64 * mib); f != nil {
		f.stop()
		t.Error("start returned a floor with GOGC=off")
	}
	if got := debug.SetGCPercent(100); got != -1 {
		t.Errorf("start with GOGC=off left the percent at %d", got)
	}

	debug.SetMemoryLimit(64 * mib)
	f := start(100 * mib)
	if f == nil {
		t.Fatal("start returned no floor under a memory limit")
	}
	defer f.stop()
	if f.floor != 32*mib {
		t.Errorf("floor %d under a memory limit of 64 MiB, want half of it, %d", f.floor, 32*mib)
	}
}

// TestStartShared: the servers of one process share one floor, the
// first's; it runs until the last of them stops, which puts back GOGC's
// percent. A stop called twice counts once.
func TestStartShared(t *testing.T) { //nolint:paralleltest // changes the process's GC settings
	withGOGC100(t)
	stop1 := Start(64 * mib)
	stop2 := Start(32 * mib)
	f := proc.f
	if f == nil || f.floor != 64*mib {
		t.Fatalf("the process's floor is %+v, want the first caller's 64 MiB", f)
	}
	if p := f.Percent(); p <= 100 {
		t.Fatalf("percent %d with a floor running and a small heap, want above GOGC's 100", p)
	}
	stop1()
	stop1()
	if proc.f != f || isStopped(f) {
		t.Fatal("the floor stopped while a caller still runs")
	}
	stop2()
	if proc.f != nil || !isStopped(f) {
		t.Fatal("the floor runs on after its last caller stopped")
	}
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("the percent after the last stop is %d, want GOGC's 100", got)
	}
	Start(0)() // no floor, nothing to stop
	if proc.f != nil {
		t.Error("Start(0) started a floor")
	}
}

// TestPercentFor: the smallest percent whose goal, live + (live +
// roots)×percent/100, reaches the floor, at least the base, and at most
// the percent whose heap minimum is the floor, and maxPercent.
func TestPercentFor(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		live, roots, floor uint64
		base, want         int
	}{
		{20 * mib, 0, 100 * mib, 100, 400},
		{20 * mib, 5 * mib, 100 * mib, 100, 320}, // stacks and globals count
		{30 * mib, 0, 100 * mib, 100, 234},       // 233.3… rounded up: the goal reaches the floor
		{50 * mib, 0, 100 * mib, 100, 100},
		{60 * mib, 0, 100 * mib, 100, 100}, // never below GOGC's
		{20 * mib, 0, 100 * mib, 500, 500},
		{100 * mib, 0, 100 * mib, 100, 100},
		{200 * mib, 0, 100 * mib, 100, 100},
		{0, 0, 100 * mib, 100, 100},
		{0, 1 * mib, 100 * mib, 100, maxPercent},
		{1, 0, 100 * mib, 100, maxPercent},
		{1, 0, 16 * mib, 100, 400}, // 4 MiB × 4 = 16 MiB: the heap minimum's bound
		{9 * mib, 0, 100 * mib, 100, 1000},
		{10 * mib, 0, 100 * mib, 100, 900},
	} {
		got := percentFor(c.live, c.roots, c.floor, c.base)
		if got != c.want {
			t.Errorf("percentFor(%d, %d, %d, %d) = %d, want %d", c.live, c.roots, c.floor, c.base, got, c.want)
		}
		if goal := c.live + (c.live+c.roots)*uint64(got)/100; c.live+c.roots > 0 && c.live < c.floor && got < min(int(c.floor*100/heapMinimum), maxPercent) && goal < c.floor {
			t.Errorf("percentFor(%d, %d, %d, %d) = %d: the goal %d is below the floor", c.live, c.roots, c.floor, c.base, got, goal)
		}
	}
}

// isStopped reports whether f was stopped.
func isStopped(f *floor) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stopped
}
