package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/hookgate/hookgate/internal/testing/pgtest"
	"github.com/hookgate/hookgate/migrations"
)

// TestRunServesAndShutsDown runs the whole program in process: it listens on
// a port of 127.0.0.1, accepts a delivery, replays its repeat, is ready, and
// returns nil once its context is cancelled, having stored its traffic
// counts for the console's charts (one accepted, one replayed).
func TestRunServesAndShutsDown(t *testing.T) {
	t.Parallel()
	pool, dsn := pgtest.NewDB(t)
	srv := startRun(t, dsn)
	c := newClient(t)
	ctx := t.Context()

	if host, _, err := net.SplitHostPort(srv.addr); err != nil || host != "127.0.0.1" {
		t.Fatalf("listening on %q, want 127.0.0.1:<port>", srv.addr)
	}

	body := bodyFor("e2e-1")
	first, err := deliver(ctx, c, srv.base, "e2e-1", body)
	if err != nil {
		t.Fatal(err)
	}
	a, err := parseAccepted(first, "e2e-1")
	if err != nil {
		t.Fatalf("first delivery: %v", err)
	}
	if first.header.Get("Idempotent-Replayed") != "" {
		t.Errorf("first delivery carries Idempotent-Replayed: %q", first.header.Get("Idempotent-Replayed"))
	}

	again, err := deliver(ctx, c, srv.base, "e2e-1", body)
	if err != nil {
		t.Fatal(err)
	}
	if again.status != first.status || !bytes.Equal(again.body, first.body) ||
		again.header.Get("Content-Type") != first.header.Get("Content-Type") {
		t.Errorf("repeat answered %s, want the first answer %s again", again, first)
	}
	if again.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("repeat: Idempotent-Replayed is %q, want true", again.header.Get("Idempotent-Replayed"))
	}

	ready, err := get(ctx, c, srv.base+"/readyz")
	if err != nil {
		t.Fatal(err)
	}
	if ready.status != http.StatusOK {
		t.Errorf("GET /readyz: %s, want 200", ready)
	}

	srv.cancel()
	if err := srv.wait(t); err != nil {
		t.Fatalf("run returned %v after its context was cancelled, want nil", err)
	}
	if n := srv.log.count("stopped"); n != 1 {
		t.Errorf("logged \"stopped\" %d times, want once", n)
	}
	if _, err := get(ctx, c, srv.base+"/healthz"); err == nil {
		t.Error("the server still answers after run returned")
	}
	var counts string
	if err := pool.QueryRow(ctx, `SELECT coalesce(string_agg(kind || '=' || n, ' ' ORDER BY kind), '') FROM (
    SELECT kind, sum(n) AS n FROM traffic_minutes WHERE sender = 'acme' AND target = '' GROUP BY kind) AS k`).Scan(&counts); err != nil {
		t.Fatal(err)
	}
	if counts != "accepted=1 replayed=1" {
		t.Errorf("traffic counts stored at shutdown: %q, want accepted=1 replayed=1", counts)
	}
	t.Logf("event %s accepted and replayed", a.EventID)
}

func TestRunVersion(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	if err := run(t.Context(), []string{"version"}, envOf(), &stdout, &stderr); err != nil {
		t.Fatalf("version: %v", err)
	}
	if !regexp.MustCompile(`^hookgate \S+\n$`).MatchString(stdout.String()) {
		t.Errorf("version printed %q, want \"hookgate <version>\\n\"", stdout.String())
	}
}

func TestRunUnknownCommand(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	err := run(t.Context(), []string{"frobnicate"}, envOf("DATABASE_URL", "postgres://127.0.0.1:1/x"), &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "frobnicate") {
		t.Fatalf("unknown command: err = %v, want an error naming the command", err)
	}
	if stdout.Len() != 0 {
		t.Errorf("unknown command printed %q", stdout.String())
	}
}

// An in-flight wait that could not end within the ingest transaction's 15s
// budget (it would turn the 409 into a 503) is refused at start-up.
func TestRunRejectsLongInFlightWait(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	err := run(t.Context(), []string{"serve", "--in-flight-wait", "11s"}, envOf("DATABASE_URL", "postgres://127.0.0.1:1/x"), &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "in-flight wait") || !strings.Contains(err.Error(), "10s") {
		t.Fatalf("--in-flight-wait 11s: err = %v, want an error naming the in-flight wait and its 10s limit", err)
	}
}

