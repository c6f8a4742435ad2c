// Command bench is hookgate's load benchmark: `make bench` starts a
// throwaway PostgreSQL (fsync on) and runs it with
// HOOKGATE_BENCH_DATABASE_URL set (HOOKGATE_PG_BINDIR: where pgbench is).
//
// It measures the real server from outside: it builds ./cmd/server, runs
// it on 127.0.0.1 with a generic sender "bench" (delivery ID in
// X-Delivery-Id) and loads it over HTTP with -c keep-alive connections,
// -warmup (not counted) plus -d per phase:
//
//  1. first deliveries (unique IDs), then a lone sender (concurrency 1);
//  2. pgbench -M prepared, gateway idle: the minimal plain SQL for the same
//     rows, one delivery per pipelined transaction (-min-ratio);
//  3. replays of -replay-keys stored keys (-min-replay-ratio);
//  4. a server whose sender forwards to a sink on 127.0.0.1: --role api
//     (-min-forward-ratio), then --role all (-min-forward-all-ratio), the
//     sink's receipt of every forward (-forward-drain-timeout), the time
//     from the 2xx to the receipt at 100/s and at half that intake, the CPU
//     per forward (-max-cpu-per-forward), and the forwards' states from the
//     operator API: one per accepted delivery.
//
// Each phase reads, from /proc, the CPU time of the gateway, of this load
// generator, of PostgreSQL (the postmaster and its children), of pgbench
// and of the machine; a ratio that other processes' load could have
// decided is reported ???? (inconclusive). The exit status is 1 when a
// check fails or is inconclusive. -pprof keeps CPU profiles of phase 1 and
// of --role all. What the gateway does per delivery in PostgreSQL is
// measured by tests: its round trips (TestRunOneRoundTripPerOutcome in
// internal/dedup, TestOutboxAddsNoRoundTrip in internal/forward) and its
// pipeline's cost (BenchmarkRun in internal/dedup).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// options are the command-line flags.
type options struct {
	concurrency, bodySize, replayKeys                                     int
	duration, warmup, forwardDrain, maxP99, maxCPUPerForward              time.Duration
	minRatio, minReplayRatio, minForwardRatio, minForwardAllRatio, maxRSS float64
	skipPgbench, skipReplay, skipForward, keep, pprof                     bool
	serverArgs, serverEnv                                                 []string
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
	fs.IntVar(&o.concurrency, "c", 32, "concurrent workers (keep-alive connections) and pgbench clients")
	fs.DurationVar(&o.duration, "d", 10*time.Second, "measured duration of each phase")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "same as -d")
	fs.DurationVar(&o.warmup, "warmup", time.Second, "warm-up before each gateway phase, not counted")
	fs.IntVar(&o.bodySize, "body-size", 512, "request body bytes (a JSON document)")
	fs.IntVar(&o.replayKeys, "replay-keys", 10000, "keys created for the replay phase (at most 100000)")
	fs.BoolVar(&o.skipPgbench, "skip-pgbench", false, "no pgbench (no ratio to it)")
	fs.BoolVar(&o.skipReplay, "skip-replay", false, "no replay phase")
	fs.BoolVar(&o.skipForward, "skip-forward", false, "no forwarding phases")
	fs.Float64Var(&o.minRatio, "min-ratio", 0.7, "lowest passing first deliveries/s ÷ pgbench's tps with the minimal plain SQL")
	fs.Float64Var(&o.minReplayRatio, "min-replay-ratio", 1.5, "lowest passing replays/s ÷ first deliveries/s")
	fs.Float64Var(&o.minForwardRatio, "min-forward-ratio", 0.85, "lowest passing first deliveries/s with one target (--role api) ÷ without")
	fs.Float64Var(&o.minForwardAllRatio, "min-forward-all-ratio", 0.6, "lowest passing first deliveries/s with one target (--role all) ÷ without")
	fs.DurationVar(&o.maxP99, "max-p99", 20*time.Millisecond, "highest passing p99 latency of first deliveries")
	fs.DurationVar(&o.forwardDrain, "forward-drain-timeout", 5*time.Second, "how long the sink may take, after the --role all load, to receive every accepted event")
	fs.DurationVar(&o.maxCPUPerForward, "max-cpu-per-forward", 350*time.Microsecond, "highest passing gateway + PostgreSQL CPU per forward (--role all, beyond a delivery's own)")
	fs.Float64Var(&o.maxRSS, "max-rss-mb", 150, "highest passing peak RSS of a server, in MB")
	fs.BoolVar(&o.keep, "keep", false, "keep the temporary directory (server logs, pgbench script and logs, profiles)")
	fs.BoolVar(&o.pprof, "pprof", false, "CPU profiles of the server in phase 1 and the --role all phase, with their hottest functions")
	fs.Func("server-arg", "an argument added to every server's `serve`, e.g. -server-arg=--forward-workers=100 (repeatable)", func(v string) error {
		o.serverArgs = append(o.serverArgs, v)
		return nil
	})
	fs.Func("server-env", "KEY=VALUE added to every server's environment, e.g. GOGC=400 or GOMAXPROCS=1 (repeatable)", func(v string) error {
		if !strings.Contains(v, "=") {
			return errors.New("want KEY=VALUE")
		}
		o.serverEnv = append(o.serverEnv, v)
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	switch {
	case fs.NArg() > 0:
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	case o.concurrency < 1 || o.duration < time.Second || o.warmup < 0 || o.forwardDrain < 0:
		return nil, errors.New("want -c ≥ 1, -d ≥ 1s, -warmup and -forward-drain-timeout ≥ 0")
	case o.bodySize < 32 || o.bodySize > 1<<20 || o.replayKeys < 1 || o.replayKeys > maxReplayKeys:
		return nil, fmt.Errorf("want -body-size from 32 to 1048576, -replay-keys from 1 to %d", maxReplayKeys)
	}
	return o, nil
}

// run is the whole program; it returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	} else if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 2
	}
	b := &bench{o: o, out: stdout, s: &summary{o: o}}
	if err := b.run(ctx); err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 1
	}
	if b.s.print(stdout) {
		return 1
	}
	return 0
}

