package forward

import (
	"sync"
	"time"
)

// Fairness across targets. A process runs at most capacity forwards at
// once. Each target may hold a fair share: capacity / (active + 1), where
// active counts the targets with recent work. One share is always left for
// a target with none yet. A target that hangs keeps its slots until its
// attempts time out. So a slow target holding floorHeld forwards may not
// take the last headroom slots either. No group of hung targets can then
// take the slots the others need. A target's max_in_flight may cap it
// below its share.
const (
	activeFor = 2 * time.Second
	floorHeld = 2
	// quickLatency is how quickly a target's attempts must end for it to
	// use the headroom. A target that starts to hang loses it this soon.
	quickLatency = 500 * time.Millisecond
	// recountEvery bounds how often the active targets are counted.
	recountEvery = 50 * time.Millisecond
)

// fair shares a capacity among targets. The gate shares the process's
// forwards this way, and the fast path shares its workers. Its fields, and
// each share's, are under mu.
type fair struct {
	capacity, headroom int

	mu      sync.Mutex
	total   int
	active  int
	counted time.Time
	all     []*share
}

// share is how many slots one target holds, and when it last asked.
type share struct {
	held int
	seen time.Time
}

func newFair(capacity int) fair {
	capacity = max(capacity, 1)
	return fair{capacity: capacity, headroom: capacity / 4}
}

// add makes s one of the targets shared among.
func (f *fair) add(s *share) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.all = append(f.all, s)
}

// share returns a target's fair share now. Under f.mu.
func (f *fair) share(now time.Time) int {
	if now.Sub(f.counted) >= recountEvery || now.Before(f.counted) {
		f.active = 0
		for _, gd := range f.all {
			if gd.held > 0 || now.Sub(gd.seen) < activeFor {
				f.active++
			}
		}
		f.counted = now
	}
	return max(f.capacity/(max(f.active, 1)+1), 1)
}

// acquire takes a slot for the target whose share gd is. It returns false
// when the target has its share or the capacity is taken. Only a quick
// target may use the headroom, since it gives its slots back soon.
func (f *fair) acquire(gd *share, now time.Time, quick bool) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if gd.seen.IsZero() || now.Sub(gd.seen) >= activeFor {
		f.counted = time.Time{} // a target becomes active: count again
	}
	gd.seen = now
	switch {
	case f.total >= f.capacity,
		gd.held >= f.share(now),
		gd.held >= floorHeld && !quick && f.total >= f.capacity-f.headroom:
		return false
	}
	gd.held++
	f.total++
	return true
}

// release gives back a slot taken by acquire.
func (f *fair) release(gd *share) {
	f.mu.Lock()
	defer f.mu.Unlock()
	gd.held--
	f.total--
}
