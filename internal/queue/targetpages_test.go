package queue

import (
	"cmp"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/riverqueue/river/rivertype"

	"github.com/hookgate/hookgate/internal/store"
	"github.com/hookgate/hookgate/internal/testing/pgtest"
)

// A page of a target's forwards merges the newest jobs of each River
// state with the delivered first attempts (migration 30). Paged in pages
// of 7, in no state and in each, and in a window, a target whose jobs of
// every River state and delivered first attempts interleave by ID lists
// each of its forwards once, newest first (failed ones by when they
// failed, ties by ID), none of another target or sender.
func TestTargetForwardPagesMergeEveryState(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDB(t)
	ctx := t.Context()
	base := time.Now().UTC().Add(-time.Hour).Truncate(time.Microsecond)

	type row struct {
		id       int64
		state    State
		created  time.Time
		finished time.Time // failed: when it failed; delivered: when it was
	}
	var want []row // acme's forwards to t
	riverStates := []string{"available", "scheduled", "pending", "retryable", "running", "completed", "discarded", "cancelled"}
	for g := range 120 {
		sender, target := "acme", "t"
		switch g % 11 {
		case 3:
			target = "u"
		case 7:
			sender = "other"
		}
		created := base.Add(time.Duration(g) * time.Second)
		var r row
		if g%5 == 2 { // a delivered first attempt
			finished := base.Add(time.Duration(g%4) * time.Minute)
			if err := pool.QueryRow(ctx, `INSERT INTO forward_delivered (sender, event_id, target, delivery_id, created_at, attempted_at, delivered_at, status, max_attempts)
VALUES ($1, gen_random_uuid()::text, $2, $3, $4, $4, $5, 200, 5) RETURNING id`, sender, target, fmt.Sprint("d", g), created, finished).Scan(&r.id); err != nil {
				t.Fatal(err)
			}
			r.state, r.created, r.finished = StateDelivered, created, finished
		} else {
			state := riverStates[(g*7)%len(riverStates)]
			failedAttempt := g%3 == 0 // its errors, for a waiting job: retrying
			superseded := g%4 == 0
			var finalized *time.Time
			if state == "completed" || state == "discarded" || state == "cancelled" {
				f := base.Add(time.Duration(g%4) * time.Minute) // ties
				finalized = &f
			}
			var errs []string
			if failedAttempt {
				errs = []string{`{"at": "2026-12-07T00:00:00Z", "attempt": 1, "error": "503"}`}
			}
			meta := `{}`
			if superseded {
				meta = `{"hookgate:superseded": true}`
			}
			if err := pool.QueryRow(ctx, `INSERT INTO river_job (kind, args, queue, state, created_at, scheduled_at, finalized_at, attempt, max_attempts, errors, metadata)
VALUES ($1, jsonb_build_object('sender', $2::text, 'target', $3::text, 'event_id', gen_random_uuid()::text, 'delivery_id', $4::text),
  'forward', $5::river_job_state, $6, $6, $7, 1, 5, $8::jsonb[], $9::jsonb) RETURNING id`,
				ForwardKind, sender, target, fmt.Sprint("d", g), state, created, finalized, errs, meta).Scan(&r.id); err != nil {
				t.Fatal(err)
			}
			r.state, r.created = stateOf(rivertype.JobState(state), failedAttempt), created
			if finalized != nil {
				r.finished = *finalized
			}
			if r.state == StateFailed && superseded {
				r.state = "failed, superseded" // in the list of every state, not in the failed list
			}
		}
		if sender == "acme" && target == "t" {
			want = append(want, r)
		}
	}

	jobs := NewJobs(pool)
	list := func(f Filter) []int64 {
		t.Helper()
		var ids []int64
		var after *store.Cursor
		for pages := 0; ; pages++ {
			if pages > len(want) {
				t.Fatalf("%+v: more pages than forwards", f)
			}
			page, err := jobs.ListTargetForwards(ctx, f, 7, after)
			if err != nil {
				t.Fatalf("%+v: %v", f, err)
			}
			for _, fw := range page.Forwards {
				ids = append(ids, fw.JobID)
			}
			if page.Next == nil {
				return ids
			}
			if len(page.Forwards) != 7 {
				t.Fatalf("%+v: a page before the last has %d forwards", f, len(page.Forwards))
			}
			after = page.Next
		}
	}
	for _, s := range []State{"", StatePending, StateRunning, StateRetrying, StateDelivered, StateFailed} {
		// A window is on when the forward finished, for delivered and
		// failed ones, and on when it was created otherwise.
		finished := s == StateDelivered || s == StateFailed
		since, until := base.Add(20*time.Second), base.Add(90*time.Second)
		if finished {
			since, until = base.Add(time.Minute), base.Add(3*time.Minute)
		}
		for _, window := range []bool{false, true} {
			f := Filter{Sender: "acme", Target: "t", State: s}
			if window {
				f.Since, f.Until = since, until
			}
			var expect []row
			for _, r := range want {
				at := r.created
				if finished {
					at = r.finished
				}
				if (s == "" || r.state == s) && (!window || !at.Before(since) && at.Before(until)) {
					expect = append(expect, r)
				}
			}
			slices.SortFunc(expect, func(a, b row) int {
				if s == StateFailed {
					if c := b.finished.Compare(a.finished); c != 0 {
						return c
					}
				}
				return cmp.Compare(b.id, a.id)
			})
			var wantIDs []int64
			for _, r := range expect {
				wantIDs = append(wantIDs, r.id)
			}
			if len(wantIDs) == 0 {
				t.Fatalf("state %q, window %v: the fixture has no such forward", s, window)
			}
			if got := list(f); !slices.Equal(got, wantIDs) {
				t.Errorf("state %q, window %v: listed %v, want %v", s, window, got, wantIDs)
			}
		}
	}
}