func TestRunWithoutDatabaseURL(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, senderConfig)
	for _, args := range [][]string{
		{"--addr", "127.0.0.1:0", "--config", cfg},
		{"serve", "--addr", "127.0.0.1:0", "--config", cfg},
		{"migrate"},
	} {
		err := run(t.Context(), args, envOf(), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "DATABASE_URL") {
			t.Errorf("%q without DATABASE_URL: err = %v, want an error mentioning DATABASE_URL", args, err)
		}
	}
}

func TestRunInvalidConfig(t *testing.T) {
	t.Parallel()
	_, dsn := pgtest.NewDB(t)
	cfg := writeConfig(t, `senders:
  - name: "Bad Name"
    preset: generic
    delivery_id: { header: X-Delivery-Id }
`)
	stderr := newLogSink()
	err := run(t.Context(), []string{"serve", "--addr", "127.0.0.1:0", "--config", cfg},
		envOf("DATABASE_URL", dsn), io.Discard, stderr)
	if err == nil || !strings.Contains(err.Error(), "senders[0].name") {
		t.Fatalf("invalid sender name: err = %v, want an error naming senders[0].name", err)
	}
	if stderr.count("listening") != 0 {
		t.Error("the server listened despite an invalid configuration")
	}
}

// migrationVersions returns the versions of the embedded migrations: the
// numeric prefix of each file name.
func migrationVersions(t *testing.T) []int64 {
	t.Helper()
	names, err := fs.Glob(migrations.FS(), "*.sql")
	if err != nil || len(names) == 0 {
		t.Fatalf("embedded migrations: %v %v", names, err)
	}
	out := make([]int64, 0, len(names))
	for _, n := range names {
		var v int64
		if _, err := fmt.Sscanf(n, "%d_", &v); err != nil {
			t.Fatalf("migration %s: no version prefix: %v", n, err)
		}
		out = append(out, v)
	}
	return out
}

// checkMigrated asserts that the database at dsn has hookgate's tables and
// that goose_db_version records each embedded migration exactly once.
func checkMigrated(t *testing.T, dsn string) {
	t.Helper()
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for _, table := range []string{"processed_messages", "webhook_events"} {
		var exists bool
		if err := conn.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", table).Scan(&exists); err != nil {
			t.Fatal(err)
		}
		if !exists {
			t.Errorf("table %s does not exist after migrate", table)
		}
	}
	rows, err := conn.Query(ctx, "SELECT version_id, count(*) FROM goose_db_version WHERE is_applied GROUP BY version_id")
	if err != nil {
		t.Fatal(err)
	}
	applied := map[int64]int64{}
	for rows.Next() {
		var v, n int64
		if err := rows.Scan(&v, &n); err != nil {
			t.Fatal(err)
		}
		applied[v] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for v, n := range applied {
		if n != 1 {
			t.Errorf("goose_db_version holds version %d %d times", v, n)
		}
	}
	for _, v := range migrationVersions(t) {
		if applied[v] == 0 {
			t.Errorf("migration %d is not recorded in goose_db_version (have %v)", v, applied)
		}
	}
}

func TestRunMigrate(t *testing.T) {
	t.Parallel()
	dsn := emptyDB(t)
	for i := range 2 {
		if err := run(t.Context(), []string{"migrate"}, envOf("DATABASE_URL", dsn), io.Discard, io.Discard); err != nil {
			t.Fatalf("migrate (run %d): %v", i+1, err)
		}
		checkMigrated(t, dsn)
	}
}

// TestRunMigrateConcurrently runs several migrate commands on one fresh
// database at once, like replicas starting together: the advisory lock makes
// all of them succeed and each migration is applied once. It does so on a few
// databases, since a missing lock does not make every round fail.
func TestRunMigrateConcurrently(t *testing.T) {
	t.Parallel()
	const rounds, n = 4, 4
	for round := range rounds {
		t.Run(fmt.Sprint("round", round), func(t *testing.T) {
			t.Parallel()
			dsn := emptyDB(t)
			errs := make([]error, n)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					errs[i] = run(context.Background(), []string{"migrate"}, envOf("DATABASE_URL", dsn), io.Discard, io.Discard)
				}()
			}
			close(start)
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					t.Errorf("migrate %d of %d: %v", i+1, n, err)
				}
			}
			checkMigrated(t, dsn)
		})
	}
}
