package forward

import (
	"testing"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookgate/hookgate/internal/store"
)

// The fast path holds at most maxBytes of bodies: an ingest whose body
// would pass the bound gets no lease (the relay takes its forwards), and a
// forward dispatched past it is handed over; attempted forwards give their
// bytes back.
func TestFastPathBodyBytesAreBounded(t *testing.T) {
	t.Parallel()
	cfg := parseConfig(t, `senders:
  - name: acme
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    forward:
      - { name: a, url: "http://127.0.0.1:1/a" }
      - { name: b, url: "http://127.0.0.1:1/b" }
`)
	d := &Dispatcher{
		lease: DefaultLease(cfg), maxBytes: 100,
		queue: make(chan fastJob, 10), records: make(chan store.FirstAttempt, 10),
		count: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x"}, []string{"result"}),
	}
	if l := d.Lease(2, 50); l.Duration <= 0 {
		t.Fatal("2 forwards of 50 bytes within a bound of 100: no lease")
	}
	if l := d.Lease(2, 51); l.Duration != 0 {
		t.Fatal("2 forwards of 51 bytes past a bound of 100: leased")
	}
	f := &Fast{Sender: &cfg.Senders[0], EventID: uuid.New(), Body: make([]byte, 60), Targets: []string{"a", "b"}, Lease: d.Lease(1, 60)}
	d.Dispatch(f)
	if len(d.queue) != 1 || d.bytes.Load() != 60 || len(d.records) != 1 || !(<-d.records).Release {
		t.Fatalf("dispatching 2 × 60 bytes under 100: %d queued, %d bytes held, want 1 queued (60 bytes) and 1 released to the relay", len(d.queue), d.bytes.Load())
	}
	if l := d.Lease(1, 50); l.Duration != 0 {
		t.Fatal("50 more bytes with 60 held under 100: leased")
	}
}
