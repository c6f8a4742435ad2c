package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// benchConfig is the hookgate.yaml of the server without a target;
// forwardConfig adds the sink at url as its one target, for the load's
// event type (X-Event-Type: order.created), so that routing is measured.
const benchConfig = `# written by cmd/bench
senders:
  - name: bench
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    event_type: { header: X-Event-Type }
`

func forwardConfig(url string) string {
	return benchConfig + "    forward:\n      - name: sink\n        url: " + url + "\n        event_types: [\"order.*\"]\n"
}

// buildServer builds ./cmd/server of the working directory's module.
func buildServer(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "hookgate")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/server").CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/server (run from the repository: make bench): %w\n%s", err, out)
	}
	return bin, nil
}

// server is a hookgate process under test.
type server struct {
	cmd                  *exec.Cmd
	addr, logPath, token string // token: its HOOKGATE_ADMIN_TOKEN
	done                 chan struct{}
	waitErr              error
}

func (s *server) pid() int    { return s.cmd.Process.Pid }
func (s *server) url() string { return "http://" + s.addr + "/webhooks/bench" }
func (s *server) exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// freeAddr returns a loopback address that nobody listened on a moment ago.
func freeAddr() (string, error) {
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// startServer starts `hookgate serve args… -server-arg…` with config and
// waits for /readyz, on up to three free ports (another process may take
// one first). It logs to a file, a JSON line per request, as in production.
func (b *bench) startServer(ctx context.Context, name, config string, args ...string) (s *server, err error) {
	cfgPath := filepath.Join(b.tmp, name+".yaml")
	if err := os.WriteFile(cfgPath, []byte(config), 0o644); err != nil {
		return nil, err
	}
	args = append(append([]string{"serve"}, args...), b.o.serverArgs...)
	for range 3 {
		if s, err = b.startOnce(ctx, name, cfgPath, args); err == nil {
			fmt.Fprintf(b.out, "server pid %d on %s: %s (log %s)\n", s.pid(), s.addr, strings.Join(args, " "), s.logPath)
			return s, nil
		} else if ctx.Err() != nil {
			break
		}
	}
	return nil, err
}

func (b *bench) startOnce(ctx context.Context, name, cfgPath string, args []string) (*server, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	s := &server{addr: addr, logPath: filepath.Join(b.tmp, name+".log"), token: rand.Text() + rand.Text(), done: make(chan struct{})}
	log, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer log.Close() // the child has its own descriptor
	s.cmd = exec.CommandContext(context.Background(), b.bin, args...)
	s.cmd.Dir, s.cmd.Stdout, s.cmd.Stderr = b.tmp, log, log
	for _, kv := range os.Environ() { // only our settings apply
		if k, _, _ := strings.Cut(kv, "="); k != "DATABASE_URL" && !strings.HasPrefix(k, "HOOKGATE_") {
			s.cmd.Env = append(s.cmd.Env, kv)
		}
	}
	s.cmd.Env = append(s.cmd.Env, "DATABASE_URL="+b.dbURL, "HOOKGATE_ADDR="+addr, "HOOKGATE_CONFIG="+cfgPath, "HOOKGATE_LOG_FORMAT=json", "HOOKGATE_ADMIN_TOKEN="+s.token)
	if b.pprofAddr != "" {
		s.cmd.Env = append(s.cmd.Env, "HOOKGATE_PPROF_ADDR="+b.pprofAddr)
	}
	s.cmd.Env = append(s.cmd.Env, b.o.serverEnv...)
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // it dies with us
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start server: %w", err)
	}
	go func() { s.waitErr = s.cmd.Wait(); close(s.done) }()
	for deadline := time.Now().Add(time.Minute); ; {
		resp, err := s.get(ctx, "/readyz", "")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s, nil
			}
			err = fmt.Errorf("%s", resp.Status)
		}
		if s.exited() || ctx.Err() != nil || time.Now().After(deadline) {
			s.kill()
			return nil, fmt.Errorf("server not ready (last /readyz: %w; exit: %w)\n--- server log ---\n%s", err, s.waitErr, tail(s.logPath))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

var client = &http.Client{Timeout: 10 * time.Second}

func (s *server) get(ctx context.Context, path, token string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.addr+path, nil)
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return client.Do(req)
}

