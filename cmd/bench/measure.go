package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/procfs"
)

// server is a hookgate process under test.
type server struct {
	cmd                             *exec.Cmd
	addr, pprofAddr, logPath, token string             // token: its HOOKGATE_ADMIN_TOKEN
	cancel                          context.CancelFunc // SIGTERM
	done                            chan struct{}
	waitErr                         error
	batches                         [2]float64 // hookgate_ingest_batch_size's count and sum at the last batchReport
}

func (s *server) pid() int { return s.cmd.Process.Pid }
func (s *server) exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// startServer starts `hookgate serve args… -server-arg…` with config on a
// free loopback port, logging to a file (a JSON line per request, as in
// production), and waits until it listens.
func (b *bench) startServer(ctx context.Context, name, config string, args ...string) (*server, error) {
	cfgPath := filepath.Join(b.tmp, name+".yaml")
	s := &server{logPath: filepath.Join(b.tmp, name+".log"), token: rand.Text() + rand.Text(), done: make(chan struct{})}
	log, err := os.Create(s.logPath)
	if err == nil {
		err = os.WriteFile(cfgPath, []byte(config), 0o644)
	}
	if err != nil {
		return nil, err
	}
	defer log.Close() // the child has its own descriptor
	args = append(append([]string{"serve"}, args...), b.serverArgs...)
	cmdCtx, cancel := context.WithCancel(context.Background())
	s.cmd, s.cancel = exec.CommandContext(cmdCtx, b.bin, args...), cancel
	s.cmd.Cancel, s.cmd.WaitDelay = func() error { return s.cmd.Process.Signal(syscall.SIGTERM) }, 25*time.Second
	s.cmd.Dir, s.cmd.Stdout, s.cmd.Stderr = b.tmp, log, log
	for _, kv := range os.Environ() { // only our settings apply
		if k, _, _ := strings.Cut(kv, "="); k != "DATABASE_URL" && !strings.HasPrefix(k, "HOOKGATE_") {
			s.cmd.Env = append(s.cmd.Env, kv)
		}
	}
	s.cmd.Env = append(s.cmd.Env, "DATABASE_URL="+b.dbURL, "HOOKGATE_ADDR=127.0.0.1:0", "HOOKGATE_CONFIG="+cfgPath, "HOOKGATE_LOG_FORMAT=json", "HOOKGATE_ADMIN_TOKEN="+s.token)
	if b.pprof {
		s.cmd.Env = append(s.cmd.Env, "HOOKGATE_PPROF_ADDR=127.0.0.1:0")
	}
	s.cmd.Env = append(s.cmd.Env, b.serverEnv...)
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // it dies with us
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start server: %w", err)
	}
	go func() { s.waitErr = s.cmd.Wait(); close(s.done) }()
	// It logs its addresses once every listener is bound (after its
	// migrations), the profiler's first.
	for deadline := time.Now().Add(time.Minute); s.addr == ""; time.Sleep(50 * time.Millisecond) {
		data, _ := os.ReadFile(s.logPath)
		for line := range strings.Lines(string(data)) {
			var l struct{ Msg, Addr string }
			if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "profiler listening" {
				s.pprofAddr = l.Addr
			} else if l.Msg == "listening" {
				s.addr = l.Addr
			}
		}
		if s.addr == "" && (s.exited() || ctx.Err() != nil || time.Now().After(deadline)) {
			_ = s.stop()
			return nil, fmt.Errorf("server not listening (exit: %w)\n--- server log ---\n%s", s.waitErr, tail(s.logPath))
		}
	}
	fmt.Fprintf(b.out, "server pid %d on %s: %s (log %s)\n", s.pid(), s.addr, strings.Join(args, " "), s.logPath)
	return s, nil
}

var client = &http.Client{Timeout: 10 * time.Second}

func (s *server) get(ctx context.Context, path string) (*http.Response, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.addr+path, nil) // ours, and valid
	req.Header.Set("Authorization", "Bearer "+s.token)
	return client.Do(req)
}

