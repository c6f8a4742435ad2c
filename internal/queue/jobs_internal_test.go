package queue

import (
	"io/fs"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/riverqueue/river/rivertype"

	"github.com/hookgate/hookgate/internal/store"
	"github.com/hookgate/hookgate/internal/testing/queuetest"
	"github.com/hookgate/hookgate/migrations"
)

// TestForwardKindLiteral: the statements name the forward jobs' kind as
// the literal that hookgate's partial index on them has in its predicate
// (migration 9), so that PostgreSQL plans them with it; and the counts
// name the forward jobs not finished as the predicate of hookgate's index
// on those (migration 23) has it.
func TestForwardKindLiteral(t *testing.T) {
	t.Parallel()
	if got, want := jobSQL("j.kind = {forward_kind} AND n.kind = {forward_kind}"), "j.kind = 'hookgate_forward' AND n.kind = 'hookgate_forward'"; got != want {
		t.Errorf("jobSQL = %q, want %q", got, want)
	}
	index, err := fs.ReadFile(migrations.FS(), "00009_forward_job_index.sql")
	if err != nil {
		t.Fatal(err)
	}
	if pred := "WHERE kind = " + forwardKind + ";"; !strings.Contains(string(index), pred) {
		t.Errorf("migration 9's index has no predicate %q:\n%s", pred, index)
	}
	// The counts repeat the predicate of migration 23's index on the
	// forwards not finished (unfinishedForwards), which names River's
	// states of a finished forward: completed and failed.
	m, err := fs.ReadFile(migrations.FS(), "00023_forward_failed_counts.sql")
	if err != nil {
		t.Fatal(err)
	}
	if pred := "WHERE " + strings.ReplaceAll(jobSQL(unfinishedForwards), "j.", "") + ";"; !strings.Contains(string(m), pred) {
		t.Errorf("migration 23 has no index with the predicate %q (unfinishedForwards):\n%s", pred, m)
	}
	if !strings.Contains(countsSQL, jobSQL(unfinishedForwards)) {
		t.Errorf("countsSQL does not repeat unfinishedForwards %q:\n%s", jobSQL(unfinishedForwards), countsSQL)
	}
	finished := append(stateNames(StateDelivered), stateNames(StateFailed)...)
	slices.Sort(finished)
	if want := "NOT IN ('" + strings.Join(finished, "', '") + "')"; !strings.Contains(unfinishedForwards, want) {
		t.Errorf("unfinishedForwards %q does not name River's finished states as %s", unfinishedForwards, want)
	}
}

// TestFixturesForwardKind: the job fixtures (package queuetest, which
// cannot import this package) write and read jobs of the forward kind.
func TestFixturesForwardKind(t *testing.T) {
	t.Parallel()
	if queuetest.ForwardKind != ForwardKind {
		t.Fatalf("queuetest.ForwardKind = %q, want ForwardKind %q", queuetest.ForwardKind, ForwardKind)
	}
	if queuetest.SupersededKey != supersededKey {
		t.Fatalf("queuetest.SupersededKey = %q, want supersededKey %q", queuetest.SupersededKey, supersededKey)
	}
}

// TestFailedLiteral: the statements on failed forwards name River's
// states of a failed forward (stateNames(StateFailed)) as the literals of
// the predicates of migration 23's indexes, and repeat those predicates
// (failedForwards, uncountedFailures), so that PostgreSQL plans them with
// those indexes.
func TestFailedLiteral(t *testing.T) {
	t.Parallel()
	m := regexp.MustCompile(`^j\.state IN \((.*)\)$`).FindStringSubmatch(failedLiteral)
	if m == nil {
		t.Fatalf("failedLiteral %q is not j.state IN (…)", failedLiteral)
	}
	var lits []string
	for _, l := range strings.Split(m[1], ", ") {
		lits = append(lits, strings.Trim(l, "'"))
	}
	if want := stateNames(StateFailed); !slices.Equal(lits, want) {
		t.Errorf("failedLiteral names the states %v, a failed forward's are %v", lits, want)
	}
	index, err := fs.ReadFile(migrations.FS(), "00023_forward_failed_counts.sql")
	if err != nil {
		t.Fatal(err)
	}
	for _, pred := range []string{failedForwards("j"), uncountedFailures("j")} {
		if want := "WHERE " + strings.ReplaceAll(pred, "j.", "") + ";"; !strings.Contains(string(index), want) {
			t.Errorf("migration 23 has no index with the predicate %q:\n%s", want, index)
		}
	}
	for name, sql := range map[string]string{"failedCountsSQL": failedCountsSQL, "foldSQL": foldSQL} {
		if !strings.Contains(sql, uncountedFailures("j")) {
			t.Errorf("%s does not repeat uncountedFailures %q:\n%s", name, uncountedFailures("j"), sql)
		}
	}
	if !strings.Contains(failedCandidates, failedForwards("f")) {
		t.Errorf("failedCandidates does not repeat failedForwards %q:\n%s", failedForwards("f"), failedCandidates)
	}
}