// alive returns an error when the run was interrupted or the server died.
func (s *server) alive(ctx context.Context) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if s.exited() {
		return fmt.Errorf("the server exited during the phase: %w\n--- server log ---\n%s", s.waitErr, tail(s.logPath))
	}
	return nil
}

// stop sends SIGTERM and waits 25 s for a clean exit, then kills. It
// returns an error unless the server exited with status 0.
func (s *server) stop() error {
	if s.exited() {
		return fmt.Errorf("server had already exited: %w", s.waitErr)
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
		if s.waitErr != nil {
			return fmt.Errorf("server exited with %w", s.waitErr)
		}
		return nil
	case <-time.After(25 * time.Second):
		s.kill()
		return fmt.Errorf("server did not stop within 25s of SIGTERM; killed")
	}
}

// kill ends the process at once (failure paths; nothing once it exited).
func (s *server) kill() {
	if !s.exited() {
		_ = s.cmd.Process.Kill()
		<-s.done
	}
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

// batches reads the server's hookgate_ingest_batch_size histogram: the
// batches it sent and the deliveries they held.
func (s *server) batches() (n [2]float64) {
	if resp, err := s.get(context.Background(), "/metrics", ""); err == nil {
		defer resp.Body.Close()
		for sc := bufio.NewScanner(resp.Body); sc.Scan(); {
			name, value, _ := strings.Cut(sc.Text(), " ")
			if i := map[string]int{"hookgate_ingest_batch_size_count": 1, "hookgate_ingest_batch_size_sum": 2}[name]; i > 0 {
				n[i-1], _ = strconv.ParseFloat(value, 64)
			}
		}
	}
	return n
}

// batchReport describes the batches since *before, and moves it on.
func (s *server) batchReport(before *[2]float64) string {
	now := s.batches()
	nb, nd := now[0]-before[0], now[1]-before[1]
	if *before = now; nb <= 0 {
		return "no batches"
	}
	return fmt.Sprintf("%.0f deliveries in %.0f transactions: %.1f per transaction (group commit)", nd, nb, nd/nb)
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
func (s *server) forwards(ctx context.Context, settle bool, wait time.Duration) (forwards, error) {
	var last forwards
	for deadline, i := time.Now().Add(wait), 0; ; i++ {
		var list struct{ Items []struct{ Forwards forwards } }
		resp, err := s.get(ctx, "/v1/senders/bench/targets", s.token)
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&list)
			resp.Body.Close()
			if err == nil && (resp.StatusCode != http.StatusOK || len(list.Items) != 1) {
				err = fmt.Errorf("%s, %d targets", resp.Status, len(list.Items))
			}
		}
		if err != nil {
			return forwards{}, fmt.Errorf("read the target's forwards: %w", err)
		}
		f := list.Items[0].Forwards
		if !settle || i > 0 && f == last && f.Pending+f.Running == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			return f, nil
		}
		last = f
		time.Sleep(50 * time.Millisecond)
	}
}

// profiler is `go tool pprof -top -cum` taking a CPU profile of the
// server (-pprof) for the run's duration; it saves it in the temporary
// directory.
type profiler struct {
	cmd *exec.Cmd
	out bytes.Buffer
}

func (b *bench) profile(ctx context.Context) *profiler {
	if b.pprofAddr == "" {
		return nil
	}
	p := &profiler{cmd: exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-cum", "-nodecount=30",
		"-seconds="+strconv.Itoa(max(int(b.o.duration.Seconds()), 1)), "http://"+b.pprofAddr+"/debug/pprof/profile")}
	p.cmd.Env, p.cmd.Stdout, p.cmd.Stderr = append(os.Environ(), "PPROF_TMPDIR="+b.tmp), &p.out, &p.out
	if err := p.cmd.Start(); err != nil {
		fmt.Fprintf(b.out, "  -pprof: %v\n", err)
		return nil
	}
	return p
}

// report waits for the profile and prints the server's hottest functions.
func (p *profiler) report(out io.Writer) {
	if p != nil {
		err := p.cmd.Wait()
		fmt.Fprintf(out, "  server CPU profile (go tool pprof%s):\n    %s\n", errSuffix(err), strings.ReplaceAll(strings.TrimSpace(p.out.String()), "\n", "\n    "))
	}
}
