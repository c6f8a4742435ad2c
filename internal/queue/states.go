package queue

import (
	"slices"

	"github.com/riverqueue/river/rivertype"
)

// A forward's five states, the one mapping between them and River's job
// states (jobStates), and River's state names as the statements take them.

// State is a forward's state as operators see it.
type State string

// The states of a forward.
const (
	// StatePending: waiting for its first attempt, or for the next one.
	StatePending State = "pending"
	// StateRunning: an attempt is under way.
	StateRunning State = "running"
	// StateRetrying: an attempt failed and another is scheduled.
	StateRetrying State = "retrying"
	// StateDelivered: the target answered 2xx.
	StateDelivered State = "delivered"
	// StateFailed: no more attempts will be made.
	StateFailed State = "failed"
)

// jobStates maps each forward state to River's job states: the one
// mapping of the two (stateOf is its inverse). A state River may add later
// is pending.
var jobStates = map[State][]rivertype.JobState{
	StatePending:   {rivertype.JobStateAvailable, rivertype.JobStateScheduled, rivertype.JobStatePending},
	StateRunning:   {rivertype.JobStateRunning},
	StateRetrying:  {rivertype.JobStateRetryable},
	StateDelivered: {rivertype.JobStateCompleted},
	StateFailed:    {rivertype.JobStateCancelled, rivertype.JobStateDiscarded},
}

// stateOf maps a River job state (as the statements read it) to a
// forward's state: available, scheduled and pending are pending; running is
// running; retryable is retrying; completed is delivered; cancelled and
// discarded are failed. A state River may add later is pending. The store's
// API speaks a forward's five states only.
func stateOf(s rivertype.JobState) State {
	for st, js := range jobStates {
		for _, j := range js {
			if j == s {
				return st
			}
		}
	}
	return StatePending
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
		out = append(out, jobStates[s]...)
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
	// running, a retrying and a failed forward.
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
	jobRunning   = string(rivertype.JobStateRunning)
	jobDiscarded = string(rivertype.JobStateDiscarded)
	jobCompleted = string(rivertype.JobStateCompleted)
)

// stateNames returns River's names of the job states of the forward states.
func stateNames(states ...State) []string {
	var out []string
	for _, s := range states {
		for _, j := range jobStates[s] {
			out = append(out, string(j))
		}
	}
	return out
}
