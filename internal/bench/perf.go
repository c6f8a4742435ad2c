package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// perfRecorder is a `perf record` of the server during a phase (-perf).
type perfRecorder struct {
	cmd  *exec.Cmd
	path string
	pid  int
	out  bytes.Buffer
}

// startPerf starts sampling the on-CPU call stacks of the whole machine
// into path; it returns nil (and says why) when perf is missing or cannot
// start. The report breaks the samples down by process, then shows the
// server's (pid) and the load generator's hottest symbols.
func startPerf(pid int, path string, out io.Writer) *perfRecorder {
	bin, err := exec.LookPath("perf")
	if err != nil {
		fmt.Fprintln(out, "  -perf: perf is not installed; not profiling")
		return nil
	}
	p := &perfRecorder{path: path, pid: pid}
	p.cmd = exec.Command(bin, "record", "-F", "499", "-g", "-a", "-o", path)
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		fmt.Fprintf(out, "  -perf: %v; not profiling\n", err)
		return nil
	}
	time.Sleep(200 * time.Millisecond) // let perf attach before the load starts
	return p
}

// stop ends the recording and prints the hottest symbols of the server,
// by self time and with their callees.
func (p *perfRecorder) stop(out io.Writer) {
	_ = p.cmd.Process.Signal(syscall.SIGINT)
	if err := p.cmd.Wait(); err != nil && !strings.Contains(err.Error(), "interrupt") {
		fmt.Fprintf(out, "  -perf: perf record: %v\n%s\n", err, p.out.String())
	}
	server := fmt.Sprint(p.pid)
	self := fmt.Sprint(os.Getpid())
	for _, view := range []struct {
		title string
		args  []string
	}{
		{"whole machine, by process", []string{"--no-children", "--sort", "comm", "--percent-limit", "0.5"}},
		{"server, self time by symbol", []string{"--pid", server, "--no-children", "--sort", "symbol", "--percent-limit", "0.7"}},
		{"server, time including callees, by symbol", []string{"--pid", server, "--children", "--sort", "symbol", "--percent-limit", "3"}},
		{"load generator, self time by symbol", []string{"--pid", self, "--no-children", "--sort", "symbol", "--percent-limit", "1.5"}},
		{"postgres, self time by symbol", []string{"--comm", "postgres", "--no-children", "--sort", "symbol", "--percent-limit", "1.5"}},
	} {
		args := append([]string{"report", "-i", p.path, "--stdio", "-g", "none"}, view.args...)
		rep, err := exec.Command("perf", args...).CombinedOutput()
		if err != nil {
			fmt.Fprintf(out, "  -perf: perf report: %v\n%s\n", err, rep)
			return
		}
		fmt.Fprintf(out, "  perf, %s:\n", view.title)
		for _, line := range strings.Split(string(rep), "\n") {
			if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
				continue
			}
			fmt.Fprintf(out, "    %s\n", line)
		}
	}
}
