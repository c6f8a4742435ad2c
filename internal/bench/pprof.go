package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// profiler takes a CPU profile of the server (served on its --pprof-addr)
// while a phase runs (-pprof).
type profiler struct {
	addr string
	path string
	done chan error
}

// pprofEnv returns the server environment that turns its profiler on at a
// free loopback port, and the address.
func pprofEnv() (string, string, error) {
	port, err := freePort()
	if err != nil {
		return "", "", err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	return "HOOKGATE_PPROF_ADDR=" + addr, addr, nil
}

// startProfile starts a CPU profile of d seconds into path.
func startProfile(ctx context.Context, addr, path string, d time.Duration) *profiler {
	p := &profiler{addr: addr, path: path, done: make(chan error, 1)}
	go func() {
		url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, max(int(d.Seconds()), 1))
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			p.done <- err
			return
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			p.done <- err
			return
		}
		defer resp.Body.Close()
		f, err := os.Create(path)
		if err != nil {
			p.done <- err
			return
		}
		_, err = io.Copy(f, resp.Body)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		p.done <- err
	}()
	return p
}

// report waits for the profile and prints the server's hottest functions
// (cumulative), as `go tool pprof -top -cum` shows them.
func (p *profiler) report(out io.Writer) {
	if err := <-p.done; err != nil {
		fmt.Fprintf(out, "  -pprof: no profile: %v\n", err)
		return
	}
	cmd := exec.CommandContext(context.Background(), "go", "tool", "pprof", "-top", "-cum", "-nodecount=30", p.path)
	b, err := cmd.Output()
	if err != nil {
		fmt.Fprintf(out, "  -pprof: go tool pprof: %v\n", err)
		return
	}
	fmt.Fprintf(out, "  server CPU profile (%s; `go tool pprof -http=: %s` to explore):\n", filepath.Base(p.path), p.path)
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		fmt.Fprintf(out, "    %s\n", line)
	}
}
