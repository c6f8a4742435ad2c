package testkit

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// Hit is one request a Target received.
type Hit struct {
	At       time.Time // when it arrived
	AnswerAt time.Time // just before the answer was written (zero if it never was)
	Header   http.Header
	Body     []byte
	Status   int // the status answered; 0 when the request was abandoned
}

// Key returns the request's Idempotency-Key.
func (h Hit) Key() string { return h.Header.Get("Idempotency-Key") }

// Answer is what a Target does with a request.
type Answer struct {
	Status int
	Header http.Header
	// Block holds the request until the client gives up (its context ends)
	// or the test ends.
	Block bool
	// Delay waits that long before answering (or less, if the client gives
	// up or the test ends).
	Delay time.Duration
}

// Decide chooses the answer to r, the n-th request with its
// Idempotency-Key (from 1). It runs in the request's goroutine, and may
// wait (for AwaitInFlight, say) before it returns.
type Decide func(n int, r *http.Request) Answer

// Target is a fake forward target: an HTTP server on 127.0.0.1 that
// records every request and answers as its Decide says.
type Target struct {
	srv *httptest.Server
	// URL is the address forwards are sent to (the server's /hooks).
	URL         string
	decide      Decide
	release     chan struct{} // closed by Release: unblocks held requests
	releaseOnce sync.Once

	mu       sync.Mutex
	decideMu sync.RWMutex
	hits     []Hit
	byKey    map[string]int
	inFlight int
	maxIn    int
	changed  chan struct{} // closed and replaced when inFlight changes
}

// NewTarget starts a Target answering as decide says. It is closed when
// the test ends, after its held requests are released.
func NewTarget(t testing.TB, decide Decide) *Target {
	t.Helper()
	tg := &Target{decide: decide, release: make(chan struct{}), byKey: map[string]int{}, changed: make(chan struct{})}
	tg.srv = httptest.NewServer(http.HandlerFunc(tg.serve))
	tg.URL = tg.srv.URL + "/hooks"
	t.Cleanup(tg.srv.Close)
	t.Cleanup(tg.Release) // runs before Close
	return tg
}

// Release lets every held request (Block, Delay) go, and those to come
// too. The test's end does it; a test calls it earlier when something it
// stops first (a River client) waits for them.
func (tg *Target) Release() { tg.releaseOnce.Do(func() { close(tg.release) }) }

// Server returns the target's base URL (no path).
func (tg *Target) Server() string { return tg.srv.URL }

// SetDecide replaces how the target answers from the next request on.
func (tg *Target) SetDecide(d Decide) {
	tg.decideMu.Lock()
	defer tg.decideMu.Unlock()
	tg.decide = d
}

func (tg *Target) addInFlight(d int) {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	tg.inFlight += d
	tg.maxIn = max(tg.maxIn, tg.inFlight)
	close(tg.changed)
	tg.changed = make(chan struct{})
}

func (tg *Target) serve(w http.ResponseWriter, r *http.Request) {
	at := time.Now()
	body, _ := io.ReadAll(r.Body)
	tg.mu.Lock()
	key := r.Header.Get("Idempotency-Key")
	tg.byKey[key]++
	n := tg.byKey[key]
	i := len(tg.hits)
	tg.hits = append(tg.hits, Hit{At: at, Header: r.Header.Clone(), Body: body})
	tg.mu.Unlock()
	tg.addInFlight(1)
	defer tg.addInFlight(-1)

	tg.decideMu.RLock()
	decide := tg.decide
	tg.decideMu.RUnlock()
	a := decide(n, r)
	if a.Block {
		select {
		case <-r.Context().Done():
		case <-tg.release:
		}
		return
	}
	if a.Delay > 0 {
		timer := time.NewTimer(a.Delay)
		select {
		case <-timer.C:
		case <-r.Context().Done():
			timer.Stop()
			return
		case <-tg.release:
			timer.Stop()
			return
		}
	}
	for k, v := range a.Header {
		w.Header()[k] = v
	}
	tg.mu.Lock()
	tg.hits[i].Status = a.Status
	tg.hits[i].AnswerAt = time.Now()
	tg.mu.Unlock()
	w.WriteHeader(a.Status)
}

// Hits returns a copy of the requests received so far, in order.
func (tg *Target) Hits() []Hit {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	return append([]Hit(nil), tg.hits...)
}

// HitsFor returns the requests with Idempotency-Key key, in order.
func (tg *Target) HitsFor(key string) []Hit {
	var out []Hit
	for _, h := range tg.Hits() {
		if h.Key() == key {
			out = append(out, h)
		}
	}
	return out
}

// Delivered returns, by Idempotency-Key, how many requests were answered
// 2xx.
func (tg *Target) Delivered() map[string]int {
	out := map[string]int{}
	for _, h := range tg.Hits() {
		if h.Status >= 200 && h.Status < 300 {
			out[h.Key()]++
		}
	}
	return out
}

// InFlight returns how many requests are being answered now, and the most
// there were at once.
func (tg *Target) InFlight() (now, most int) {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	return tg.inFlight, tg.maxIn
}

// AwaitInFlight waits until at least n requests have been answered at
// once (now or at any time before), and returns true; false when ctx ends
// or the test ends first. It looks at the most there have been, not at
// how many there are now: a request that came and went while the caller
// was not yet waiting, or was not scheduled in time, still counts.
func (tg *Target) AwaitInFlight(ctx context.Context, n int) bool {
	for {
		tg.mu.Lock()
		most, changed := tg.maxIn, tg.changed
		tg.mu.Unlock()
		if most >= n {
			return true
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return false
		case <-tg.release:
			return false
		}
	}
}

// Always answers every request with status.
func Always(status int) Decide {
	return func(int, *http.Request) Answer { return Answer{Status: status} }
}

// FailFirst answers the first k requests of each Idempotency-Key with
// status and later ones with 200.
func FailFirst(k, status int) Decide {
	return func(n int, _ *http.Request) Answer {
		if n <= k {
			return Answer{Status: status}
		}
		return Answer{Status: http.StatusOK}
	}
}

// Sequence answers the target's i-th request (counted over all keys, from
// 1) with statuses[i-1]; the last status repeats.
func Sequence(statuses ...int) Decide {
	var (
		mu sync.Mutex
		i  int
	)
	return func(int, *http.Request) Answer {
		mu.Lock()
		defer mu.Unlock()
		i++
		return Answer{Status: statuses[min(i, len(statuses))-1]}
	}
}
