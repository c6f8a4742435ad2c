package forward

import (
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// queueTestConfig has the targets a, b and c of sender acme (timeout 10 s).
const queueTestConfig = `senders:
  - name: acme
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    forward:
      - { name: a, url: "http://127.0.0.1:1/a", timeout: 10s }
      - { name: b, url: "http://127.0.0.1:1/b", timeout: 10s }
      - { name: c, url: "http://127.0.0.1:1/c", timeout: 10s }
`

// newQueueTestDispatcher returns a dispatcher of workers workers, with
// neither scheduler nor recorder running, for the targets of
// queueTestConfig, and the sender.
func newQueueTestDispatcher(t *testing.T, workers int) (*Dispatcher, *Fast) {
	t.Helper()
	cfg := testkit.ParseConfig(t, queueTestConfig)
	return newDispatcherOn(t, workers, cfg), &Fast{Sender: &cfg.Senders[0]}
}

// newDispatcherOn returns a dispatcher of workers workers, with neither
// scheduler nor recorder running, whose worker reads its configuration
// from senders.
func newDispatcherOn(t *testing.T, workers int, senders config.Source) *Dispatcher {
	t.Helper()
	m := NewMetrics(prometheus.NewRegistry())
	gate, err := NewGate(GateConfig{Capacity: 100, Breakers: DefaultBreakerConfig(), Metrics: m, Log: noLog})
	if err != nil {
		t.Fatal(err)
	}
	wc := DefaultWorkerConfig()
	wc.Senders, wc.DB, wc.Jobs, wc.Client, wc.Gate, wc.Metrics, wc.Log = senders, noPool, noJobs, http.DefaultClient, gate, m, noLog
	w, err := NewWorker(wc)
	if err != nil {
		t.Fatal(err)
	}
	dc := DefaultDispatcherConfig()
	dc.Workers, dc.Worker, dc.Log = workers, w, noLog
	return newDispatcher(dc)
}

// dispatch queues n forwards of one new event each to target.
func dispatch(t *testing.T, d *Dispatcher, proto *Fast, target string, n int) {
	t.Helper()
	for range n {
		f := *proto
		f.EventID, f.Targets = uuid.New(), []string{target}
		f.Lease = d.Lease(f.Sender, f.Targets, 0)
		if f.Lease.For(0) <= 0 {
			t.Fatalf("no lease for a forward to %s", target)
		}
		d.Dispatch(&f)
	}
}

// The dispatcher serves the targets in turn, not in the order their
// forwards arrived: 20 forwards to a, then 2 to b and 2 to c, are
// attempted a, b, c, a, b, c, a, a, …
func TestDispatcherServesTargetsInTurn(t *testing.T) {
	t.Parallel()
	d, proto := newQueueTestDispatcher(t, 100)
	dispatch(t, d, proto, "a", 20)
	dispatch(t, d, proto, "b", 2)
	dispatch(t, d, proto, "c", 2)
	var order []string
	for range 8 {
		j, _, ok, _, _ := d.pick(time.Now())
		if !ok {
			t.Fatalf("after %v: nothing to pick, want more", order)
		}
		order = append(order, j.target.Name)
	}
	want := []string{"a", "b", "c", "a", "b", "c", "a", "a"}
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("attempted in the order %v, want %v", order, want)
		}
	}
}

// A target holds at most its fair share of the dispatcher's workers: with
// 8 workers and three targets with forwards queued, a takes at most
// 8/(3+1) = 2 while its attempts are under way, and b and c still get
// theirs.
func TestDispatcherSharesItsWorkers(t *testing.T) {
	t.Parallel()
	d, proto := newQueueTestDispatcher(t, 8)
	dispatch(t, d, proto, "a", 20)
	dispatch(t, d, proto, "b", 1)
	dispatch(t, d, proto, "c", 1)
	got := map[string]int{}
	for {
		j, _, ok, _, _ := d.pick(time.Now())
		if !ok {
			break
		}
		got[j.target.Name]++ // the attempts never end: their slots stay held
	}
	if got["a"] > 2 || got["b"] != 1 || got["c"] != 1 {
		t.Errorf("attempts started: %v; want at most 2 of a (its share) and b's and c's", got)
	}
	if d.queued != 20-got["a"] {
		t.Errorf("%d forwards queued, want a's other %d", d.queued, 20-got["a"])
	}
}

