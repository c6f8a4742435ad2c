package main

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// awaitBackendsGone waits for the children a server started since before
// to be reaped (pgbench's backends as it ends), but not for an autovacuum
// worker, and gives up at its timeout. A bash script stands in for the
// PostgreSQL server: its children are real processes it reaps.
func TestAwaitBackendsGone(t *testing.T) {
	t.Parallel()
	// One child before, then an "autovacuum worker" that lives on and a
	// backend that ends once the file ended exists.
	ended := filepath.Join(t.TempDir(), "ended")
	// The worker's name comes from the environment: in the script, it
	// would be in the command line of bash's subshells too.
	cmd := exec.Command("bash", "-c", `sleep 30 & read -r _; (exec -a "$AV" sleep 30) & (while [ ! -e "$0" ]; do sleep 0.01; done) & wait`, ended)
	cmd.Env = append(os.Environ(), "AV=postgres: autovacuum worker")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	pid := cmd.Process.Pid
	testkit.Poll(t, 30*time.Second, "the first child", func() bool { return len(pgChildren(pid)) == 1 })
	before := pgChildren(pid)
	if _, err := io.WriteString(in, "\n"); err != nil {
		t.Fatal(err)
	}
	testkit.Poll(t, 30*time.Second, "the two new children", func() bool { return len(pgChildren(pid)) == 3 })

	if err := os.WriteFile(ended, nil, 0o600); err != nil {
		t.Fatal(err)
	}

	const timeout = 20 * time.Second
	start := time.Now()
	awaitBackendsGone(pid, before, timeout)
	if took := time.Since(start); took >= timeout {
		t.Errorf("waited %s, the whole timeout: it waited for the autovacuum worker", took)
	}
	if n := len(pgChildren(pid)); n != 2 {
		t.Errorf("%d children left, want 2 (the one from before and the autovacuum worker): it returned before the backend was reaped", n)
	}

	// Measured against no children before, the first child is new and
	// lives on: the wait ends at its timeout.
	start = time.Now()
	awaitBackendsGone(pid, map[int]bool{}, 200*time.Millisecond)
	if took := time.Since(start); took < 200*time.Millisecond {
		t.Errorf("returned after %s while a new child lived on, before its timeout", took)
	}
}
