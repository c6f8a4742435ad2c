package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// benchConfig is the hookgate.yaml the benchmark's server runs with.
const benchConfig = `# written by internal/bench
senders:
  - name: bench
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    event_type: { header: X-Event-Type }
`

// moduleRoot returns the directory of the main module's go.mod.
func moduleRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("not inside the hookgate module: run from the repository (make bench)")
	}
	return filepath.Dir(gomod), nil
}

// buildServer builds ./cmd/server into dir and returns the binary's path.
func buildServer(ctx context.Context, dir string) (string, error) {
	root, err := moduleRoot(ctx)
	if err != nil {
		return "", err
	}
	pkg := "./cmd/server"
	bin := filepath.Join(dir, "hookgate")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, pkg)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
	}
	return bin, nil
}

// server is the hookgate process under test.
type server struct {
	cmd     *exec.Cmd
	addr    string
	logPath string
	logFile *os.File
	done    chan struct{} // closed when the process has exited
	waitErr error
	once    sync.Once
	spec    serverSpec
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
func (s *server) logTail() string { return tailFile(s.logPath, 20) }

// freePort returns a TCP port on 127.0.0.1 that nobody listened on a moment ago.
func freePort() (int, error) {
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// serverSpec is one configuration of the server under test: its name
// (which names its configuration and log files), its hookgate.yaml and
// extra arguments of `serve`.
type serverSpec struct {
	name   string
	config string
	args   []string
}

// mainSpec is the server of the phases without forwarding: one sender
// without forward targets, cmd/server's default role (all).
var mainSpec = serverSpec{name: "server", config: benchConfig}

// startServer writes spec's configuration, starts bin serving on a free port
// of 127.0.0.1 and waits until /readyz answers 200. On failure the process is
// killed and the error carries the end of its log.
func startServer(ctx context.Context, bin, dir, dbURL string, o *options, spec serverSpec) (*server, error) {
	cfgPath := filepath.Join(dir, spec.name+".yaml")
	if err := os.WriteFile(cfgPath, []byte(spec.config), 0o644); err != nil {
		return nil, err
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ { // another process may take the port first
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		s, err := startOnce(ctx, bin, dir, cfgPath, dbURL, "127.0.0.1:"+strconv.Itoa(port), o, spec)
		if err == nil {
			return s, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

// withPoolMaxConns returns dbURL with pool_max_conns=n in its query (n > 0),
// which cmd/server's pool reads (and strips before PostgreSQL sees it).
func withPoolMaxConns(dbURL string, n int) (string, error) {
	if n <= 0 {
		return dbURL, nil
	}
	u, err := url.Parse(dbURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", errors.New("-pool-max-conns with -server cmd needs a postgres:// URL in HOOKGATE_BENCH_DATABASE_URL")
	}
	q := u.Query()
	q.Set("pool_max_conns", strconv.Itoa(n))
	u.RawQuery = q.Encode()
	return u.String(), nil
}

func startOnce(ctx context.Context, bin, dir, cfgPath, dbURL, addr string, o *options, spec serverSpec) (*server, error) {
	logPath := filepath.Join(dir, spec.name+".log")
	if o.serverLog == "null" {
		logPath = os.DevNull
	}
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	if dbURL, err = withPoolMaxConns(dbURL, o.poolMaxConns); err != nil {
		logFile.Close()
		return nil, err
	}
	args := append(append([]string{"serve"}, spec.args...), o.serverArgs...)
	cmd := exec.CommandContext(context.Background(), bin, args...)
	cmd.Dir = dir
	cmd.Env = append(cleanEnv(os.Environ()),
		"DATABASE_URL="+dbURL,
		"HOOKGATE_ADDR="+addr,
		"HOOKGATE_CONFIG="+cfgPath,
		"HOOKGATE_LOG_FORMAT=json",
	)
	if o.serverGOMAXPROCS > 0 {
		cmd.Env = append(cmd.Env, "GOMAXPROCS="+strconv.Itoa(o.serverGOMAXPROCS))
	}
	cmd.Env = append(cmd.Env, o.serverEnv...)
	// The server logs one JSON line per request, as in production; the log
	// goes to a file so that writing it costs what it costs there.
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// If this program dies, the kernel kills the server too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start server: %w", err)
	}
	s := &server{cmd: cmd, addr: addr, logPath: logPath, logFile: logFile, done: make(chan struct{}), spec: spec}
	go func() {
		s.waitErr = cmd.Wait()
		close(s.done)
	}()
	if err := s.waitReady(ctx, 60*time.Second); err != nil {
		s.kill()
		return nil, fmt.Errorf("%w\n--- server log ---\n%s", err, s.logTail())
	}
	return s, nil
}

// cleanEnv drops the variables the server reads, so that only ours apply.
func cleanEnv(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if k == "DATABASE_URL" || strings.HasPrefix(k, "HOOKGATE_") {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// waitReady polls /readyz until it answers 200, the process exits, ctx ends
// or timeout passes.
func (s *server) waitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	client := &http.Client{Timeout: time.Second}
	url := "http://" + s.addr + "/readyz"
	var last string
	for {
		if s.exited() {
			return fmt.Errorf("server exited before it was ready: %w", s.waitErr)
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("server not ready after %s (last /readyz: %s)", timeout, last)
		}
		select {
		case <-ctx.Done():
		case <-s.done:
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// stop sends SIGTERM and waits up to grace for a clean exit; after that it
// kills the process. It returns an error unless the server exited with 0.
func (s *server) stop(grace time.Duration) error {
	defer s.once.Do(func() { s.logFile.Close() })
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
	case <-time.After(grace):
		_ = s.cmd.Process.Kill()
		<-s.done
		return fmt.Errorf("server did not stop within %s of SIGTERM; killed", grace)
	}
}

// kill ends the process at once (used on failure paths).
func (s *server) kill() {
	if !s.exited() {
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	s.once.Do(func() { s.logFile.Close() })
}

// tailFile returns the last n lines of the file at path.
func tailFile(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// batchSizes reads the server's hookgate_ingest_batch_size histogram: how
// many batches it sent and how many deliveries they held, in all.
func (s *server) batchSizes() (batches, deliveries float64, err error) {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, "http://"+s.addr+"/metrics", nil)
	if err != nil {
		return 0, 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		name, value, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		switch name {
		case "hookgate_ingest_batch_size_count":
			batches, err = strconv.ParseFloat(value, 64)
		case "hookgate_ingest_batch_size_sum":
			deliveries, err = strconv.ParseFloat(value, 64)
		}
		if err != nil {
			return 0, 0, err
		}
	}
	return batches, deliveries, sc.Err()
}

// batchReport returns what the server's batches held since before, as
// text, and the new totals.
func (s *server) batchReport(before [2]float64) (string, [2]float64) {
	b, d, err := s.batchSizes()
	if err != nil {
		return "batch sizes not read: " + err.Error(), before
	}
	nb, nd := b-before[0], d-before[1]
	if nb <= 0 {
		return "no batches", [2]float64{b, d}
	}
	return fmt.Sprintf("%.0f deliveries in %.0f transactions: %.1f per transaction (group commit)", nd, nb, nd/nb), [2]float64{b, d}
}
