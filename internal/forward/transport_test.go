package forward_test

import (
	"context"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/forward/transport"
)

// fakeTransport is a destination in memory: it answers each send as
// answer says (given the message and how many sends of its delivery
// there were, from 1), and keeps every message it was handed.
type fakeTransport struct {
	answer func(m transport.Message, n int) transport.Sent

	mu    sync.Mutex
	sends []fakeSend
}

// fakeSend is one message a fakeTransport was handed, and when.
type fakeSend struct {
	m  transport.Message
	at time.Time
}

func (f *fakeTransport) Send(_ context.Context, m transport.Message) transport.Sent {
	f.mu.Lock()
	n := 1
	for _, s := range f.sends {
		if s.m.DeliveryID == m.DeliveryID {
			n++
		}
	}
	f.sends = append(f.sends, fakeSend{m: m, at: time.Now()})
	f.mu.Unlock()
	return f.answer(m, n)
}

// of returns the messages of the delivery id, in the order they were sent.
func (f *fakeTransport) of(id string) []fakeSend {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []fakeSend
	for _, s := range f.sends {
		if s.m.DeliveryID == id {
			out = append(out, s)
		}
	}
	return out
}

// TestTransportSeam: the River worker and the fast path send through the
// worker's Transport, hand it the same Message, and honour its verdicts: a
// delivered forward is completed at its first attempt; a retry with
// Retry-After (a second, far above the test's backoff) is attempted again
// no earlier than it asked, then delivered; a failed one is failed without
// a retry. In the fast env the first attempts are the fast path's (a
// Limit: its lease) and the retry is River's, with the same message.
func TestTransportSeam(t *testing.T) {
	t.Parallel()
	const retryAfter = time.Second
	for _, fast := range []bool{false, true} {
		name := "River worker"
		if fast {
			name = "fast path"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ft := &fakeTransport{answer: func(m transport.Message, n int) transport.Sent {
				switch {
				case m.DeliveryID == "later" && n == 1:
					return transport.Sent{Verdict: transport.VerdictRetry, Status: http.StatusServiceUnavailable, RetryAfter: retryAfter,
						Err: errors.New("fake: busy"), Took: time.Millisecond}
				case m.DeliveryID == "bad":
					return transport.Sent{Verdict: transport.VerdictFailed, Status: http.StatusUnprocessableEntity, Err: errors.New("fake: refused"), Took: time.Millisecond}
				default:
					return transport.Sent{Verdict: transport.VerdictDelivered, Status: http.StatusOK, At: time.Now().UTC(), Took: time.Millisecond}
				}
			}}
			yaml := "      - name: orders\n        url: http://127.0.0.1:1/never-sent\n        max_attempts: 5\n"
			opts := envOpts{Work: true, Transport: ft}
			var e *env
			if fast {
				e = newFastEnv(t, yaml, opts, fastOptions{})
			} else {
				e = newEnv(t, yaml, opts)
			}
			body := []byte(`{"order":7}`)
			ds := map[string]delivery{}
			for _, id := range []string{"ok", "later", "bad"} {
				ds[id] = e.deliver(id, body, "application/json")
			}
			want := map[string]struct {
				state          string
				attempt, sends int
			}{"ok": {"completed", 1, 1}, "later": {"completed", 2, 2}, "bad": {"cancelled", 1, 1}}
			for _, j := range e.waitJobs(3) {
				w := want[j.DeliveryID]
				if got := len(ft.of(j.DeliveryID)); j.State != w.state || j.Attempt != w.attempt || got != w.sends {
					t.Errorf("%s: job %s at attempt %d after %d sends, want %s at attempt %d after %d", j.DeliveryID, j.State, j.Attempt, got, w.state, w.attempt, w.sends)
				}
				if j.DeliveryID == "bad" && (len(j.Errors) != 1 || !strings.Contains(j.Errors[0], "fake: refused")) {
					t.Errorf("bad: errors %q, want the transport's one", j.Errors)
				}
			}
			for id, d := range ds {
				for i, s := range ft.of(id) {
					m := s.m
					if m.Sender != "acme" || m.Target == nil || m.Target.Name != "orders" || m.EventID.String() != d.eventID || m.DeliveryID != id ||
						string(m.Body) != string(body) || http.Header(m.Headers).Get("Content-Type") != "application/json" {
						t.Errorf("%s: send %d handed %+v, want the event of acme to orders", id, i+1, m)
					}
					// The fast path attempts first, within its lease; River's
					// worker is bound by the target's timeout alone.
					if byFastPath := fast && i == 0; (m.Limit > 0) != byFastPath {
						t.Errorf("%s: send %d has Limit %v, want one only on the fast path's first attempt (fast env: %v)", id, i+1, m.Limit, fast)
					}
				}
			}
			later := ft.of("later")
			if len(later) == 2 {
				first, second := later[0].m, later[1].m
				first.Limit = 0
				if !reflect.DeepEqual(first, second) {
					t.Errorf("the retry's message differs from the first attempt's:\n first: %+v\nsecond: %+v", first, second)
				}
				// 1ms: the job's scheduled_at is stored in microseconds.
				if d := later[1].at.Sub(later[0].at); d < retryAfter-time.Millisecond {
					t.Errorf("the retry after Retry-After %v was sent %v after the first attempt", retryAfter, d)
				}
			}
			for outcome, n := range map[string]float64{"delivered": 2, "retry": 1, "failed": 1} {
				if got := e.counter("hookgate_forward_attempts_total", map[string]string{"outcome": outcome}); got != n {
					t.Errorf("hookgate_forward_attempts_total{outcome=%s} = %v, want %v", outcome, got, n)
				}
			}
			if fast {
				for result, n := range map[string]float64{"delivered": 1, "retry": 1, "failed": 1} {
					if got := e.counter("hookgate_forward_fast_path_total", map[string]string{"result": result}); got != n {
						t.Errorf("hookgate_forward_fast_path_total{result=%s} = %v, want %v", result, got, n)
					}
				}
			}
		})
	}
}
