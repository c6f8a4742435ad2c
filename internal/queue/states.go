package queue

import (
	"fmt"
	"slices"

	"github.com/riverqueue/river/rivertype"
)

// A forward's five states, the one mapping between them and River's job
// states (jobStates, stateOf), and River's state names as the statements
// take them.

// State is a forward's state as operators see it.
type State string

// The states of a forward.
const (
	// StatePending: waiting for its first attempt (none has failed yet).
	StatePending State = "pending"
	// StateRunning: an attempt is under way.
	StateRunning State = "running"
	// StateRetrying: an attempt failed and the forward waits for its next
	// one, whenever that is due.
	StateRetrying State = "retrying"
	// StateDelivered: the target answered 2xx.
	StateDelivered State = "delivered"
	// StateFailed: no more attempts will be made.
	StateFailed State = "failed"
)

// waitingJobStates are River's states of a job waiting for an attempt:
// due now (available), at a later time (scheduled, retryable) or not yet
// (pending). River leaves a job whose retry is due within its scheduler's
// interval available, and one due later retryable (and the fast path
// records its failed first attempts the same way), so the state alone does
// not tell a forward waiting for its first attempt from one waiting for a
// retry: whether an attempt has failed (failedAttempt) does.
var waitingJobStates = []rivertype.JobState{
	rivertype.JobStateAvailable, rivertype.JobStateScheduled, rivertype.JobStatePending, rivertype.JobStateRetryable,
}

// jobStates maps each forward state to the River job states a forward in
// it may be in: the one mapping of the two (stateOf is its inverse, given
// whether an attempt failed). Pending and retrying share River's waiting
// states (waitingJobStates): a waiting job is retrying after a failed
// attempt (failedAttempt), pending otherwise.
var jobStates = map[State][]rivertype.JobState{
	StatePending:   waitingJobStates,
	StateRunning:   {rivertype.JobStateRunning},
	StateRetrying:  waitingJobStates,
	StateDelivered: {rivertype.JobStateCompleted},
	StateFailed:    {rivertype.JobStateCancelled, rivertype.JobStateDiscarded},
}

// stateOf maps a River job state (as the statements read it), and whether
// an attempt of the job has failed (failedAttempt: it has a recorded error
// after at least one attempt), to a forward's state: running is running;
// completed is delivered; cancelled and discarded are failed; a waiting job
// (available, scheduled, pending, retryable) is retrying after a failed
// attempt and pending before any. A state River may add later is taken as
// waiting. The store's API speaks a forward's five states only.
func stateOf(s rivertype.JobState, failed bool) State {
	switch s {
	case rivertype.JobStateRunning:
		return StateRunning
	case rivertype.JobStateCompleted:
		return StateDelivered
	case rivertype.JobStateCancelled, rivertype.JobStateDiscarded:
		return StateFailed
	}
	if failed {
		return StateRetrying
	}
	return StatePending
}

// failedAttempt is the condition, over the River job with the alias %[1]s,
// that an attempt of it has failed: it was attempted (River decrements
// attempt again when a job snoozes, so a forward held by its breaker before
// any attempt failed has none) and has an error recorded. stateOf's failed
// argument, and with waitingJobStates what tells a retrying forward from a
// pending one in the statements (inState).
func failedAttempt(alias string) string {
	return fmt.Sprintf("(%[1]s.attempt >= 1 AND coalesce(cardinality(%[1]s.errors), 0) > 0)", alias)
}

// inState is the condition that job j is in forward state s, its River
// state being one of the parameter $%[1]d (stateNames(s)): for pending and
// retrying, also whether an attempt failed.
func inState(s State, param int) string {
	cond := fmt.Sprintf("j.state = ANY($%d::river_job_state[])", param)
	switch s {
	case StatePending:
		cond += " AND NOT " + failedAttempt("j")
	case StateRetrying:
		cond += " AND " + failedAttempt("j")
	}
	return cond
}

// ValidState reports whether s is one of the five forward states.
func ValidState(s State) bool { return jobStates[s] != nil }

// unfinished are the states of a forward not finished yet.
var unfinished = []State{StatePending, StateRunning, StateRetrying}

// Unfinished reports whether a forward in state s may still be attempted:
// pending, running or retrying.
func (s State) Unfinished() bool { return slices.Contains(unfinished, s) }

// unfinishedJobStates are the River job states of a job not yet finished
// (pending, running or retrying): the states in which a unique job (a
// forward of the same event to the same target, a second bulk redelivery)
// is not inserted again, for River's own configuration (UniqueOpts).
func unfinishedJobStates() []rivertype.JobState {
	var out []rivertype.JobState
	for _, s := range unfinished {
		for _, j := range jobStates[s] {
			if !slices.Contains(out, j) {
				out = append(out, j)
			}
		}
	}
	return out
}

// River's job states as the statements on its table take them: query
// parameters (a text, or an array of River's state names), never literals
// in the SQL text, so that jobStates is the one mapping of forward states
// to River's. None of River's indexes that the statements use has a state
// in its predicate (a partial index would need the literal: see
// forwardKind).
var (
	// unfinishedJobs are the River states of a forward not finished yet
	// (pending, running or retrying): unfinishedJobStates.
	unfinishedJobs = stateNames(unfinished...)
	// runningJobs, retryingJobs and failedJobs are the River states of a
	// running, a retrying (waiting: with failedAttempt) and a failed
	// forward.
	runningJobs  = stateNames(StateRunning)
	retryingJobs = stateNames(StateRetrying)
	failedJobs   = stateNames(StateFailed)
)

// River's job states as River's own machinery moves jobs between them (a
// snoozed job woken, a job taken over from a process that is gone), and
// the one a forward_delivered row stands for (completed: delivered).
var (
	jobAvailable = string(rivertype.JobStateAvailable)
	jobScheduled = string(rivertype.JobStateScheduled)
	jobRetryable = string(rivertype.JobStateRetryable)
	jobRunning   = string(rivertype.JobStateRunning)
	jobDiscarded = string(rivertype.JobStateDiscarded)
	jobCompleted = string(rivertype.JobStateCompleted)
)

// stateNames returns River's names of the job states of the forward states.
func stateNames(states ...State) []string {
	var out []string
	for _, s := range states {
		for _, j := range jobStates[s] {
			if !slices.Contains(out, string(j)) {
				out = append(out, string(j))
			}
		}
	}
	return out
}
