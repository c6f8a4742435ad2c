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

	"github.com/hookgate/hookgate/internal/ingestsql"
)

// findPgbench returns pgbench from HOOKGATE_PG_BINDIR, else from PATH.
func findPgbench() (string, error) {
	if dir := os.Getenv("HOOKGATE_PG_BINDIR"); dir != "" {
		p := filepath.Join(dir, "pgbench")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	p, err := exec.LookPath("pgbench")
	if err != nil {
		return "", errors.New("pgbench not found in HOOKGATE_PG_BINDIR or PATH (install the PostgreSQL client tools, or pass -skip-pgbench)")
	}
	return p, nil
}

// pgbenchMode is one pgbench workload.
type pgbenchMode struct {
	name       string
	roundTrips string // per transaction, for the report
	script     func() string
}

// Parameter names of the pgbench scripts, in the order of the gateway's $n.
// The event ID is computed by the server from the delivery ID (pgbench
// cannot make UUIDs itself), the same in every statement of a transaction,
// as the gateway's fresh UUIDv7 is: for a replay it differs from the stored
// one, as the gateway's does.
const eventID = "md5(:did::text)::uuid"

// The statements take the sender as $1 and one array per column, one
// element per delivery: pgbench sends one delivery's, as one-element arrays.
var (
	claimParams  = rowParams(":did", ":sha", eventID, ":status", ":ctype", ":resp", ":ts", ":exp")
	eventParams  = rowParams(eventID, ":did", ":ts", ":headers", ":body", ":etype")
	storedParams = rowParams(":did", eventID)
)

// rowParams returns the parameters of a multi-row statement for one row:
// the sender, then each value as a one-element array.
func rowParams(values ...string) []string {
	out := []string{":sender"}
	for _, v := range values {
		out = append(out, "ARRAY["+v+"]")
	}
	return out
}

var placeholder = regexp.MustCompile(`\$([0-9]+)`)

// bind replaces the placeholders $1 … $n of sql with params[0] … params[n-1]:
// pgbench variables, which -M prepared sends as parameters of a prepared
// statement, as the gateway does.
func bind(sql string, params []string) string {
	return placeholder.ReplaceAllStringFunc(sql, func(m string) string {
		i, _ := strconv.Atoi(m[1:])
		return params[i-1]
	})
}

// uniqueKey makes :did unique per transaction: a per-client counter (n starts
// at 0 with -D) times the client number. The sender differs per run.
const uniqueKey = `\set n :n + 1
\set did :client_id * 1000000000 + :n
`

// pipeline is the gateway's pipeline for a sender without targets, bound to
// pgbench variables: BEGIN … COMMIT between \startpipeline and
// \endpipeline, one round trip (the gateway sends one more Sync before
// COMMIT, which costs no round trip).
func pipeline() string {
	return "\\startpipeline\nBEGIN;\n" +
		lockTimeoutSQL + ";\n" +
		ingestsql.GenericPlans + ";\n" +
		bind(claimSQL, claimParams) + ";\n" +
		bind(insertEventSQL, eventParams) + ";\n" +
		bind(storedSQL, storedParams) + ";\n" +
		"COMMIT;\n\\endpipeline\n"
}

// The minimal plain SQL for a first delivery's rows: the key and the event,
// each a prepared INSERT … VALUES of scalar parameters (design.md §8's
// baseline, which cannot move with the gateway's own statements).
const (
	plainClaimSQL = `INSERT INTO processed_messages
  (sender, delivery_id, request_sha256, event_id, response_status, response_content_type, response_body, created_at, expires_at)
VALUES (:sender, :did, :sha, ` + eventID + `, :status, :ctype, :resp, :ts, :exp)`
	plainEventSQL = `INSERT INTO webhook_events (sender, id, delivery_id, received_at, headers, body, event_type)
VALUES (:sender, ` + eventID + `, :did, :ts, :headers, :body, :etype)`
)

// plain is the minimal plain SQL of a first delivery, pipelined, one
// delivery per transaction: one round trip, as the gateway's pipeline.
func plain() string {
	return "\\startpipeline\nBEGIN;\n" + plainClaimSQL + ";\n" + plainEventSQL + ";\nCOMMIT;\n\\endpipeline\n"
}

var (
	// modePlain sends the minimal plain SQL for the rows of a first
	// delivery. The gateway's ratio to it is the -min-ratio check.
	modePlain = pgbenchMode{
		name:       "first delivery: pgbench plain SQL",
		roundTrips: "1 round trip: BEGIN, INSERT … VALUES of the key, INSERT … VALUES of the event, COMMIT, pipelined — the -min-ratio check",
		script:     func() string { return uniqueKey + plain() },
	}
	// modePipeline sends what the gateway sends for a first delivery: its
	// ratio is printed as information (a change that slows the gateway's
	// SQL down slows this baseline down too).
	modePipeline = pgbenchMode{
		name:       "first delivery: pgbench pipeline",
		roundTrips: "1 round trip: the gateway's own pipeline (BEGIN, lock timeout, generic plans, claim, event, read, COMMIT) — information",
		script:     func() string { return uniqueKey + pipeline() },
	}
	// modeReplay sends the same pipeline for keys the gateway stored.
	modeReplay = pgbenchMode{
		name:       "replay: pgbench pipeline",
		roundTrips: "1 round trip: the same pipeline on stored keys (the claim takes nothing, the read returns the row)",
		script: func() string {
			return "\\set did :replay_base + random(0, :replay_keys - 1)\n" + pipeline()
		},
	}
)

// pgbenchResult is what one pgbench run measured.
type pgbenchResult struct {
	mode      pgbenchMode
	tps       float64
	processed int
	failed    int
	latencies []time.Duration // sorted, from pgbench's transaction log
	cpu       cpuUse
	script    string
}

func (r *pgbenchResult) p(q float64) time.Duration { return percentile(r.latencies, q) }

// runPgbench runs pgbench -M prepared with mode's script against dbURL while
// nothing else loads the database.
func runPgbench(ctx context.Context, bin, dbURL, dir string, mode pgbenchMode, f *fixture, o *options, pgPID int) (*pgbenchResult, error) {
	slug := strings.NewReplacer(" ", "-", ":", "", "…", "-", "(", "", ")", "", "≈", "").Replace(mode.name)
	script := mode.script()
	scriptPath := filepath.Join(dir, slug+".sql")
	if err := os.WriteFile(scriptPath, []byte(script), 0o644); err != nil {
		return nil, err
	}
	logPrefix := filepath.Join(dir, slug+"-log")
	sender := "pgbench-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	if mode.name == modeReplay.name {
		sender = "bench" // the keys the gateway created
	}
	secs := int(math.Ceil(o.duration.Seconds()))
	args := []string{
		"-n", "-M", "prepared",
		"-c", strconv.Itoa(o.concurrency), "-j", strconv.Itoa(min(2, o.concurrency)),
		"-T", strconv.Itoa(secs),
		"-f", scriptPath,
		"-l", "--log-prefix", logPrefix,
		"-D", "n=0",
		"-D", "sender=" + sender,
		"-D", "sha=" + f.sha256Hex,
		"-D", "status=" + strconv.Itoa(f.respStatus),
		"-D", "ctype=" + f.respType,
		"-D", "resp=" + f.respBodyHex,
		"-D", "ts=" + f.receivedAtTxt,
		"-D", "exp=" + f.expiresAtTxt,
		"-D", "headers=" + f.headersJSON,
		"-D", "body=" + f.bodyHex,
		"-D", "etype=" + f.eventType,
		"-D", "replay_base=" + strconv.FormatInt(f.replayBase, 10),
		"-D", "replay_keys=" + strconv.Itoa(max(f.replayKeys, 1)),
		dbURL,
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	var output bytes.Buffer
	cmd.Stdout, cmd.Stderr = &output, &output
	cpu0 := takeCPU(0, pgPID)
	err := cmd.Run()
	cpu1 := takeCPU(0, pgPID)
	if err != nil {
		return nil, fmt.Errorf("pgbench (%s): %w\n%s\n--- script ---\n%s", mode.name, err, output.String(), script)
	}
	r := &pgbenchResult{mode: mode, script: script}
	if r.tps, r.processed, r.failed, err = parsePgbench(output.String()); err != nil {
		return nil, fmt.Errorf("pgbench (%s): %w\n%s", mode.name, err, output.String())
	}
	pgbenchCPU := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	r.cpu = cpuBetween(cpu0, cpu1, &pgbenchCPU)
	r.latencies, err = readPgbenchLogs(logPrefix)
	if err != nil {
		return nil, err
	}
	return r, nil
}

var (
	tpsLine       = regexp.MustCompile(`(?m)^tps = ([0-9.]+) \((?:without initial connection time|excluding connections establishing)\)`)
	processedLine = regexp.MustCompile(`(?m)^number of transactions actually processed: ([0-9]+)`)
	failedLine    = regexp.MustCompile(`(?m)^number of failed transactions: ([0-9]+)`)
)

// parsePgbench reads the tps (excluding connection set-up), the transactions
// processed and failed from pgbench's report.
func parsePgbench(out string) (tps float64, processed, failed int, err error) {
	m := tpsLine.FindStringSubmatch(out)
	if m == nil {
		return 0, 0, 0, errors.New("no tps line in pgbench's output")
	}
	tps, err = strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("tps %q: %w", m[1], err)
	}
	if m := processedLine.FindStringSubmatch(out); m != nil {
		processed, _ = strconv.Atoi(m[1])
	}
	if m := failedLine.FindStringSubmatch(out); m != nil {
		failed, _ = strconv.Atoi(m[1])
	}
	return tps, processed, failed, nil
}

