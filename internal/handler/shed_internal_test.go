package handler

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"
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
	h1, h2 := b.hold(ctx, a), b.hold(ctx, a)
	grow(h1, 128<<10)
	grow(h2, 128<<10)
	if err := h2.grow(200 << 10); !errors.Is(err, errBodyClientShare) {
		t.Errorf("the younger body past its client's share: %v, want errBodyClientShare", err)
	}
	grow(h1, 300<<10) // the oldest of its client: past the share, at once
	other := b.hold(ctx, c)
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
		h := b.hold(ctx, netip.PrefixFrom(netip.AddrFrom4([4]byte{192, 0, 2, byte(10 + i)}), 32))
		grow(h, 190<<10)
		hs = append(hs, h)
	}
	if err := hs[1].grow(250 << 10); !errors.Is(err, errBodyBudget) {
		t.Errorf("a younger body past the share of large bodies: %v, want errBodyBudget", err)
	}
	grow(hs[0], 400<<10) // the oldest of all: past the budget's share, at once
	small := b.hold(ctx, a)
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
// never past the end.
func TestBodyPace(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	end := start.Add(time.Minute)
	for _, tc := range []struct {
		n      int64
		waited time.Duration
		want   time.Time
	}{
		{0, 0, start.Add(5 * time.Second)},
		{1, 0, start.Add(5*time.Second + time.Second/1024)},
		{1024, 0, start.Add(6 * time.Second)},
		{1536, 2 * time.Second, start.Add(8*time.Second + 500*time.Millisecond)},
		{54 << 10, 0, start.Add(59 * time.Second)},
		{55 << 10, 0, end},
		{1 << 40, 0, end},
	} {
		p := &bodyPace{rate: 1024, grace: 5 * time.Second, start: start, end: end}
		if got := p.deadline(tc.n, tc.waited); !got.Equal(tc.want) {
			t.Errorf("deadline after %d bytes, %s waited: %s, want %s", tc.n, tc.waited, got.Sub(start), tc.want.Sub(start))
		}
	}
}
