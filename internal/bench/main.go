// Command bench is hookgate's load benchmark, run by `make bench` (which
// starts a throwaway PostgreSQL with fsync on and runs this program with
// `go run ./internal/bench`).
//
// It builds the real server (./cmd/server), starts it as a child process on
// 127.0.0.1 with a one-sender configuration (generic sender "bench", delivery
// ID in the X-Delivery-Id header, no forward target) against the database in
// HOOKGATE_BENCH_DATABASE_URL, waits for /readyz, and then:
//
//  0. counts the round trips to PostgreSQL of a first delivery, of a replay
//     and of a first delivery of a sender with one forward target, running
//     internal/dedup, internal/events and internal/forward on one pgx
//     connection whose socket writes it counts;
//  1. first deliveries: -c workers POST unique delivery IDs over keep-alive
//     connections for -warmup (not counted) plus -d; it prints deliveries/s,
//     p50/p99 latency and errors (transport errors, and answers other than
//     202 without Idempotent-Replayed). The gateway runs one pipeline per
//     delivery (set_config, claim, event insert; one Sync, one implicit
//     transaction);
//  2. pgbench -M prepared on the same database, while the gateway is idle,
//     one delivery per transaction, pipelined (\startpipeline …
//     \endpipeline, one round trip): first with the minimal plain SQL for
//     the same rows, BEGIN, INSERT … VALUES of the key, INSERT … VALUES of
//     the event, COMMIT (design.md §8's baseline, which the gateway's own
//     statements cannot move: the -min-ratio check), then with the SQL the
//     gateway runs per first delivery (its ratio to it is printed as
//     information). The parameter values (headers, body, stored
//     response) are those of a row the gateway stored; a pg_stat_activity
//     sample taken during phase 1 checks that the gateway ran the
//     statements pgbench runs;
//  3. replays: -replay-keys keys are created through the gateway, then -c
//     workers POST duplicates (same ID, same body) for -warmup plus -d; an
//     answer without "Idempotent-Replayed: true" counts as an error. The
//     gateway's claim fails with 23505, then it reads the stored row;
//  4. pgbench of the replay SQL, an approximation: the claim with ON
//     CONFLICT DO NOTHING (pgbench aborts a client on the unique violation
//     the gateway provokes) in a pipeline, then the SELECT of the stored row;
//  5. forwarding: the bench starts a sink on 127.0.0.1 (a minimal HTTP/1.1
//     server, lean for the reason the load generator's client is, that
//     answers 204 at once and counts what it receives) and, after stopping
//     the first server, runs first deliveries (fresh keys) against a server
//     of its own whose bench sender has one forward target, the sink: (a)
//     with --role api (the forward jobs are inserted in the ingest
//     transaction and worked elsewhere: ingestion's own cost; its rate over
//     phase 1's is the -min-forward-ratio check), then (b) with --role all
//     (the same process works the forwards on the same cores; printed as
//     information), after which it waits up to -forward-drain-timeout until
//     the sink has received every event accepted during (b), or prints the
//     backlog left. Jobs (a) leaves queued are deleted before (b) starts.
//
// During the gateway phases it samples the server's RSS (VmRSS of
// /proc/<pid>/status every 200 ms) and, in every phase, the CPU time of the
// server, of this load generator (and, in the forwarding phases, the sink),
// of PostgreSQL (the postmaster and its children), of pgbench and of the
// whole machine, so that the report shows where the cores went, and flags
// phases that other processes disturbed. The load generator shares the
// machine with what it measures: it reuses one request and one body per
// worker (-client raw goes further).
//
// It ends with a summary table and exits with status 1 when a check fails:
// the gateway reaching less than -min-ratio of pgbench's BEGIN…COMMIT rate
// on the first-delivery path, the --role api server with a forward target
// reaching less than -min-forward-ratio of phase 1's rate, any error on any
// path, forward jobs that do not match the events accepted, a peak RSS over
// -max-rss-mb, SQL that differs from the gateway's, or an unclean shutdown.
// A check that other processes' load could have decided is reported as
// inconclusive (exit status 1 as well). With -skip-pgbench the pgbench
// ratios are not checked; -skip-forward skips phase 5.
//
// Flags:
//
//	-c 32              concurrent workers (keep-alive connections) and pgbench clients
//	-d 10s             measured duration of each phase (also -duration)
//	-warmup 1s         warm-up before each gateway phase, not counted
//	-body-size 512     request body bytes (a JSON document)
//	-replay-keys 10000 keys created for the replay phase
//	-skip-pgbench      no pgbench (no ratio check)
//	-skip-replay       no replay phase
//	-skip-forward      no forwarding phases
//	-forward-drain-timeout 60s   how long to wait for the sink after (b)
//	-min-ratio 0.6, -min-forward-ratio 0.8, -max-rss-mb 150: the pass marks
//	-client net/http   or raw: a minimal HTTP/1.1 client that costs less CPU
//	-keep              keep the temporary directory (server logs, pgbench scripts and logs)
//	-pprof             a CPU profile of the server (its --pprof-addr) during phase 1 and the
//	                   --role all forwarding phase; print the
//	                   hottest processes and symbols (server, load generator, postgres)
//
// Experiments on the server's settings, not its code: -server-arg ARG
// (an argument of every server's `serve`, e.g. -server-arg=--forward-workers=100;
// repeatable); -server-gomaxprocs N;
// -server-env KEY=VALUE (e.g. GOGC=400; repeatable); -pool-max-conns N (the
// pool's size; cmd/server reads pool_max_conns from DATABASE_URL);
// -db-socket (server and pgbench reach PostgreSQL over its Unix socket
// instead of TCP); -server-log null (request log to /dev/null).
//
// Environment: HOOKGATE_BENCH_DATABASE_URL (required), HOOKGATE_PG_BINDIR
// (where pgbench is; PATH otherwise).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// options are the command-line flags.
type options struct {
	concurrency int
	duration    time.Duration
	warmup      time.Duration
	bodySize    int
	replayKeys  int
	skipPgbench bool
	minRatio    float64
	maxRSSMB    float64
	keep        bool
	pprof       bool
	pprofAddr   string // the server's profiler, with -pprof
	skipReplay  bool
	skipForward bool
	// forwardDrain bounds the wait for the sink after phase 5 (b).
	forwardDrain       time.Duration
	minForwardRatio    float64
	minForwardAllRatio float64
	maxCPUPerForward   time.Duration
	minReplayRatio     float64
	maxP99             time.Duration
	client             string
	dbSocket           bool
	// Experiments on the server's settings (not its code).
	poolMaxConns     int
	serverGOMAXPROCS int
	serverEnv        []string
	serverArgs       []string
	serverLog        string
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.concurrency, "c", 32, "concurrent workers (and keep-alive connections); pgbench clients")
	fs.DurationVar(&o.duration, "d", 10*time.Second, "measured duration of each phase (gateway and pgbench)")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "same as -d")
	fs.DurationVar(&o.warmup, "warmup", time.Second, "warm-up before each gateway phase, not counted")
	fs.IntVar(&o.bodySize, "body-size", 512, "request body size in bytes (a JSON document)")
	fs.IntVar(&o.replayKeys, "replay-keys", 10000, "keys created before the replay phase (at most 100000)")
	fs.BoolVar(&o.skipPgbench, "skip-pgbench", false, "do not run pgbench (the ratio is then not checked)")
	fs.Float64Var(&o.minRatio, "min-ratio", 0.7, "lowest passing ratio of gateway first deliveries/s to pgbench's tps sending the minimal plain SQL for the same rows")
	fs.Float64Var(&o.minReplayRatio, "min-replay-ratio", 1.5, "lowest passing ratio of gateway replays/s to its first deliveries/s")
	fs.Float64Var(&o.minForwardRatio, "min-forward-ratio", 0.85, "lowest passing ratio of first deliveries/s with one forward target (--role api) to those without")
	fs.Float64Var(&o.minForwardAllRatio, "min-forward-all-ratio", 0.6, "lowest passing ratio of first deliveries/s with one forward target (--role all) to those without")
	fs.DurationVar(&o.maxP99, "max-p99", 20*time.Millisecond, "highest passing p99 latency of first deliveries")
	fs.BoolVar(&o.skipForward, "skip-forward", false, "skip the forwarding phases (one forward target, --role api then --role all)")
	fs.DurationVar(&o.forwardDrain, "forward-drain-timeout", 5*time.Second, "how long the sink may take, after the --role all forwarding phase, to receive every accepted event (the check)")
	fs.DurationVar(&o.maxCPUPerForward, "max-cpu-per-forward", 350*time.Microsecond, "highest passing gateway + PostgreSQL CPU time per forward (--role all, beyond a delivery's own)")
	fs.Float64Var(&o.maxRSSMB, "max-rss-mb", 150, "highest passing peak RSS of the server, in MB")
	fs.BoolVar(&o.keep, "keep", false, "keep the temporary directory (server log, pgbench scripts and logs)")
	fs.BoolVar(&o.pprof, "pprof", false, "take a CPU profile of the server (pprof) during the first-delivery phase and the --role all forwarding phase and print its hottest functions (with -keep, the profile is kept)")
	fs.Func("server-arg", "experiment: an argument added to every server's `serve` command line, e.g. -server-arg=--forward-workers=100 (repeatable; -server cmd only)", func(v string) error {
		o.serverArgs = append(o.serverArgs, v)
		return nil
	})
	fs.BoolVar(&o.skipReplay, "skip-replay", false, "skip the replay phase (quicker experiments)")
	fs.BoolVar(&o.dbSocket, "db-socket", false, "connect the server and pgbench to PostgreSQL over its Unix socket instead of TCP (PostgreSQL on the same machine)")
	fs.StringVar(&o.client, "client", "raw", "load generator's HTTP client: raw (a minimal HTTP/1.1 keep-alive client: like pgbench's client, it costs little CPU next to what it measures on the shared machine) or net/http (http.Transport, keep-alive, about 2.5 times the CPU)")
	fs.IntVar(&o.poolMaxConns, "pool-max-conns", 0, "experiment: the server pool's size (0: 32, cmd/server's default; pool_max_conns in DATABASE_URL for -server cmd)")
	fs.IntVar(&o.serverGOMAXPROCS, "server-gomaxprocs", 0, "experiment: GOMAXPROCS of the server (0: Go's default)")
	fs.Func("server-env", "experiment: KEY=VALUE added to the server's environment, e.g. GOGC=400 (repeatable)", func(v string) error {
		if !strings.Contains(v, "=") {
			return errors.New("want KEY=VALUE")
		}
		o.serverEnv = append(o.serverEnv, v)
		return nil
	})
	fs.StringVar(&o.serverLog, "server-log", "file", "where the server's request log goes: file (as in production) or null (/dev/null)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if o.pprof {
		env, addr, err := pprofEnv()
		if err != nil {
			return nil, err
		}
		o.serverEnv, o.pprofAddr = append(o.serverEnv, env), addr
	}
	switch {
	case fs.NArg() > 0:
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	case o.concurrency < 1:
		return nil, errors.New("-c must be at least 1")
	case o.duration < time.Second:
		return nil, errors.New("-d must be at least 1s")
	case o.warmup < 0:
		return nil, errors.New("-warmup must not be negative")
	case o.bodySize < 32 || o.bodySize > 1<<20:
		return nil, errors.New("-body-size must be between 32 and 1048576")
	case o.client != "net/http" && o.client != "raw":
		return nil, errors.New("-client must be net/http or raw")
	case o.serverLog != "file" && o.serverLog != "null":
		return nil, errors.New("-server-log must be file or null")
	case o.poolMaxConns < 0:
		return nil, errors.New("-pool-max-conns must not be negative")
	case o.forwardDrain < 0:
		return nil, errors.New("-forward-drain-timeout must not be negative")
	case o.replayKeys < 1 || o.replayKeys > maxReplayKeys:
		return nil, fmt.Errorf("-replay-keys must be between 1 and %d", maxReplayKeys)
	}
	return o, nil
}

