package queue

import (
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/rivertype"

	"github.com/hookgate/hookgate/internal/testing/queuetest"
	"github.com/hookgate/hookgate/internal/testing/storetest"
)

// A forward the fast path delivered at its first attempt is a row of
// forward_delivered, not a River job; every read sees it like a River job
// completed after one attempt: the event's forwards, the target's counts
// and list (by state, time and cursor), the current forward of the event,
// the bulk redelivery's match, and the job fixtures. A newer forward of
// the same event (a redelivery, a River job) supersedes it, and it
// supersedes an older failure.
func TestDeliveredFirstAttemptsReadLikeJobs(t *testing.T) {
	t.Parallel()
	forEachRecordingForm(t, testDeliveredFirstAttemptsReadLikeJobs)
}

// forEachRecordingForm runs test in a subtest for each form of the fast
// path's recording: deleting the outbox rows in the records' statements
// (PostgreSQL), and the split form (Citus: Jobs.Distributed), each on a
// fixture of its own.
func forEachRecordingForm(t *testing.T, test func(t *testing.T, s *fixture, pool *pgxpool.Pool)) {
	for _, split := range []bool{false, true} {
		t.Run(map[bool]string{false: "deleting", true: "split"}[split], func(t *testing.T) {
			t.Parallel()
			s, pool := newFixture(t)
			if split {
				s.Jobs = s.Distributed()
			}
			test(t, s, pool)
		})
	}
}

