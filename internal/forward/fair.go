package forward

import (
	"sync"
	"time"
)

// Fairness across targets. A process runs at most capacity forwards at once
// (--forward-workers). Each target may hold at most a fair share of them,
// capacity / (active + 1), where active is the number of targets that have
// forwards under way or asked for one within activeFor: the share shrinks as
// more targets have work, and one share is always left for a target that
// has none yet. Shares only limit what a target may start; one that hangs
// keeps what it holds until its attempts time out, so a target holding
// floorHeld forwards or more may not take the last headroom slots of the
// capacity either: those stay for targets that hold fewer. Together, no
// target and no group of targets can take the slots the others need, however
// many of them hang, and a target alone may use half the capacity (as the
// former default max_in_flight did). A target's max_in_flight, when set,
// caps it below its share.
const (
	activeFor = 2 * time.Second
	floorHeld = 2
	// quickLatency is how quickly a target's attempts must end, on
	// average and those under way so far, for it to use the headroom
	// (guard.quick): a burst to a healthy target is not held to two
	// forwards at a time while hung targets hold the rest, and a target
	// that starts to hang loses the headroom within this long.
	quickLatency = 500 * time.Millisecond
	// recountEvery bounds how often the active targets are counted.
	recountEvery = 50 * time.Millisecond
)

// fair shares a process's capacity among targets. Its fields, and each
// share's, are under mu. The gate shares the process's forwards (River's
// workers and the fast path together); the fast path's dispatcher shares
// its own workers the same way.
type fair struct {
	capacity, headroom int

	mu      sync.Mutex
	total   int
	active  int
	counted time.Time
	all     []*share
}

// share is one target's use of a fair capacity: how many of its slots it
// holds, and when it last asked for one.
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

// acquire takes one of the capacity's slots for a forward of the target
// whose share gd is, or returns false when the target has its share (or the
// capacity is taken). quick says that the target's attempts end quickly
// (guard.quick): such a target may use the headroom too, since it gives
// its slots back within moments; one that hangs or is slow may not.
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