// run is the whole program; it returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "bench:", err)
		return 2
	}
	failed, err := bench(ctx, o, stdout)
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 1
	}
	if failed {
		return 1
	}
	return 0
}

// bench runs every phase and prints the report. It returns failed when a
// check failed, and an error when the benchmark itself could not run.
func bench(ctx context.Context, o *options, out io.Writer) (failed bool, err error) {
	dbURL := os.Getenv("HOOKGATE_BENCH_DATABASE_URL")
	if dbURL == "" {
		return false, errors.New("HOOKGATE_BENCH_DATABASE_URL is not set: run `make bench`, which starts a throwaway PostgreSQL and sets it")
	}
	pgbenchBin := ""
	if !o.skipPgbench {
		if pgbenchBin, err = findPgbench(); err != nil {
			return false, err
		}
	}
	tmpParent := "" // os.TempDir()
	if o.keep {
		// .ci/bench.sh deletes its TMPDIR on exit; it says where to keep files.
		tmpParent = os.Getenv("HOOKGATE_BENCH_KEEP_DIR")
	}
	tmp, err := os.MkdirTemp(tmpParent, "hookgate-bench-")
	if err != nil {
		return false, err
	}
	if o.keep {
		fmt.Fprintf(out, "temporary files kept in %s\n", tmp)
	} else {
		defer os.RemoveAll(tmp)
	}

	db, err := openDB(ctx, dbURL)
	if err != nil {
		return false, err
	}
	defer db.close()
	if o.dbSocket {
		if dbURL, err = db.socketURL(ctx); err != nil {
			return false, err
		}
		fmt.Fprintf(out, "server and pgbench connect over the Unix socket: %s\n", dbURL)
	}

	fmt.Fprintf(out, "== hookgate bench: -c %d, -d %s (+%s warm-up), body %d bytes, client %s\n", o.concurrency, o.duration, o.warmup, o.bodySize, o.client)
	printMachine(ctx, out, db, pgbenchBin)

	fmt.Fprintln(out, "building the server …")
	bin, err := buildServer(ctx, tmp)
	if err != nil {
		return false, err
	}
	srv, err := startServer(ctx, bin, tmp, dbURL, o, mainSpec)
	if err != nil {
		return false, err
	}
	// Always stop the server, even on failure or interrupt.
	defer func() {
		if srv != nil {
			srv.kill()
		}
	}()
	fmt.Fprintf(out, "server pid %d on %s (log %s; pool_max_conns %s, GOMAXPROCS %s%s%s)\n", srv.pid(), srv.addr, srv.logPath,
		orDefault(o.poolMaxConns), orDefault(o.serverGOMAXPROCS), strings.Join(append([]string{""}, o.serverEnv...), ", "),
		strings.Join(append([]string{""}, o.serverArgs...), " "))

	rss := newRSSSampler(srv.pid(), 200*time.Millisecond)
	defer rss.stop()

	body := makeBody(o.bodySize)
	pgPID := db.postmasterPID(ctx)
	s := &summary{o: o}
	if s.roundTrips, err = roundTrips(ctx, dbURL, body, out); err != nil {
		return false, err
	}

	// Phase 1: first deliveries through the gateway.
	if err := db.checkpoint(ctx); err != nil {
		return false, err
	}
	var prof *profiler
	if o.pprof {
		prof = startProfile(ctx, o.pprofAddr, filepath.Join(tmp, "cpu.pprof"), o.duration)
	}
	watch := watchSQL(ctx, dbURL, o.warmup, firstSQL...)
	_, batches := srv.batchReport([2]float64{})
	cpu0 := takeCPU(srv.pid(), pgPID)
	rss.mark()
	first := runLoad(ctx, loadConfig{
		url: srv.url(), workers: o.concurrency, warmup: o.warmup, duration: o.duration,
		body: body, ids: firstIDs("fd"), wantReplayed: false, raw: o.client == "raw",
	})
	cpu1 := takeCPU(srv.pid(), pgPID)
	first.rssPeakMB = rss.phasePeakMB()
	first.cpu = cpuBetween(cpu0, cpu1, nil)
	if first.requests > 0 {
		s.firstCPU = gatewayPGTime(cpu0, cpu1) / time.Duration(first.requests)
	}
	first.name = "first delivery: gateway"
	printLoad(out, first)
	var batchText string
	batchText, batches = srv.batchReport(batches)
	fmt.Fprintf(out, "  batches: %s\n", batchText)
	s.firstBatches = batchText
	if prof != nil {
		prof.report(out)
	}
	s.sqlFirstOK = printSQLCheck(out, watch, firstSQL, txSQL)
	s.first = first
	if err := phaseEnd(ctx, srv); err != nil {
		return false, err
	}
	// A lone sender: what one delivery costs without company.
	lone := runLoad(ctx, loadConfig{
		url: srv.url(), workers: 1, warmup: o.warmup, duration: 3 * time.Second,
		body: body, ids: firstIDs("lone"), wantReplayed: false, raw: o.client == "raw",
	})
	lone.name = "first delivery, concurrency 1"
	printLoad(out, lone)
	batchText, batches = srv.batchReport(batches)
	fmt.Fprintf(out, "  batches: %s\n", batchText)
	s.lone = lone

	// Phase 2: pgbench of the same SQL, gateway idle.
	var fp *fixture
	if !o.skipPgbench {
		fp, err = db.fixture(ctx)
		if err != nil {
			return false, err
		}
		fmt.Fprintf(out, "pgbench parameters taken from a row the gateway stored: headers %s\n", fp.headersJSON)
		for _, mode := range []pgbenchMode{modePlain, modePipeline} {
			fmt.Fprintf(out, "pgbench script of %q (-D sets :sender, :sha, :resp, :body, … to the stored row's values):\n  %s\n",
				mode.name, strings.ReplaceAll(strings.TrimSpace(mode.script()), "\n", "\n  "))
		}
		for _, mode := range []pgbenchMode{modePlain, modePipeline} {
			if err := db.checkpoint(ctx); err != nil {
				return false, err
			}
			r, err := runPgbench(ctx, pgbenchBin, dbURL, tmp, mode, fp, o, pgPID)
			if err != nil {
				return false, err
			}
			printPgbench(out, r)
			s.pgbench = append(s.pgbench, r)
		}
	}

	if !o.skipReplay {
		// Phase 3: replays through the gateway.
		fmt.Fprintf(out, "creating %d keys for the replay phase through the gateway …\n", o.replayKeys)
		base := replayBase()
		pre := createKeys(ctx, srv.url(), o.concurrency, body, base, o.replayKeys, o.client == "raw")
		s.precreateErrors = pre.errors
		if pre.errors > 0 {
			fmt.Fprintf(out, "  %d errors while creating keys: %s\n", pre.errors, strings.Join(pre.errSamples, "; "))
		}
		if err := db.checkpoint(ctx); err != nil {
			return false, err
		}
		watch = watchSQL(ctx, dbURL, o.warmup, replaySQL...)
		cpu0 = takeCPU(srv.pid(), pgPID)
		rss.mark()
		replay := runLoad(ctx, loadConfig{
			url: srv.url(), workers: o.concurrency, warmup: o.warmup, duration: o.duration,
			body: body, ids: replayIDs(base, o.replayKeys), wantReplayed: true, raw: o.client == "raw",
		})
		cpu1 = takeCPU(srv.pid(), pgPID)
		replay.rssPeakMB = rss.phasePeakMB()
		replay.cpu = cpuBetween(cpu0, cpu1, nil)
		replay.name = "replay: gateway"
		printLoad(out, replay)
		batchText, _ = srv.batchReport(batches)
		fmt.Fprintf(out, "  batches (since the concurrency-1 phase, with the keys' creation): %s\n", batchText)
		// Most replays are answered from the replay cache without any
		// statement: what the connections ran is shown, not checked.
		printSQLSeen(out, watch, replaySQL)
		s.sqlReplayOK = true
		s.replay = replay
		if err := phaseEnd(ctx, srv); err != nil {
			return false, err
		}

		// Phase 4: pgbench of the replay SQL.
		if !o.skipPgbench {
			if err := db.checkpoint(ctx); err != nil {
				return false, err
			}
			fp.replayBase, fp.replayKeys = base, o.replayKeys
			r, err := runPgbench(ctx, pgbenchBin, dbURL, tmp, modeReplay, fp, o, pgPID)
			if err != nil {
				return false, err
			}
			printPgbench(out, r)
			s.pgbench = append(s.pgbench, r)
		}
	}

	// The first server stops here: with --role all it works forward jobs
	// too, and its configuration has no target for them.
	s.rssOverallMB = rss.peakMB()
	if err := srv.stop(25 * time.Second); err != nil {
		fmt.Fprintf(out, "server shutdown: %v\n", err)
		s.shutdownErr = err
	}
	srv = nil

	// Phase 5: one forward target, --role api then --role all.
	switch {
	case o.skipForward:
	default:
		sk, err := startSink()
		if err != nil {
			return false, err
		}
		defer sk.close()
		for _, p := range []struct{ role, tag string }{{"api", "fwa"}, {"all", "fwb"}} {
			r, err := forwardPhase(ctx, o, bin, tmp, dbURL, db, sk, body, p.role, p.tag, s.first.rate(), s.firstCPU, pgPID, out)
			if err != nil {
				return false, err
			}
			s.forward = append(s.forward, r)
		}
	}
	return s.print(out), nil
}

// phaseEnd returns an error when the run was interrupted or the server died.
func phaseEnd(ctx context.Context, srv *server) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if srv.exited() {
		return fmt.Errorf("the server exited during the phase: %w\n--- server log ---\n%s", srv.waitErr, srv.logTail())
	}
	return nil
}

func orDefault(n int) string {
	if n <= 0 {
		return "default"
	}
	return strconv.Itoa(n)
}
