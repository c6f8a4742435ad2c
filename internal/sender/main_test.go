package sender_test

import (
	"runtime"
	"testing"

	"go.uber.org/goleak"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/sender"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// env returns a lookup function over vars, as config.Parse takes (like
// os.LookupEnv).
func env(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := vars[k]
		return v, ok
	}
}

// noEnv is a lookup in which no variable is set.
var noEnv = env(nil)

// senderYAML returns the YAML of one list item under senders:, a generic
// sender with the given extra lines (indented by four spaces by this
// function).
func senderYAML(name string, extra ...string) string {
	s := "  - name: " + name + "\n    preset: generic\n"
	for _, e := range extra {
		s += "    " + e + "\n"
	}
	return s
}

// parse is what hookgate does with a configuration file: config.Parse,
// then Compile.
func parse(data []byte, lookup func(string) (string, bool)) (*sender.Set, error) {
	c, err := config.Parse(data, lookup)
	if err != nil {
		return nil, err
	}
	return sender.Compile(c)
}

func mustParse(t *testing.T, yaml string, lookup func(string) (string, bool)) *sender.Set {
	t.Helper()
	c, err := parse([]byte(yaml), lookup)
	if err != nil {
		t.Fatalf("parse:\n%s\nerror: %v", yaml, err)
	}
	return c
}

// heapPerCall returns the bytes allocated by one call of f, on average, and
// the allocations per call (runtime.MemStats, as testing.AllocsPerRun counts
// them, in the same runs).
func heapPerCall(f func()) (bytes uint64, allocs float64) {
	const runs = 2
	f() // warm up
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range runs {
		f()
	}
	runtime.ReadMemStats(&after)
	return (after.TotalAlloc - before.TotalAlloc) / runs, float64(after.Mallocs-before.Mallocs) / runs
}