func testDeliveredFirstAttemptsReadLikeJobs(t *testing.T, s *fixture, _ *pgxpool.Pool) {
	ctx := t.Context()
	at := time.Now().UTC().Add(-time.Minute).Truncate(time.Microsecond)
	// e1 failed earlier through River (an older job), e1 and e2 then went
	// through the fast path: delivered; e3's first attempt failed
	// (retryable, a River job); e4's outbox row was taken by the relay
	// before the outcome was recorded (nothing recorded).
	e1, e2, e3, e4 := uuid.New(), uuid.New(), uuid.New(), uuid.New()
	failed, err := s.jobs.InsertForwardJobs(ctx, "q", queuetest.JobFixture{State: rivertype.JobStateDiscarded, At: at.Add(-time.Hour)},
		queuetest.NewForwardJob{Sender: "acme", Target: "t", EventID: e1, DeliveryID: "d1", MaxAttempts: 5})
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range []uuid.UUID{e1, e2, e3} {
		if err := storetest.InsertOutbox(ctx, s.DB(), storetest.Outbox{Sender: "acme", Target: "t", EventID: e, DeliveryID: []string{"d1", "d2", "d3"}[i]}, at); err != nil {
			t.Fatal(err)
		}
	}
	delivered := func(e uuid.UUID) FirstAttempt {
		return FirstAttempt{Sender: "acme", EventID: e, Target: "t", State: StateDelivered, MaxAttempts: 5,
			AttemptedAt: at, FinalizedAt: &at, ScheduledAt: at, Output: Output{Status: 204, DeliveredAt: at}}
	}
	retry := FirstAttempt{Sender: "acme", EventID: e3, Target: "t", State: StateRetrying, MaxAttempts: 5,
		AttemptedAt: at, ScheduledAt: at.Add(time.Hour), Error: "target answered 503", Output: Output{Status: 503}}
	if err := s.RecordFirstAttempts(ctx, "q", []FirstAttempt{delivered(e1), delivered(e2), retry, delivered(e4)}); err != nil {
		t.Fatal(err)
	}

	fwds, err := s.EventForwards(ctx, "acme", e2)
	if err != nil {
		t.Fatal(err)
	}
	if len(fwds) != 1 || fwds[0].State != StateDelivered || fwds[0].Attempts != 1 || fwds[0].MaxAttempts != 5 ||
		fwds[0].LastStatus != 204 || !fwds[0].DeliveredAt.Equal(at) || fwds[0].Target != "t" || fwds[0].JobID <= failed[0] {
		t.Errorf("forwards of e2: %+v", fwds)
	}
	if fwds, err := s.EventForwards(ctx, "acme", e4); err != nil || len(fwds) != 0 {
		t.Errorf("forwards of e4 (its outbox row gone before the recording): %+v, %v; want none", fwds, err)
	}

	counts, err := s.CountForwards(ctx, "acme", true)
	if err != nil {
		t.Fatal(err)
	}
	if c := counts["t"]; c != (Counts{Retrying: 1, Delivered: 2}) {
		t.Errorf("counts %+v, want 1 retrying, 2 delivered and no failure (e1's is superseded)", c)
	}
	if counts, err := s.CountForwards(ctx, "acme", false); err != nil || counts["t"] != (Counts{Retrying: 1}) {
		t.Errorf("counts without delivered: %+v, %v", counts, err)
	}

	page, err := s.ListTargetForwards(ctx, Filter{Sender: "acme", Target: "t"}, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Forwards) != 2 || page.Next == nil || page.Forwards[0].JobID < page.Forwards[1].JobID {
		t.Fatalf("first page: %+v", page)
	}
	all := page.Forwards
	if page, err = s.ListTargetForwards(ctx, Filter{Sender: "acme", Target: "t"}, 2, page.Next); err != nil {
		t.Fatal(err)
	}
	all = append(all, page.Forwards...)
	if len(all) != 4 || page.Next != nil || all[3].JobID != failed[0] {
		t.Errorf("every forward, newest first: %+v", all)
	}
	page, err = s.ListTargetForwards(ctx, Filter{Sender: "acme", Target: "t", State: StateDelivered, Since: at, Until: at.Add(time.Second)}, 10, nil)
	if err != nil {
		t.Fatal(err)
	}
	// e1 and e2 were recorded by one statement, in no given order.
	if len(page.Forwards) != 2 || page.Forwards[0].JobID < page.Forwards[1].JobID {
		t.Fatalf("delivered: %+v", page.Forwards)
	}
	for _, f := range page.Forwards {
		want := map[uuid.UUID]string{e1: "d1", e2: "d2"}[f.EventID]
		if want == "" || f.DeliveryID != want || !f.FinishedAt.Equal(at) || f.LastStatus != 204 || f.Attempts != 1 {
			t.Errorf("delivered: %+v", f)
		}
	}
	if page, err = s.ListTargetForwards(ctx, Filter{Sender: "acme", Target: "t", State: StateDelivered, Since: at.Add(time.Second)}, 10, nil); err != nil || len(page.Forwards) != 0 {
		t.Errorf("delivered after they were: %+v, %v", page.Forwards, err)
	}
	if page, err = s.ListTargetForwards(ctx, Filter{Sender: "acme", Target: "t", State: StateFailed}, 10, nil); err != nil || len(page.Forwards) != 0 {
		t.Errorf("failed (e1's failure is superseded by its delivery): %+v, %v", page.Forwards, err)
	}

	cur, err := s.CurrentForwards(ctx, "acme", e1, []string{"t"})
	if err != nil {
		t.Fatal(err)
	}
	var e1Delivery int64
	for _, f := range all {
		if f.EventID == e1 && f.State == StateDelivered {
			e1Delivery = f.JobID
		}
	}
	if c := cur["t"]; c.JobID != e1Delivery || c.State != StateDelivered || c.Attempt != 1 || c.Outbox || c.Queued {
		t.Errorf("current forward of e1: %+v, want its delivery %d", c, e1Delivery)
	}

	newest, _, err := s.NewestJobID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	match := Filter{Sender: "acme", Target: "t", State: StateDelivered}
	if n, err := s.CountBulkMatch(ctx, match, newest); err != nil || n != 2 {
		t.Errorf("bulk match of delivered: %d, %v; want 2", n, err)
	}
	// A redelivery of e1 (a newer River job) supersedes its delivery.
	if _, err := s.jobs.InsertForwardJobs(ctx, "q", queuetest.JobFixture{}, queuetest.NewForwardJob{Sender: "acme", Target: "t", EventID: e1, DeliveryID: "d1", MaxAttempts: 5}); err != nil {
		t.Fatal(err)
	}
	got, err := s.BulkMatchBatch(ctx, match, newest, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].EventID != e2 || got[0].DeliveryID != "d2" {
		t.Errorf("bulk match after e1's redelivery: %+v, want e2's delivery only", got)
	}

	jobs, err := s.jobs.ForwardJobs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 5 {
		t.Fatalf("forward jobs: %+v", jobs)
	}
	for _, j := range jobs {
		if j.EventID == e2.String() && (j.State != rivertype.JobStateCompleted || j.Attempt != 1 || j.Output == "") {
			t.Errorf("e2's job fixture: %+v", j)
		}
	}
}