// readPgbenchLogs returns the sorted transaction latencies of pgbench's
// per-transaction logs (-l) whose names start with prefix.
func readPgbenchLogs(prefix string) ([]time.Duration, error) {
	files, err := filepath.Glob(prefix + ".*")
	if err != nil {
		return nil, err
	}
	var lat []time.Duration
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		lat, err = parsePgbenchLog(f, lat)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	slices.Sort(lat)
	return lat, nil
}

// parsePgbenchLog appends the latencies of a pgbench transaction log to lat.
// Each line is "client_id transaction_no time script_no time_epoch time_us …"
// with time in microseconds ("failed" or "skipped" for such transactions).
func parsePgbenchLog(r io.Reader, lat []time.Duration) ([]time.Duration, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 3 {
			continue
		}
		us, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil {
			continue
		}
		lat = append(lat, time.Duration(us)*time.Microsecond)
	}
	return lat, sc.Err()
}

func printPgbench(out io.Writer, r *pgbenchResult) {
	fmt.Fprintf(out, "%-32s %9.0f tps           p50 %s  p99 %s  failed %d  (%d transactions)\n",
		r.mode.name, r.tps, ms(r.p(0.50)), ms(r.p(0.99)), r.failed, r.processed)
	fmt.Fprintf(out, "  %s\n  CPU cores: %s\n", r.mode.roundTrips, r.cpu)
	warnDisturbed(out, r.cpu)
}
