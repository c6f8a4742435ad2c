package store

import (
	"maps"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/riverqueue/river/rivertype"

	"github.com/hookgate/hookgate/internal/store/storetest"
)

// TestPhaseTally checks the load benchmark's tally of a phase: the forward
// jobs of the deliveries whose ID has the phase's prefix counted by state,
// the outbox rows counted (the fast path's delivered forwards as completed
// jobs), and the available jobs and the outbox rows
// deleted, leaving the other jobs and every other phase's rows alone; and
// the phase's events counted.
func TestPhaseTally(t *testing.T) {
	t.Parallel()
	s, _ := store(t)
	ctx := t.Context()
	if _, err := s.jobs.InsertForwardJobs(ctx, "forward", storetest.JobFixture{},
		storetest.NewForwardJob{Sender: "bench", Target: "sink", DeliveryID: "p1-1"},
		storetest.NewForwardJob{Sender: "bench", Target: "sink", DeliveryID: "p1-2"},
		storetest.NewForwardJob{Sender: "bench", Target: "sink", DeliveryID: "p2-1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.jobs.InsertForwardJobs(ctx, "forward", storetest.JobFixture{State: rivertype.JobStateCompleted, Attempt: 1},
		storetest.NewForwardJob{Sender: "bench", Target: "sink", DeliveryID: "p1-3"}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"p1-4", "p2-2"} {
		if err := s.InsertOutbox(ctx, OutboxRow{Sender: "bench", Target: "sink", EventID: uuid.New(), DeliveryID: id}, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	// p1-5 was delivered by the fast path: a completed forward too.
	fast := OutboxRow{Sender: "bench", Target: "sink", EventID: uuid.New(), DeliveryID: "p1-5"}
	if err := s.InsertOutbox(ctx, fast, time.Now()); err != nil {
		t.Fatal(err)
	}
	at := time.Now()
	if err := s.RecordFirstAttempts(ctx, "forward", []FirstAttempt{{Sender: "bench", EventID: fast.EventID, Target: "sink",
		State: StateDelivered, MaxAttempts: 3, AttemptedAt: at, FinalizedAt: &at, ScheduledAt: at, Output: Output{Status: 204, DeliveredAt: at}}}); err != nil {
		t.Fatal(err)
	}
	states, err := s.ForwardJobStates(ctx, "p1-")
	if want := map[rivertype.JobState]int64{rivertype.JobStateAvailable: 2, rivertype.JobStateCompleted: 2}; err != nil || !maps.Equal(states, want) {
		t.Fatalf("ForwardJobStates(p1-) = %v, %v; want %v", states, err, want)
	}
	if n, err := s.CountOutboxOf(ctx, "bench", "p1-"); err != nil || n != 1 {
		t.Fatalf("CountOutboxOf(bench, p1-) = %d, %v; want 1", n, err)
	}
	if n, err := s.DeleteAvailableForwardJobs(ctx, "p1-"); err != nil || n != 2 {
		t.Fatalf("DeleteAvailableForwardJobs(p1-) = %d, %v; want 2", n, err)
	}
	if n, err := s.DeleteOutboxOf(ctx, "bench", "p1-"); err != nil || n != 1 {
		t.Fatalf("DeleteOutboxOf(bench, p1-) = %d, %v; want 1", n, err)
	}
	states, err = s.ForwardJobStates(ctx, "p1-")
	if want := map[rivertype.JobState]int64{rivertype.JobStateCompleted: 2}; err != nil || !maps.Equal(states, want) {
		t.Fatalf("after the deletes, ForwardJobStates(p1-) = %v, %v; want %v", states, err, want)
	}
	if states, err := s.ForwardJobStates(ctx, "p2-"); err != nil || states[rivertype.JobStateAvailable] != 1 {
		t.Fatalf("the other phase's jobs: %v, %v; want 1 available", states, err)
	}
	if n, err := s.CountOutboxOf(ctx, "bench", "p2-"); err != nil || n != 1 {
		t.Fatalf("the other phase's outbox rows: %d, %v; want 1", n, err)
	}
	// The phase's events: those of sender bench whose delivery ID has the
	// prefix (p1_x would match a LIKE 'p1-%' only by its wildcard).
	if _, err := s.InsertGenerated(ctx, Generated{Sender: "bench", Prefix: "p1-", N: 3, Newest: time.Now(), Events: true}); err != nil {
		t.Fatal(err)
	}
	for _, g := range []Generated{{Sender: "bench", Prefix: "p2-", N: 2}, {Sender: "other", Prefix: "p1-", N: 4}, {Sender: "bench", Prefix: "p1_", N: 5}} {
		g.Newest, g.Events = time.Now(), true
		if _, err := s.InsertGenerated(ctx, g); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := s.CountEventsOf(ctx, "bench", "p1-"); err != nil || n != 3 {
		t.Fatalf("CountEventsOf(bench, p1-) = %d, %v; want 3", n, err)
	}
}
