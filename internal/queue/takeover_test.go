package queue

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/riverqueue/river/rivertype"

	"github.com/hookgate/hookgate/internal/testing/queuetest"
)

// TakeOverJobs makes available again exactly the running jobs whose last
// attempt was made by a hookgate process that is gone (no row, or a row not
// seen within the stale time), keeping their attempt and adding an error
// that says why; a job whose attempts are used up is discarded. It leaves
// alone the jobs of live processes, of clients that are not hookgate's
// (an earlier version, which writes no heartbeat), jobs not running, and
// jobs whose earlier attempt was a dead process's but whose last is a live
// one's. A second call finds nothing.
func TestTakeOverJobsOfProcessesThatAreGone(t *testing.T) {
	t.Parallel()
	s, _ := newFixture(t)
	ctx := t.Context()
	const prefix = "hookgate:"
	live, stale, gone := prefix+"host:1:live", prefix+"host:2:stale", prefix+"host:3:gone"
	if err := s.Heartbeat(ctx, live, time.Now(), 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Heartbeat(ctx, stale, time.Now().Add(-time.Hour), 0); err != nil {
		t.Fatal(err)
	}
	// The stale process wrote its row a minute ago (it has not since).
	if _, err := s.db.Exec(ctx, `UPDATE forward_processes SET seen_at = now() - interval '1 minute' WHERE id = $1`, stale); err != nil {
		t.Fatal(err) // raw SQL: the row's age is what the test examines
	}
	type job struct {
		name        string
		state       rivertype.JobState
		attempt     int
		attemptedBy []string
		wantState   rivertype.JobState // after the takeover
	}
	jobs := []job{
		{"live", rivertype.JobStateRunning, 1, []string{live}, rivertype.JobStateRunning},
		{"stale", rivertype.JobStateRunning, 2, []string{stale}, rivertype.JobStateAvailable},
		{"gone", rivertype.JobStateRunning, 1, []string{gone}, rivertype.JobStateAvailable},
		{"gone, then live", rivertype.JobStateRunning, 2, []string{gone, live}, rivertype.JobStateRunning},
		{"live, then gone", rivertype.JobStateRunning, 2, []string{live, gone}, rivertype.JobStateAvailable},
		{"gone, out of attempts", rivertype.JobStateRunning, 3, []string{gone}, rivertype.JobStateDiscarded},
		{"another kind of client", rivertype.JobStateRunning, 1, []string{"host_2026_12_02T10_00_00"}, rivertype.JobStateRunning},
		{"gone, but retryable", rivertype.JobStateRetryable, 1, []string{gone}, rivertype.JobStateRetryable},
		{"gone, but completed", rivertype.JobStateCompleted, 1, []string{gone}, rivertype.JobStateCompleted},
	}
	ids := map[int64]job{}
	for _, j := range jobs {
		id, err := s.jobs.InsertForwardJobs(ctx, "q", queuetest.JobFixture{State: j.state, Attempt: j.attempt, AttemptedBy: j.attemptedBy,
			ScheduledAt: time.Now().Add(-time.Minute)},
			queuetest.NewForwardJob{Sender: "acme", Target: "t", DeliveryID: j.name, MaxAttempts: 3})
		if err != nil {
			t.Fatal(err)
		}
		ids[id[0]] = j
	}

	before := time.Now()
	taken, err := s.TakeOverJobs(ctx, prefix, 5*time.Second, 100)
	if err != nil {
		t.Fatal(err)
	}
	var got, want []string
	for _, tk := range taken {
		j := ids[tk.JobID]
		got = append(got, j.name)
		if tk.State != stateOf(j.wantState, false) || tk.Kind != ForwardKind || tk.Process != j.attemptedBy[len(j.attemptedBy)-1] {
			t.Errorf("taken over %q: %+v, want state %s, kind %s, process %s", j.name, tk, j.wantState, ForwardKind, j.attemptedBy[len(j.attemptedBy)-1])
		}
	}
	for _, j := range jobs {
		if j.state != j.wantState {
			want = append(want, j.name)
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("taken over %q, want %q", got, want)
	}

	all, err := s.jobs.ForwardJobs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, fj := range all {
		j := ids[fj.ID]
		if fj.State != j.wantState || fj.Attempt != j.attempt {
			t.Errorf("job %q: state %s attempt %d, want %s and %d (the attempt under way counts, as River's rescuer counts it)",
				j.name, fj.State, fj.Attempt, j.wantState, j.attempt)
		}
		if j.state == j.wantState {
			continue
		}
		if n := len(fj.Errors); n == 0 || !strings.Contains(fj.Errors[n-1], "taken over") || !strings.Contains(fj.Errors[n-1], j.attemptedBy[len(j.attemptedBy)-1]) {
			t.Errorf("job %q: errors %q, want a last one saying it was taken over from its process", j.name, fj.Errors)
		}
		if j.wantState == rivertype.JobStateAvailable && fj.ScheduledAt.Before(before.Add(-time.Second)) {
			t.Errorf("job %q: scheduled at %v, want now (it is due at once)", j.name, fj.ScheduledAt)
		}
	}

	again, err := s.TakeOverJobs(ctx, prefix, 5*time.Second, 100)
	if err != nil || len(again) != 0 {
		t.Errorf("a second takeover: %+v, %v; want none", again, err)
	}
}

// TakeOverJobs takes at most its limit per call; the next call takes the
// rest.
func TestTakeOverJobsLimit(t *testing.T) {
	t.Parallel()
	s, _ := newFixture(t)
	ctx := t.Context()
	var jobs []queuetest.NewForwardJob
	for range 5 {
		jobs = append(jobs, queuetest.NewForwardJob{Sender: "acme", Target: "t", DeliveryID: "d", MaxAttempts: 3})
	}
	if _, err := s.jobs.InsertForwardJobs(ctx, "q", queuetest.JobFixture{State: rivertype.JobStateRunning, Attempt: 1, AttemptedBy: []string{"hookgate:gone"}}, jobs...); err != nil {
		t.Fatal(err)
	}
	first, err := s.TakeOverJobs(ctx, "hookgate:", time.Second, 3)
	if err != nil || len(first) != 3 {
		t.Fatalf("first takeover: %d jobs, %v; want 3", len(first), err)
	}
	second, err := s.TakeOverJobs(ctx, "hookgate:", time.Second, 3)
	if err != nil || len(second) != 2 {
		t.Fatalf("second takeover: %d jobs, %v; want 2", len(second), err)
	}
}