// alive returns an error when the run was interrupted or the server died.
func (s *server) alive(ctx context.Context) error {
	if ctx.Err() != nil {
		return ctx.Err()
	} else if s.exited() {
		return fmt.Errorf("the server exited during the phase: %w\n--- server log ---\n%s", s.waitErr, tail(s.logPath))
	}
	return nil
}

// stop sends SIGTERM, and SIGKILL 25 s later (exec.Cmd's Cancel and
// WaitDelay); it returns an error unless the server exited with status 0.
func (s *server) stop() error {
	if s.exited() {
		return fmt.Errorf("server had already exited: %w", s.waitErr)
	}
	s.cancel()
	if <-s.done; !s.cmd.ProcessState.Success() {
		return fmt.Errorf("server exited with %w (SIGTERM; SIGKILL after 25 s)", s.waitErr)
	}
	return nil
}

// peakRSS returns the server's peak resident set so far (VmHWM), in MB.
func (s *server) peakRSS() float64 {
	if p, err := procFS.Proc(s.pid()); err == nil {
		if st, err := p.NewStatus(); err == nil {
			return float64(st.VmHWM) / (1 << 20)
		}
	}
	return 0
}

func tail(path string) string {
	data, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	return strings.Join(lines[max(len(lines)-20, 0):], "\n")
}

// batchReport describes the batches the server sent since the last call
// (its hookgate_ingest_batch_size histogram: batches and deliveries).
func (s *server) batchReport() string {
	before := s.batches
	if resp, err := s.get(context.Background(), "/metrics"); err == nil {
		defer resp.Body.Close()
		for sc := bufio.NewScanner(resp.Body); sc.Scan(); {
			name, value, _ := strings.Cut(sc.Text(), " ")
			if i := map[string]int{"hookgate_ingest_batch_size_count": 1, "hookgate_ingest_batch_size_sum": 2}[name]; i > 0 {
				s.batches[i-1], _ = strconv.ParseFloat(value, 64)
			}
		}
	}
	if nb, nd := s.batches[0]-before[0], s.batches[1]-before[1]; nb > 0 {
		return fmt.Sprintf("%.0f deliveries in %.0f transactions: %.1f per transaction (group commit)", nd, nb, nd/nb)
	}
	return "no batches"
}

// forwards are the target's forwards by state, as the operator API counts
// them (GET /v1/senders/{sender}/targets).
type forwards struct{ Pending, Running, Retrying, Delivered, Failed int }

func (f forwards) total() int { return f.Pending + f.Running + f.Retrying + f.Delivered + f.Failed }

func (f forwards) String() string {
	return fmt.Sprintf("pending %d, running %d, retrying %d, delivered %d, failed %d", f.Pending, f.Running, f.Retrying, f.Delivered, f.Failed)
}

// forwards reads the counts of the sink target. With settle it reads
// them until two reads in a row agree and none is pending or running (for
// up to wait): the API counts the outbox and the jobs in two statements,
// and a forward recorded in between counts in neither.
func (s *server) forwards(ctx context.Context, settle bool, wait time.Duration) (f forwards, err error) {
	for deadline, last := time.Now().Add(wait), (forwards{Pending: -1}); ; last = f {
		var list struct{ Items []struct{ Forwards forwards } }
		resp, err := s.get(ctx, "/v1/senders/bench/targets")
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&list)
			if resp.Body.Close(); err == nil && (resp.StatusCode != http.StatusOK || len(list.Items) != 1) {
				err = fmt.Errorf("%s, %d targets", resp.Status, len(list.Items))
			}
		}
		if err != nil {
			return f, fmt.Errorf("read the target's forwards: %w", err)
		}
		if f = list.Items[0].Forwards; !settle || f == last && f.Pending+f.Running == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			return f, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// profile starts `go tool pprof -top -cum` on the server's CPU for d
