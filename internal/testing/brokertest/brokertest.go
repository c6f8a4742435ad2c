// Package brokertest starts the servers beside PostgreSQL that hookgate
// is tested against, from Debian's packages: the message brokers of its
// broker targets, a real nats-server with JetStream and a real
// rabbitmq-server, and PgBouncer, the pooler that operations.md puts
// between hookgate and PostgreSQL. Each is private to the test that
// starts it, on free ports of 127.0.0.1 and in a temporary directory. It
// is killed when the test ends. A missing server is installed with
// apt-get when the tests run as root. Otherwise the test is skipped with
// a message naming the package. It fails instead when
// HOOKGATE_REQUIRE_BROKERS is set, as CI sets it.
package brokertest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// EnvRequire, when set to anything, makes a missing broker fail the test
// instead of skipping it.
const EnvRequire = "HOOKGATE_REQUIRE_BROKERS"

// installMu serialises this process's installs. installLock, a file lock,
// serialises those of the test processes that run at once.
var installMu sync.Mutex

const installLock = "/tmp/hookgate-brokertest-apt.lock"

// binary returns the path of the server binary of package pkg. When it is
// missing and the tests run as root, it installs it with apt-get. When
// there is none, it skips the test, or fails it under EnvRequire.
func binary(t testing.TB, name, pkg string, paths ...string) string {
	t.Helper()
	find := func() string {
		for _, p := range paths {
			if _, err := os.Stat(p); err == nil {
				return p
			}
		}
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
		return ""
	}
	if p := find(); p != "" {
		return p
	}
	if os.Geteuid() == 0 {
		installMu.Lock()
		defer installMu.Unlock()
		if err := install(pkg); err != nil {
			t.Logf("brokertest: apt-get install %s: %v", pkg, err)
		}
		if p := find(); p != "" {
			return p
		}
	}
	msg := fmt.Sprintf("brokertest: no %s: install the Debian/Ubuntu package '%s' (e.g. sudo apt-get install %s)", name, pkg, pkg)
	if os.Getenv(EnvRequire) != "" {
		t.Fatal(msg + " (" + EnvRequire + " is set: broker tests are not skipped)")
	}
	t.Skip(msg)
	return ""
}

// install installs pkg with apt-get, under a file lock that concurrent
// test processes share, since dpkg takes one install at a time.
func install(pkg string) error {
	f, err := os.OpenFile(installLock, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return err
	}
	defer func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	env := append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	if out, err := exec.CommandContext(ctx, "apt-get", "install", "-y", "--no-install-recommends", pkg).CombinedOutput(); err != nil {
		update := exec.CommandContext(ctx, "apt-get", "update")
		update.Env = env
		_ = update.Run()
		cmd := exec.CommandContext(ctx, "apt-get", "install", "-y", "--no-install-recommends", pkg)
		cmd.Env = env
		if out2, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%w: %s%s", err, out, out2)
		}
	}
	return nil
}

// freePort returns a TCP port of 127.0.0.1 that was free a moment ago.
//
// The port is below the kernel's range of ephemeral ports when it can be.
// A port that the kernel gave a listener on port 0 is free only until that
// listener closes. The kernel may then give it to any outgoing connection
// before the server binds it, and the tests make thousands. A RabbitMQ
// whose distribution port is taken fails to boot. Below that range, only
// another bind can take the port.
func freePort(t testing.TB) int {
	t.Helper()
	lo := ephemeralLow()
	for range 200 {
		if lo <= minPort+1000 {
			break
		}
		port := minPort + rand.IntN(lo-minPort)
		l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err == nil {
			_ = l.Close()
			return port
		}
	}
	l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// minPort is the lowest port that freePort picks, above the well-known
// and most registered servers' ports.
const minPort = 20000

// ephemeralLow returns the first of the kernel's ephemeral ports, from
// Linux's ip_local_port_range, or 0 when it cannot be read.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	lo, _ := strconv.Atoi(f[0])
	return lo
}

// waitPort waits until 127.0.0.1:port accepts a connection. After within,
// it fails the test with what the server logged in logFile.
func waitPort(t testing.TB, port int, within time.Duration, exited <-chan struct{}, logFile string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		c, err := (&net.Dialer{Timeout: time.Second}).DialContext(context.Background(), "tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err == nil {
			_ = c.Close()
			return
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(logFile)
			t.Fatalf("brokertest: the server exited before it listened on %d:\n%s", port, tail(log))
		default:
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(logFile)
			t.Fatalf("brokertest: nothing listens on %d after %s:\n%s", port, within, tail(log))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// tail is the end of a log, for a failure's message.
func tail(b []byte) string {
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// process is a server started by the package, in a process group of its
// own. The group is killed with the test, or by the parent-death signal
// when the test binary dies.
type process struct {
	cmd    *exec.Cmd
	exited chan struct{}
}

// start starts name with args and env, logging to logFile.
func start(t testing.TB, logFile string, env []string, name string, args ...string) *process {
	t.Helper()
	return startAs(t, nil, logFile, env, name, args...)
}

// startAs is start, with the process running as cred when it is not nil.
func startAs(t testing.TB, cred *syscall.Credential, logFile string, env []string, name string, args ...string) *process {
	t.Helper()
	log, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	// Not CommandContext, since the server lives beyond the call, until
	// kill.
	cmd := exec.Command(name, args...) //nolint:noctx // killed by process.kill (and the parent-death signal)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: cred}
	if err := cmd.Start(); err != nil {
		_ = log.Close()
		t.Fatalf("brokertest: start %s: %v", filepath.Base(name), err)
	}
	p := &process{cmd: cmd, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		_ = log.Close()
		close(p.exited)
	}()
	return p
}

// kill kills the process's group and waits for it.
func (p *process) kill() {
	if p == nil {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.exited
}
