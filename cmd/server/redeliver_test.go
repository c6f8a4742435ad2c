package main

import (
	"bytes"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/riverqueue/river/rivertype"

	"github.com/hookgate/hookgate/internal/queue"
	"github.com/hookgate/hookgate/internal/store"
	"github.com/hookgate/hookgate/internal/testing/pgtest"
	"github.com/hookgate/hookgate/internal/testing/queuetest"
)

// TestRunRedeliver runs `hookgate redeliver` against a database with failed
// forwards: it prints how many it matched within the window and enqueues a
// bulk redelivery job.
func TestRunRedeliver(t *testing.T) {
	t.Parallel()
	pool, dsn := pgtest.NewDB(t)
	ctx := t.Context()
	// 3 forwards to orders failed half an hour ago, 1 three hours ago, and
	// 2 to another target half an hour ago.
	q := queuetest.New(pool)
	failed := func(ago time.Duration, target string, ids ...string) {
		t.Helper()
		var jobs []queuetest.NewForwardJob
		for _, id := range ids {
			jobs = append(jobs, queuetest.NewForwardJob{Sender: "acme", Target: target, DeliveryID: id, MaxAttempts: 3})
		}
		if _, err := q.InsertForwardJobs(ctx, queue.ForwardQueue, queuetest.JobFixture{State: rivertype.JobStateDiscarded, At: time.Now().Add(-ago)}, jobs...); err != nil {
			t.Fatal(err)
		}
	}
	failed(30*time.Minute, "orders", "d-1", "d-2", "d-3")
	failed(3*time.Hour, "orders", "d-4")
	failed(30*time.Minute, "ledger", "d-5", "d-6")
	cfg := writeConfig(t, senderConfig+`    forward:
      - name: orders
        url: http://127.0.0.1:1/orders
      - name: ledger
        url: http://127.0.0.1:1/ledger
`)
	env := envOf("DATABASE_URL", dsn, "HOOKGATE_CONFIG", cfg)
	for range 2 {
		var out, errs bytes.Buffer
		if err := run(ctx, []string{"redeliver", "--sender", "acme", "--target", "orders", "--state", "failed", "--since", "2h"}, env, &out, &errs); err != nil {
			t.Fatalf("redeliver: %v; stderr: %s", err, errs.String())
		}
		if !strings.HasPrefix(out.String(), "matched 3 failed forwards of acme/orders") {
			t.Errorf("stdout %q, want it to report 3 matched", out.String())
		}
	}
	// The redelivered forwards' attempts will say who asked: the command.
	var by []string
	if err := pool.QueryRow(ctx, `SELECT array_agg(DISTINCT coalesce(args->>'by', '')) FROM river_job WHERE kind = 'hookgate_bulk_redeliver'`).Scan(&by); err != nil {
		t.Fatal(err)
	}
	if len(by) != 1 || by[0] != "hookgate redeliver" {
		t.Errorf("the bulk redeliveries ask as %q, want hookgate redeliver", by)
	}
	// The audit trail keeps each run, by the command's name.
	page, err := store.New(pool).ListAudit(ctx, store.AuditFilter{}, 10, "")
	if err != nil {
		t.Fatal(err)
	}
	entries := page.Entries
	if len(entries) != 2 {
		t.Fatalf("%d audit rows, want one per run: %+v", len(entries), entries)
	}
	for _, e := range entries {
		if e.Token != "hookgate redeliver" || e.Action != store.ActionRedeliverBulk || e.Sender != "acme" || e.Target != "orders" ||
			e.Outcome != store.OutcomeOK || e.Details["matched"] != float64(3) {
			t.Errorf("audit row %+v, want the command's bulk redelivery of acme/orders, 3 matched", e)
		}
	}
	var out bytes.Buffer
	if err := run(ctx, []string{"redeliver", "--sender", "acme", "--target", "orders", "--until", "2h"}, env, &out, io.Discard); err != nil || !strings.HasPrefix(out.String(), "matched 1 ") {
		t.Errorf("redeliver --until 2h: %v, stdout %q; want 1 matched", err, out.String())
	}
	// A relative --since is a new instant each time, so each run is a
	// request of its own (the forwards are still redelivered once: the
	// job that runs second finds them redelivered).
	if bulk, err := q.CountJobs(ctx, queue.BulkArgs{}.Kind()); err != nil || bulk != 3 {
		t.Errorf("%d bulk jobs (%v), want 3", bulk, err)
	}
	// No failure in the last 10 minutes: it says so, and enqueues nothing.
	out.Reset()
	if err := run(ctx, []string{"redeliver", "--sender", "acme", "--target", "orders", "--since", "10m"}, env, &out, io.Discard); err != nil ||
		!regexp.MustCompile(`^matched no failed forwards of acme/orders \(since \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\): nothing was enqueued\n$`).MatchString(out.String()) {
		t.Errorf("redeliver --since 10m: %v, stdout %q; want none matched, nothing enqueued", err, out.String())
	}
	if bulk, err := q.CountJobs(ctx, queue.BulkArgs{}.Kind()); err != nil || bulk != 3 {
		t.Errorf("after matching nothing: %d bulk jobs (%v), want still 3", bulk, err)
	}

	// A forward to ledger still retrying gets a new attempt after the
	// current one, and the output says so.
	if _, err := q.InsertForwardJobs(ctx, queue.ForwardQueue, queuetest.JobFixture{State: rivertype.JobStateRetryable, Attempt: 1, Errors: []string{"target answered 503"},
		ScheduledAt: time.Now().Add(time.Hour)}, queuetest.NewForwardJob{Sender: "acme", Target: "ledger", DeliveryID: "d-7", MaxAttempts: 3}); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := run(ctx, []string{"redeliver", "--sender", "acme", "--target", "ledger", "--state", "retrying"}, env, &out, io.Discard); err != nil ||
		out.String() != "matched 1 retrying forwards of acme/ledger; the worker processes forward each again after the current one has ended\n" {
		t.Errorf("redeliver --state retrying: %v, stdout %q; want 1 matched, queued after the current one", err, out.String())
	}

	for _, tc := range []struct {
		args    []string
		mention string
	}{
		{[]string{"redeliver", "--target", "orders"}, "--sender and --target are required"},
		{[]string{"redeliver", "--sender", "acme", "--target", "nope"}, `no forward target named "nope"`},
		{[]string{"redeliver", "--sender", "nobody", "--target", "orders"}, `no sender named "nobody"`},
		{[]string{"redeliver", "--sender", "acme", "--target", "orders", "--state", "pending"}, "must be failed, delivered, running or retrying"},
		{[]string{"redeliver", "--sender", "acme", "--target", "orders", "--since", "yesterday"}, "neither a duration"},
	} {
		err := run(ctx, tc.args, env, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.mention) {
			t.Errorf("%v: error %v, want one mentioning %q", tc.args, err, tc.mention)
		}
	}
}
