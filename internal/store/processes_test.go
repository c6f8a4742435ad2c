package store

import (
	"fmt"
	"slices"
	"sync"
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

// TestHeartbeatsAfterALongOutage: processes that come back together after
// the database was away for longer than forget each find the others' rows
// stale while those write them. No heartbeat fails (a row another
// transaction is writing is alive, and skipped; deleting it, each would
// wait for the other, and PostgreSQL would abort one as a deadlock), and
// every process keeps its row.
func TestHeartbeatsAfterALongOutage(t *testing.T) {
	t.Parallel()
	s, _ := store(t)
	ctx := t.Context()
	const processes, rounds = 8, 10
	started := time.Now().Add(-3 * time.Hour)
	for round := range rounds {
		if _, err := s.db.Exec(ctx, `UPDATE forward_processes SET seen_at = now() - interval '2 hours'`); err != nil {
			t.Fatal(err) // raw SQL: every process was away for two hours
		}
		errs := make([]error, processes)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range processes {
			wg.Go(func() {
				<-start
				errs[i] = s.Heartbeat(ctx, fmt.Sprintf("p%d", i), started, time.Hour)
			})
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("round %d, process %d: %v", round, i, err)
			}
		}
	}
	ps, err := s.Processes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != processes {
		t.Errorf("%d processes kept, want %d: %+v", len(ps), processes, ps)
	}
}
