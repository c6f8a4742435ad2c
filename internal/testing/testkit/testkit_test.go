package testkit_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/hookgate/hookgate/internal/testing/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestSlowSkipsUnderShortOnly: Slow skips a test under -short (saying why)
// and lets it run otherwise.
func TestSlowSkipsUnderShortOnly(t *testing.T) {
	t.Parallel()
	ran := false
	t.Run("slow", func(t *testing.T) {
		testkit.Slow(t, "a test of Slow")
		ran = true
	})
	if ran == testing.Short() {
		t.Errorf("under -short=%v the slow test ran=%v", testing.Short(), ran)
	}
}

// post sends a request with Idempotency-Key key and returns the status.
func post(t *testing.T, url, key string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader("body"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// TestTargetRecordsAndAnswers: the target answers as its Decide says (per
// key for FailFirst, over all requests for Sequence) and records every
// request with its answer.
func TestTargetRecordsAndAnswers(t *testing.T) {
	t.Parallel()
	tg := testkit.NewTarget(t, testkit.FailFirst(1, http.StatusServiceUnavailable))
	got := []int{post(t, tg.URL, "a"), post(t, tg.URL, "a"), post(t, tg.URL, "b")}
	if want := []int{503, 200, 503}; got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("FailFirst(1, 503) answered %v; want %v", got, want)
	}
	if hits := tg.HitsFor("a"); len(hits) != 2 || hits[0].Status != 503 || hits[1].Status != 200 || string(hits[0].Body) != "body" {
		t.Errorf("hits of a: %+v", hits)
	}
	if d := tg.Delivered(); d["a"] != 1 || d["b"] != 0 {
		t.Errorf("Delivered() = %v; want a once, b never", d)
	}
	tg.SetDecide(testkit.Sequence(201, 202))
	if a, b, c := post(t, tg.URL, "x"), post(t, tg.URL, "y"), post(t, tg.URL, "z"); a != 201 || b != 202 || c != 202 {
		t.Errorf("Sequence(201, 202) answered %d %d %d; want 201 202 202", a, b, c)
	}
}

// TestTargetAwaitInFlight: a request held by its Decide counts as in
// flight until it is released.
func TestTargetAwaitInFlight(t *testing.T) {
	t.Parallel()
	tg := testkit.NewTarget(t, func(int, *http.Request) testkit.Answer {
		return testkit.Answer{Block: true}
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, tg.URL, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_ = resp.Body.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if !tg.AwaitInFlight(ctx, 1) {
		t.Fatal("the held request never counted as in flight")
	}
	tg.Release()
	<-done
	testkit.Poll(t, 30*time.Second, "the released request to leave", func() bool { n, _ := tg.InFlight(); return n == 0 })
	if _, most := tg.InFlight(); most != 1 {
		t.Errorf("most in flight %d; want 1", most)
	}
}

// TestTargetAwaitInFlightCountsWhatWasMissed: a request that was in flight
// beside a held one, and has already been answered when the held one starts
// to wait, still counts: the waiter is not left waiting for a partner that
// came and went while it was not looking (a busy machine schedules waiters
// late).
func TestTargetAwaitInFlightCountsWhatWasMissed(t *testing.T) {
	t.Parallel()
	proceed := make(chan struct{})
	var tg *testkit.Target
	tg = testkit.NewTarget(t, func(_ int, r *http.Request) testkit.Answer {
		if r.Header.Get("X-Role") != "held" {
			return testkit.Answer{Status: http.StatusOK}
		}
		<-proceed
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		if !tg.AwaitInFlight(ctx, 2) {
			return testkit.Answer{Status: http.StatusGatewayTimeout}
		}
		return testkit.Answer{Status: http.StatusOK}
	})
	status := make(chan int, 1)
	go func() {
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, tg.URL, nil)
		req.Header.Set("X-Role", "held")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			status <- 0
			return
		}
		_ = resp.Body.Close()
		status <- resp.StatusCode
	}()
	testkit.Poll(t, 30*time.Second, "the held request to be in flight", func() bool { n, _ := tg.InFlight(); return n == 1 })
	if got := post(t, tg.URL, "passer-by"); got != http.StatusOK {
		t.Fatalf("the second request answered %d; want 200", got)
	}
	close(proceed) // only now does the held request start to wait
	if got := <-status; got != http.StatusOK {
		t.Errorf("the held request answered %d; want 200 (two requests were in flight at once before it waited)", got)
	}
}

// TestPollReturnsOnceTrue: Poll returns as soon as its condition holds.
func TestPollReturnsOnceTrue(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	testkit.Poll(t, 30*time.Second, "three calls", func() bool { return n.Add(1) >= 3 })
	if n.Load() != 3 {
		t.Errorf("cond called %d times; want 3", n.Load())
	}
}

// TestLogBuffer: concurrent writers, read back whole.
func TestLogBuffer(t *testing.T) {
	t.Parallel()
	var b testkit.LogBuffer
	log := b.Logger()
	done := make(chan struct{})
	for range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			log.Info("hello")
		}()
	}
	for range 4 {
		<-done
	}
	if got := strings.Count(b.String(), "msg=hello"); got != 4 {
		t.Errorf("%d lines logged; want 4:\n%s", got, b.String())
	}
}