// (-pprof; it saves the profile in the temporary
// directory); the function it returns waits and prints the hottest
// functions.
func (b *bench) profile(ctx context.Context, srv *server, d time.Duration) func() {
	if srv.pprofAddr == "" {
		return func() {}
	}
	seconds := "-seconds=" + strconv.Itoa(max(int(d.Seconds()), 1))
	var out, allocs bytes.Buffer
	cmd := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-cum", "-nodecount=30", seconds, "http://"+srv.pprofAddr+"/debug/pprof/profile")
	cmd.Env, cmd.Stdout, cmd.Stderr = append(os.Environ(), "PPROF_TMPDIR="+b.tmp), &out, &out
	// The allocations of the same seconds (a delta profile), by count:
	// what the garbage collector pays for.
	acmd := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-sample_index=alloc_objects", "-nodecount=25", seconds, "http://"+srv.pprofAddr+"/debug/pprof/allocs")
	acmd.Env, acmd.Stdout, acmd.Stderr = cmd.Env, &allocs, &allocs
	err, aerr := cmd.Start(), acmd.Start()
	return func() {
		if err == nil {
			err = cmd.Wait()
		}
		if aerr == nil {
			aerr = acmd.Wait()
		}
		fmt.Fprintf(b.out, "  server CPU profile (go tool pprof%s):\n    %s\n", errSuffix(err), strings.ReplaceAll(strings.TrimSpace(out.String()), "\n", "\n    "))
		fmt.Fprintf(b.out, "  server allocations, by count (go tool pprof%s):\n    %s\n", errSuffix(aerr), strings.ReplaceAll(strings.TrimSpace(allocs.String()), "\n", "\n    "))
	}
}

// procFS is /proc; without it no CPU use or RSS is reported.
var procFS, _ = procfs.NewDefaultFS()

// cpuSnap is the CPU time, in seconds, used so far by the processes the
// report tells apart, by every other one, and by the machine.
type cpuSnap struct {
	at                                       time.Time
	server, postgres, self, busy, irq, total float64 // postgres: the postmaster and its children, live or reaped
	broker                                   float64 // the NATS phase's nats-server
	beside                                   float64 // the bench's other server, which runs beside the measured one
	others                                   map[int]float64
	comm                                     map[int]string // of others; "" for kernel threads
}

// takeCPU snapshots the CPU times; pgPID is the postmaster's (0: unknown),
// besidePID the bench's other server's that runs beside serverPID's (0:
// none).
func takeCPU(serverPID, pgPID int, besidePID ...int) cpuSnap {
	s := cpuSnap{at: time.Now(), others: map[int]float64{}, comm: map[int]string{}}
	procs, _ := procFS.AllProcs()
	for _, p := range procs {
		st, err := p.Stat()
		if err != nil || p.PID == os.Getpid() {
			continue
		}
		switch all := st.CPUTime() + float64(st.CUTime+st.CSTime)/100; { // USER_HZ
		case p.PID == serverPID:
			s.server = st.CPUTime()
		case slices.Contains(besidePID, p.PID):
			s.beside += st.CPUTime()
		case pgPID > 0 && (p.PID == pgPID || st.PPID == pgPID):
			s.postgres += all
		case st.Comm == "nats-server": // the NATS phase's target, part of what it measures
			s.broker += all
		default:
			s.others[p.PID], s.comm[p.PID] = all, st.Comm
			if st.PPID == 2 || p.PID == 2 {
				s.comm[p.PID] = ""
			}
		}
	}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		s.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
	}
	if st, err := procFS.Stat(); err == nil {
		c := st.CPUTotal // guest time is in user and nice already
		s.busy, s.irq = c.User+c.Nice+c.System+c.IRQ+c.SoftIRQ+c.Steal, c.IRQ+c.SoftIRQ
		s.total = s.busy + c.Idle + c.Iowait
	}
	return s
}

