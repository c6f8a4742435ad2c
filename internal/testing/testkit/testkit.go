// Package testkit holds the helpers the tests of every package share: one
// polling helper (Poll), one fake forward target (Target), one log buffer
// (LogBuffer), and the one switch of the fast tier (Slow). It is imported by
// tests only.
package testkit

import (
	"bytes"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"
)

// Slow marks a test as too slow for the fast tier (`make test-fast`, which
// runs go test -short): under -short it skips the test, giving why and
// saying it is not in the fast tier; otherwise it does nothing. Call it first,
// before t.Parallel. The process-kill, outage, load, browser and long
// multi-process suites call it; `make test` and CI run them all.
func Slow(t testing.TB, why string) {
	t.Helper()
	if testing.Short() {
		t.Skip(why + ": not in the fast tier (-short)")
	}
}

// PollInterval is how often Poll checks its condition.
const PollInterval = 10 * time.Millisecond

// Poll calls cond every PollInterval until it returns true. It fails the
// test (t.Fatalf, naming what it waited for, and what state returns when
// given) when timeout passes first or the test's context ends. The timeout
// is a guard against a hang, not a timed assertion.
func Poll(t testing.TB, timeout time.Duration, what string, cond func() bool, state ...func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(PollInterval)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s%s", timeout, what, describe(state))
		}
		select {
		case <-tick.C:
		case <-t.Context().Done():
			t.Fatalf("the test ended waiting for %s%s", what, describe(state))
		}
	}
}

func describe(state []func() string) string {
	var b bytes.Buffer
	for _, s := range state {
		if s != nil {
			fmt.Fprintf(&b, "; %s", s())
		}
	}
	return b.String()
}

// LogBuffer is an io.Writer safe for concurrent writers: the destination of
// a test's logger, read back with String.
type LogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *LogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *LogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Logger returns a text logger (level info) writing to b.
func (b *LogBuffer) Logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// Logger returns a text logger (level info) into a new LogBuffer, whose
// last 8,000 bytes are logged with the test when it fails.
func Logger(t testing.TB) *slog.Logger {
	t.Helper()
	b := &LogBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			s := b.String()
			if len(s) > 8000 {
				s = "…" + s[len(s)-8000:]
			}
			t.Logf("log:\n%s", s)
		}
	})
	return b.Logger()
}
