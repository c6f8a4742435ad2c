package dedup

import (
	"fmt"
	"testing"
	"time"
)

// TestBatchPanicFailsBatchAndKeepsSender: a state change that panics in the
// middle of a batch fails the batch's deliveries with an error (none is left
// waiting), and the sender's later deliveries, in batches or alone, are
// answered as usual.
func TestBatchPanicFailsBatchAndKeepsSender(t *testing.T) {
	t.Parallel()
	s, ctx, _ := batchStore(t)
	s.maxInFlight = 1 // one slot: a slot lost to the panic would block the sender
	boom := func(*Batch) { panic("boom") }
	a, bad, c := delivery(t, "p", "a", "x"), delivery(t, "p", "bad", "x"), delivery(t, "p", "c", "x")
	cs := calls(ctx, []Change{mark(a), boom, mark(c)}, a, bad, c)

	panicked := make(chan any, 1)
	go func() {
		defer func() { panicked <- recover() }()
		s.batcher("p").mu.Lock()
		s.batcher("p").inFlight++ // the slot this batch runs in, as run takes it
		s.batcher("p").mu.Unlock()
		s.batcher("p").work(cs)
	}()
	if v := <-panicked; v != nil {
		t.Fatalf("the batch's panic reached the caller: %v", v)
	}
	for _, c := range cs {
		select {
		case <-c.done:
		default:
			t.Fatalf("delivery %s is still waiting after its batch panicked", c.d.DeliveryID)
		}
		if c.err == nil {
			t.Errorf("delivery %s: %+v, no error; want the batch's panic as an error", c.d.DeliveryID, c.res)
		}
	}

	// The sender keeps working: several deliveries at once (batches) and
	// one alone, each answered in time.
	done := make(chan error, 4)
	for i := range 4 {
		go func() {
			d := delivery(t, "p", fmt.Sprintf("after-%d", i), "x")
			res, err := s.Run(ctx, d, mark(d))
			if err == nil && (res.Replayed || res.EventID != d.EventID) {
				err = fmt.Errorf("result %+v; want new", res)
			}
			done <- err
		}()
	}
	deadline := time.After(30 * time.Second)
	for range 4 {
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("a delivery after the panic: %v", err)
			}
		case <-deadline:
			t.Fatal("the sender's deliveries after the panic were not answered in 30s: its ingestion is blocked")
		}
	}
}
