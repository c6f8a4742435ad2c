package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/hookgate/hookgate/internal/store"
	"github.com/hookgate/hookgate/internal/testing/pgtest"
	"github.com/hookgate/hookgate/internal/testing/storetest"
)

// TestRunAttempts: `hookgate attempts EVENT_ID` prints every kept attempt
// of the event, newest first, with its answer and cause; a body or header
// holding control characters is printed escaped, never as they are.
func TestRunAttempts(t *testing.T) {
	t.Parallel()
	pool, dsn := pgtest.NewDB(t)
	ctx := t.Context()
	if _, err := storetest.InsertGenerated(ctx, pool, storetest.Generated{Sender: "acme", Prefix: "d-", N: 1, Newest: time.Now(),
		ExpiresAt: time.Now().Add(time.Hour), Status: 202, Keys: true, Events: true}); err != nil {
		t.Fatal(err)
	}
	var id uuid.UUID
	if err := pool.QueryRow(ctx, `SELECT id FROM webhook_events WHERE sender = 'acme'`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	q := store.New(pool)
	for _, a := range []store.Attempt{
		{Target: "t1", StartedAt: start, Took: 3 * time.Millisecond, Outcome: "retry", Cause: store.CauseFirst, Attempt: 1, Status: 500,
			Error: "target answered 500", Header: map[string][]string{"Set-Cookie": {"xxxxx"}}, Body: []byte("boom\x1b[31m")},
		{Target: "t1", StartedAt: start.Add(time.Second), Took: 2 * time.Millisecond, Outcome: "retry", Cause: store.CauseRetry, Attempt: 2, Status: 503,
			Error: "target answered 503, Retry-After 1s", Header: map[string][]string{"Retry-After": {"1"}}, Body: []byte("busy")},
		{Target: "t1", StartedAt: start.Add(3 * time.Second), Took: time.Millisecond, Outcome: "delivered", Cause: store.CauseRetry, Attempt: 3, Status: 200,
			Body: []byte("ok")},
	} {
		a.Sender, a.EventID = "acme", id
		if err := q.RecordAttempt(ctx, a, 20); err != nil {
			t.Fatal(err)
		}
	}
	var out, errs bytes.Buffer
	if err := run(ctx, []string{"attempts", id.String()}, envOf("DATABASE_URL", dsn), &out, &errs); err != nil {
		t.Fatalf("attempts: %v; stderr %s", err, errs.String())
	}
	got := out.String()
	want := []string{
		"event " + id.String() + " of acme: 3 attempts kept, newest first",
		"2026-12-05 10:00:03.000 UTC  t1  delivered  200  took 1ms  retry 2",
		`  body (first 2 bytes): "ok"`,
		"2026-12-05 10:00:01.000 UTC  t1  retry  503  took 2ms  retry 1",
		`  error: "target answered 503, Retry-After 1s"`,
		`  Retry-After: "1"`,
		"2026-12-05 10:00:00.000 UTC  t1  retry  500  took 3ms  first attempt",
		`  Set-Cookie: "xxxxx"`,
		`  body (first 9 bytes): "boom\x1b[31m"`,
	}
	last := -1
	for _, w := range want {
		i := strings.Index(got, w)
		if i <= last {
			t.Errorf("output lacks %q after the previous line:\n%s", w, got)
			continue
		}
		last = i
	}
	if strings.Contains(got, "\x1b") {
		t.Errorf("the output holds a raw escape character:\n%q", got)
	}
	if err := run(ctx, []string{"attempts", uuid.NewString()}, envOf("DATABASE_URL", dsn), &out, &errs); err == nil || !strings.Contains(err.Error(), "no event") {
		t.Errorf("attempts of an unknown event: %v, want no event", err)
	}
}