// pgChildren returns the PIDs of the PostgreSQL server pgPID's children.
func pgChildren(pgPID int) map[int]bool {
	kids := map[int]bool{}
	procs, _ := procFS.AllProcs()
	for _, p := range procs {
		if st, err := p.Stat(); err == nil && st.PPID == pgPID {
			kids[p.PID] = true
		}
	}
	return kids
}

// awaitBackendsGone waits, up to timeout, until the PostgreSQL server
// pgPID has reaped every child that is not in before, other than
// autovacuum's workers: the backends of pgbench's connections, which end
// with it. A backend reaped while takeCPU reads /proc is counted neither
// by itself nor in the server's reaped children's time, which it has
// already read. Measured right after pgbench, up to 1.75 s of
// PostgreSQL's CPU went missing that way, and showed as other processes'
// (0.14–0.17 of a core) on an idle machine.
func awaitBackendsGone(pgPID int, before map[int]bool, timeout time.Duration) {
	if pgPID <= 0 {
		return
	}
	for end := time.Now().Add(timeout); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		left := false
		for pid := range pgChildren(pgPID) {
			if before[pid] {
				continue
			}
			if p, err := procFS.Proc(pid); err == nil {
				if cmd, err := p.CmdLine(); err == nil && strings.Contains(strings.Join(cmd, " "), "autovacuum") {
					continue
				}
			}
			left = true
			break
		}
		if !left {
			return
		}
	}
}

// gatewayPGTime returns the CPU time of the gateway and PostgreSQL
// between a and b.
func gatewayPGTime(a, b cpuSnap) time.Duration {
	return time.Duration((b.server - a.server + b.postgres - a.postgres) * float64(time.Second))
}

// cpuUse is the CPU used between two snapshots, in cores (1.0: one core
// busy for the whole interval).
type cpuUse struct {
	server, loadgen, postgres, pgbench, irq, kthreads, machine, cores float64
	broker                                                            float64 // nats-server
	beside                                                            float64 // the bench's other server, beside the measured one
	others                                                            float64 // processes outside the measurement
	topOthers                                                         string  // which (a hint: reaped children count whole)
	ok, isPgbench                                                     bool
}

// cpuBetween returns the use between a and b; pgbench is a pgbench
// process's CPU time in the interval, or nil.
func cpuBetween(a, b cpuSnap, pgbench *time.Duration) cpuUse {
	secs := b.at.Sub(a.at).Seconds()
	if secs <= 0 {
		return cpuUse{}
	}
	u := cpuUse{server: (b.server - a.server) / secs, loadgen: (b.self - a.self) / secs, postgres: (b.postgres - a.postgres) / secs,
		irq: (b.irq - a.irq) / secs, machine: (b.busy - a.busy) / secs, cores: (b.total - a.total) / secs, broker: (b.broker - a.broker) / secs,
		beside: (b.beside - a.beside) / secs, ok: true}
	if pgbench != nil {
		u.pgbench, u.isPgbench = pgbench.Seconds()/secs, true
	}
	byComm := map[string]float64{}
	for pid, t := range b.others {
		if d := (t - a.others[pid]) / secs; d > 0 && b.comm[pid] == "" { // a process started since a counts whole
			u.kthreads += d
		} else if d > 0 {
			byComm[b.comm[pid]] += d
		}
	}
	var top []string
	for _, c := range slices.SortedFunc(maps.Keys(byComm), func(x, y string) int { return cmp.Compare(byComm[y], byComm[x]) }) {
		if len(top) < 3 && byComm[c] >= 0.01 {
			top = append(top, fmt.Sprintf("%s %.2f", c, byComm[c]))
		}
	}
	// Other processes are what the machine did beyond what is accounted
	// for (summing their deltas would overstate: a process that reaps a
	// long-running child gains its whole lifetime at once).
	u.others, u.topOthers = max(u.machine-u.server-u.loadgen-u.postgres-u.pgbench-u.broker-u.beside-u.irq-u.kthreads, 0), strings.Join(top, ", ")
	return u
}

