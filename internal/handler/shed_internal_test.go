package handler

import (
	"context"
	"errors"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// TestBodyBudgetOldestGetsRoom: bodies half read that fill a client's
// share, or the whole budget, cannot wait for each other for ever: the
// oldest hold (of the client, of the budget) is given room past the bound
// at once, a younger one waits for room and gets it when the oldest ends,
// or, waiting too long, is refused for the bound it lacked. Once every
// hold is released, nothing is held and no client is remembered.
func TestBodyBudgetOldestGetsRoom(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, c := netip.MustParsePrefix("192.0.2.1/32"), netip.MustParsePrefix("192.0.2.2/32")
	wantHeld := func(b *bodyBudget, all int64, clients int) {
		t.Helper()
		if got := b.inFlight.Load(); got != all {
			t.Errorf("held %d bytes, want %d", got, all)
		}
		if got := b.clientCount(); got != clients {
			t.Errorf("%d clients remembered, want %d", got, clients)
		}
	}
	grow := func(h *bodyHold, to int64) {
		t.Helper()
		if err := h.grow(to); err != nil {
			t.Fatalf("grow to %d: %v", to, err)
		}
	}

	// One client's share (256 KiB of 1 MiB) filled by two half-read bodies.
	b := newBodyBudget(1<<20, 50*time.Millisecond)
	h1, h2 := b.hold(ctx, a, nil), b.hold(ctx, a, nil)
	grow(h1, 128<<10)
	grow(h2, 128<<10)
	if err := h2.grow(200 << 10); !errors.Is(err, errBodyClientShare) {
		t.Errorf("the younger body past its client's share: %v, want errBodyClientShare", err)
	}
	grow(h1, 300<<10) // the oldest of its client: past the share, at once
	other := b.hold(ctx, c, nil)
	grow(other, 200<<10) // another client is not held up
	wantHeld(b, 628<<10, 2)
	done := make(chan error, 1)
	b.wait = time.Minute
	go func() { done <- h2.grow(200 << 10) }()
	h1.release() // h2 is now the oldest of its client
	if err := <-done; err != nil {
		t.Errorf("the younger body once the oldest ended: %v", err)
	}
	h2.release()
	other.release()
	wantHeld(b, 0, 0)

	// The budget (1 MiB, three quarters for large bodies) filled by bodies
	// of four clients.
	b = newBodyBudget(1<<20, 50*time.Millisecond)
	var hs []*bodyHold
	for i := range 4 {
		h := b.hold(ctx, netip.PrefixFrom(netip.AddrFrom4([4]byte{192, 0, 2, byte(10 + i)}), 32), nil)
		grow(h, 190<<10)
		hs = append(hs, h)
	}
	if err := hs[1].grow(250 << 10); !errors.Is(err, errBodyBudget) {
		t.Errorf("a younger body past the share of large bodies: %v, want errBodyBudget", err)
	}
	grow(hs[0], 400<<10) // the oldest of all: past the budget's share, at once
	small := b.hold(ctx, a, nil)
	grow(small, 64<<10) // the quarter for small bodies
	wantHeld(b, (400+3*190+64)<<10, 5)
	for _, h := range append(hs, small) {
		h.release()
		h.release() // twice is once
	}
	wantHeld(b, 0, 0)
	if b.all != 0 || b.large != 0 || b.oldest != nil || b.newest != nil || b.waitFirst != nil || b.waitLast != nil {
		t.Errorf("after every release: all %d, large %d, holds %p..%p, waiters %p..%p", b.all, b.large, b.oldest, b.newest, b.waitFirst, b.waitLast)
	}
}

// TestBodyPace: the read deadline a body is given for n bytes that
// arrived is start + grace + n / rate, plus the time it waited for room,
// never past the end, and never more than the idle timeout after now (the
// read it is set for): a body that came fast has no credit for a longer
// pause.
func TestBodyPace(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	end := start.Add(time.Minute)
	for _, tc := range []struct {
		n           int64
		waited      time.Duration
		rate        int64
		idle, since time.Duration // the idle timeout, and now - start
		want        time.Time
	}{
		{0, 0, 1024, 0, 0, start.Add(5 * time.Second)},
		{1, 0, 1024, 0, 0, start.Add(5*time.Second + time.Second/1024)},
		{1024, 0, 1024, 0, 0, start.Add(6 * time.Second)},
		{1536, 2 * time.Second, 1024, 0, 0, start.Add(8*time.Second + 500*time.Millisecond)},
		{54 << 10, 0, 1024, 0, 0, start.Add(59 * time.Second)},
		{55 << 10, 0, 1024, 0, 0, end},
		{1 << 40, 0, 1024, 0, 0, end},
		// The idle timeout: 64 KiB that came at once buy no pause past it.
		{0, 0, 1024, 5 * time.Second, 0, start.Add(5 * time.Second)},
		{65535, 0, 1024, 5 * time.Second, 100 * time.Millisecond, start.Add(5*time.Second + 100*time.Millisecond)},
		{65535, 0, 1024, 5 * time.Second, 57 * time.Second, end},
		{1024, 0, 1024, 10 * time.Second, time.Second, start.Add(6 * time.Second)},  // the rate's is earlier
		{65535, 0, 0, 5 * time.Second, 2 * time.Second, start.Add(7 * time.Second)}, // no minimum rate
		{65535, 0, 0, 0, 2 * time.Second, end},                                      // neither
	} {
		p := &bodyPace{rate: tc.rate, grace: 5 * time.Second, idle: tc.idle, start: start, end: end}
		if got := p.deadline(tc.n, tc.waited, start.Add(tc.since)); !got.Equal(tc.want) {
			t.Errorf("deadline after %d bytes at %d B/s, %s waited, idle %s, at %s: %s, want %s", tc.n, tc.rate, tc.waited, tc.idle, tc.since, got.Sub(start), tc.want.Sub(start))
		}
	}
}

// TestBodyBudgetNewcomerPreempts: when the budget is full, the first body
// of a client that holds nothing takes room from the client that holds
// the most: that client's newest body still being read is preempted (its
// next step, or its wait for room, ends in errBodyPreempted), and once it
// is released the room goes to the newcomer, before the other waiters. A
// client that holds something already, or a body whose client holds no
// more than it asks for, preempts nobody; nor is the budget's oldest, or a
// body read whole, ever preempted.
func TestBodyBudgetNewcomerPreempts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := httptest.NewRecorder() // a body being read (its deadline cannot be moved: ignored)
	client := func(i int) netip.Prefix {
		return netip.PrefixFrom(netip.AddrFrom4([4]byte{192, 0, 2, byte(i)}), 32)
	}
	grow := func(h *bodyHold, to int64) {
		t.Helper()
		if err := h.grow(to); err != nil {
			t.Fatalf("grow to %d: %v", to, err)
		}
	}
	// 1 MiB, each client's share 256 KiB: four clients fill it with four
	// small bodies each (64 KiB); client 1's are the oldest. Client 4
	// holds one more than the others would: its last body is read whole.
	b := newBodyBudget(1<<20, time.Minute)
	holds := map[int][]*bodyHold{}
	for i := 1; i <= 4; i++ {
		for range 4 {
			h := b.hold(ctx, client(i), w)
			grow(h, 64<<10)
			holds[i] = append(holds[i], h)
		}
	}
	held := func(i int) []*bodyHold { return holds[i] }
	b.wait = 100 * time.Millisecond
	// A client that holds something already preempts nobody.
	if err := b.hold(ctx, client(1), w).grow(4 << 10); !errors.Is(err, errBodyClientShare) && !errors.Is(err, errBodyBudget) {
		t.Errorf("a further body of a client at its share: %v, want errBodyClientShare or errBodyBudget", err)
	}
	for i := 1; i <= 4; i++ {
		for _, h := range held(i) {
			if h.preempted.Load() {
				t.Fatalf("a body of client %d was preempted for a client that held something", i)
			}
		}
	}
	// Client 4's newest body was read whole, and a body of client 3 waits
	// for room: the newcomer preempts a reading body of the client that
	// holds the most (each holds 256 KiB: any but the whole one and the
	// oldest of all).
	held(4)[3].read.Store(true)
	b.wait = time.Minute
	b.clientSize = 1 << 20 // (client 3's body waits for the budget, not its share)
	waiting := make(chan error, 1)
	go func() { waiting <- held(3)[3].grow(128 << 10) }()
	testkit.Poll(t, time.Minute, "client 3's body to wait for room", func() bool { b.mu.Lock(); defer b.mu.Unlock(); return held(3)[3].waiting() })
	newcomer := b.hold(ctx, client(9), w)
	granted := make(chan error, 1)
	go func() { granted <- newcomer.grow(4 << 10) }()
	var victim *bodyHold
	testkit.Poll(t, time.Minute, "the newcomer to preempt a body", func() bool {
		for i := 1; i <= 4; i++ {
			for _, h := range held(i) {
				if h.preempted.Load() {
					victim = h
					return true
				}
			}
		}
		return false
	})
	if victim == held(1)[0] || victim == held(4)[3] {
		t.Fatalf("preempted the budget's oldest or a body read whole")
	}
	if victim == held(3)[3] {
		if err := <-waiting; !errors.Is(err, errBodyPreempted) {
			t.Errorf("the waiting body, preempted: %v, want errBodyPreempted", err)
		}
	} else if err := victim.grow(victim.all + 4<<10); !errors.Is(err, errBodyPreempted) {
		t.Errorf("the next step of a preempted body: %v, want errBodyPreempted", err)
	}
	select {
	case err := <-granted:
		t.Fatalf("the newcomer got an answer (%v) before the preempted body was released", err)
	default:
	}
	victim.release()
	if err := <-granted; err != nil {
		t.Errorf("the newcomer once the preempted body was released: %v", err)
	}
	if victim != held(3)[3] {
		// The waiter of client 3 was not served before the newcomer.
		select {
		case err := <-waiting:
			t.Errorf("client 3's waiting body was answered (%v) while the budget had no room for it", err)
		default:
		}
		// Room for it once the other bodies end.
		for i := 1; i <= 2; i++ {
			for _, h := range held(i) {
				h.release()
			}
		}
		if err := <-waiting; err != nil {
			t.Errorf("client 3's waiting body once others ended: %v", err)
		}
	}
	// A newcomer whose client would hold as much as the others preempts
	// nobody: a budget of many clients holding one small body each.
	b2 := newBodyBudget(64<<10, 50*time.Millisecond)
	for i := range 16 {
		grow(b2.hold(ctx, client(100+i), w), 4<<10)
	}
	if err := b2.hold(ctx, client(200), w).grow(4 << 10); !errors.Is(err, errBodyBudget) {
		t.Errorf("a newcomer among clients that hold as much as it asks: %v, want errBodyBudget", err)
	}
	for h := b2.oldest; h != nil; h = h.next {
		if h.preempted.Load() {
			t.Errorf("a body of a client holding 4 KiB was preempted for a newcomer asking as much")
		}
	}
}
