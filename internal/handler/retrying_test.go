package handler_test

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/riverqueue/river/rivertype"

	"github.com/hookgate/hookgate/internal/queue"
	"github.com/hookgate/hookgate/internal/store"
	"github.com/hookgate/hookgate/internal/testing/queuetest"
)

// TestForwardStatesPendingAndRetrying: a waiting forward is retrying after
// a failed attempt, whichever River state it waits in (available, when its
// retry is due within River's scheduler interval; retryable, when later),
// and pending before any (a new job, or one snoozed behind its breaker
// before any attempt failed); the delivery's forwards, the target's counts
// and ?state=pending and ?state=retrying all say so alike.
func TestForwardStatesPendingAndRetrying(t *testing.T) {
	t.Parallel()
	s := newOpServer(t, opOptions{yaml: `
senders:
  - name: fwd
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    forward:
      - name: a
        url: http://127.0.0.1:1/a
        max_attempts: 5
`})
	ids := []string{"new", "snoozed", "retry-soon", "retry-later"}
	for _, id := range ids {
		s.accept("fwd", id, []byte(`{}`))
	}
	if n := s.relayOnce(); n != len(ids) {
		t.Fatalf("relayed %d, want %d", n, len(ids))
	}
	jobs := map[string]int64{}
	for _, f := range s.forwardPage("fwd", "a", "").Items {
		jobs[f.DeliveryID] = f.JobID
	}
	q := queuetest.New(s.pool)
	for id, f := range map[string]queuetest.JobFixture{
		"retry-soon": {State: rivertype.JobStateAvailable, Attempt: 1, Errors: []string{"target answered 500"}, ScheduledAt: time.Now().Add(3 * time.Second)},
		"retry-later": {State: rivertype.JobStateRetryable, Attempt: 2, Errors: []string{"target answered 500", "target answered 500"},
			ScheduledAt: time.Now().Add(time.Hour)},
	} {
		if err := q.SetForwardJob(t.Context(), jobs[id], f); err != nil {
			t.Fatal(err)
		}
	}
	// Snoozed behind an open breaker before any attempt: River puts the
	// attempt back (attempt 0) and schedules it later, with no error.
	if _, err := s.pool.Exec(t.Context(), `UPDATE river_job SET state = 'scheduled', scheduled_at = now() + interval '1 minute',
  attempted_at = now(), metadata = metadata || '{"snoozes": 1}' WHERE id = $1`, jobs["snoozed"]); err != nil {
		t.Fatal(err)
	}

	want := map[string]string{"new": "pending", "snoozed": "pending", "retry-soon": "retrying", "retry-later": "retrying"}
	for _, id := range ids {
		d := s.delivery("fwd", id)
		if len(d.Forwards) != 1 || d.Forwards[0].State != want[id] {
			t.Errorf("delivery %s: forwards %+v, want one %s", id, d.Forwards, want[id])
		}
	}
	if c := s.targets("fwd")["a"].Forwards; c != (forwardCounts{Pending: 2, Retrying: 2}) {
		t.Errorf("counts = %+v, want 2 pending and 2 retrying", c)
	}
	for _, state := range []queue.State{queue.StatePending, queue.StateRetrying} {
		var got, exp []string
		for _, f := range s.forwardPage("fwd", "a", "?state="+string(state)).Items {
			got = append(got, f.DeliveryID)
			if f.State != string(state) {
				t.Errorf("?state=%s listed %s in state %s", state, f.DeliveryID, f.State)
			}
		}
		for _, id := range ids {
			if want[id] == string(state) {
				exp = append(exp, id)
			}
		}
		slices.Sort(got)
		slices.Sort(exp)
		if fmt.Sprint(got) != fmt.Sprint(exp) {
			t.Errorf("?state=%s = %v, want %v", state, got, exp)
		}
	}
}