// mergeCPU returns the use over the intervals of us, each secs[i] long,
// as if they were one: each figure weighted by its interval's length.
// Other processes' heaviest names are the busiest interval's.
func mergeCPU(us []cpuUse, secs []float64) cpuUse {
	var m cpuUse
	var total, busiest float64
	for i, u := range us {
		if !u.ok {
			return cpuUse{}
		}
		w := secs[i]
		m.server, m.loadgen, m.postgres, m.pgbench = m.server+u.server*w, m.loadgen+u.loadgen*w, m.postgres+u.postgres*w, m.pgbench+u.pgbench*w
		m.irq, m.kthreads, m.machine, m.cores = m.irq+u.irq*w, m.kthreads+u.kthreads*w, m.machine+u.machine*w, m.cores+u.cores*w
		m.broker, m.beside, m.others = m.broker+u.broker*w, m.beside+u.beside*w, m.others+u.others*w
		if total += w; u.others >= busiest {
			busiest, m.topOthers = u.others, u.topOthers
		}
		m.isPgbench = m.isPgbench || u.isPgbench
	}
	if total <= 0 {
		return cpuUse{}
	}
	for _, f := range []*float64{&m.server, &m.loadgen, &m.postgres, &m.pgbench, &m.irq, &m.kthreads, &m.machine, &m.cores, &m.broker, &m.beside, &m.others} {
		*f /= total
	}
	m.ok = true
	return m
}

// String formats u as "gateway 0.81, load generator 0.32, …".
func (u cpuUse) String() string {
	if !u.ok {
		return "n/a"
	}
	who := fmt.Sprintf("gateway %.2f, load generator %.2f", u.server, u.loadgen)
	if u.isPgbench {
		who = fmt.Sprintf("pgbench %.2f", u.pgbench)
	}
	if u.broker > 0 {
		who += fmt.Sprintf(", nats-server %.2f", u.broker)
	}
	if u.beside >= 0.005 {
		who += fmt.Sprintf(", the other server %.2f", u.beside)
	}
	s := fmt.Sprintf("%s, postgres %.2f, irq/softirq %.2f, kernel threads %.2f, other processes %.2f", who, u.postgres, u.irq, u.kthreads, u.others)
	if u.topOthers != "" {
		s += " (" + u.topOthers + ")"
	}
	return s + fmt.Sprintf("; machine busy %.2f of %.0f", u.machine, u.cores)
}

