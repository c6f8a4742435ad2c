package doccheck

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// TestMakeRunListensOnLoopback runs make run's script (.ci/run-local.sh,
// in a copy of the checkout: its own .data, PostgreSQL, build, gateway and
// sink) and reads the kernel's table of listening sockets: the gateway,
// which starts with the example's public secrets, listens on 127.0.0.1
// only; with HOOKGATE_ADDR=:PORT (told otherwise) on every interface. The
// second run, whose HOOKGATE_PG_PORT names another port while the first
// run's PostgreSQL still runs, says that it keeps the running server's
// port and how to move it. Both say that no url of hookgate.yaml names the
// sink they start (HOOKGATE_SINK_ADDR is not the example's 9099).
func TestMakeRunListensOnLoopback(t *testing.T) {
	testkit.Slow(t, "runs make run's script: PostgreSQL, go build, the gateway and the sink")
	t.Parallel()
	if _, err := os.Stat("/proc/net/tcp"); err != nil {
		t.Skip("no /proc/net/tcp to read the listening address from")
	}
	work := copyCheckout(t, repoRoot(t))
	t.Cleanup(func() {
		out, err := exec.Command("bash", filepath.Join(work, ".ci", "pg.sh"), "destroy", filepath.Join(work, ".data", "pg")).CombinedOutput()
		if err != nil {
			t.Logf("pg.sh destroy: %v\n%s", err, out)
		}
	})
	_, pgPort, _ := net.SplitHostPort(freePort(t))
	_, otherPGPort, _ := net.SplitHostPort(freePort(t))
	sink := freePort(t)
	_, own, _ := net.SplitHostPort(freePort(t))
	for _, tc := range []struct {
		name, addr string
		loopback   bool // listens on 127.0.0.1 only, else on every interface
		pgPort     string
		says       []string
	}{
		{"make run", "", true, pgPort, nil},
		{"make run with HOOKGATE_ADDR=:PORT", ":" + own, false, otherPGPort, []string{
			"HOOKGATE_PG_PORT=" + otherPGPort + " is not used: this checkout's PostgreSQL (.data/pg) is running on port " + pgPort,
			"stop it first (make db-stop)",
		}},
	} {
		cmd := exec.Command("bash", ".ci/run-local.sh")
		cmd.Dir = work
		cmd.Env = []string{"HOOKGATE_PG_PORT=" + tc.pgPort, "HOOKGATE_SINK_ADDR=" + sink}
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "HOOKGATE_ADDR=") && !strings.HasPrefix(kv, "HOOKGATE_PG_PORT=") && !strings.HasPrefix(kv, "HOOKGATE_SINK_ADDR=") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		if tc.addr != "" {
			cmd.Env = append(cmd.Env, "HOOKGATE_ADDR="+tc.addr)
		}
		var log bytes.Buffer
		cmd.Stdout, cmd.Stderr = &log, &log
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := os.Remove(filepath.Join(work, ".data", "http-port")); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		stop := func() {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGINT) // Ctrl-C
			select {
			case <-done:
			case <-time.After(time.Minute):
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
				<-done
			}
		}
		var port string
		testkit.Poll(t, 3*time.Minute, tc.name+": the gateway to answer /healthz", func() bool {
			select {
			case <-done:
				t.Fatalf("%s: the script exited:\n%s", tc.name, log.String())
			default:
			}
			b, err := os.ReadFile(filepath.Join(work, ".data", "http-port"))
			if err != nil {
				return false
			}
			port = strings.TrimSpace(string(b))
			r, err := http.Get("http://127.0.0.1:" + port + "/healthz")
			if err != nil {
				return false
			}
			r.Body.Close()
			return r.StatusCode == http.StatusOK
		})
		addrs := listening(t, port)
		stop()
		if len(addrs) == 0 {
			t.Errorf("%s: nothing listens on port %s", tc.name, port)
		}
		for _, a := range addrs {
			if loopback := a.IsLoopback(); loopback != tc.loopback {
				t.Errorf("%s: the gateway listens on %s port %s, want loopback %v\n%s", tc.name, a, port, tc.loopback, log.String())
			}
		}
		if tc.loopback && !strings.Contains(log.String(), "127.0.0.1:"+port) {
			t.Errorf("%s: the script does not say it listens on 127.0.0.1:%s:\n%s", tc.name, port, log.String())
		}
		for _, s := range append(tc.says, "hookgate sink listens on "+sink+" and prints each forward below, but no url in hookgate.yaml names "+sink) {
			if !strings.Contains(log.String(), s) {
				t.Errorf("%s: the script does not say %q:\n%s", tc.name, s, log.String())
			}
		}
	}
}

