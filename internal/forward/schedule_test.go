package forward_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/forward"
	"github.com/hookgate/hookgate/internal/testing/queuetest"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// scheduleBackoff is a short backoff: a first retry after 50 to 100 ms.
var scheduleBackoff = forward.Backoff{Base: 100 * time.Millisecond, Max: time.Minute}

// TestRetryComesOnSchedule: a forward whose first attempt fails (500) is
// attempted again on its backoff's schedule (50 to 100 ms later here),
// without River's job scheduler, which runs in the elected leader only:
// another process holds River's leadership here, so the scheduler never
// runs, and the second attempt still reaches the target, not before its
// schedule. The first attempt is River's worker's (which leaves a retry due
// within the scheduler's interval available itself), or the fast path's
// (which recorded it retryable, and its second attempt came up to 5 s
// late: 3.9 s in the run). The time from the first answer to the
// second attempt is logged, not bounded: a bound of 2 s fails on a busy
// machine, and the held leadership proves what the bound stood for.
func TestRetryComesOnSchedule(t *testing.T) {
	t.Parallel()
	for _, fast := range []bool{false, true} {
		name := "River's worker"
		if fast {
			name = "the fast path"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tg := testkit.NewTarget(t, testkit.FailFirst(1, http.StatusInternalServerError))
			forwardYAML := fmt.Sprintf("      - name: flaky\n        url: %s\n        timeout: 5s\n        max_attempts: 5\n", tg.URL)
			opts := envOpts{Work: true, Backoff: scheduleBackoff, Setup: func(pool *pgxpool.Pool) {
				if err := queuetest.New(pool).HoldLeadership(t.Context(), "another-process", time.Hour); err != nil {
					t.Fatal(err)
				}
			}}
			var e *env
			if fast {
				e = newFastEnv(t, forwardYAML, opts, fastOptions{})
			} else {
				e = newEnv(t, forwardYAML, opts)
			}
			d := e.deliver("sched-1", []byte(`{}`), "application/json")
			js := e.waitJobs(1)
			if js[0].State != "completed" || js[0].Attempt != 2 {
				t.Fatalf("job %+v: want completed at attempt 2", js[0])
			}
			hits := tg.HitsFor(d.eventID)
			if len(hits) != 2 || hits[0].Status != http.StatusInternalServerError {
				t.Fatalf("the target received %d requests for the event, want 2, the first answered 500", len(hits))
			}
			gap := hits[1].At.Sub(hits[0].AnswerAt)
			if gap < scheduleBackoff.Base/2 {
				t.Errorf("the second attempt reached the target %v after the first was answered; want at least %v (its backoff)", gap, scheduleBackoff.Base/2)
			}
			t.Logf("the second attempt reached the target %v after the first was answered", gap)
		})
	}
}

// TestFastPathRecordsRetriesAsRiverWould: the fast path records a failed
// first attempt whose retry is due within River's scheduler interval (5 s)
// as an available job whose scheduled_at is the retry's time (River's
// fetch takes it once due), as River's executor leaves its own short
// retries, and one due later (a Retry-After of 10 s) as retryable, for the
// scheduler. River works no job here (the env's client only inserts), so
// the recorded states are seen as the fast path wrote them.
func TestFastPathRecordsRetriesAsRiverWould(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		answer      testkit.Answer
		state       string
		least, most time.Duration // of scheduled_at after the attempt's answer, and after its record was seen
	}{
		{"500, the backoff's 50 to 100 ms", testkit.Answer{Status: http.StatusInternalServerError}, "available", 50 * time.Millisecond, time.Second},
		{"503, Retry-After 3", testkit.Answer{Status: http.StatusServiceUnavailable, Header: http.Header{"Retry-After": {"3"}}}, "available", 3 * time.Second, 4 * time.Second},
		{"503, Retry-After 10", testkit.Answer{Status: http.StatusServiceUnavailable, Header: http.Header{"Retry-After": {"10"}}}, "retryable", 10 * time.Second, 11 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tg := testkit.NewTarget(t, func(int, *http.Request) testkit.Answer { return tc.answer })
			e := newFastEnv(t, fmt.Sprintf("      - name: flaky\n        url: %s\n        timeout: 5s\n        max_attempts: 5\n", tg.URL),
				envOpts{Backoff: scheduleBackoff}, fastOptions{})
			e.deliver("rec-1", []byte(`{}`), "application/json")
			var js []job
			e.poll("the fast path to record its failed attempt", func() bool {
				js = e.jobs()
				return len(js) == 1 && len(e.outbox()) == 0
			}, func() string { return fmt.Sprintf("jobs: %+v; outbox: %s", js, strings.Join(e.outbox(), ", ")) })
			seen := time.Now() // after the record: a busy machine may take seconds from the answer to it
			j := js[0]
			answered := tg.Hits()[0].AnswerAt
			if j.State != tc.state || j.Attempt != 1 || len(j.Errors) != 1 {
				t.Errorf("job %+v: want %s at attempt 1 with the attempt's error", j, tc.state)
			}
			if d := j.ScheduledAt.Sub(answered); d < tc.least {
				t.Errorf("job scheduled %v after the attempt's answer, want at least %v", d, tc.least)
			}
			if d := j.ScheduledAt.Sub(seen); d > tc.most {
				t.Errorf("job scheduled %v after its record was seen, want at most %v", d, tc.most)
			}
		})
	}
}