// findPgbench returns pgbench from HOOKGATE_PG_BINDIR, else from PATH.
func findPgbench() (string, error) {
	if p, err := exec.LookPath(filepath.Join(os.Getenv("HOOKGATE_PG_BINDIR"), "pgbench")); err == nil {
		return p, nil
	} else if p, err := exec.LookPath("pgbench"); err == nil {
		return p, nil
	}
	return "", errors.New("pgbench not found in HOOKGATE_PG_BINDIR or PATH (install the PostgreSQL client tools, or pass -skip-pgbench)")
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

// pgbenchRun is what one run of pgbench measured.
type pgbenchRun struct {
	tps, processed, failed float64
	lat                    []time.Duration // sorted
	cpu                    cpuUse
	secs                   float64 // over which cpu was read
}

// runPgbench runs pgbenchScript with -M prepared, the run's concurrency
// and duration, with the values of a delivery of phase 1, prints it, and
// returns its tps and CPU use.
func (b *bench) runPgbench(ctx context.Context) (tps float64, cpu cpuUse, err error) {
	defs, err := b.pgbenchDefs(ctx, "")
	if err != nil {
		return 0, cpu, err
	}
	r, err := b.pgbenchOnce(ctx, defs, b.duration, "pgbench-log", nil, 0)
	if err != nil {
		return 0, cpu, err
	}
	b.reportPgbench(r, fmt.Sprintf("%.0f transactions", r.processed))
	return r.tps, r.cpu, nil
}

// pgbenchDefs returns pgbench's -D values: those of a delivery of phase 1,
// under a sender of pgbench's own (suffixed with suffix).
func (b *bench) pgbenchDefs(ctx context.Context, suffix string) (defs []string, err error) {
	if err := b.conn.QueryRow(ctx, `SELECT ARRAY['n=0', 'sender=pgbench-' || extract(epoch FROM now())::bigint || $1::text, 'sha=\x' || encode(p.request_sha256, 'hex'),
  'status=' || p.response_status, 'ctype=' || p.response_content_type, 'resp=\x' || encode(p.response_body, 'hex'), 'ts=' || now(),
  'exp=' || now() + (p.expires_at - p.created_at), 'headers=' || e.headers::text, 'body=\x' || encode(e.body, 'hex'), 'etype=' || e.event_type]
FROM webhook_events e JOIN processed_messages p USING (sender, delivery_id) WHERE e.sender = 'bench' AND e.delivery_id LIKE 'fd-%' LIMIT 1`, suffix).Scan(&defs); err != nil {
		return nil, fmt.Errorf("read a stored delivery for pgbench's parameters (did the gateway store any?): %w", err)
	}
	return defs, nil
}

// pgbenchOnce runs pgbench for d (whole seconds, at least one) with defs,
// its transactions' log under logPrefix; beside is the gateway that runs
// beside it, idle (nil: none). With window > 0, its rate and latencies
// are those of the transactions that ended in the last window of the
// run, read from the log: what comes before is its warm-up (new
// backends, their first statements).
func (b *bench) pgbenchOnce(ctx context.Context, defs []string, d time.Duration, logPrefix string, beside *server, window time.Duration) (r pgbenchRun, err error) {
	script, logs := filepath.Join(b.tmp, "pgbench.sql"), filepath.Join(b.tmp, logPrefix)
	if err := os.WriteFile(script, []byte(pgbenchScript), 0o644); err != nil {
		return r, err
	}
	args := []string{"-n", "-M", "prepared", "-c", strconv.Itoa(b.concurrency), "-j", strconv.Itoa(min(2, b.concurrency)),
		"-T", strconv.Itoa(max(int(math.Ceil(d.Seconds())), 1)), "-f", script, "-l", "--log-prefix", logs}
	for _, d := range defs {
		args = append(args, "-D", d)
	}
	cmd := exec.CommandContext(ctx, b.pgbench, append(args, b.dbURL)...)
	var output bytes.Buffer
	cmd.Dir, cmd.Stdout, cmd.Stderr = b.tmp, &output, &output
	before := pgChildren(b.pgPID)
	cpu0 := takeCPU(0, b.pgPID, pidOf(beside)...)
	err = cmd.Run()
	awaitBackendsGone(b.pgPID, before, 3*time.Second)
	cpu1 := takeCPU(0, b.pgPID, pidOf(beside)...)
	if err == nil {
		r.tps, r.processed, r.failed, err = parsePgbench(output.String())
	}
	if err != nil {
		return r, fmt.Errorf("pgbench: %w\n%s", err, output.String())
	}
	used := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	r.cpu, r.secs = cpuBetween(cpu0, cpu1, &used), cpu1.at.Sub(cpu0.at).Seconds()
	files, _ := filepath.Glob(logs + ".*")
	var all []byte
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			return r, err
		}
		all = append(all, data...)
	}
	n, lat := pgbenchWindow(all, window)
	r.lat = lat
	if window > 0 {
		r.processed, r.tps = float64(n), float64(n)/window.Seconds()
	}
	slices.Sort(r.lat)
	return r, nil
}