// listening returns the local addresses of the TCP sockets listening on
// port, from /proc/net/tcp and /proc/net/tcp6.
func listening(t *testing.T, port string) []net.IP {
	t.Helper()
	p, err := strconv.Atoi(port)
	if err != nil {
		t.Fatalf("port %q", port)
	}
	want := fmt.Sprintf(":%04X", p)
	var out []net.IP
	for _, file := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(file)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			// sl local_address rem_address st …; st 0A is LISTEN.
			if len(fields) < 4 || fields[3] != "0A" || !strings.HasSuffix(fields[1], want) {
				continue
			}
			out = append(out, procIP(strings.TrimSuffix(fields[1], want)))
		}
		f.Close()
	}
	return out
}

// procIP decodes an address of /proc/net/tcp{,6}: hex, 32-bit words in
// host (little-endian) order.
func procIP(h string) net.IP {
	var ip net.IP
	for i := 0; i+8 <= len(h); i += 8 {
		w, err := strconv.ParseUint(h[i:i+8], 16, 32)
		if err != nil {
			return nil
		}
		ip = append(ip, byte(w), byte(w>>8), byte(w>>16), byte(w>>24))
	}
	return ip
}

// copyCheckout copies the files git tracks in root, as they are in its
// work tree, into a new directory that the postgres user can traverse,
// and returns it.
func copyCheckout(t *testing.T, root string) string {
	t.Helper()
	work := t.TempDir()
	for d := work; d != filepath.Dir(d) && strings.HasPrefix(d, os.TempDir()) && d != filepath.Clean(os.TempDir()); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	out, err := exec.Command("git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	for name := range strings.SplitSeq(strings.TrimRight(string(out), "\x00"), "\x00") {
		src := filepath.Join(root, name)
		info, err := os.Lstat(src)
		if err != nil {
			continue // deleted in the work tree
		}
		dst := filepath.Join(work, name)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if info.Mode()&os.ModeSymlink != 0 {
			target, err := os.Readlink(src)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, dst); err != nil {
				t.Fatal(err)
			}
			continue
		}
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, info.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
	return work
}

// TestMakeRunNamesUnsetVariables runs make run's script and make redeliver
// in a copy of the checkout whose hookgate.yaml names two unset ${VAR}s:
// each fails, naming both variables, before anything else. make run prints
// no banner and starts no PostgreSQL; make redeliver does not get as far
// as asking for make run's database.
func TestMakeRunNamesUnsetVariables(t *testing.T) {
	testkit.Slow(t, "runs make run's script and make redeliver: go build")
	t.Parallel()
	work := copyCheckout(t, repoRoot(t))
	cfg := `senders:
  - name: orders
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    secret: ${HOOKGATE_TEST_UNSET_SECRET}
    signature: { scheme: hmac-sha256, header: X-Signature, encoding: hex }
    forward:
      - name: sink
        url: http://127.0.0.1:9099/
        signing_secret: ${HOOKGATE_TEST_UNSET_SIGNING}
`
	if err := os.WriteFile(filepath.Join(work, "hookgate.yaml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	_, pgPort, _ := net.SplitHostPort(freePort(t))
	env := []string{"HOOKGATE_PG_PORT=" + pgPort}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "HOOKGATE_") && !strings.HasPrefix(kv, "MAKEFLAGS=") && !strings.HasPrefix(kv, "MAKELEVEL=") {
			env = append(env, kv)
		}
	}
	for _, tc := range []struct {
		name string
		args []string
		not  []string // what it must not say: it got past the check
	}{
		{"make run", []string{"bash", ".ci/run-local.sh"}, []string{"The gateway listens", "Admin token"}},
		{"make redeliver", []string{"make", "--no-print-directory", "redeliver", "ARGS=--sender orders --target sink"}, []string{"run make run first", "matched"}},
	} {
		cmd := exec.Command(tc.args[0], tc.args[1:]...)
		cmd.Dir, cmd.Env = work, env
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Errorf("%s succeeded with unset variables:\n%s", tc.name, out)
		}
		if !strings.Contains(string(out), "environment variables HOOKGATE_TEST_UNSET_SECRET (line 5), HOOKGATE_TEST_UNSET_SIGNING (line 10) are not set") {
			t.Errorf("%s does not name both unset variables with their lines:\n%s", tc.name, out)
		}
		for _, s := range tc.not {
			if strings.Contains(string(out), s) {
				t.Errorf("%s says %q: it went on past the unset variables:\n%s", tc.name, s, out)
			}
		}
	}
	for _, f := range []string{".data/pg", ".data/pg-port", ".data/database-url"} {
		if _, err := os.Stat(filepath.Join(work, f)); !os.IsNotExist(err) {
			t.Errorf("%s exists: make run went on to the database (%v)", f, err)
		}
	}
}