// A bulk redelivery of forwards under way matches, when its job runs, the
// forwards that were running, or retrying, when it was asked for
// (Filter.InStateAt), whatever they have become since; the request counts
// those in the state now.
func TestBulkMatchUnderWayAt(t *testing.T) {
	t.Parallel()
	s, _ := newFixture(t)
	ctx := t.Context()
	at := time.Now().UTC().Truncate(time.Microsecond)
	job := func(f queuetest.JobFixture) int64 {
		t.Helper()
		ids, err := s.jobs.InsertForwardJobs(ctx, "q", f, queuetest.NewForwardJob{Sender: "acme", Target: "t", DeliveryID: "d", MaxAttempts: 5})
		if err != nil {
			t.Fatal(err)
		}
		return ids[0]
	}
	running := job(queuetest.JobFixture{State: rivertype.JobStateRunning, Attempt: 1, At: at.Add(-time.Second)})
	retrying := job(queuetest.JobFixture{State: rivertype.JobStateRetryable, Attempt: 1, Errors: []string{"503"}, At: at.Add(-time.Second), ScheduledAt: at.Add(time.Hour)})
	retriedSince := job(queuetest.JobFixture{State: rivertype.JobStateCompleted, Attempt: 2, Errors: []string{"503"}, At: at.Add(time.Second)})
	job(queuetest.JobFixture{State: rivertype.JobStateCompleted, Attempt: 1, At: at.Add(time.Second)}) // pending then, delivered since
	job(queuetest.JobFixture{})                                                                        // pending
	newest, _, err := s.NewestJobID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for state, want := range map[State][]int64{StateRunning: {running}, StateRetrying: {retrying, retriedSince}} {
		ids := bulkMatchIDs(t, s.Jobs, Filter{Sender: "acme", Target: "t", State: state, InStateAt: at}, newest)
		if !slices.Equal(ids, want) {
			t.Errorf("%s at the request: matched jobs %v, want %v", state, ids, want)
		}
	}
	for state, want := range map[State]int64{StateRunning: 1, StateRetrying: 1} {
		if n, err := s.CountBulkMatch(ctx, Filter{Sender: "acme", Target: "t", State: state}, newest); err != nil || n != want {
			t.Errorf("%s now: counted %d, %v; want %d", state, n, err, want)
		}
	}
}

