package queue

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/riverqueue/river/rivertype"

	"github.com/hookgate/hookgate/internal/testing/queuetest"
	"github.com/hookgate/hookgate/internal/testing/storetest"
)

// TestForwardSummaries: a page of events' forward states, each target
// counted once by its newest forward: a River job (a redelivery replacing
// the failure it follows), a delivered first attempt of the fast path, an
// outbox row (pending, or running while leased); another sender's forwards
// and targets not asked about are not counted.
func TestForwardSummaries(t *testing.T) {
	t.Parallel()
	s, _ := newFixture(t)
	ctx := t.Context()
	at := time.Now().UTC().Add(-time.Minute).Truncate(time.Microsecond)
	e1, e2, e3, e4, none := uuid.New(), uuid.New(), uuid.New(), uuid.New(), uuid.New()
	insert := func(f queuetest.JobFixture, sender, target string, e uuid.UUID) {
		t.Helper()
		if _, err := s.jobs.InsertForwardJobs(ctx, "q", f, queuetest.NewForwardJob{Sender: sender, Target: target, EventID: e, DeliveryID: "d", MaxAttempts: 5}); err != nil {
			t.Fatal(err)
		}
	}
	// e1: t1 failed and was redelivered (now delivered), t2 retrying after
	// a failed attempt due soon (available), t3 retrying later.
	insert(queuetest.JobFixture{State: rivertype.JobStateDiscarded, Errors: []string{"target answered 500"}}, "acme", "t1", e1)
	insert(queuetest.JobFixture{State: rivertype.JobStateCompleted, Attempt: 1, Output: &Output{Attempt: 1, Status: 200, DeliveredAt: at}}, "acme", "t1", e1)
	insert(queuetest.JobFixture{State: rivertype.JobStateAvailable, Attempt: 1, Errors: []string{"target answered 500"}, ScheduledAt: at.Add(time.Minute + 3*time.Second)}, "acme", "t2", e1)
	insert(queuetest.JobFixture{State: rivertype.JobStateRetryable, Attempt: 2, Errors: []string{"a", "b"}, ScheduledAt: at.Add(time.Hour)}, "acme", "t3", e1)
	// Another sender's job of the same event, and a target not asked about.
	insert(queuetest.JobFixture{State: rivertype.JobStateDiscarded, Errors: []string{"x"}}, "other", "t1", e1)
	insert(queuetest.JobFixture{State: rivertype.JobStateDiscarded, Errors: []string{"x"}}, "acme", "gone", e1)
	// e2: delivered by the fast path to t1; a new job (pending) to t2.
	if err := storetest.InsertOutbox(ctx, s.DB(), storetest.Outbox{Sender: "acme", Target: "t1", EventID: e2, DeliveryID: "d2"}, at); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordFirstAttempts(ctx, "q", []FirstAttempt{{Sender: "acme", EventID: e2, Target: "t1", State: StateDelivered, MaxAttempts: 5,
		AttemptedAt: at, FinalizedAt: &at, ScheduledAt: at, Output: Output{Status: 204, DeliveredAt: at}}}); err != nil {
		t.Fatal(err)
	}
	insert(queuetest.JobFixture{}, "acme", "t2", e2)
	// e3: still in the outbox for t1 and t2 (not relayed), t3 running.
	for _, tg := range []string{"t1", "t2"} {
		if err := storetest.InsertOutbox(ctx, s.DB(), storetest.Outbox{Sender: "acme", Target: tg, EventID: e3, DeliveryID: "d3"}, at); err != nil {
			t.Fatal(err)
		}
	}
	insert(queuetest.JobFixture{State: rivertype.JobStateRunning, Attempt: 1}, "acme", "t3", e3)
	// e4: failed at once to t1.
	insert(queuetest.JobFixture{State: rivertype.JobStateCancelled, Attempt: 1, Errors: []string{"target answered 400"}}, "acme", "t1", e4)

	got, err := s.ForwardSummaries(ctx, "acme", []string{"t1", "t2", "t3"}, []uuid.UUID{e1, e2, e3, e4, none})
	if err != nil {
		t.Fatal(err)
	}
	want := map[uuid.UUID]string{
		e1: "1 delivered, 2 retrying",
		e2: "1 delivered, 1 pending",
		e3: "1 running, 2 pending",
		e4: "1 failed",
	}
	if len(got) != len(want) {
		t.Errorf("summaries of %d events, want %d: %v", len(got), len(want), got)
	}
	for e, w := range want {
		if g := got[e].String(); g != w {
			t.Errorf("summary of %s = %q, want %q", e, g, w)
		}
	}
	if got, err := s.ForwardSummaries(ctx, "acme", []string{"t1"}, nil); err != nil || len(got) != 0 {
		t.Errorf("summaries of no events = %v, %v; want none", got, err)
	}
}
