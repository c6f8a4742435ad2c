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
// the environment says, and puts both back after. The test starts with the
// memory that tests before it freed returned to the system: the memory
// limit a floor sets counts what the runtime holds.
func withGOGC100(t *testing.T) {
	t.Helper()
	old := debug.SetGCPercent(100)
	oldLimit := debug.SetMemoryLimit(math.MaxInt64)
	t.Cleanup(func() {
		debug.SetGCPercent(old)
		debug.SetMemoryLimit(oldLimit)
	})
	debug.FreeOSMemory()
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
// MiB or so), and 512 MiB of garbage then takes at most about one cycle
// per 28 MiB: about 9 against 60 without the floor on a quiet machine.
// The count without the floor is logged, not compared: on a busy machine
// what a slow cycle marks while the loop allocates counts as live, which
// raises the goal without the floor, and by how much depends on the load
// (33, then 4 cycles seen beside CPU hogs, against 11 and 12 with the
// floor). The goals, read after a full cycle, show the floor's part.
func TestFloorRunsFewerCycles(t *testing.T) { //nolint:paralleltest // changes the process's GC settings
	withGOGC100(t)
	live := make([]byte, 8*mib)
	runtime.GC()
	waitCleanups(t)
	if g := goal(); g >= 32*mib {
		t.Fatalf("the heap's goal without a floor is %d MiB with 8 MiB live, want about twice the live heap", g/mib)
	}
	without := garbage(512 * mib)
	// The floor's memory limit counts what the runtime holds, and on a
	// busy machine the loop above may have grown the heap far past twice
	// the live heap: the floor starts, as at the test's start, with that
	// memory returned to the system.
	debug.FreeOSMemory()

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
	if with > 512/28+2 {
		t.Errorf("%d cycles with the floor (%d without): want at most %d, one per 28 MiB", with, without, 512/28+2)
	}
	runtime.KeepAlive(live)
}

// goal returns the heap's goal for the cycle under way or the next.
func goal() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/goal:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// floorAt8MiB starts a floor of 64 MiB with GOGC=100 (stopped at the
// test's end) and 8 MiB live, which it returns, and waits for the floor's
// percent for that live heap, about 700.
func floorAt8MiB(t *testing.T) (*floor, []byte, int) {
	t.Helper()
	withGOGC100(t)
	f := start(64 * mib)
	if f == nil {
		t.Fatal("start returned no floor with GOGC=100")
	}
	t.Cleanup(f.stop)
	live := make([]byte, 8*mib)
	p := waitPercent(t, f, func(p int) bool { return p >= 500 && p <= 800 })
	return f, live, p
}

// TestFloorYieldsToTheLiveHeap: the percent follows the live heap: with 8
// MiB live under a floor of 64 MiB, a cycle starts once the heap is near
// 64 MiB (percent about 700); with 48 MiB live, twice the live heap is
// above the floor and GOGC's percent stands. The floor never lowers it.
// stop puts back GOGC's percent.
func TestFloorYieldsToTheLiveHeap(t *testing.T) { //nolint:paralleltest // changes the process's GC settings
	f, live, p := floorAt8MiB(t)
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

// TestFloorBoundsASharpGrowth: with 8 MiB live under a floor of 64 MiB,
// the percent is about 700. When the live heap grows to 48 MiB within one
// cycle, the runtime sets the next cycle's goal from that percent, about
// 380 MiB, and the floor's callback lowers it only after that cycle: a
// burst of large bodies could grow the heap that far meanwhile. The memory
// limit the callback set with the percent caps the goal at once: at half
// again the floor plus the runtime's memory outside the heap. stop puts
// back the limit in force at start (none here).
func TestFloorBoundsASharpGrowth(t *testing.T) { //nolint:paralleltest // changes the process's GC settings
	f, live, _ := floorAt8MiB(t)
	limit := debug.SetMemoryLimit(-1)
	if limit < 96*mib || limit > 96*mib+64*mib {
		t.Fatalf("memory limit %.1f MiB with 8 MiB live under a floor of 64 MiB, want 96 MiB and the runtime's memory outside the heap (a few MiB)", float64(limit)/mib)
	}

	f.mu.Lock() // the callback waits: the percent and the limit stay those of 8 MiB live
	live = append(live, make([]byte, 40*mib)...)
	runtime.GC()
	g, p := goal(), f.percent
	f.mu.Unlock()
	paced := 48*mib + 48*mib*uint64(p)/100 // the percent's goal, roots left out
	t.Logf("48 MiB live, percent %d (%.0f MiB of goal) under a memory limit of %.1f MiB: goal %.1f MiB",
		p, float64(paced)/mib, float64(limit)/mib, float64(g)/mib)
	if paced <= uint64(limit) {
		t.Fatalf("the percent %d sets a goal of %d MiB, not above the limit: the test shows nothing", p, paced/mib)
	}
	if g > uint64(limit) {
		t.Errorf("the heap's goal is %.1f MiB, above the memory limit of %.1f MiB the floor set", float64(g)/mib, float64(limit)/mib)
	}
	runtime.KeepAlive(live)

	f.stop()
	if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
		t.Errorf("after stop, the memory limit is %d, want none (math.MaxInt64)", got)
	}
	// The next test starts from a small live heap, as the last cycle marks
	// it: live is not used past KeepAlive.
	runtime.GC()
	waitCleanups(t)
}

// TestFloorOffOrCapped: no floor when it is 0 or the collector is off;
// under a memory limit, the floor is at most half of it, the floor's own
// limit is at most that limit, and stop puts it back.
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
	if got := debug.SetMemoryLimit(-1); got > 64*mib {
		t.Errorf("memory limit %d under GOMEMLIMIT's 64 MiB, want at most that", got)
	}
	f.stop()
	if got := debug.SetMemoryLimit(-1); got != 64*mib {
		t.Errorf("after stop, the memory limit is %d, want GOMEMLIMIT's %d", got, 64*mib)
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

// TestLimitFor: half again the goal the floor means, the floor or GOGC's
// goal, whichever is larger, plus the memory outside the heap; at most the
// limit in force at start.
func TestLimitFor(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		live, roots, other, floor uint64
		base                      int
		limit, want               int64
	}{
		{8 * mib, 0, 10 * mib, 100 * mib, 100, math.MaxInt64, 160 * mib},         // the floor's goal
		{80 * mib, 0, 10 * mib, 100 * mib, 100, math.MaxInt64, 250 * mib},        // GOGC's: 160 MiB
		{80 * mib, 20 * mib, 10 * mib, 100 * mib, 100, math.MaxInt64, 280 * mib}, // roots count: 180 MiB
		{8 * mib, 0, 10 * mib, 100 * mib, 400, math.MaxInt64, 160 * mib},         // GOGC=400's 40 MiB is below the floor
		{30 * mib, 0, 10 * mib, 100 * mib, 400, math.MaxInt64, 235 * mib},        // and 150 MiB above it
		{8 * mib, 0, 10 * mib, 100 * mib, 100, 128 * mib, 128 * mib},             // GOMEMLIMIT's bounds it
		{0, 0, 0, 100 * mib, 100, math.MaxInt64, 150 * mib},
	} {
		if got := limitFor(c.live, c.roots, c.other, c.floor, c.base, c.limit); got != c.want {
			t.Errorf("limitFor(%d, %d, %d, %d, %d, %d) = %d, want %d", c.live, c.roots, c.other, c.floor, c.base, c.limit, got, c.want)
		}
	}
}

// isStopped reports whether f was stopped.
func isStopped(f *floor) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stopped
}
