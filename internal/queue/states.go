package queue

import (
	"fmt"
	"slices"

	"github.com/riverqueue/river/rivertype"
)

// State is a forward's state as operators see it.
type State string

// The states of a forward.
const (
	// StatePending waits for the first attempt; none has failed yet.
	StatePending State = "pending"
	// StateRunning has an attempt under way.
	StateRunning State = "running"
	// StateRetrying had an attempt fail and waits for the next one.
	StateRetrying State = "retrying"
	// StateDelivered got a 2xx answer from the target.
	StateDelivered State = "delivered"
	// StateFailed will get no more attempts.
	StateFailed State = "failed"
)

// waitingJobStates are River's states of a job that waits for an attempt.
// River leaves a retry that is due soon available, and a later one
// retryable. So the state alone does not tell a first attempt from a
// retry; failedAttempt does.
var waitingJobStates = []rivertype.JobState{
	rivertype.JobStateAvailable, rivertype.JobStateScheduled, rivertype.JobStatePending, rivertype.JobStateRetryable,
}

// jobStates maps each forward state to the River job states it may have.
// It is the one mapping of the two, and stateOf is its inverse. Pending
// and retrying share River's waiting states; failedAttempt tells them
// apart.
var jobStates = map[State][]rivertype.JobState{
	StatePending:   waitingJobStates,
	StateRunning:   {rivertype.JobStateRunning},
	StateRetrying:  waitingJobStates,
	StateDelivered: {rivertype.JobStateCompleted},
	StateFailed:    {rivertype.JobStateCancelled, rivertype.JobStateDiscarded},
}

// stateOf maps a River job state, and whether an attempt of the job has
// failed, to a forward's state. A waiting job is retrying after a failed
// attempt and pending before. A state that River may add later counts as
// waiting.
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

// failedAttempt is the SQL condition that an attempt of the job alias has
// failed: it was attempted and has an error recorded. River decrements
// attempt when a job snoozes, so a forward that its breaker held before any
// attempt has none. It tells retrying from pending in the statements.
func failedAttempt(alias string) string {
	return fmt.Sprintf("(%[1]s.attempt >= 1 AND coalesce(cardinality(%[1]s.errors), 0) > 0)", alias)
}

// inState is the SQL condition that job j is in forward state s. The
// parameter numbered param holds stateNames(s).
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

var unfinished = []State{StatePending, StateRunning, StateRetrying}

// Unfinished reports whether a forward in state s may still be attempted.
func (s State) Unfinished() bool { return slices.Contains(unfinished, s) }

// unfinishedJobStates returns the River states of an unfinished job. In
// these states, River does not insert a second unique job of the same key.
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

// River's job states as the statements take them. They are query
// parameters, never literals in the SQL, so jobStates stays the one
// mapping. No index that the statements use has a state in its predicate,
// which would need a literal.
var (
	unfinishedJobs = stateNames(unfinished...)
	// retryingJobs also needs failedAttempt to tell it from pending.
	runningJobs  = stateNames(StateRunning)
	retryingJobs = stateNames(StateRetrying)
	failedJobs   = stateNames(StateFailed)
)

// River's job states as a wake or a takeover moves jobs between them. A
// forward_delivered row stands for jobCompleted.
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
