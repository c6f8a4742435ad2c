package queue

import (
	"fmt"
	"slices"
	"testing"

	"github.com/hookgate/hookgate/internal/testing/queuetest"
)

// WakeHeldForwards makes a resumed target's waiting forwards available in
// the order they were created, however their snoozes ordered them and
// however many batches the wake takes: River's fetch (by scheduled_at,
// then ID) takes them in that order, before the forwards created since.
// The target's other forwards and another target's are left alone.
func TestWakeHeldForwardsKeepsTheOrderOfCreation(t *testing.T) {
	t.Parallel()
	s, _ := newFixture(t)
	ctx := t.Context()
	const n = wakeBatch + wakeBatch/2 // two statements
	var ids []int64
	for c := range 3 { // three transactions: three creation times
		batch := make([]queuetest.NewForwardJob, n/3)
		for i := range batch {
			batch[i] = queuetest.NewForwardJob{Sender: "acme", Target: "t", DeliveryID: fmt.Sprintf("d-%d-%d", c, i), MaxAttempts: 5}
		}
		got, err := s.jobs.InsertForwardJobs(ctx, ForwardQueue, queuetest.JobFixture{}, batch...)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, got...)
	}
	other, err := s.jobs.InsertForwardJobs(ctx, ForwardQueue, queuetest.JobFixture{}, queuetest.NewForwardJob{Sender: "acme", Target: "u", DeliveryID: "other", MaxAttempts: 5})
	if err != nil {
		t.Fatal(err)
	}
	// Held by a pause: snoozed (River's state scheduled) for a random
	// while, in any order; the other target's too.
	if _, err := s.pool.Exec(ctx, `UPDATE river_job SET state = 'scheduled', scheduled_at = now() + random() * interval '1 hour' WHERE kind = '`+ForwardKind+`'`); err != nil {
		t.Fatal(err) // raw SQL: the snoozes' disorder is what the test examines
	}
	woken, err := s.WakeHeldForwards(ctx, ForwardQueue, "acme", "t")
	if err != nil || woken != int64(len(ids)) {
		t.Fatalf("woke %d, %v; want %d", woken, err, len(ids))
	}
	rows, err := s.pool.Query(ctx, `SELECT id FROM river_job WHERE state = 'available' AND scheduled_at <= now() ORDER BY priority, scheduled_at, id`)
	if err != nil {
		t.Fatal(err)
	}
	var fetched []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		fetched = append(fetched, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(fetched, ids) {
		i := 0
		for i < min(len(fetched), len(ids)) && fetched[i] == ids[i] {
			i++
		}
		t.Errorf("River's fetch order of the woken forwards differs from their order of creation from position %d of %d (%d available)", i, len(ids), len(fetched))
	}
	var state string
	if err := s.pool.QueryRow(ctx, `SELECT state FROM river_job WHERE id = $1`, other[0]).Scan(&state); err != nil || state != "scheduled" {
		t.Errorf("the other target's forward: %s, %v; want still scheduled", state, err)
	}
}
