package store

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/idempotency"
	"github.com/hookgate/hookgate/internal/testing/storetest"
)

// refCounts counts sender's deliveries of the hour and the day before now
// by status with one scan of processed_messages: what CountDeliveries
// answered before it kept closed hours.
func refCounts(t *testing.T, s *fixture, sender string, now time.Time) []StatusCount {
	t.Helper()
	rows, err := s.pool.Query(t.Context(), `SELECT response_status, count(*) FILTER (WHERE created_at >= $3), count(*)
FROM processed_messages WHERE sender = $1 AND created_at >= $2 GROUP BY response_status ORDER BY response_status`,
		sender, now.Add(-24*time.Hour), now.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := []StatusCount{}
	for rows.Next() {
		var (
			c  StatusCount
			st int16
		)
		if err := rows.Scan(&st, &c.LastHour, &c.LastDay); err != nil {
			t.Fatal(err)
		}
		c.Status = int(st)
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestCountDeliveriesKeepsClosedHours: the overview's counts by status
// equal a scan of the day's deliveries, at its open ends, in its closed
// hours and across the hour a delivery sits on; a closed hour is counted
// once and read back (a delivery deleted from it afterwards stays
// counted); an hour that closes later is counted when it does; viewers at
// once agree; hours past the retention are forgotten.
func TestCountDeliveriesKeepsClosedHours(t *testing.T) {
	t.Parallel()
	s, _ := store(t)
	ctx := t.Context()
	now := time.Date(2026, 12, 1, 10, 20, 0, 0, time.UTC)
	// Deliveries at the open ends, in closed hours, on hour boundaries,
	// just inside and outside the day, with two statuses and another sender.
	offsets := []time.Duration{10 * time.Minute, 50 * time.Minute, 60 * time.Minute, 70 * time.Minute, 80 * time.Minute,
		2 * time.Hour, 2*time.Hour + 20*time.Minute, 3 * time.Hour, 5*time.Hour + 59*time.Minute, 12 * time.Hour,
		23*time.Hour + 20*time.Minute, 23*time.Hour + 30*time.Minute, 23*time.Hour + 59*time.Minute, 24 * time.Hour, 25 * time.Hour}
	for i, off := range offsets {
		for j := range 1 + i%3 {
			status := 202
			if j == 1 {
				status = 200
			}
			acceptAnswered(t, s, "orders", fmt.Sprintf("o-%d-%d", i, j), now.Add(-off), status, nil)
		}
		accept(t, s, "billing", fmt.Sprintf("b-%d", i), now.Add(-off))
	}
	check := func(what string, now time.Time) []StatusCount {
		t.Helper()
		got, err := s.CountDeliveries(ctx, "orders", now)
		if err != nil {
			t.Fatal(err)
		}
		if want := refCounts(t, s, "orders", now); !slices.Equal(got, want) {
			t.Errorf("%s: counts %+v, want %+v (one scan of the day)", what, got, want)
		}
		return got
	}
	first := check("first view", now)
	var kept int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM delivery_hour_counts WHERE sender = 'orders' AND status = 0`).Scan(&kept); err != nil {
		t.Fatal(err)
	}
	if kept != 22 { // 2026-11-30 11:00 to 2026-12-01 09:00
		t.Errorf("%d closed hours kept, want 22", kept)
	}
	check("second view", now)

	// A delivery of a closed hour disappears (its key expired): the kept
	// count still has it; the open ends are counted afresh.
	if ok, err := storetest.DeleteKey(ctx, s.DB(), idempotency.Key{Sender: "orders", DeliveryID: "o-7-0"}); err != nil || !ok { // 3h ago, 202
		t.Fatalf("delete o-7-0: %v, %v", ok, err)
	}
	got, err := s.CountDeliveries(ctx, "orders", now)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, first) {
		t.Errorf("after deleting a delivery of a closed hour: %+v, want the kept %+v", got, first)
	}
	if ok, err := storetest.DeleteKey(ctx, s.DB(), idempotency.Key{Sender: "orders", DeliveryID: "o-0-0"}); err != nil || !ok { // 10 min ago: open
		t.Fatalf("delete o-0-0: %v, %v", ok, err)
	}
	if got, _ := s.CountDeliveries(ctx, "orders", now); got[len(got)-1].LastHour != first[len(first)-1].LastHour-1 {
		t.Errorf("after deleting a delivery of the last hour: %+v, want one fewer than %+v", got, first)
	}
	// Both come back (new deliveries with the same IDs): the reference
	// agrees with the kept count again.
	accept(t, s, "orders", "o-7-0", now.Add(-3*time.Hour))
	accept(t, s, "orders", "o-0-0", now.Add(-10*time.Minute))

	// Later: more hours have closed. Viewers at once agree.
	later := now.Add(90 * time.Minute)
	accept(t, s, "orders", "late-1", later.Add(-5*time.Minute))
	var wg sync.WaitGroup
	results := make([][]StatusCount, 8)
	errs := make([]error, 8)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = s.CountDeliveries(ctx, "orders", later)
		}()
	}
	wg.Wait()
	want := refCounts(t, s, "orders", later)
	for i := range results {
		if errs[i] != nil || !slices.Equal(results[i], want) {
			t.Errorf("viewer %d: %+v, %v; want %+v", i, results[i], errs[i], want)
		}
	}
	check("a view after the others", later)

	// Three days on, the kept hours older than the retention are gone.
	if _, err := s.CountDeliveries(ctx, "orders", now.Add(72*time.Hour)); err != nil {
		t.Fatal(err)
	}
	var oldest time.Time
	if err := s.pool.QueryRow(ctx, `SELECT min(hour) FROM delivery_hour_counts WHERE sender = 'orders'`).Scan(&oldest); err != nil {
		t.Fatal(err)
	}
	if limit := now.Add(72 * time.Hour).Add(-HourCountRetention); oldest.Before(limit) {
		t.Errorf("oldest kept hour %s, want none before %s", oldest, limit)
	}
}

// TestViewersCountingTheSameHoursAtOnce: viewers that count the same
// newly closed hours at the same moment all answer the counts of one scan;
// none fails (their transactions keep the same rows, so they must take the
// rows' locks in the same order, or PostgreSQL aborts one as a deadlock).
func TestViewersCountingTheSameHoursAtOnce(t *testing.T) {
	t.Parallel()
	s, _ := store(t)
	ctx := t.Context()
	now := time.Date(2026, 12, 1, 10, 20, 0, 0, time.UTC)
	statuses := []int{200, 201, 202, 204, 208}
	for h := range 24 {
		for i, st := range statuses {
			acceptAnswered(t, s, "orders", fmt.Sprintf("o-%d-%d", h, i), now.Add(-time.Duration(h)*time.Hour-5*time.Minute), st, nil)
		}
	}
	if _, err := s.CountDeliveries(ctx, "orders", now); err != nil {
		t.Fatal(err)
	}
	const viewers = 16
	// Each round forgets the last closed hour's counts, so every viewer
	// finds that hour missing, counts it and keeps it, all at once, as when
	// an hour has just closed under a console open in several browsers.
	for round := range 20 {
		if _, err := s.pool.Exec(ctx, `DELETE FROM delivery_hour_counts WHERE sender = 'orders' AND hour = $1`, now.Add(-2*time.Hour).Truncate(time.Hour)); err != nil {
			t.Fatal(err)
		}
		at := now.Add(time.Duration(round) * time.Minute)
		want := refCounts(t, s, "orders", at)
		results := make([][]StatusCount, viewers)
		errs := make([]error, viewers)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range viewers {
			wg.Go(func() {
				<-start
				results[i], errs[i] = s.CountDeliveries(ctx, "orders", at)
			})
		}
		close(start)
		wg.Wait()
		for i := range viewers {
			if errs[i] != nil || !slices.Equal(results[i], want) {
				t.Errorf("round %d, viewer %d: %+v, %v; want %+v", round, i, results[i], errs[i], want)
			}
		}
	}
}
