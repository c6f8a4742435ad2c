package forward

import (
	"testing"

	"github.com/hookgate/hookgate/internal/queue"
	"github.com/hookgate/hookgate/internal/store"
)

// TestCauseOf: a job's attempt is its first, a retry, a redelivery's
// first (with who asked), or the attempt after a takeover, which wins.
func TestCauseOf(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		job  queue.Job
		want string
	}{
		{queue.Job{Attempt: 1}, "first attempt"},
		{queue.Job{Attempt: 3}, "retry 2"},
		{queue.Job{Attempt: 1, Args: queue.Args{By: "ops-alice"}}, "redelivery by ops-alice"},
		{queue.Job{Attempt: 2, Args: queue.Args{By: "ops-alice"}}, "retry 1 of the redelivery by ops-alice"},
		{queue.Job{Attempt: 2, TakenOver: true}, "takeover after a crash"},
		{queue.Job{Attempt: 1, TakenOver: true, Args: queue.Args{By: "admin"}}, "takeover after a crash"},
	} {
		c := causeOf(tc.job)
		a := store.Attempt{Cause: c.why, Attempt: c.attempt, Actor: c.actor}
		if got := a.CauseText(); got != tc.want {
			t.Errorf("job %+v: cause %q, want %q", tc.job, got, tc.want)
		}
	}
}