// A target's queue holds at most a quarter of the dispatcher's queue: past
// it, its forwards get no lease (the relay takes them) while another
// target's still do.
func TestDispatcherBoundsEachTargetsQueue(t *testing.T) {
	t.Parallel()
	d, proto := newQueueTestDispatcher(t, 1)
	dispatch(t, d, proto, "a", DefaultDispatchQueue/4)
	if l := d.Lease(proto.Sender, []string{"a", "b"}, 0); l.For(0) != 0 || l.For(1) <= 0 {
		t.Errorf("leases with a's queue full: %v, want none for a and one for b", l.Durations)
	}
}

// A forward waits in its target's queue only while its lease can still
// cover its attempt and recording: one whose lease has run that low is
// handed to the relay instead of attempted.
func TestDispatcherHandsOverWhatWaitedTooLong(t *testing.T) {
	t.Parallel()
	d, proto := newQueueTestDispatcher(t, 4)
	dispatch(t, d, proto, "a", 1)
	// The lease is the timeout (10 s) + 4 s; 2 s are kept for the
	// recording: after more than 2 s in the queue it cannot be attempted.
	if _, _, ok, _, _ := d.pick(time.Now().Add(3 * time.Second)); ok {
		t.Fatal("a forward that waited 3 s of its 2 s was attempted")
	}
	if d.queued != 0 || len(d.records) != 1 || !(<-d.records).Release {
		t.Errorf("after the wait: %d queued, %d records; want none queued and its row released", d.queued, len(d.records))
	}
}

// liveConfig is a config.Source a test swaps, as a reload does.
type liveConfig struct{ p atomic.Pointer[config.Config] }

func (l *liveConfig) Current() *config.Config { return l.p.Load() }

// A forward queued in the fast path is attempted with its target as the
// configuration in force has it when its attempt starts: a target a reload
// changed sends to its new URL, and the forwards of a target a reload
// removed are not attempted but handed to the relay (River holds them).
func TestDispatcherFollowsReloadedTargets(t *testing.T) {
	t.Parallel()
	from := testkit.ParseConfig(t, queueTestConfig)
	to := testkit.ParseConfig(t, strings.Replace(strings.Replace(queueTestConfig, "127.0.0.1:1/a", "127.0.0.1:2/a2", 1),
		`      - { name: b, url: "http://127.0.0.1:1/b", timeout: 10s }`+"\n", "", 1))
	var live liveConfig
	live.p.Store(from)
	d := newDispatcherOn(t, 100, &live)
	proto := &Fast{Sender: &from.Senders[0]}
	dispatch(t, d, proto, "a", 2)
	dispatch(t, d, proto, "b", 3)
	live.p.Store(to)
	var picked []string
	for {
		j, _, ok, _, _ := d.pick(time.Now())
		if !ok {
			break
		}
		picked = append(picked, j.target.Name+" "+j.target.URL)
	}
	if want := []string{"a http://127.0.0.1:2/a2", "a http://127.0.0.1:2/a2"}; !slices.Equal(picked, want) {
		t.Errorf("attempted %v, want %v", picked, want)
	}
	released := 0
	for len(d.records) > 0 {
		if o := <-d.records; o.Release && o.Target == "b" {
			released++
		}
	}
	if released != 3 || d.queued != 0 {
		t.Errorf("b's forwards: %d released to the relay, %d still queued; want 3 and none", released, d.queued)
	}
}