// pgbenchWindow returns how many transactions of pgbench's log (without
// aggregation: client, transaction, latency µs, script, end s, end µs)
// ended within window of the last one's end, or at all when window is 0,
// and their latencies. A failed or skipped transaction's latency reads
// "failed" or "skipped": it is not counted.
func pgbenchWindow(data []byte, window time.Duration) (n int, lat []time.Duration) {
	type tx struct {
		end time.Time
		lat time.Duration
	}
	var txs []tx
	var last time.Time
	for line := range strings.Lines(string(data)) {
		f := strings.Fields(line)
		if len(f) < 6 {
			continue
		}
		us, err1 := strconv.ParseInt(f[2], 10, 64)
		sec, err2 := strconv.ParseInt(f[4], 10, 64)
		usec, err3 := strconv.ParseInt(f[5], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			continue
		}
		t := time.Unix(sec, usec*1000)
		txs = append(txs, tx{t, time.Duration(us) * time.Microsecond})
		if t.After(last) {
			last = t
		}
	}
	from := last.Add(-window)
	for _, t := range txs {
		if window <= 0 || t.end.After(from) {
			n, lat = n+1, append(lat, t.lat)
		}
	}
	return n, lat
}

// reportPgbench prints pgbench's figures, its transactions as counted.
func (b *bench) reportPgbench(r pgbenchRun, counted string) {
	name := "first delivery: pgbench plain SQL"
	fmt.Fprintf(b.out, "%-32s %9.0f tps           p50 %s  p99 %s  failed %.0f  (%s)\n  %s\n  CPU cores: %s\n",
		name, r.tps, ms(percentile(r.lat, .5)), ms(percentile(r.lat, .99)), r.failed, counted,
		"1 round trip: BEGIN, INSERT … VALUES of the key, INSERT … VALUES of the event, COMMIT, pipelined (pgbench.sql with -keep) — the -min-ratio check", r.cpu)
	b.noteDisturbed(name, r.cpu)
}

// parsePgbench reads the tps (without connection set-up) and the
// transactions processed and failed from pgbench's report.
func parsePgbench(out string) (tps, processed, failed float64, err error) {
	num := func(re string) float64 {
		m := regexp.MustCompile(`(?m)^` + re).FindStringSubmatch(out)
		if m == nil {
			return 0
		}
		v, _ := strconv.ParseFloat(m[1], 64)
		return v
	}
	tps = num(`tps = ([0-9.]+) \((?:without initial connection time|excluding connections establishing)\)`)
	processed, failed = num(`number of transactions actually processed: (\d+)`), num(`number of failed transactions: (\d+)`)
	if tps == 0 {
		err = errors.New("no tps line in pgbench's output")
	}
	return tps, processed, failed, err
}

var goBenchLine = regexp.MustCompile(`(?m)^BenchmarkRun/(\S+?)(?:-\d+)?\s+\d+\s+[0-9.]+ ns/op\s+([0-9.]+) deliveries/s`)

// runGoBench runs BenchmarkRun (internal/dedup: the gateway's pipeline
// without HTTP) for the run's duration per case, prints its results and
// returns the rate of its first case (one delivery per transaction).
func (b *bench) runGoBench(ctx context.Context) (first float64, err error) {
	fmt.Fprintln(b.out, "the gateway's pipeline without HTTP: go test -run '^$' -bench ^BenchmarkRun$ ./internal/dedup/ (its test databases on the same server) …")
	cmd := exec.CommandContext(ctx, "go", "test", "-count=1", "-run", "^$", "-bench", "^BenchmarkRun$", "-benchtime", b.duration.String(), "./internal/dedup/")
	cmd.Env = append(os.Environ(), "HOOKGATE_TEST_DATABASE_URL="+b.dbURL)
	out, err := cmd.CombinedOutput()
	found := goBenchLine.FindAllStringSubmatch(string(out), -1)
	for _, m := range found {
		rate, _ := strconv.ParseFloat(m[2], 64)
		fmt.Fprintf(b.out, "%-32s %9.0f deliveries/s\n", "pipeline in Go: "+m[1], rate)
	}
	if err != nil {
		return 0, fmt.Errorf("BenchmarkRun: %w\n%s", err, out)
	} else if len(found) == 0 || found[0][1] != "first" {
		return 0, fmt.Errorf("BenchmarkRun printed no result for first:\n%s", out)
	}
	return strconv.ParseFloat(found[0][2], 64)
}
