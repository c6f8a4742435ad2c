package forward

import (
	"testing"

	"github.com/google/uuid"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// The fast path holds at most maxBytes of bodies: an ingest whose body
// would pass the bound gets no lease (the relay takes its forwards), and a
// forward dispatched past it is handed over; attempted forwards give their
// bytes back.
func TestFastPathBodyBytesAreBounded(t *testing.T) {
	t.Parallel()
	cfg := testkit.ParseConfig(t, `senders:
  - name: acme
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    forward:
      - { name: a, url: "http://127.0.0.1:1/a" }
      - { name: b, url: "http://127.0.0.1:1/b" }
`)
	dc := DefaultDispatcherConfig()
	dc.MaxBytes, dc.Queue = 100, 10
	d := newDispatcher(dc) // neither scheduler nor recorder: the queues alone
	s := &cfg.Senders[0]
	leased := func(l Lease) int {
		n := 0
		for _, d := range l.Durations {
			if d > 0 {
				n++
			}
		}
		return n
	}
	if l := d.Lease(s, []string{"a", "b"}, 50); leased(l) != 2 {
		t.Fatalf("2 forwards of 50 bytes within a bound of 100: %v leased, want both", l.Durations)
	}
	if l := d.Lease(s, []string{"a", "b"}, 51); leased(l) != 1 {
		t.Fatalf("2 forwards of 51 bytes under a bound of 100: %v leased, want one", l.Durations)
	}
	f := &Fast{Sender: s, EventID: uuid.New(), Body: make([]byte, 60), Targets: []string{"a", "b"}, Lease: d.Lease(s, []string{"a", "b"}, 0)}
	d.Dispatch(f)
	if d.queued != 1 || d.bytes.Load() != 60 || len(d.records) != 1 || !(<-d.records).Release {
		t.Fatalf("dispatching 2 × 60 bytes under 100: %d queued, %d bytes held, want 1 queued (60 bytes) and 1 released to the relay", d.queued, d.bytes.Load())
	}
	if l := d.Lease(s, []string{"a"}, 50); leased(l) != 0 {
		t.Fatal("50 more bytes with 60 held under 100: leased")
	}
}
