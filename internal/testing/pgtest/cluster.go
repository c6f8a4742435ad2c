package pgtest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// EnvBinDir names the environment variable holding the directory of the
// PostgreSQL server binaries (initdb, pg_ctl, postgres); `make test` sets it.
const EnvBinDir = "HOOKGATE_PG_BINDIR"

// serverUser is the user the server runs as when the tests run as root, since
// PostgreSQL refuses to run as root.
const serverUser = "postgres"

// Cluster is a private PostgreSQL server of one test, for tests that need to
// take the database away (stop it, kill it) and bring it back. It listens on
// 127.0.0.1 only, trusts every local connection, and runs with fsync off but
// synchronous_commit on: a transaction committed before Stop is there after
// Start, as after a real server crash (only an operating system crash could
// lose it).
type Cluster struct {
	bindir string
	dir    string // owned by the server user; holds data/, the log and the socket
	port   int

	mu sync.Mutex // serialises Start and Stop
}

// StartCluster initialises a new cluster in a temporary directory, starts it on
// a free port and creates the empty database "hookgate" in it (not migrated).
// The server is stopped and its directory removed when the test ends. It fails
// the test when no PostgreSQL binaries are found or the server does not start.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	bindir, err := findBinDir()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	c := newCluster(t, bindir)

	out, err := c.asServer(filepath.Join(bindir, "initdb"),
		"-D", c.dataDir(), "-U", "hookgate", "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C")
	if err != nil {
		t.Fatalf("pgtest: initdb: %v\n%s", err, out)
	}

	if err := c.startOnFreePort(); err != nil {
		t.Fatalf("pgtest: start cluster: %v", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	if err := adminExec(ctx, c.urlFor("postgres"), "CREATE DATABASE hookgate"); err != nil {
		t.Fatalf("pgtest: create database hookgate: %v", err)
	}
	return c
}

// newCluster returns a cluster of the binaries in bindir, in a new
// directory of the server user, stopped and removed when the test ends.
func newCluster(t testing.TB, bindir string) *Cluster {
	t.Helper()
	dir, err := makeServerDir()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	c := &Cluster{bindir: bindir, dir: dir}
	t.Cleanup(func() {
		if err := c.stop(); err != nil {
			t.Errorf("pgtest: stop cluster: %v", err)
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("pgtest: remove cluster directory: %v", err)
		}
	})
	return c
}

// startOnFreePort starts the server on a free port. Another process may
// take the port before the server binds it: it tries a few.
func (c *Cluster) startOnFreePort() error {
	var err error
	for range 3 {
		if c.port, err = freePort(); err != nil {
			return err
		}
		if err = c.start(); err == nil {
			return nil
		}
	}
	return err
}

// URL returns the URL of the cluster's database "hookgate". The URL stays the
// same across Stop and Start.
func (c *Cluster) URL() string { return c.urlFor("hookgate") }

// BinDir returns the directory of the PostgreSQL binaries the cluster runs.
func (c *Cluster) BinDir() string { return c.bindir }

// Port returns the TCP port the cluster listens on, the same across Stop and
// Start.
func (c *Cluster) Port() int { return c.port }

// Stop kills the server the way a crash would (immediate shutdown: no
// checkpoint, clients cut off) and returns once it is gone. Stopping a stopped
// cluster does nothing. It fails the test when the server does not stop.
func (c *Cluster) Stop(t testing.TB) {
	t.Helper()
	if err := c.stop(); err != nil {
		t.Fatalf("pgtest: stop cluster: %v", err)
	}
}

// Start starts the server again on the same port with the same data, and
// returns once it accepts connections. Starting a running cluster does
// nothing. It fails the test when the server does not start (for instance
// because another process took the port meanwhile).
func (c *Cluster) Start(t testing.TB) {
	t.Helper()
	if err := c.start(); err != nil {
		t.Fatalf("pgtest: start cluster: %v", err)
	}
}

func (c *Cluster) urlFor(db string) string {
	return fmt.Sprintf("postgres://hookgate@127.0.0.1:%d/%s?sslmode=disable", c.port, db)
}

func (c *Cluster) dataDir() string { return filepath.Join(c.dir, "data") }
func (c *Cluster) logFile() string { return filepath.Join(c.dir, "log") }

// running reports whether the server runs; pg_ctl status exits 0 exactly then.
func (c *Cluster) running() bool {
	if _, err := os.Stat(filepath.Join(c.dataDir(), "PG_VERSION")); err != nil {
		return false
	}
	_, err := c.asServer(filepath.Join(c.bindir, "pg_ctl"), "status", "-D", c.dataDir())
	return err == nil
}

func (c *Cluster) start() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running() {
		return nil
	}
	// max_connections above the connection budget of the processes a
	// test starts (docs/deployment.md): two api and two worker processes
	// with the default pool of 32 take up to 130 as they reconnect after
	// a restart, and at 100 the test's own read was refused (53300).
	opts := fmt.Sprintf("-p %d -c listen_addresses=127.0.0.1 -k '%s' -c max_connections=200"+
		" -c fsync=off -c full_page_writes=off", c.port, c.dir)
	out, err := c.asServer(filepath.Join(c.bindir, "pg_ctl"),
		"-D", c.dataDir(), "-l", c.logFile(), "-w", "-t", "60", "-o", opts, "start")
	if err != nil {
		return fmt.Errorf("pg_ctl start on port %d: %w\n%s%s", c.port, err, out, c.logTail())
	}
	return nil
}