// TestTargetFailedForwardsPageByFailure: ?state=failed pages the failed
// forwards by when they failed, newest first (then by job), as the
// console's target page lists them, whatever order their jobs were
// inserted in; the cursor carries that position, and a cursor of the
// other order is refused.
func TestTargetFailedForwardsPageByFailure(t *testing.T) {
	t.Parallel()
	s := newOpServer(t, opOptions{yaml: `
senders:
  - name: fwd
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    forward:
      - name: a
        url: http://127.0.0.1:1/a
`})
	// Failed at these minutes past the base, in job order: two at the same
	// time (then the newer job first).
	minutes := []int{50, 10, 40, 40, 20, 30}
	for i := range minutes {
		s.accept("fwd", fmt.Sprintf("f-%d", i), []byte(`{}`))
	}
	if n := s.relayOnce(); n != len(minutes) {
		t.Fatalf("relayed %d", n)
	}
	byID := s.forwardPage("fwd", "a", "").Items // newest job first
	slices.Reverse(byID)
	base := time.Date(2026, 11, 30, 1, 0, 0, 123456000, time.UTC)
	q := queuetest.New(s.pool)
	failedAt := map[int64]time.Time{}
	for i, f := range byID {
		failedAt[f.JobID] = base.Add(time.Duration(minutes[i]) * time.Minute)
		if err := q.SetForwardJob(t.Context(), f.JobID, queuetest.JobFixture{State: rivertype.JobStateDiscarded, At: failedAt[f.JobID],
			Errors: []string{"target answered 503"}}); err != nil {
			t.Fatal(err)
		}
	}
	want := slices.Clone(byID)
	slices.SortFunc(want, func(x, y targetForward) int {
		if c := failedAt[y.JobID].Compare(failedAt[x.JobID]); c != 0 {
			return c
		}
		return int(y.JobID - x.JobID)
	})
	var got []int64
	query := "?state=failed&limit=2"
	for pages := 0; ; pages++ {
		if pages > 3 {
			t.Fatal("more than 3 pages of 2 for 6 forwards")
		}
		p := s.forwardPage("fwd", "a", query)
		for _, f := range p.Items {
			got = append(got, f.JobID)
			if !f.FinishedAt.Equal(failedAt[f.JobID]) {
				t.Errorf("job %d finished at %v, want %v", f.JobID, f.FinishedAt, failedAt[f.JobID])
			}
		}
		if p.NextCursor == nil {
			break
		}
		// A cursor of this order is not one of the list by job.
		wantOpProblem(t, s.call(http.MethodGet, "/v1/senders/fwd/targets/a/forwards?cursor="+url.QueryEscape(*p.NextCursor)),
			http.StatusBadRequest, "invalid-parameter", http.MethodGet, routeTargetForwards)
		query = "?state=failed&limit=2&cursor=" + url.QueryEscape(*p.NextCursor)
	}
	var wantIDs []int64
	for _, f := range want {
		wantIDs = append(wantIDs, f.JobID)
	}
	if !slices.Equal(got, wantIDs) {
		t.Errorf("failed forwards page by page: jobs %v, want %v (by when they failed, newest first)", got, wantIDs)
	}
	// And the list by job refuses to be continued as failed ones.
	p := s.forwardPage("fwd", "a", "?limit=2")
	wantOpProblem(t, s.call(http.MethodGet, "/v1/senders/fwd/targets/a/forwards?state=failed&cursor="+url.QueryEscape(*p.NextCursor)),
		http.StatusBadRequest, "invalid-parameter", http.MethodGet, routeTargetForwards)
}

// TestTargetsShowAPause: a target's breaker in the list says until when a
// pause a worker recorded (its Retry-After) holds the target's forwards,
// and nothing once it has ended.
func TestTargetsShowAPause(t *testing.T) {
	t.Parallel()
	s := newOpServer(t, opOptions{yaml: `
senders:
  - name: fwd
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    forward:
      - name: a
        url: http://127.0.0.1:1/a
      - name: b
        url: http://127.0.0.1:1/b
`})
	until := time.Now().Add(time.Hour).UTC().Truncate(time.Microsecond)
	q := store.New(s.pool)
	if err := q.RecordPause(t.Context(), "fwd", "a", until, "target answered 429, Retry-After 1h0m0s"); err != nil {
		t.Fatal(err)
	}
	if err := q.RecordPause(t.Context(), "fwd", "b", time.Now().Add(-time.Minute), "target answered 503, Retry-After 30s"); err != nil {
		t.Fatal(err)
	}
	got := s.targets("fwd")
	if b := got["a"].Breaker; b.State != "closed" || b.PausedUntil == nil || !b.PausedUntil.Equal(until) || b.OpenedAt != nil {
		t.Errorf("a's breaker = %+v, want closed, paused until %s", b, until)
	}
	if b := got["b"].Breaker; b.State != "closed" || b.PausedUntil != nil {
		t.Errorf("b's breaker = %+v, want closed, its pause over (null)", b)
	}
}
