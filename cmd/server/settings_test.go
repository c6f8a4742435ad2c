package main

import (
	"bytes"
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/dedup"
)

// TestSettingsTableMatchesDocs: docs/configuration.md's settings table lists
// exactly the rows of settingTable, in the same order, with the same flag,
// environment variable and default.
func TestSettingsTableMatchesDocs(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("^\\| `([A-Z_]+)` \\| `--([a-z-]+)` \\| ([^|]+) \\|")
	type entry struct{ env, flag, def string }
	var documented []entry
	for _, line := range strings.Split(string(doc), "\n") {
		if m := row.FindStringSubmatch(line); m != nil {
			documented = append(documented, entry{m[1], m[2], strings.TrimSpace(m[3])})
		}
	}
	var code []entry
	for i := range settingTable {
		st := &settingTable[i]
		code = append(code, entry{st.env, st.flag, st.shownDefault()})
	}
	if len(documented) != len(code) {
		t.Errorf("docs/configuration.md lists %d settings, settingTable %d", len(documented), len(code))
	}
	for i := 0; i < len(code) || i < len(documented); i++ {
		var d, c entry
		if i < len(documented) {
			d = documented[i]
		}
		if i < len(code) {
			c = code[i]
		}
		if d != c {
			t.Errorf("row %d: docs %+v, code %+v", i+1, d, c)
		}
	}
}

// TestServeHelp: serve --help prints each setting on one line: the flag
// (with a placeholder unless it is a boolean), its variable, the default
// docs/configuration.md shows without its Markdown, and a short
// description; no other flag, and no backquote. usage, the whole help of
// a flag migrate accepts without listing it, says its default once.
func TestServeHelp(t *testing.T) {
	t.Parallel()
	var help bytes.Buffer
	if _, err := parseSettings("serve", []string{"--help"}, envOf(), &help); !errors.Is(err, errHelpShown) {
		t.Fatalf("--help: err = %v, want errHelpShown", err)
	}
	out := help.String()
	if strings.Contains(out, "`") {
		t.Errorf("serve --help prints a backquote:\n%s", out)
	}
	var flagLines []string
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "  --") {
			flagLines = append(flagLines, line)
		}
	}
	if len(flagLines) != len(settingTable) {
		t.Errorf("serve --help prints %d flag lines, want one per setting (%d):\n%s", len(flagLines), len(settingTable), out)
	}
	for i := range settingTable {
		st := &settingTable[i]
		prefix := "  --" + st.flag + " VALUE "
		if st.boolean {
			prefix = "  --" + st.flag + " "
		}
		var found []string
		for _, l := range flagLines {
			if strings.HasPrefix(l, prefix) {
				found = append(found, l)
			}
		}
		if len(found) != 1 {
			t.Errorf("--%s: %d lines of serve --help start with %q, want 1", st.flag, len(found), prefix)
			continue
		}
		if f := strings.Fields(strings.TrimPrefix(found[0], prefix)); len(f) < 2 || f[0] != st.env || !strings.Contains(found[0], "  "+st.shownPlain()+"  ") {
			t.Errorf("--%s: line %q does not show %s and the default %q", st.flag, found[0], st.env, st.shownPlain())
		}
		u := st.usage()
		if n := strings.Count(u, "default"); n != 1 {
			t.Errorf("--%s: the help says default %d times: %s", st.flag, n, u)
		}
		if def := strings.ReplaceAll(strings.Trim(st.shownDefault(), "()"), "`", ""); !strings.HasSuffix(u, "; default "+def+")") {
			t.Errorf("--%s: the help %q does not end with the default docs/configuration.md shows (%s)", st.flag, u, st.shownDefault())
		}
	}
}

// TestEverySettingHasFlagEnvAndHelp: each row has a flag, a variable named
// HOOKGATE_* (or DATABASE_URL), help, a parser, a default or a documented
// one; no name appears twice; and each default parses.
func TestEverySettingHasFlagEnvAndHelp(t *testing.T) {
	t.Parallel()
	flags, envs := map[string]bool{}, map[string]bool{}
	for i := range settingTable {
		st := &settingTable[i]
		if st.flag == "" || st.help == "" || st.parse == nil || (st.def == "" && st.shown == "") {
			t.Errorf("setting %d (%q) is incomplete", i, st.flag)
		}
		if st.env != "DATABASE_URL" && !strings.HasPrefix(st.env, "HOOKGATE_") {
			t.Errorf("setting %q: variable %q is not HOOKGATE_*", st.flag, st.env)
		}
		if flags[st.flag] || envs[st.env] {
			t.Errorf("setting %q (%s) is listed twice", st.flag, st.env)
		}
		flags[st.flag], envs[st.env] = true, true
		if err := st.parse(defaultSettings(), st.def); err != nil {
			t.Errorf("setting %q: its default %q does not parse: %v", st.flag, st.def, err)
		}
	}
}