func TestStateOf(t *testing.T) {
	t.Parallel()
	// want before any failed attempt, and after one.
	for js, want := range map[rivertype.JobState][2]State{
		rivertype.JobStateAvailable: {StatePending, StateRetrying},
		rivertype.JobStateScheduled: {StatePending, StateRetrying},
		rivertype.JobStatePending:   {StatePending, StateRetrying},
		rivertype.JobStateRetryable: {StatePending, StateRetrying},
		rivertype.JobStateRunning:   {StateRunning, StateRunning},
		rivertype.JobStateCompleted: {StateDelivered, StateDelivered},
		rivertype.JobStateCancelled: {StateFailed, StateFailed},
		rivertype.JobStateDiscarded: {StateFailed, StateFailed},
		"some_future_state":         {StatePending, StateRetrying},
	} {
		for i, failed := range []bool{false, true} {
			if got := stateOf(js, failed); got != want[i] {
				t.Errorf("stateOf(%s, failed attempt %v) = %s, want %s", js, failed, got, want[i])
			}
		}
	}
	// Every state River knows maps to a forward state, and back.
	for _, js := range rivertype.JobStates() {
		for _, failed := range []bool{false, true} {
			st := stateOf(js, failed)
			if !ValidState(st) {
				t.Errorf("stateOf(%s, %v) = %q, not a forward state", js, failed, st)
			}
			if !slices.Contains(jobStates[st], js) {
				t.Errorf("job state %s is not among the job states of %s: %v", js, st, jobStates[st])
			}
		}
	}
	unfinished := map[rivertype.JobState]bool{}
	for _, js := range unfinishedJobStates() {
		if unfinished[js] {
			t.Errorf("job state %s twice among the unfinished ones", js)
		}
		unfinished[js] = true
	}
	for _, js := range rivertype.JobStates() {
		want := stateOf(js, false) != StateDelivered && stateOf(js, false) != StateFailed
		if unfinished[js] != want {
			t.Errorf("job state %s: unfinished %v, want %v", js, unfinished[js], want)
		}
	}
	if n := stateNames(StatePending, StateRetrying); len(n) != len(waitingJobStates) {
		t.Errorf("stateNames(pending, retrying) = %v, want each waiting state once", n)
	}
}

// TestStatusIn checks that the status of every target answer that older
// versions recorded only in the error's text (as River stores it) is found
// again, and that errors without one give 0.
func TestStatusIn(t *testing.T) {
	t.Parallel()
	for text, want := range map[string]int{
		"target answered 503":                                                            503,
		"target answered 429, Retry-After 30s":                                           429,
		"target answered 408":                                                            408,
		"JobCancelError: target answered 400":                                            400,
		"JobCancelError: target answered 410":                                            410,
		`post to target "t1": context deadline exceeded`:                                 0,
		"JobCancelError: event 00000000-0000-0000-0000-000000000000 is no longer stored": 0,
		"read event: connection answered 5000 times":                                     0,
	} {
		if got := statusIn(text); got != want {
			t.Errorf("statusIn(%q) = %d, want %d", text, got, want)
		}
	}
}