// bench is one run: what its phases share.
type bench struct {
	o                  *options
	out                io.Writer
	s                  *summary
	db                 *benchDB
	dbURL, tmp, bin    string // bin: the server's
	pgbench, pprofAddr string // "" without -pprof, -skip-pgbench
	pgPID              int    // the postmaster's; 0 when PostgreSQL runs elsewhere
	body               []byte
	firstCPU           time.Duration // gateway + PostgreSQL CPU per first delivery
}

func (b *bench) run(ctx context.Context) (err error) {
	if b.dbURL = os.Getenv("HOOKGATE_BENCH_DATABASE_URL"); b.dbURL == "" {
		return errors.New("HOOKGATE_BENCH_DATABASE_URL is not set: run `make bench`, which starts a throwaway PostgreSQL and sets it")
	}
	if !b.o.skipPgbench {
		if b.pgbench, err = findPgbench(); err != nil {
			return err
		}
	}
	if b.o.pprof {
		if b.pprofAddr, err = freeAddr(); err != nil {
			return err
		}
	}
	keepIn := "" // os.TempDir(), which .ci/bench.sh deletes on exit
	if b.o.keep {
		keepIn = os.Getenv("HOOKGATE_BENCH_KEEP_DIR")
	}
	if b.tmp, err = os.MkdirTemp(keepIn, "hookgate-bench-"); err != nil {
		return err
	}
	if b.o.keep {
		fmt.Fprintf(b.out, "temporary files kept in %s\n", b.tmp)
	} else {
		defer os.RemoveAll(b.tmp)
	}
	if b.db, err = openDB(ctx, b.dbURL); err != nil {
		return err
	}
	defer b.db.close()
	fmt.Fprintf(b.out, "== hookgate bench: -c %d, -d %s (+%s warm-up), body %d bytes\n", b.o.concurrency, b.o.duration, b.o.warmup, b.o.bodySize)
	b.db.printMachine(ctx, b.out, b.pgbench)
	fmt.Fprintln(b.out, "building the server …")
	if b.bin, err = buildServer(ctx, b.tmp); err != nil {
		return err
	}
	b.pgPID, b.body = b.db.postmasterPID(ctx), makeBody(b.o.bodySize)
	if err := b.noTarget(ctx); err != nil {
		return err
	}
	if b.o.skipForward {
		return nil
	}
	sk, err := startSink()
	if err != nil {
		return err
	}
	defer sk.close()
	for _, p := range []struct{ role, tag string }{{"api", "fwa"}, {"all", "fwb"}} {
		r, err := b.forwardPhase(ctx, sk, p.role, p.tag)
		if err != nil {
			return err
		}
		b.s.forward = append(b.s.forward, r)
	}
	return nil
}

