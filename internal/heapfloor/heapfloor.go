// Package heapfloor keeps Go's garbage collector from starting a cycle
// before the heap has grown to a floor, while the live heap is small.
//
// With GOGC=100 a cycle starts once the heap has doubled. hookgate's live
// heap is small (about 16 MB under load: the replay cache, the
// connections' buffers) and it allocates fast (about 120 MB/s at 10,000
// deliveries per second: bodies, the batches' statements, the forwards'
// requests), so it ran a cycle about every 100 ms, and 10–15% of the
// gateway's CPU went to the collector. Each cycle marks the whole live
// heap, so fewer cycles is less work.
//
// After each cycle, the floor's callback sets the GC percent so that the
// heap's goal for the next cycle is the floor: the collector starts that
// cycle as the heap nears the floor, not as it nears twice the live heap.
// When GOGC's percent (100 by default) sets a goal above the floor
// already, as once the live heap is about half of it, that percent
// stands. So the floor costs about its own size in memory beyond what
// GOGC alone would use, and nothing at a large live heap. The percent is
// set after each cycle, and at most 1,000: a live heap that grows sharply
// within one cycle gets the goal of the percent set after the cycle
// before (see maxPercent). Go's memory limit (GOMEMLIMIT) still applies:
// the collector runs as the limit nears, whatever the percent.
package heapfloor

import (
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// The metrics tune reads, by their index in sampled.
const (
	// The pacer's inputs, as of the last cycle: the heap marked live, and
	// the goroutines' stacks and the globals it scanned. GOGC's percent
	// applies to all three: the heap's goal is live + (live + stacks +
	// globals)×percent/100.
	liveHeap = iota
	stacks
	globals
	// The memory the runtime holds (what its memory limit counts: all it
	// has mapped less what it has released), and the heap's share of it.
	held
	released
	heapObjects
	heapUnused
	heapFree
)

var sampled = [...]string{
	liveHeap:    "/gc/heap/live:bytes",
	stacks:      "/gc/scan/stack:bytes",
	globals:     "/gc/scan/globals:bytes",
	held:        "/memory/classes/total:bytes",
	released:    "/memory/classes/heap/released:bytes",
	heapObjects: "/memory/classes/heap/objects:bytes",
	heapUnused:  "/memory/classes/heap/unused:bytes",
	heapFree:    "/memory/classes/heap/free:bytes",
}

// heapMinimum is the runtime's smallest heap goal at GOGC=100, 4 MiB.
// It scales with the percent: at 2,500 it is 100 MiB. The percent set
// stays at or below floor/heapMinimum×100, so that this minimum does not
// push the goal past the floor while the live heap is tiny (at start).
const heapMinimum = 4 << 20

// maxPercent bounds the percent set. The runtime sets each cycle's goal
// from the live heap it has just marked and the percent in force, and the
// floor's callback sets the new percent only after that cycle's sweep. A
// live heap that grew sharply within one cycle, from a few MB, thus gets
// a goal of up to 11 times itself for one cycle. With the default floor
// of 100 MiB, 1,000 is reached below a live heap of about 9 MB.
const maxPercent = 1000

// floor is a running floor; see [Start].
type floor struct {
	floor   uint64
	base    int // the GC percent in force at start: GOGC's
	sample  []metrics.Sample
	mu      sync.Mutex // the cleanup's state against stop
	stopped bool
	percent int // the percent last set
	// limit is the memory limit in force at start (GOMEMLIMIT's, or
	// math.MaxInt64 for none); set is the one the floor set last.
	limit, set int64
}

// proc is the process's floor, shared by the callers of Start: the GC
// percent is the process's. users counts the callers that have not
// stopped.
var proc struct {
	sync.Mutex
	f     *floor
	users int
}

// Start makes floor bytes the heap's goal while the live heap is small,
// as the package says, until every caller has called the stop it
// returns. A floor already running in the process is shared, whatever
// floor this call asks for: it is the first caller's (several servers in
// one test process). Start changes nothing when floor is 0 or the
// collector is off (GOGC=off). When a memory limit is in force, the floor
// is at most half of it, so that the collector does not run against the
// limit at every cycle.
func Start(floor uint64) (stop func()) {
	proc.Lock()
	defer proc.Unlock()
	if proc.f == nil {
		if proc.f = start(floor); proc.f == nil {
			return func() {}
		}
	}
	proc.users++
	var once sync.Once
	return func() {
		once.Do(func() {
			proc.Lock()
			defer proc.Unlock()
			if proc.users--; proc.users == 0 {
				proc.f.stop()
				proc.f = nil
			}
		})
	}
}

// start starts a floor of n bytes, or returns nil; see [Start].
func start(n uint64) *floor {
	limit := debug.SetMemoryLimit(-1)
	if limit < math.MaxInt64 && limit > 0 {
		n = min(n, uint64(limit)/2)
	}
	if n == 0 {
		return nil
	}
	base, on := gogc()
	if !on {
		return nil
	}
	f := &floor{floor: n, base: base, percent: base, limit: limit, set: limit}
	for _, name := range sampled {
		f.sample = append(f.sample, metrics.Sample{Name: name})
	}
	if f.tune() { // the heap is nearly empty at start: no need to wait for a cycle
		f.arm()
	}
	return f
}

// gogc returns the GC percent in force (GOGC's, or SetGCPercent's), and
// whether the collector is on, read without changing it.
func gogc() (percent int, on bool) {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0, false // unknown to this Go: leave the pace alone
	}
	v := s[0].Value.Uint64()
	if v > math.MaxInt32 { // GOGC=off
		return 0, false
	}
	return int(v), true
}

