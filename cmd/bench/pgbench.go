package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// findPgbench returns pgbench from HOOKGATE_PG_BINDIR, else from PATH.
func findPgbench() (string, error) {
	if dir := os.Getenv("HOOKGATE_PG_BINDIR"); dir != "" {
		if _, err := os.Stat(filepath.Join(dir, "pgbench")); err == nil {
			return filepath.Join(dir, "pgbench"), nil
		}
	}
	p, err := exec.LookPath("pgbench")
	if err != nil {
		return "", errors.New("pgbench not found in HOOKGATE_PG_BINDIR or PATH (install the PostgreSQL client tools, or pass -skip-pgbench)")
	}
	return p, nil
}

// pgbenchScript is the minimal plain SQL for a first delivery's rows, the
// key and the event, each a prepared INSERT … VALUES of scalars, one
// delivery per pipelined transaction: one round trip, as the gateway's
// (design.md §8's baseline, which the gateway's own statements cannot
// move). :did is unique per transaction (a per-client counter and the
// client number); the event ID is computed from it (pgbench makes no
// UUIDs); the other values are those of a row the gateway stored.
const pgbenchScript = `\set n :n + 1
\set did :client_id * 1000000000 + :n
\startpipeline
BEGIN;
INSERT INTO processed_messages
  (sender, delivery_id, request_sha256, event_id, response_status, response_content_type, response_body, created_at, expires_at)
VALUES (:sender, :did, :sha, md5(:did::text)::uuid, :status, :ctype, :resp, :ts, :exp);
INSERT INTO webhook_events (sender, id, delivery_id, received_at, headers, body, event_type)
VALUES (:sender, md5(:did::text)::uuid, :did, :ts, :headers, :body, :etype);
COMMIT;
\endpipeline
`

const pgbenchName = "first delivery: pgbench plain SQL"

// pgbenchResult is what the pgbench run measured.
type pgbenchResult struct {
	tps               float64
	processed, failed int
	latencies         []time.Duration // sorted, from pgbench's transaction log
	cpu               cpuUse
}

func (r *pgbenchResult) p(q float64) time.Duration { return percentile(r.latencies, q) }

