package doccheck

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// TestTestScriptStopsItsServerWhatever: make test's script (.ci/test.sh)
// stops and deletes its throwaway PostgreSQL whatever go test's outcome,
// and exits with go test's status. A go test that fails (here on a flag it
// does not know) used to end the script's exit trap before its cleanup:
// the server kept running, its directory under /tmp kept.
func TestTestScriptStopsItsServerWhatever(t *testing.T) {
	testkit.Slow(t, "runs make test's script: a PostgreSQL of its own")
	t.Parallel()
	root := repoRoot(t)
	for _, tc := range []struct {
		name, flags string
		rc          int
	}{
		{"go test fails", "-badflag", 1},
		{"go test passes", "-run TestNothingAtAll", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parent := t.TempDir()
			cmd := exec.Command("bash", filepath.Join(root, ".ci", "test.sh"))
			cmd.Dir = root
			cmd.Env = append(os.Environ(), "PKGS=./internal/jsonptr/", "GOTESTFLAGS="+tc.flags, "TEST_RACE=",
				"HOOKGATE_TMP_PG_PARENT="+parent, "HOOKGATE_TEST_CACHE="+t.TempDir())
			out, err := cmd.CombinedOutput()
			rc := 0
			if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
				rc = ee.ExitCode()
			} else if err != nil {
				t.Fatalf("run .ci/test.sh: %v", err)
			}
			if rc != tc.rc {
				t.Errorf("exit status %d, want go test's %d; output:\n%s", rc, tc.rc, out)
			}
			left, err := os.ReadDir(parent)
			if err != nil {
				t.Fatal(err)
			}
			if len(left) > 0 {
				t.Errorf("left %d entries in the parent of its PostgreSQL's directory (%s): not stopped and deleted", len(left), left[0].Name())
			}
			if pids := serversUnder(t, parent); len(pids) > 0 {
				t.Errorf("PostgreSQL still runs under %s: pids %v", parent, pids)
				for _, pid := range pids { // do not leave it for the next run
					_ = exec.Command("kill", pid).Run()
				}
			}
		})
	}
}

// serversUnder returns the pids of the processes whose command line names
// dir.
func serversUnder(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Skip("no /proc to look for the server in")
	}
	var pids []string
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(b), dir) {
			pids = append(pids, e.Name())
		}
	}
	return pids
}

// TestMakeTestPassesFlagsAsWritten: make test hands GOTESTFLAGS to go test
// as written on make's command line, with single quotes, double quotes
// and a $ in it. A single quote used to end the recipe's own quoting: the
// shell ran the rest as a command.
func TestMakeTestPassesFlagsAsWritten(t *testing.T) {
	testkit.Slow(t, "runs make test: a PostgreSQL of its own")
	t.Parallel()
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	root := repoRoot(t)
	for _, flags := range []string{
		`-run 'TestNothing|TestParsePointer$' -v`,
		`-run "TestNothing|TestParsePointer$" -v`,
	} {
		cmd := exec.Command("make", "--no-print-directory", "test", "PKGS=./internal/jsonptr/", "GOTESTFLAGS="+flags)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "TEST_RACE=", "HOOKGATE_TMP_PG_PARENT="+t.TempDir(), "HOOKGATE_TEST_CACHE="+t.TempDir())
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("make test GOTESTFLAGS=%s: %v\n%s", flags, err, out)
			continue
		}
		// The pattern reached go test whole: the test it names ran, and
		// only that one.
		if !strings.Contains(string(out), "\n--- PASS: TestParsePointer ") || strings.Count(string(out), "\n--- PASS") != 1 {
			t.Errorf("make test GOTESTFLAGS=%s did not run TestParsePointer alone:\n%s", flags, out)
		}
	}
}