// sentinel is an object that becomes unreachable at once, so that its
// cleanup runs after the next cycle. It is larger than the tiny
// allocator's 16 bytes, which may keep an object alive with its
// neighbours.
type sentinel [32]byte

// arm runs tune after the next cycle, and arms again, until stop.
func (f *floor) arm() {
	runtime.AddCleanup(new(sentinel), func(f *floor) {
		if f.tune() {
			f.arm()
		}
	}, f)
}

// tune sets the percent from the live heap the last cycle marked. It
// reports false once the floor is stopped.
func (f *floor) tune() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		return false
	}
	metrics.Read(f.sample)
	var v [len(sampled)]uint64
	for i, s := range f.sample {
		if s.Value.Kind() != metrics.KindUint64 {
			return true // not in this Go: leave the percent as it is
		}
		v[i] = s.Value.Uint64()
	}
	live, roots := v[liveHeap], v[stacks]+v[globals]
	p := percentFor(live, roots, f.floor, f.base)
	if p != f.percent {
		debug.SetGCPercent(p)
		f.percent = p
	}
	outside := sub(sub(v[held], v[released]), v[heapObjects]+v[heapUnused]+v[heapFree])
	if l := limitFor(live, roots, outside, f.floor, f.base, f.limit); l != f.set {
		debug.SetMemoryLimit(l)
		f.set = l
	}
	return true
}

// sub returns a-b, or 0 when b is larger: the runtime's metrics are read
// one by one, not as one snapshot.
func sub(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}

// limitFor is the memory limit the floor sets, given live bytes of heap,
// roots bytes of stacks and globals, and other bytes the runtime holds
// outside the heap: half again the heap's goal the floor means (floor
// bytes, or GOGC's goal at base percent when that is larger), plus other,
// and at most limit, the one in force at start. In a steady state the
// heap stays under the goal, and the limit never decides a cycle; it
// bounds a heap that the percent set for a smaller live heap would let
// grow far past it.
func limitFor(live, roots, other, floor uint64, base int, limit int64) int64 {
	goal := max(floor, live+(live+roots)*uint64(base)/100)
	l := other + goal + goal/2
	if l > math.MaxInt64 || int64(l) > limit {
		return limit
	}
	return int64(l)
}

// percentFor is the GC percent that makes floor bytes the heap's goal,
// given live bytes of heap and roots bytes of stacks and globals, and at
// least base: the heap's goal is live + (live + roots)×percent/100.
func percentFor(live, roots, floor uint64, base int) int {
	if live >= floor {
		return base
	}
	scanned := live + roots
	if scanned == 0 {
		return base
	}
	// The smallest percent whose goal reaches the floor.
	p := (floor - live) * 100 / scanned
	if (floor-live)*100%scanned != 0 {
		p++
	}
	return max(base, int(min(p, floor*100/heapMinimum, maxPercent)))
}

// Percent returns the GC percent the floor set last.
func (f *floor) Percent() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.percent
}

// stop ends the floor and puts back the percent and the memory limit in
// force at its start. The cleanup armed last still runs after the next
// cycle, and does nothing.
func (f *floor) stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		return
	}
	f.stopped = true
	debug.SetGCPercent(f.base)
	f.percent = f.base
	debug.SetMemoryLimit(f.limit)
	f.set = f.limit
}