// noTarget runs the phases of a sender without forward targets on one
// server: first deliveries, a lone sender, pgbench, replays.
func (b *bench) noTarget(ctx context.Context) error {
	srv, err := b.startServer(ctx, "server", benchConfig)
	if err != nil {
		return err
	}
	defer srv.kill()
	b.db.checkpoint(ctx, b.out)
	prof := b.profile(ctx)
	batches := srv.batches()
	b.s.first = b.load(ctx, srv, "first delivery: gateway", loadConfig{ids: firstIDs("fd")})
	if b.s.first.requests > 0 {
		b.firstCPU = b.s.first.gatewayPG / time.Duration(b.s.first.requests)
	}
	fmt.Fprintf(b.out, "  batches: %s\n", srv.batchReport(&batches))
	prof.report(b.out)
	if err := srv.alive(ctx); err != nil {
		return err
	}
	b.load(ctx, srv, "first delivery, concurrency 1", loadConfig{ids: firstIDs("lone"), workers: 1, duration: 3 * time.Second})
	fmt.Fprintf(b.out, "  batches: %s\n", srv.batchReport(&batches))
	if err := srv.alive(ctx); err != nil {
		return err
	}
	if !b.o.skipPgbench {
		b.db.checkpoint(ctx, b.out)
		if b.s.pgbench, err = runPgbench(ctx, b); err != nil {
			return err
		}
		if b.s.goBench, err = runGoBench(ctx, b); err != nil {
			return err
		}
	}
	if !b.o.skipReplay {
		fmt.Fprintf(b.out, "creating %d keys for the replay phase through the gateway …\n", b.o.replayKeys)
		base := replayBase()
		pre := runLoad(ctx, loadConfig{url: srv.url(), workers: b.o.concurrency, body: b.body, ids: keyIDs(base), keys: b.o.replayKeys})
		if b.s.precreateErrors = pre.errors; pre.errors > 0 {
			fmt.Fprintf(b.out, "  %d errors while creating keys: %s\n", pre.errors, strings.Join(pre.errSamples, "; "))
		}
		b.db.checkpoint(ctx, b.out)
		b.s.replay = b.load(ctx, srv, "replay: gateway", loadConfig{ids: replayIDs(base, b.o.replayKeys), wantReplayed: true})
		fmt.Fprintf(b.out, "  batches (with the keys' creation): %s\n", srv.batchReport(&batches))
		if err := srv.alive(ctx); err != nil {
			return err
		}
	}
	// This server stops here: with --role all it would work forward jobs
	// too, and its configuration has no target for them.
	b.s.rssOverall = srv.peakRSS()
	if b.s.shutdownErr = srv.stop(); b.s.shutdownErr != nil {
		fmt.Fprintf(b.out, "server shutdown: %v\n", b.s.shutdownErr)
	}
	return nil
}

// load runs one measured phase against srv, with the run's body,
// concurrency, warm-up and duration unless cfg sets workers and duration,
// and prints it.
func (b *bench) load(ctx context.Context, srv *server, name string, cfg loadConfig) *loadResult {
	cfg.url, cfg.body, cfg.warmup = srv.url(), b.body, b.o.warmup
	if cfg.workers == 0 {
		cfg.workers, cfg.duration = b.o.concurrency, b.o.duration
	}
	cpu0 := takeCPU(srv.pid(), b.pgPID)
	r := runLoad(ctx, cfg)
	r.end = takeCPU(srv.pid(), b.pgPID)
	r.name, r.rssPeak = name, srv.peakRSS()
	r.cpu, r.gatewayPG = cpuBetween(cpu0, r.end, nil), gatewayPGTime(cpu0, r.end)
	printLoad(b.out, r)
	return r
}