// TestDecodeOutcome checks where a forward's last status comes from: the
// output its latest attempt recorded (with the Retry-After), not the
// error's text; the text only for an attempt that recorded none (an older
// version's), and nothing from an earlier attempt's output.
func TestDecodeOutcome(t *testing.T) {
	t.Parallel()
	delivered := time.Date(2026, 12, 1, 5, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name            string
		state           rivertype.JobState
		lastErr, output string
		status          int
		retryAfter      time.Duration
		errText         string
	}{
		{"delivered", rivertype.JobStateCompleted, "", `{"attempt":2,"status":204,"delivered_at":"2026-12-01T05:00:00Z"}`, 204, 0, ""},
		{"retrying with Retry-After", rivertype.JobStateRetryable,
			`{"attempt":3,"error":"target answered 503, Retry-After 1m30s"}`, `{"attempt":3,"status":503,"retry_after":90}`, 503, 90 * time.Second, "target answered 503, Retry-After 1m30s"},
		{"status from output, not text", rivertype.JobStateCancelled,
			`{"attempt":1,"error":"JobCancelError: gone"}`, `{"attempt":1,"status":410}`, 410, 0, "gone"},
		{"older version: the text", rivertype.JobStateDiscarded,
			`{"attempt":20,"error":"target answered 500"}`, ``, 500, 0, "target answered 500"},
		{"earlier attempt's output", rivertype.JobStateRetryable,
			`{"attempt":2,"error":"post to target \"t\": connection refused"}`, `{"attempt":1,"status":503,"retry_after":5}`, 0, 0, `post to target "t": connection refused`},
		{"nothing yet", rivertype.JobStateAvailable, "", "", 0, 0, ""},
	} {
		var f Forward
		var lastErr, output []byte
		if tc.lastErr != "" {
			lastErr = []byte(tc.lastErr)
		}
		if tc.output != "" {
			output = []byte(tc.output)
		}
		if err := decodeOutcome(&f, tc.state, lastErr, output); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if f.LastStatus != tc.status || f.LastRetryAfter != tc.retryAfter || f.LastError != tc.errText {
			t.Errorf("%s: status %d, Retry-After %v, error %q; want %d, %v, %q", tc.name, f.LastStatus, f.LastRetryAfter, f.LastError, tc.status, tc.retryAfter, tc.errText)
		}
		if tc.state == rivertype.JobStateCompleted && !f.DeliveredAt.Equal(delivered) {
			t.Errorf("%s: delivered at %v, want %v", tc.name, f.DeliveredAt, delivered)
		}
	}
}

// TestRecordedState: the fast path's first attempts that were not delivered
// are recorded in the River states River's own worker leaves such jobs in:
// a retry due within River's scheduler interval (5 s) available (River's
// fetch takes it once its scheduled_at has come), a later one retryable
// (for the scheduler), a failure at once cancelled and one whose attempts
// are used up discarded; no other state is recorded as a job.
func TestRecordedState(t *testing.T) {
	t.Parallel()
	now := time.Now()
	retry := func(in time.Duration) FirstAttempt {
		return FirstAttempt{State: StateRetrying, ScheduledAt: now.Add(in)}
	}
	for _, c := range []struct {
		a    FirstAttempt
		want rivertype.JobState
		// reads is the state the job reads back as.
		reads State
	}{
		{FirstAttempt{State: StatePending}, rivertype.JobStateAvailable, StatePending},
		{retry(0), rivertype.JobStateAvailable, StateRetrying},
		{retry(100 * time.Millisecond), rivertype.JobStateAvailable, StateRetrying},
		{retry(5 * time.Second), rivertype.JobStateAvailable, StateRetrying},
		{retry(5*time.Second + time.Nanosecond), rivertype.JobStateRetryable, StateRetrying},
		{retry(5 * time.Minute), rivertype.JobStateRetryable, StateRetrying},
		{FirstAttempt{State: StateFailed, FailedAtOnce: true}, rivertype.JobStateCancelled, StateFailed},
		{FirstAttempt{State: StateFailed}, rivertype.JobStateDiscarded, StateFailed},
	} {
		if got, err := recordedState(c.a, now); err != nil || got != string(c.want) {
			t.Errorf("recordedState(%s due in %v, at once %v) = %q, %v; want %s", c.a.State, c.a.ScheduledAt.Sub(now), c.a.FailedAtOnce, got, err, c.want)
		}
		// A retry is recorded with its first attempt's error.
		if got := stateOf(c.want, c.a.State == StateRetrying); got != c.reads {
			t.Errorf("%s is recorded as %s, which reads back as %s, want %s", c.a.State, c.want, got, c.reads)
		}
	}
	for _, s := range []State{StateRunning, StateDelivered, ""} {
		if got, err := recordedState(FirstAttempt{State: s}, now); err == nil {
			t.Errorf("recordedState(%q) = %q, want an error", s, got)
		}
	}
}

// TestListAfterADeliveryCursor: a forward list given a delivery's cursor
// refuses it as a bad cursor, before any query.
func TestListAfterADeliveryCursor(t *testing.T) {
	t.Parallel()
	if _, err := NewJobs(nil).ListTargetForwards(t.Context(), Filter{Sender: "s", Target: "t"}, 1, &store.Cursor{DeliveryID: "x"}); !store.IsBadCursor(err) {
		t.Errorf("ListTargetForwards after a delivery's cursor: %v, want a bad cursor", err)
	}
}