// runPgbench runs pgbenchScript with -M prepared, the run's concurrency
// and duration, with the values of a delivery of phase 1, and prints it.
func runPgbench(ctx context.Context, b *bench) (*pgbenchResult, error) {
	var (
		headers, etype, ctype string
		body, sum, resp       []byte
		status                int
		received, expires     time.Time
	)
	if err := b.db.conn.QueryRow(ctx, `SELECT e.headers::text, e.body, e.event_type, p.request_sha256, p.response_body, p.response_content_type, p.response_status, p.created_at, p.expires_at
FROM webhook_events e JOIN processed_messages p USING (sender, delivery_id) WHERE e.sender = 'bench' AND e.delivery_id LIKE 'fd-%' LIMIT 1`).
		Scan(&headers, &body, &etype, &sum, &resp, &ctype, &status, &received, &expires); err != nil {
		return nil, fmt.Errorf("read a stored delivery for pgbench's parameters (did the gateway store any?): %w", err)
	}
	fmt.Fprintf(b.out, "pgbench parameters taken from a row the gateway stored: headers %s\npgbench script (-D sets :sender, :sha, :resp, :body, … to the stored row's values):\n  %s\n",
		headers, strings.ReplaceAll(strings.TrimSpace(pgbenchScript), "\n", "\n  "))
	script, logs := filepath.Join(b.tmp, "pgbench.sql"), filepath.Join(b.tmp, "pgbench-log")
	if err := os.WriteFile(script, []byte(pgbenchScript), 0o644); err != nil {
		return nil, err
	}
	now, hexa := time.Now().UTC(), func(b []byte) string { return `\x` + fmt.Sprintf("%x", b) }
	args := []string{"-n", "-M", "prepared", "-c", strconv.Itoa(b.o.concurrency), "-j", strconv.Itoa(min(2, b.o.concurrency)),
		"-T", strconv.Itoa(int(math.Ceil(b.o.duration.Seconds()))), "-f", script, "-l", "--log-prefix", logs}
	for _, d := range []string{"n=0", "sender=pgbench-" + strconv.FormatInt(now.UnixNano(), 36), "sha=" + hexa(sum), "status=" + strconv.Itoa(status),
		"ctype=" + ctype, "resp=" + hexa(resp), "ts=" + now.Format(time.RFC3339Nano), "exp=" + now.Add(expires.Sub(received)).Format(time.RFC3339Nano),
		"headers=" + headers, "body=" + hexa(body), "etype=" + etype} {
		args = append(args, "-D", d)
	}
	cmd := exec.CommandContext(ctx, b.pgbench, append(args, b.dbURL)...)
	var output bytes.Buffer
	cmd.Dir, cmd.Stdout, cmd.Stderr = b.tmp, &output, &output
	cpu0 := takeCPU(0, b.pgPID)
	err := cmd.Run()
	cpu1 := takeCPU(0, b.pgPID)
	r := &pgbenchResult{}
	if err == nil {
		r.tps, r.processed, r.failed, err = parsePgbench(output.String())
	}
	if err != nil {
		return nil, fmt.Errorf("pgbench: %w\n%s", err, output.String())
	}
	used := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	r.cpu = cpuBetween(cpu0, cpu1, &used)
	files, _ := filepath.Glob(logs + ".*")
	for _, name := range files {
		if r.latencies, err = readPgbenchLog(name, r.latencies); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	slices.Sort(r.latencies)
	fmt.Fprintf(b.out, "%-32s %9.0f tps           p50 %s  p99 %s  failed %d  (%d transactions)\n  %s\n  CPU cores: %s\n",
		pgbenchName, r.tps, ms(r.p(0.50)), ms(r.p(0.99)), r.failed, r.processed,
		"1 round trip: BEGIN, INSERT … VALUES of the key, INSERT … VALUES of the event, COMMIT, pipelined — the -min-ratio check", r.cpu)
	warnDisturbed(b.out, r.cpu)
	return r, nil
}

var (
	tpsLine       = regexp.MustCompile(`(?m)^tps = ([0-9.]+) \((?:without initial connection time|excluding connections establishing)\)`)
	processedLine = regexp.MustCompile(`(?m)^number of transactions actually processed: ([0-9]+)`)
	failedLine    = regexp.MustCompile(`(?m)^number of failed transactions: ([0-9]+)`)
)

// parsePgbench reads the tps (without connection set-up) and the
// transactions processed and failed from pgbench's report.
func parsePgbench(out string) (tps float64, processed, failed int, err error) {
	m := tpsLine.FindStringSubmatch(out)
	if m == nil {
		return 0, 0, 0, errors.New("no tps line in pgbench's output")
	}
	if tps, err = strconv.ParseFloat(m[1], 64); err != nil {
		return 0, 0, 0, err
	}
	if m := processedLine.FindStringSubmatch(out); m != nil {
		processed, _ = strconv.Atoi(m[1])
	}
	if m := failedLine.FindStringSubmatch(out); m != nil {
		failed, _ = strconv.Atoi(m[1])
	}
	return tps, processed, failed, nil
}

func readPgbenchLog(name string, lat []time.Duration) ([]time.Duration, error) {
	f, err := os.Open(name)
	if err != nil {
		return lat, err
	}
	defer f.Close()
	return parsePgbenchLog(f, lat)
}

// parsePgbenchLog appends the latencies of a pgbench transaction log to
// lat: "client_id transaction_no time script_no time_epoch time_us …",
// time in microseconds ("failed" or "skipped" for such transactions).
func parsePgbenchLog(r io.Reader, lat []time.Duration) ([]time.Duration, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) >= 3 {
			if us, err := strconv.ParseInt(f[2], 10, 64); err == nil {
				lat = append(lat, time.Duration(us)*time.Microsecond)
			}
		}
	}
	return lat, sc.Err()
}

// goBench is a result of BenchmarkRun (internal/dedup): the gateway's own
// pipeline, without HTTP, on the same database.
type goBench struct {
	name string
	rate float64 // deliveries/s
}

var goBenchLine = regexp.MustCompile(`(?m)^BenchmarkRun/(\S+?)(?:-\d+)?\s+\d+\s+[0-9.]+ ns/op\s+([0-9.]+) deliveries/s`)

// runGoBench runs BenchmarkRun for the run's duration per case and prints
// its results.
func runGoBench(ctx context.Context, b *bench) ([]goBench, error) {
	fmt.Fprintln(b.out, "the gateway's pipeline without HTTP: go test -run '^$' -bench ^BenchmarkRun$ ./internal/dedup/ (its test databases on the same server) …")
	cmd := exec.CommandContext(ctx, "go", "test", "-count=1", "-run", "^$", "-bench", "^BenchmarkRun$", "-benchtime", b.o.duration.String(), "./internal/dedup/")
	cmd.Env = append(os.Environ(), "HOOKGATE_TEST_DATABASE_URL="+b.dbURL)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("BenchmarkRun: %w\n%s", err, out)
	}
	var r []goBench
	for _, m := range goBenchLine.FindAllStringSubmatch(string(out), -1) {
		rate, _ := strconv.ParseFloat(m[2], 64)
		r = append(r, goBench{name: "pipeline in Go: " + m[1], rate: rate})
		fmt.Fprintf(b.out, "%-32s %9.0f deliveries/s\n", r[len(r)-1].name, rate)
	}
	if len(r) == 0 {
		return nil, fmt.Errorf("BenchmarkRun printed no result:\n%s", out)
	}
	return r, nil
}