// A bulk redelivery of running forwards reads forward_outbox (distributed
// by sender on Citus) in statements of its own, apart from River's table
// and forward_delivered (local tables), and still takes each forward once:
// a leased outbox row is a fast-path attempt under way (JobID -1), unless
// its event has a forward_delivered row to the target (the attempt was
// recorded between the two reads), which is then taken as it is (matched
// when its attempt started before the request); and a redelivery queued
// after a forward is not under way while that forward's outbox row is
// there.
func TestBulkRunningReadsTheOutboxApart(t *testing.T) {
	t.Parallel()
	s, pool := newFixture(t)
	ctx := t.Context()
	at := time.Now().UTC().Truncate(time.Microsecond)
	// eA: under way in the fast path. eB: under way at the request, its
	// delivery recorded since (its outbox row is still read: the race).
	// eC: the same, its attempt started after the request.
	eA, eB, eC := uuid.New(), uuid.New(), uuid.New()
	for i, e := range []uuid.UUID{eA, eB, eC} {
		if err := storetest.InsertOutbox(ctx, s.DB(), storetest.Outbox{Sender: "acme", Target: "t", EventID: e, DeliveryID: "d"}, at.Add(time.Duration(i-3)*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `UPDATE forward_outbox SET leased_until = now() + interval '1 hour' WHERE sender = 'acme' AND target = 't'`); err != nil {
		t.Fatal(err)
	}
	var dB int64
	err := pool.QueryRow(ctx, `INSERT INTO forward_delivered (sender, event_id, target, delivery_id, created_at, attempted_at, delivered_at, status, max_attempts)
VALUES ('acme', $1, 't', 'd', $3::timestamptz - interval '2 seconds', $3::timestamptz - interval '1 second', $3::timestamptz + interval '1 second', 204, 5),
       ('acme', $2, 't', 'd', $3::timestamptz - interval '1 second', $3::timestamptz + interval '1 second', $3::timestamptz + interval '2 seconds', 204, 5)
RETURNING id`, eB.String(), eC.String(), at).Scan(&dB)
	if err != nil {
		t.Fatal(err)
	}
	// eD and eE: redeliveries queued after the fast path's attempt, run by
	// River to find whether they must wait; eD's forward is still in the
	// outbox (not leased), eE's has left it.
	eD, eE := uuid.New(), uuid.New()
	if err := storetest.InsertOutbox(ctx, s.DB(), storetest.Outbox{Sender: "acme", Target: "t", EventID: eD, DeliveryID: "d"}, at.Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	queued, err := s.jobs.InsertForwardJobs(ctx, "q", queuetest.JobFixture{State: rivertype.JobStateRunning, Attempt: 1, At: at.Add(-time.Second)},
		queuetest.NewForwardJob{Sender: "acme", Target: "t", EventID: eD, DeliveryID: "d", MaxAttempts: 5},
		queuetest.NewForwardJob{Sender: "acme", Target: "t", EventID: eE, DeliveryID: "d", MaxAttempts: 5})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE river_job SET args = args || '{"after": -1}' WHERE id = ANY($1)`, queued); err != nil {
		t.Fatal(err)
	}
	newest, _, err := s.NewestJobID(ctx)
	if err != nil {
		t.Fatal(err)
	}

	running := Filter{Sender: "acme", Target: "t", State: StateRunning, InStateAt: at}
	got, err := s.FastPathRunningBatch(ctx, running, 10)
	if err != nil {
		t.Fatal(err)
	}
	want := []Matched{{JobID: -1, EventID: eA, DeliveryID: "d"}, {JobID: dB, EventID: eB, DeliveryID: "d"}}
	if !slices.Equal(got, want) {
		t.Errorf("FastPathRunningBatch = %+v, want %+v", got, want)
	}
	if n, err := s.CountFastPathRunning(ctx, Filter{Sender: "acme", Target: "t", State: StateRunning}, at); err != nil || n != 2 {
		t.Errorf("CountFastPathRunning = %d, %v; want 2", n, err)
	}
	matched := func(want ...int64) {
		t.Helper()
		ids := bulkMatchIDs(t, s.Jobs, running, newest)
		if !slices.Equal(ids, want) {
			t.Errorf("BulkMatchBatch(running at the request) = %v, want %v", ids, want)
		}
		if n, err := s.CountBulkMatch(ctx, Filter{Sender: "acme", Target: "t", State: StateRunning}, newest); err != nil || n != int64(len(want)) {
			t.Errorf("CountBulkMatch(running now) = %d, %v; want %d", n, err, len(want))
		}
	}
	matched(queued[1])
	if _, err := storetest.DeleteOutboxOfEvent(ctx, s.DB(), "acme", eD); err != nil {
		t.Fatal(err)
	}
	matched(queued...)
}

// bulkMatchIDs returns the job IDs of the first 10 forwards a bulk
// redelivery of f matches up to job maxID (BulkMatchBatch), oldest first.
func bulkMatchIDs(t *testing.T, s *Jobs, f Filter, maxID int64) []int64 {
	t.Helper()
	got, err := s.BulkMatchBatch(t.Context(), f, maxID, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]int64, 0, len(got))
	for _, m := range got {
		ids = append(ids, m.JobID)
	}
	return ids
}

// TestRecordFirstAttemptsOneTransactionPerSender: a recording that holds
// outcomes of several senders commits each sender's in a transaction of
// its own (on Citus, one transaction over the outbox rows of two senders
// would commit in two phases), still in one round trip; each sender's
// delivered, retried and released forwards stay one transaction.
func TestRecordFirstAttemptsOneTransactionPerSender(t *testing.T) {
	t.Parallel()
	forEachRecordingForm(t, testRecordFirstAttemptsOneTransactionPerSender)
}

func testRecordFirstAttemptsOneTransactionPerSender(t *testing.T, s *fixture, pool *pgxpool.Pool) {
	ctx := t.Context()
	at := time.Now().UTC().Add(-time.Minute).Truncate(time.Microsecond)
	var batch []FirstAttempt
	for _, sender := range []string{"acme", "bravo", "acme", "carol", "bravo"} {
		e := uuid.New()
		if err := storetest.InsertOutbox(ctx, s.DB(), storetest.Outbox{Sender: sender, Target: "t", EventID: e, DeliveryID: e.String()}, at); err != nil {
			t.Fatal(err)
		}
		batch = append(batch, FirstAttempt{Sender: sender, EventID: e, Target: "t", State: StateDelivered, MaxAttempts: 5,
			AttemptedAt: at, FinalizedAt: &at, ScheduledAt: at, Output: Output{Status: 204, DeliveredAt: at}})
	}
	if err := s.RecordFirstAttempts(ctx, "q", batch); err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, `SELECT sender, xmin::text FROM forward_delivered`)
	if err != nil {
		t.Fatal(err)
	}
	xids := map[string]map[string]bool{} // sender -> its rows' transactions
	n := 0
	for rows.Next() {
		var sender, xid string
		if err := rows.Scan(&sender, &xid); err != nil {
			t.Fatal(err)
		}
		if xids[sender] == nil {
			xids[sender] = map[string]bool{}
		}
		xids[sender][xid] = true
		n++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n != len(batch) || len(xids) != 3 {
		t.Fatalf("%d delivered rows of %d senders, want %d of 3", n, len(xids), len(batch))
	}
	seen := map[string]string{}
	for sender, set := range xids {
		if len(set) != 1 {
			t.Errorf("%s's rows were written by %d transactions, want 1", sender, len(set))
		}
		for xid := range set {
			if other, ok := seen[xid]; ok {
				t.Errorf("%s and %s were recorded in one transaction (%s)", sender, other, xid)
			}
			seen[xid] = sender
		}
	}
	if left, err := s.jobs.CountOutboxOf(ctx, "acme", "t"); err != nil || left != 0 {
		t.Errorf("acme's outbox rows left: %d, %v", left, err)
	}
}

// TestSplitRecordingLeavesOthersMarks: the split form of the recording
// (Citus) writes each record in a transaction that marks its outbox row
// recorded, and deletes the rows it marked after that has committed. A
// row another recording (the relay's, say) marked already is neither
// recorded a second time nor deleted by this one: its delete is the other
// recording's, and if that never comes, the relay takes the row again
// after its grace.
func TestSplitRecordingLeavesOthersMarks(t *testing.T) {
	t.Parallel()
	f, pool := newFixture(t)
	s := f.Distributed()
	ctx := t.Context()
	at := time.Now().UTC().Add(-time.Minute).Truncate(time.Microsecond)
	e1, e2, e3 := uuid.New(), uuid.New(), uuid.New()
	for _, e := range []uuid.UUID{e1, e2, e3} {
		if err := storetest.InsertOutbox(ctx, f.DB(), storetest.Outbox{Sender: "acme", Target: "t", EventID: e, DeliveryID: e.String()}, at); err != nil {
			t.Fatal(err)
		}
	}
	other := time.Now().UTC().Add(-time.Second).Truncate(time.Microsecond)
	if _, err := pool.Exec(ctx, `UPDATE forward_outbox SET recorded_at = $1 WHERE sender = 'acme' AND event_id = $2`, other, e3); err != nil {
		t.Fatal(err)
	}
	delivered := func(e uuid.UUID) FirstAttempt {
		return FirstAttempt{Sender: "acme", EventID: e, Target: "t", State: StateDelivered, MaxAttempts: 5,
			AttemptedAt: at, FinalizedAt: &at, ScheduledAt: at, Output: Output{Status: 204, DeliveredAt: at}}
	}
	retry := FirstAttempt{Sender: "acme", EventID: e2, Target: "t", State: StateRetrying, MaxAttempts: 5,
		AttemptedAt: at, ScheduledAt: at.Add(time.Hour), Error: "target answered 503", Output: Output{Status: 503}}
	if err := s.RecordFirstAttempts(ctx, "q", []FirstAttempt{delivered(e1), retry, delivered(e3)}); err != nil {
		t.Fatal(err)
	}
	for e, want := range map[uuid.UUID]State{e1: StateDelivered, e2: StateRetrying} {
		fwds, err := s.EventForwards(ctx, "acme", e)
		if err != nil || len(fwds) != 1 || fwds[0].State != want {
			t.Errorf("forwards of %s: %+v, %v; want one %s", e, fwds, err, want)
		}
	}
	// No record of this recording's; and the row, marked by the other
	// within its grace, is that recording's to show (its record), not read
	// as a forward of its own (store.Unrecorded).
	if fwds, err := s.EventForwards(ctx, "acme", e3); err != nil || len(fwds) != 0 {
		t.Errorf("forwards of the row another recording marked: %+v, %v; want none recorded by this one, and the marked row not read", fwds, err)
	}
	var left []uuid.UUID
	rows, err := pool.Query(ctx, `SELECT event_id FROM forward_outbox WHERE sender = 'acme' AND recorded_at = $1`, other)
	if err != nil {
		t.Fatal(err)
	}
	if left, err = pgx.CollectRows(rows, pgx.RowTo[uuid.UUID]); err != nil {
		t.Fatal(err)
	}
	if len(left) != 1 || left[0] != e3 {
		t.Errorf("outbox rows left marked by the other recording: %v, want e3 alone", left)
	}
	if n, err := f.jobs.CountOutboxOf(ctx, "acme", ""); err != nil || n != 1 {
		t.Errorf("%d outbox rows left (%v), want e3's alone", n, err)
	}
	// Marked longer ago than the grace, the row's delete never came (a
	// crash; its record may be lost): it reads as the pending forward it
	// is until the relay takes it again.
	if _, err := pool.Exec(ctx, `UPDATE forward_outbox SET recorded_at = now() - interval '1 hour' WHERE sender = 'acme' AND event_id = $1`, e3); err != nil {
		t.Fatal(err)
	}
	if fwds, err := s.EventForwards(ctx, "acme", e3); err != nil || len(fwds) != 1 || fwds[0].JobID != 0 || fwds[0].State != StatePending {
		t.Errorf("forwards of a row marked an hour ago: %+v, %v; want its outbox row, pending", fwds, err)
	}
}

// TestNewFirstAttemptLooksForNoFailure: the recording of a New forward (of
// an event its ingest created) does not look for failed forwards of its
// event to supersede, and one that is not New does. A New forward never
// has one in use; the fixture plants one, older than the event could be,
// only to show which recording looked.
func TestNewFirstAttemptLooksForNoFailure(t *testing.T) {
	t.Parallel()
	forEachRecordingForm(t, func(t *testing.T, s *fixture, _ *pgxpool.Pool) {
		ctx := t.Context()
		at := time.Now().UTC().Add(-time.Minute).Truncate(time.Microsecond)
		fresh, handed := uuid.New(), uuid.New()
		for i, e := range []uuid.UUID{fresh, handed} {
			d := []string{"d1", "d2"}[i]
			if _, err := s.jobs.InsertForwardJobs(ctx, "q", queuetest.JobFixture{State: rivertype.JobStateDiscarded, At: at.Add(-time.Hour)},
				queuetest.NewForwardJob{Sender: "acme", Target: "t", EventID: e, DeliveryID: d, MaxAttempts: 5}); err != nil {
				t.Fatal(err)
			}
			if err := storetest.InsertOutbox(ctx, s.DB(), storetest.Outbox{Sender: "acme", Target: "t", EventID: e, DeliveryID: d}, at); err != nil {
				t.Fatal(err)
			}
		}
		delivered := func(e uuid.UUID, isNew bool) FirstAttempt {
			return FirstAttempt{Sender: "acme", EventID: e, Target: "t", State: StateDelivered, MaxAttempts: 5, New: isNew,
				AttemptedAt: at, FinalizedAt: &at, ScheduledAt: at, Output: Output{Status: 204, DeliveredAt: at}}
		}
		if err := s.RecordFirstAttempts(ctx, "q", []FirstAttempt{delivered(fresh, true), delivered(handed, false)}); err != nil {
			t.Fatal(err)
		}
		page, err := s.ListTargetForwards(ctx, Filter{Sender: "acme", Target: "t", State: StateFailed}, 10, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Forwards) != 1 || page.Forwards[0].EventID != fresh {
			t.Errorf("failed forwards %+v: want only the planted one of the New forward's event, the other superseded by its delivery", page.Forwards)
		}
	})
}
