package queue

import (
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/procfs"

	"github.com/hookgate/hookgate/internal/store"
	"github.com/hookgate/hookgate/internal/testing/pgtest"
)

// BenchmarkRecordDelivered records batches of 100 forwards delivered at
// their first attempt, with their answers, as the fast path does, over one
// connection, on tables that hold 100,000 earlier ones. Their event IDs
// are UUIDv7, as the gateway's. It reports the CPU
// its PostgreSQL backend spent per forward (pg-µs/forward, read from /proc:
// it skips when the server runs elsewhere) beside the time. The outbox
// rows are inserted with the timer stopped; the backend's CPU for their
// insert is reported apart (pg-insert-µs/forward). /proc counts in ticks of
// 10 ms: run it for a few hundred batches at least.
//
//	make test-fast PKGS=./internal/queue/ GOTESTFLAGS='-run NONE -bench BenchmarkRecordDelivered -benchtime 400x -count 4'
func BenchmarkRecordDelivered(b *testing.B) {
	const batch = 100
	_, url := pgtest.NewDB(b)
	ctx := b.Context()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	var pid int
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		b.Fatal(err)
	}
	jobs := NewJobs(conn)
	if pgtest.Citus() {
		jobs = jobs.Distributed()
	}
	// A history, as a running gateway has.
	if _, err := conn.Exec(ctx, `INSERT INTO forward_delivered (sender, event_id, target, delivery_id, created_at, attempted_at, delivered_at, status, max_attempts)
SELECT 'acme', gen_random_uuid()::text, 't', 'd' || g, now(), now(), now(), 200, 10 FROM generate_series(1, 100000) g`); err != nil {
		b.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO forward_attempts (sender, event_id, target, started_at, took_us, outcome, cause, attempt, status, headers, body)
SELECT 'acme', gen_random_uuid(), 't', now(), 100, 'delivered', 'first', 1, 200, '{"Content-Type":["text/plain"]}', 'ok' FROM generate_series(1, 100000) g`); err != nil {
		b.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "VACUUM ANALYZE forward_delivered, forward_attempts, forward_outbox"); err != nil {
		b.Fatal(err)
	}
	var recordCPU, insertCPU time.Duration
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		at := time.Now().UTC().Truncate(time.Microsecond)
		fas := make([]FirstAttempt, batch)
		ids, dids := make([]uuid.UUID, batch), make([]string, batch)
		for i := range fas {
			// Time-ordered, as the gateway's event IDs are: the keys of
			// forward_delivered grow at one end of its index.
			ids[i], dids[i] = uuid.Must(uuid.NewV7()), "d-"+strconv.Itoa(i)
			fas[i] = FirstAttempt{Sender: "acme", EventID: ids[i], Target: "t", State: StateDelivered, MaxAttempts: 10, New: true,
				AttemptedAt: at, FinalizedAt: &at, ScheduledAt: at, Output: Output{Status: 200, DeliveredAt: at},
				Answer: store.Attempt{Sender: "acme", EventID: ids[i], Target: "t", StartedAt: at, Took: 300 * time.Microsecond,
					Outcome: "delivered", Cause: store.CauseFirst, Attempt: 1, Status: 200,
					Header: map[string][]string{"Content-Type": {"text/plain; charset=utf-8"}}, Body: []byte("ok")}}
		}
		c0 := backendCPU(b, pid)
		if _, err := conn.Exec(ctx, `INSERT INTO forward_outbox (sender, event_id, target, delivery_id, created_at, leased_until)
SELECT 'acme', e, 't', d, $3, $3::timestamptz + interval '1 minute' FROM unnest($1::uuid[], $2::text[]) AS u(e, d)`, ids, dids, at); err != nil {
			b.Fatal(err)
		}
		c1 := backendCPU(b, pid)
		b.StartTimer()
		if err := jobs.RecordFirstAttempts(ctx, "q", fas); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		c2 := backendCPU(b, pid)
		insertCPU += c1 - c0
		recordCPU += c2 - c1
		b.StartTimer()
	}
	b.StopTimer()
	var left int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM forward_outbox").Scan(&left); err != nil {
		b.Fatal(err)
	}
	if left != 0 {
		b.Fatalf("%d outbox rows left after the recordings", left)
	}
	n := float64(b.N * batch)
	b.ReportMetric(float64(recordCPU.Microseconds())/n, "pg-µs/forward")
	b.ReportMetric(float64(insertCPU.Microseconds())/n, "pg-insert-µs/forward")
	b.ReportMetric(float64(b.Elapsed().Microseconds())/n, "µs/forward")
}

// backendCPU is the CPU that process pid has used, from /proc.
func backendCPU(b *testing.B, pid int) time.Duration {
	p, err := procfs.NewProc(pid)
	if err != nil {
		b.Skipf("the backend's CPU: %v", err)
	}
	st, err := p.Stat()
	if err != nil {
		b.Skipf("the backend's CPU: %v", err)
	}
	return time.Duration(st.CPUTime() * float64(time.Second))
}