// TestSettingsFromFlagEnvAndDefault: a flag wins over its variable, a
// variable over the default, for every kind of setting; a bad value from
// either is refused with a message naming the setting.
func TestSettingsFromFlagEnvAndDefault(t *testing.T) {
	t.Parallel()
	var stderr bytes.Buffer
	s, err := parseSettings("serve", nil, envOf(), &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if s.addr != ":8080" || s.dedup.ReplayCache == nil || s.dedup.ReplayCache.Size != 10000 || s.shutdownWait != 20*time.Second || s.handler.BodyBudget != 64<<20 || s.dedup.Shedding.MaxWait != 3*time.Second || s.allowExampleSecrets || s.client.RescueAfter != 0 || s.worker.RetryAfterMax != 5*time.Minute ||
		s.client.MaxWorkers != 100 || s.gate.Capacity != 100 || !s.onWorkers || s.citusWorkers != nil || s.heapFloor != 100<<20 {
		t.Errorf("defaults: %+v", s)
	}
	env := envOf("HOOKGATE_ADDR", ":1", "HOOKGATE_FORWARD_WORKERS", "7", "HOOKGATE_SHUTDOWN_TIMEOUT", "3s",
		"HOOKGATE_ALLOW_EXAMPLE_SECRETS", "1", "HOOKGATE_REPLAY_CACHE_SIZE", "0", "HOOKGATE_RETENTION_INTERVAL", "5m",
		"HOOKGATE_FORWARD_RETRY_AFTER_MAX", "1m", "HOOKGATE_CITUS_WORKER_HOSTS", "w1.internal:5432", "HOOKGATE_HEAP_FLOOR", "0")
	s, err = parseSettings("serve", []string{"--addr", ":2", "--allow-example-secrets=false", "--forward-rescue-after", "2m",
		"--citus-worker-hosts", "w1.internal:5432,w2.internal:5432"}, env, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if s.addr != ":2" || s.client.MaxWorkers != 7 || s.gate.Capacity != 7 || s.shutdownWait != 3*time.Second || s.allowExampleSecrets || s.dedup.ReplayCache != nil || s.retention.Interval != 5*time.Minute || s.client.RescueAfter != 2*time.Minute ||
		s.worker.RetryAfterMax != time.Minute || strings.Join(s.citusWorkers, ",") != "w1.internal:5432,w2.internal:5432" || s.heapFloor != 0 {
		t.Errorf("flag over env over default: %+v", s)
	}
	s, err = parseSettings("serve", []string{"--allow-example-secrets"}, envOf(), &stderr)
	if err != nil || !s.allowExampleSecrets {
		t.Errorf("--allow-example-secrets alone: %v, %+v", err, s)
	}
	for _, tc := range []struct {
		env  []string
		args []string
		want string
	}{
		{[]string{"HOOKGATE_FORWARD_WORKERS", "x"}, nil, "forward workers"},
		{nil, []string{"--forward-workers", "0"}, "forward workers"},
		{[]string{"HOOKGATE_FORWARD_POLL_INTERVAL", "0"}, nil, "forward poll interval"},
		{[]string{"HOOKGATE_ALLOW_EXAMPLE_SECRETS", "yes"}, nil, "allow example secrets"},
		{[]string{"HOOKGATE_REPLAY_CACHE_SIZE", "-1"}, nil, "replay cache size"},
		{nil, []string{"--ingest-batch-size", "0"}, "ingest batch size"},
		{[]string{"HOOKGATE_FORWARD_BACKOFF_BASE", "2h"}, nil, "forward backoff"},
		{nil, []string{"--forward-rescue-after", "0"}, "forward rescue after"},
		{nil, []string{"--forward-retry-after-max", "0"}, "forward retry-after max"},
		{[]string{"HOOKGATE_FORWARD_RETRY_AFTER_MAX", "500ms"}, nil, "forward retry-after max"},
		{[]string{"HOOKGATE_CITUS_WORKER_HOSTS", "w1.internal"}, nil, "citus worker"},
		{nil, []string{"--citus-worker-hosts", "postgres://w1.internal:5432"}, "citus worker"},
		{nil, []string{"--heap-floor", "-1"}, "heap floor"},
		{[]string{"HOOKGATE_HEAP_FLOOR", "100MiB"}, nil, "heap floor"},
		{nil, []string{"--heap-floor", "68719476737"}, "heap floor"}, // 64 GiB + 1
		{nil, []string{"extra"}, "unexpected argument"},
	} {
		_, err := parseSettings("serve", tc.args, envOf(tc.env...), &stderr)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("env %v args %v: %v, want an error naming %q", tc.env, tc.args, err, tc.want)
		}
	}
}

// TestBatchesInFlightByLayout: --ingest-batches-in-flight unset is
// dedup.DefaultMaxInFlight on PostgreSQL and distributedMaxInFlight on
// Citus; set (flag or variable), it is what the operator gave on both.
func TestBatchesInFlightByLayout(t *testing.T) {
	t.Parallel()
	var stderr bytes.Buffer
	for _, tc := range []struct {
		args        []string
		env         []string
		plain, dist int
	}{
		{nil, nil, dedup.DefaultMaxInFlight, distributedMaxInFlight},
		{[]string{"--ingest-batches-in-flight", "3"}, nil, 3, 3},
		{nil, []string{"HOOKGATE_INGEST_BATCHES_IN_FLIGHT", "2"}, 2, 2},
	} {
		s, err := parseSettings("serve", tc.args, envOf(tc.env...), &stderr)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range []struct {
			distributed bool
			want        int
		}{{false, tc.plain}, {true, tc.dist}} {
			if got := ingestConfig(s, l.distributed, nil, nil).Batching.MaxInFlight; got != l.want {
				t.Errorf("args %v env %v, distributed %v: %d batches in flight, want %d", tc.args, tc.env, l.distributed, got, l.want)
			}
		}
	}
	if _, err := parseSettings("serve", []string{"--ingest-batches-in-flight", "0"}, envOf(), &stderr); err == nil {
		t.Error("--ingest-batches-in-flight 0 was accepted")
	}
}
