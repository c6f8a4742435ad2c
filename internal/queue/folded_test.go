package queue

import (
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/store"
	"github.com/hookgate/hookgate/internal/testing/storetest"
)

// deliveredWithAnswer is a forward of acme's event e to target t that the
// fast path delivered at its first attempt at at, with the target's answer.
func deliveredWithAnswer(e uuid.UUID, at time.Time) FirstAttempt {
	return FirstAttempt{Sender: "acme", EventID: e, Target: "t", State: StateDelivered, MaxAttempts: 5, New: true,
		AttemptedAt: at, FinalizedAt: &at, ScheduledAt: at, Output: Output{Status: 202, DeliveredAt: at.Add(3 * time.Millisecond)},
		Answer: store.Attempt{Sender: "acme", EventID: e, Target: "t", StartedAt: at, Took: 3217 * time.Microsecond,
			Outcome: "delivered", Cause: store.CauseFirst, Attempt: 1, Status: 202,
			Header: map[string][]string{"X-Request-Id": {"r-" + e.String()[:8]}}, Body: []byte("queued " + e.String()[:8])}}
}

// sameAttempt reports whether got is want as EventAttempts reads it back.
func sameAttempt(got, want store.Attempt) bool {
	return got.Sender == want.Sender && got.EventID == want.EventID && got.Target == want.Target && got.StartedAt.Equal(want.StartedAt) &&
		got.Took == want.Took && got.Outcome == want.Outcome && got.Cause == want.Cause && got.Attempt == want.Attempt &&
		got.Actor == "" && got.JobID == 0 && got.Status == want.Status && got.Ack == want.Ack && got.Error == "" &&
		slices.Equal(got.Header["X-Request-Id"], want.Header["X-Request-Id"]) && len(got.Header) == len(want.Header) &&
		string(got.Body) == string(want.Body)
}

// TestDeliveredAttemptReadOnce: the attempt of a forward the fast path
// delivered reads back as it was recorded, once, in both recording forms:
// kept in the forward's forward_delivered row when the recording deletes
// the outbox row, a forward_attempts row in the split form (Citus). A
// recording tried again (its first COMMIT's outcome unknown) adds none. A
// delivered forward whose outbox row the relay took first still has its
// attempt, once, even when recorded twice.
func TestDeliveredAttemptReadOnce(t *testing.T) {
	t.Parallel()
	forEachRecordingForm(t, func(t *testing.T, s *fixture, pool *pgxpool.Pool) {
		ctx := t.Context()
		at := time.Now().UTC().Add(-time.Minute).Truncate(time.Microsecond)
		taken, untaken := uuid.New(), uuid.New()
		if err := storetest.InsertOutbox(ctx, s.DB(), storetest.Outbox{Sender: "acme", Target: "t", EventID: taken, DeliveryID: "d1"}, at); err != nil {
			t.Fatal(err)
		}
		batch := []FirstAttempt{deliveredWithAnswer(taken, at), deliveredWithAnswer(untaken, at)}
		for try := range 2 {
			if err := s.RecordFirstAttempts(ctx, "q", batch); err != nil {
				t.Fatal(err)
			}
			for _, fa := range batch {
				as, err := s.EventAttempts(ctx, "acme", fa.EventID)
				if err != nil {
					t.Fatal(err)
				}
				if len(as) != 1 || !sameAttempt(as[0], fa.Answer) {
					t.Errorf("recording %d: attempts of %s: %+v; want its one attempt %+v", try+1, fa.EventID, as, fa.Answer)
				}
			}
		}
		var folded, rows int
		if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM forward_delivered WHERE took_us IS NOT NULL), (SELECT count(*) FROM forward_attempts)`).Scan(&folded, &rows); err != nil {
			t.Fatal(err)
		}
		// The split form writes every attempt to forward_attempts; the
		// deleting form only the one whose outbox row it did not take.
		wantFolded, wantRows := 1, 1
		if s.split {
			wantFolded, wantRows = 0, 2
		}
		if folded != wantFolded || rows != wantRows {
			t.Errorf("attempts kept in forward_delivered rows: %d, forward_attempts rows: %d; want %d and %d", folded, rows, wantFolded, wantRows)
		}
	})
}

// TestFoldedAttemptCountsTowardTheKept: a forward the fast path delivered
// and an operator then redelivered keeps its newest attempts across both
// tables: the first attempt, kept in its forward_delivered row, goes once
// the newer ones fill the number kept, and not before.
func TestFoldedAttemptCountsTowardTheKept(t *testing.T) {
	t.Parallel()
	s, pool := newFixture(t)
	ctx := t.Context()
	at := time.Now().UTC().Add(-time.Hour).Truncate(time.Microsecond)
	e := uuid.New()
	if err := storetest.InsertOutbox(ctx, s.DB(), storetest.Outbox{Sender: "acme", Target: "t", EventID: e, DeliveryID: "d1"}, at); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordFirstAttempts(ctx, "q", []FirstAttempt{deliveredWithAnswer(e, at)}); err != nil {
		t.Fatal(err)
	}
	const keep = 3
	for i := range keep + 1 {
		a := store.Attempt{Sender: "acme", EventID: e, Target: "t", StartedAt: at.Add(time.Duration(i+1) * time.Minute), Took: time.Millisecond,
			Outcome: "retry", Cause: store.CauseRedelivery, Attempt: i + 1, Actor: "ops", JobID: 7, Status: 500, Body: []byte("boom")}
		if i > 0 {
			a.Cause = store.CauseRetry
		}
		if err := s.RecordAttempt(ctx, a, keep); err != nil {
			t.Fatal(err)
		}
		as, err := s.EventAttempts(ctx, "acme", e)
		if err != nil {
			t.Fatal(err)
		}
		want := min(i+2, keep) // the first attempt and i+1 of the redelivery's
		if len(as) != want || !as[0].StartedAt.Equal(a.StartedAt) {
			t.Fatalf("after attempt %d of the redelivery: %d attempts, newest %v; want %d, the newest first", i+1, len(as), as[0].StartedAt, want)
		}
		first := as[len(as)-1].Cause == store.CauseFirst
		if first != (i+2 <= keep) {
			t.Errorf("after attempt %d of the redelivery: the first attempt shown %v, want %v: %+v", i+1, first, i+2 <= keep, as)
		}
	}
	var delivered, answers int
	if err := pool.QueryRow(ctx, `SELECT count(*), count(took_us) + count(headers) + count(body) FROM forward_delivered WHERE event_id = $1`, e.String()).Scan(&delivered, &answers); err != nil {
		t.Fatal(err)
	}
	if delivered != 1 || answers != 0 {
		t.Errorf("forward_delivered rows of the event: %d, with %d answer columns set; want the row kept, its attempt cleared", delivered, answers)
	}
}
