package queuetest_test

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/riverqueue/river/rivertype"

	"github.com/hookgate/hookgate/internal/queue"
	"github.com/hookgate/hookgate/internal/testing/pgtest"
	"github.com/hookgate/hookgate/internal/testing/queuetest"
)

// TestForwardJobFixturesReadBack: the fixtures tests build forward jobs
// with (InsertForwardJobs, SetForwardJob) are read back by ForwardJobs as
// they were put: state, attempts, errors (their text and River's records,
// numbered to end at the attempt) and output.
func TestForwardJobFixturesReadBack(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDB(t)
	s := queuetest.New(pool)
	ctx := t.Context()
	ids, err := s.InsertForwardJobs(ctx, "forward", queuetest.JobFixture{State: rivertype.JobStateRetryable, Attempt: 3, Errors: []string{"boom 2", "boom 3"}, Output: &queue.Output{Attempt: 3, Status: 503}},
		queuetest.NewForwardJob{Sender: "s", Target: "a", DeliveryID: "d-1", MaxAttempts: 5},
		queuetest.NewForwardJob{Sender: "s", Target: "b", DeliveryID: "d-2", MaxAttempts: 5})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetForwardJob(ctx, ids[1], queuetest.JobFixture{State: rivertype.JobStateRunning, Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	jobs, err := s.ForwardJobs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 2 || jobs[0].ID != ids[0] || jobs[1].ID != ids[1] {
		t.Fatalf("ForwardJobs = %+v; want jobs %v", jobs, ids)
	}
	a, b := jobs[0], jobs[1]
	if a.State != rivertype.JobStateRetryable || a.Attempt != 3 || a.MaxAttempts != 5 || a.Target != "a" || a.DeliveryID != "d-1" ||
		!slices.Equal(a.Errors, []string{"boom 2", "boom 3"}) || a.Output == "" {
		t.Errorf("job put retryable after 3 attempts: %+v", a)
	}
	if len(a.ErrorRecords) != 2 {
		t.Fatalf("error records %q; want 2", a.ErrorRecords)
	}
	for i, rec := range a.ErrorRecords {
		var r struct {
			Attempt int    `json:"attempt"`
			Error   string `json:"error"`
		}
		if err := json.Unmarshal([]byte(rec), &r); err != nil || r.Attempt != i+2 || r.Error != a.Errors[i] {
			t.Errorf("error record %d = %s (%v); want attempt %d, error %q", i, rec, err, i+2, a.Errors[i])
		}
	}
	if b.State != rivertype.JobStateRunning || b.Attempt != 1 || len(b.Errors) != 0 || len(b.ErrorRecords) != 0 {
		t.Errorf("job set running at its first attempt: %+v", b)
	}
}

// TestPostponeWaitingForwards: the forwards waiting for a time within the
// span given are moved to the new time; one due sooner, one due later and
// a running one are left as they were.
func TestPostponeWaitingForwards(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDB(t)
	s := queuetest.New(pool)
	ctx := t.Context()
	now := time.Now()
	insert := func(f queuetest.JobFixture, id string) int64 {
		t.Helper()
		ids, err := s.InsertForwardJobs(ctx, "forward", f, queuetest.NewForwardJob{Sender: "s", Target: "t", DeliveryID: id, MaxAttempts: 5})
		if err != nil {
			t.Fatal(err)
		}
		return ids[0]
	}
	insert(queuetest.JobFixture{State: rivertype.JobStateScheduled, Attempt: 1, Errors: []string{}, ScheduledAt: now.Add(2 * time.Second)}, "soon")
	snoozed := insert(queuetest.JobFixture{State: rivertype.JobStateScheduled, Attempt: 1, Errors: []string{}, ScheduledAt: now.Add(30 * time.Second)}, "snoozed")
	retrying := insert(queuetest.JobFixture{State: rivertype.JobStateRetryable, Attempt: 1, Errors: []string{"503"}, ScheduledAt: now.Add(time.Minute)}, "retrying")
	insert(queuetest.JobFixture{State: rivertype.JobStateScheduled, Attempt: 1, Errors: []string{}, ScheduledAt: now.Add(time.Hour)}, "later")
	insert(queuetest.JobFixture{State: rivertype.JobStateRunning, Attempt: 1, ScheduledAt: now.Add(30 * time.Second)}, "running")

	moved, err := s.PostponeWaitingForwards(ctx, 5*time.Second, 10*time.Minute, 2*time.Hour)
	if err != nil || moved != 2 {
		t.Fatalf("PostponeWaitingForwards moved %d (%v), want the snoozed and the retrying forward", moved, err)
	}
	jobs, err := s.ForwardJobs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		postponed := j.ScheduledAt.After(now.Add(2*time.Hour - time.Minute))
		if want := j.ID == snoozed || j.ID == retrying; postponed != want {
			t.Errorf("job %s scheduled at %s: postponed %v, want %v", j.DeliveryID, j.ScheduledAt, postponed, want)
		}
	}
}
