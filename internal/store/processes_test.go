package store

import (
	"slices"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// Heartbeat writes a process's row and moves its seen time on; it forgets
// the rows of processes not seen for longer than forget; RemoveProcess
// deletes a row.
func TestHeartbeat(t *testing.T) {
	t.Parallel()
	s, _ := store(t)
	ctx := t.Context()
	started := time.Now().Add(-time.Minute).UTC().Truncate(time.Microsecond)
	for _, id := range []string{"a", "b", "old"} {
		if err := s.Heartbeat(ctx, id, started, 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.db.Exec(ctx, `UPDATE forward_processes SET seen_at = now() - interval '2 hours' WHERE id = 'old'`); err != nil {
		t.Fatal(err) // raw SQL: the row's age is what the test examines
	}
	ps, err := s.Processes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var seenA time.Time
	for _, p := range ps {
		if p.ID == "a" {
			seenA = p.SeenAt
		}
	}
	testkit.Poll(t, time.Minute, "a's seen time to move on", func() bool {
		if err := s.Heartbeat(ctx, "a", started, time.Hour); err != nil {
			t.Fatal(err)
		}
		ps, err := s.Processes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ps {
			if p.ID == "a" {
				return p.SeenAt.After(seenA) && p.StartedAt.Equal(started)
			}
		}
		return false
	})
	if err := s.RemoveProcess(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	ps, err = s.Processes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, p := range ps {
		ids = append(ids, p.ID)
	}
	if !slices.Equal(ids, []string{"a"}) {
		t.Errorf("processes %q, want only a (b removed, old forgotten)", ids)
	}
}