func (c *Cluster) stop() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.running() {
		return nil
	}
	out, err := c.asServer(filepath.Join(c.bindir, "pg_ctl"),
		"-D", c.dataDir(), "-m", "immediate", "-w", "-t", "60", "stop")
	if err != nil && c.running() {
		return fmt.Errorf("pg_ctl stop: %w\n%s%s", err, out, c.logTail())
	}
	return nil
}

// logTail returns the end of the server log, for error messages.
func (c *Cluster) logTail() string {
	b, err := os.ReadFile(c.logFile())
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 30 {
		lines = lines[len(lines)-30:]
	}
	return "--- server log ---\n" + strings.Join(lines, "\n") + "\n"
}

// asServer runs a PostgreSQL binary as the server user, from / (a working
// directory the server user may not read must not matter), and returns its
// combined output.
func (c *Cluster) asServer(name string, args ...string) ([]byte, error) {
	var cmd *exec.Cmd
	if os.Geteuid() == 0 {
		cmd = exec.CommandContext(context.Background(), "runuser", append([]string{"-u", serverUser, "--", name}, args...)...)
	} else {
		cmd = exec.CommandContext(context.Background(), name, args...)
	}
	cmd.Dir = "/"
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	// pg_ctl start leaves the server running; should it keep our output
	// pipes open, do not wait for it to exit.
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	return out.Bytes(), err
}

// findBinDir returns HOOKGATE_PG_BINDIR, else the highest
// /usr/lib/postgresql/<version>/bin holding pg_ctl, else the directory of
// pg_ctl on PATH.
func findBinDir() (string, error) {
	if d := os.Getenv(EnvBinDir); d != "" {
		if _, err := os.Stat(filepath.Join(d, "pg_ctl")); err != nil {
			return "", fmt.Errorf("%s=%s holds no pg_ctl: %w", EnvBinDir, d, err)
		}
		return d, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return versionOf(dirs[i]) < versionOf(dirs[j]) })
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "pg_ctl")); err == nil {
			return dirs[i], nil
		}
	}
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			p = r
		}
		return filepath.Dir(p), nil
	}
	return "", fmt.Errorf("no PostgreSQL server binaries: set %s, or install the Debian/Ubuntu package 'postgresql' (e.g. sudo apt-get install postgresql), or run the tests with `make test`", EnvBinDir)
}

// versionOf returns the major version in /usr/lib/postgresql/<version>/bin,
// or 0.
func versionOf(bindir string) float64 {
	v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(bindir)), 64)
	return v
}

// makeServerDir creates a temporary directory the server user owns, with a
// short path (the server puts its Unix socket there). As root,
// it lives where the postgres user can reach it: under os.TempDir() when that
// is world-traversable, else under /tmp.
func makeServerDir() (string, error) {
	base := os.TempDir()
	if len(base) > 60 { // keep the Unix socket path under its ~100-byte limit
		base = "/tmp"
	}
	if os.Geteuid() != 0 {
		return os.MkdirTemp(base, "hookgate-pgtest-")
	}
	u, err := user.Lookup(serverUser)
	if err != nil {
		return "", fmt.Errorf("running as root, but there is no user %q to run PostgreSQL as: %w", serverUser, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if !traversable(base) {
		base = "/tmp"
	}
	dir, err := os.MkdirTemp(base, "hookgate-pgtest-")
	if err != nil {
		return "", err
	}
	if err := os.Chown(dir, uid, gid); err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("chown %s to %s: %w", dir, serverUser, err)
	}
	return dir, nil
}

// traversable reports whether every directory on the way to dir, and dir
// itself, is searchable by other users.
func traversable(dir string) bool {
	dir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return false
	}
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil || fi.Mode().Perm()&0o001 == 0 {
			return false
		}
		if d == filepath.Dir(d) {
			return true
		}
	}
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
