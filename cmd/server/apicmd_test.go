package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookgate/hookgate/api"
	"github.com/hookgate/hookgate/internal/testing/pgtest"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// cliToken is the admin token of the server the api command's tests run.
const cliToken = "cli-test-token-4f8a2c91d7e05b3a6c1f"

// cliResult is what a run of the hookgate binary printed, and its exit
// status.
type cliResult struct {
	stdout, stderr string
	code           int
}

func (r cliResult) String() string {
	return fmt.Sprintf("exit status %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// runCLI runs the hookgate binary bin with args, in an environment of env
// only.
func runCLI(t *testing.T, bin string, env []string, args ...string) cliResult {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), bin, args...)
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := cliResult{stdout: stdout.String(), stderr: stderr.String()}
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run %s %q: %v", bin, args, err)
	}
	return r
}

// getJSON GETs path from base with the token and decodes the answer into v.
func getJSON(t *testing.T, c *http.Client, base, path string, v any) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+cliToken)
	r, err := do(c, req)
	if err != nil || r.status != http.StatusOK {
		t.Fatalf("GET %s: %v %v", path, r, err)
	}
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}

// TestAPICommandAgainstServer runs the hookgate binary's api subcommands
// against a real hookgate (PostgreSQL, a forward target that answers 400):
// it lists the delivery just accepted, shows its event with the failed
// forward, lists that forward as failed, redelivers the event and the
// target's failed forwards, pauses and resumes the target (the API shows
// the change), and --json prints what parses as the API's models. A wrong
// token exits 1 without printing the token, a usage error 2, an unknown
// sender and an unreachable server 1.
func TestAPICommandAgainstServer(t *testing.T) {
	t.Parallel()
	_, dsn := pgtest.NewDB(t)
	// The target refuses with a body that holds a terminal escape, and a
	// credential-like header.
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("X-Api-Token", "tgt-secret-7d1c")
		http.Error(w, "refused \x1b[31mred", http.StatusBadRequest)
	}))
	t.Cleanup(target.Close)
	cfg := senderConfig + fmt.Sprintf("    forward:\n      - name: orders\n        url: %s\n        max_attempts: 3\n", target.URL)
	srv := startRunWith(t, dsn, cfg, "--admin-token", cliToken)
	bin := buildBinary(t)
	c := newClient(t)
	env := []string{"HOOKGATE_URL=" + srv.base, "HOOKGATE_TOKEN=" + cliToken}
	cli := func(args ...string) cliResult {
		t.Helper()
		return runCLI(t, bin, env, append([]string{"api"}, args...)...)
	}
	ok := func(args ...string) string {
		t.Helper()
		r := cli(args...)
		if r.code != 0 || r.stderr != "" {
			t.Fatalf("hookgate api %s: %s", strings.Join(args, " "), r)
		}
		return r.stdout
	}

	r, err := deliver(t.Context(), c, srv.base, "cli-1", bodyFor("cli-1"))
	if err != nil {
		t.Fatal(err)
	}
	a, err := parseAccepted(r, "cli-1")
	if err != nil {
		t.Fatal(err)
	}

	// deliveries: a table for people, the API's JSON for scripts.
	if out := ok("deliveries", "--sender", "acme"); !strings.Contains(out, "cli-1") || !strings.Contains(out, a.EventID) || !strings.HasPrefix(out, "RECEIVED") {
		t.Errorf("deliveries:\n%s", out)
	}
	var page api.DeliveryPage
	if err := json.Unmarshal([]byte(ok("deliveries", "--sender", "acme", "--json")), &page); err != nil || len(page.Items) != 1 || page.Items[0].DeliveryId != "cli-1" {
		t.Errorf("deliveries --json: %+v %v", page, err)
	}

	// failed: the forward, once the target has refused it.
	testkit.Poll(t, time.Minute, "the forward to fail", func() bool {
		var fp api.TargetForwardPage
		return json.Unmarshal([]byte(ok("failed", "--sender", "acme", "--target", "orders", "--json")), &fp) == nil && len(fp.Items) == 1
	})
	if out := ok("failed", "--sender", "acme", "--target", "orders"); !strings.Contains(out, a.EventID) || !strings.Contains(out, "cli-1") || !strings.Contains(out, "400") {
		t.Errorf("failed:\n%s", out)
	}

	// event: the event, its body and its forward with its answer; the
	// event ID may come before or after the flags.
	out := ok("event", a.EventID)
	t.Logf("hookgate api event %s:\n%s", a.EventID, out)
	for _, want := range []string{"cli-1", "acme", `{"id":"cli-1"`, "orders", "failed", "400"} {
		if !strings.Contains(out, want) {
			t.Errorf("event: no %q in:\n%s", want, out)
		}
	}
	var ev api.Event
	if err := json.Unmarshal([]byte(ok("event", "--json", a.EventID)), &ev); err != nil || ev.EventId.String() != a.EventID || ev.DeliveryId != "cli-1" {
		t.Errorf("event --json: %+v %v", ev, err)
	}

	// redeliver --event: a second forward of the event, as the API shows.
	if out := ok("redeliver", "--event", a.EventID); !strings.Contains(out, "orders") || !strings.Contains(out, "enqueued") {
		t.Errorf("redeliver --event:\n%s", out)
	}
	var d api.Delivery
	getJSON(t, c, srv.base, "/v1/senders/acme/deliveries/cli-1", &d)
	if len(d.Forwards) != 2 {
		t.Errorf("after redeliver --event, the delivery has %d forwards, want 2: %+v", len(d.Forwards), d.Forwards)
	}
	// attempts: the first attempt and the redelivery's, newest first, each
	// with its answer; the body escaped, the token-like header hidden.
	testkit.Poll(t, time.Minute, "the redelivery's attempt", func() bool {
		var ea api.EventAttempts
		return json.Unmarshal([]byte(ok("attempts", "--json", a.EventID)), &ea) == nil && len(ea.Attempts) == 2
	})
	out = ok("attempts", a.EventID)
	i, j := strings.Index(out, "redelivery by admin"), strings.Index(out, "first attempt")
	if i < 0 || j < i || strings.Count(out, "  orders  failed  400  ") != 2 || !strings.Contains(out, `body (17 bytes): "refused \x1b[31mred\n"`) ||
		!strings.Contains(out, `X-Api-Token: "xxxxx"`) {
		t.Errorf("attempts: want the redelivery's attempt, then the first, each 400 with its body escaped and its token hidden:\n%s", out)
	}
	if strings.Contains(out, "\x1b") || strings.Contains(out, "tgt-secret") {
		t.Errorf("attempts printed a raw escape or the target's token:\n%q", out)
	}
	if out := ok("event", a.EventID); !strings.Contains(out, "Attempts (2, newest first)") || !strings.Contains(out, "redelivery by admin") {
		t.Errorf("event: no attempts in:\n%s", out)
	}

	// redeliver in bulk: it matches what failed.
	if out := ok("redeliver", "--sender", "acme", "--target", "orders", "--state", "failed", "--since", "1h"); !strings.HasPrefix(out, "matched ") {
		t.Errorf("redeliver in bulk:\n%s", out)
	}

	// pause and resume, as the API shows them.
	if out := ok("pause", "--sender", "acme", "--target", "orders", "--reason", "maintenance"); !strings.Contains(out, "acme/orders is paused") || !strings.Contains(out, "(maintenance)") {
		t.Errorf("pause:\n%s", out)
	}
	var targets api.TargetList
	getJSON(t, c, srv.base, "/v1/senders/acme/targets", &targets)
	if len(targets.Items) != 1 || targets.Items[0].Pause == nil || targets.Items[0].Pause.Reason != "maintenance" {
		t.Errorf("after pause, the API shows %+v, want orders paused for maintenance", targets.Items)
	}
	if out := ok("targets", "--sender", "acme"); !strings.Contains(out, "(maintenance)") {
		t.Errorf("targets while paused:\n%s", out)
	}
	if out := ok("resume", "--sender", "acme", "--target", "orders"); !strings.Contains(out, "acme/orders is not paused") {
		t.Errorf("resume:\n%s", out)
	}
	getJSON(t, c, srv.base, "/v1/senders/acme/targets", &targets)
	if len(targets.Items) != 1 || targets.Items[0].Pause != nil {
		t.Errorf("after resume, the API shows %+v, want no pause", targets.Items)
	}
	if out := ok("senders"); !strings.Contains(out, "acme") || !strings.Contains(out, "orders") {
		t.Errorf("senders:\n%s", out)
	}

	// The audit trail lists the pause and the resume above, by the admin
	// token, newest first; --action filters; --json parses as the API's.
	out = ok("audit", "--action", "pause")
	if !strings.Contains(out, "admin") || !strings.Contains(out, "pause") || !strings.Contains(out, "acme") || !strings.Contains(out, "orders") || strings.Contains(out, "resume") {
		t.Errorf("audit --action pause:\n%s", out)
	}
	var audit api.AuditPage
	if err := json.Unmarshal([]byte(ok("audit", "--json")), &audit); err != nil {
		t.Fatalf("audit --json: %v", err)
	}
	var actions []string
	for _, e := range audit.Items {
		actions = append(actions, e.Action)
		if e.Token != "admin" {
			t.Errorf("audit row %+v: token %q, want admin", e, e.Token)
		}
	}
	if i, j := slices.Index(actions, "resume"), slices.Index(actions, "pause"); i < 0 || j < 0 || i > j {
		t.Errorf("audit --json actions %v: want the resume listed before the pause", actions)
	}

	// A wrong token: exit status 1, the problem's title, never the token.
	const wrong = "wrong-token-0d1e2f3a4b5c6d7e8f90a1b2"
	for _, tokenEnv := range []string{"HOOKGATE_TOKEN=" + wrong, "HOOKGATE_ADMIN_TOKEN=" + wrong} {
		r := runCLI(t, bin, []string{"HOOKGATE_URL=" + srv.base, tokenEnv}, "api", "deliveries", "--sender", "acme")
		if r.code != 1 || !strings.Contains(r.stderr, "401") || r.stdout != "" {
			t.Errorf("%s: %s; want exit status 1 and the 401 on stderr", tokenEnv, r)
		}
		if strings.Contains(r.stdout+r.stderr, wrong) {
			t.Errorf("%s: the token is printed: %s", tokenEnv, r)
		}
	}
	r2 := runCLI(t, bin, env, "api", "deliveries", "--sender", "acme", "--token", wrong)
	if r2.code != 1 || strings.Contains(r2.stdout+r2.stderr, wrong) {
		t.Errorf("--token wrong: %s; want exit status 1, the token not printed", r2)
	}

	// The API's errors: exit status 1, with the problem's title and detail.
	if r := cli("deliveries", "--sender", "nobody"); r.code != 1 || !strings.Contains(r.stderr, "404") || !strings.Contains(r.stderr, "nobody") {
		t.Errorf("unknown sender: %s", r)
	}
	if r := runCLI(t, bin, []string{"HOOKGATE_URL=http://" + freeAddr(t), "HOOKGATE_TOKEN=" + cliToken}, "api", "senders"); r.code != 1 || !strings.Contains(r.stderr, "cannot reach hookgate") {
		t.Errorf("unreachable: %s", r)
	}

	// Usage errors: exit status 2, nothing asked of the API.
	for _, args := range [][]string{
		{"deliveries"},
		{"deliveries", "--sender", "acme", "--bogus"},
		{"frobnicate"},
		{},
		{"event", "not-a-uuid"},
		{"redeliver", "--event", a.EventID, "--target", "orders"},
		{"pause", "--sender", "acme", "--target", "orders", "--until", "-1h"},
	} {
		if r := cli(args...); r.code != 2 || r.stdout != "" || r.stderr == "" {
			t.Errorf("hookgate api %q: %s; want exit status 2 and why on stderr", args, r)
		}
	}
	if r := runCLI(t, bin, []string{"HOOKGATE_URL=" + srv.base}, "api", "senders"); r.code != 2 || !strings.Contains(r.stderr, "HOOKGATE_TOKEN") {
		t.Errorf("no token: %s; want exit status 2 naming HOOKGATE_TOKEN", r)
	}
}

// TestHelpListsCommands: hookgate help, --help and -h list every command,
// each on its line, and exit 0; help CMD and CMD --help show the same.
func TestHelpListsCommands(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	for _, args := range [][]string{{"help"}, {"--help"}, {"-h"}} {
		r := runCLI(t, bin, nil, args...)
		if r.code != 0 || r.stderr != "" {
			t.Errorf("hookgate %s: %s", args[0], r)
		}
		for _, c := range commands {
			if !strings.Contains(r.stdout, "\n  "+c.name+" ") {
				t.Errorf("hookgate %s does not list %s:\n%s", args[0], c.name, r.stdout)
			}
		}
	}
	for _, cmd := range []string{"serve", "migrate", "sink", "redeliver", "rules", "config", "api"} {
		a := runCLI(t, bin, nil, "help", cmd)
		b := runCLI(t, bin, nil, cmd, "--help")
		if a.code != 0 || b.code != 0 || a.stdout != b.stdout || a.stdout == "" {
			t.Errorf("hookgate help %s and hookgate %s --help differ or fail:\n%s\n%s", cmd, cmd, a, b)
		}
	}
	if r := runCLI(t, bin, nil, "help", "frobnicate"); r.code != 2 {
		t.Errorf("help of an unknown command: %s", r)
	}
}

// flagLines returns the flags a command's help lists, one a line.
func flagLines(t *testing.T, help string) []string {
	t.Helper()
	var flags []string
	seen := map[string]bool{}
	for _, line := range strings.Split(help, "\n") {
		if !strings.HasPrefix(line, "  --") {
			continue
		}
		f := strings.Fields(line)[0]
		if seen[f] {
			t.Errorf("%s is listed twice:\n%s", f, help)
		}
		seen[f] = true
		flags = append(flags, f)
	}
	return flags
}

// TestCommandHelpShowsOwnFlags: each command's help lists its own flags
// and no other, one a line, and never the token of the environment.
func TestCommandHelpShowsOwnFlags(t *testing.T) {
	t.Parallel()
	const token = "env-token-9a8b7c6d5e4f3a2b1c0d9e8f"
	env := envOf("HOOKGATE_TOKEN", token, "HOOKGATE_ADMIN_TOKEN", token)
	common := []string{"--url", "--token", "--json", "--timeout"}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"sink"}, []string{"--addr", "--secret", "--config", "--database-url"}},
		{[]string{"redeliver"}, []string{"--database-url", "--config", "--sender", "--target", "--state", "--since", "--until"}},
		{[]string{"rules"}, []string{"--config", "--sender", "--target", "--header"}},
		{[]string{"config"}, []string{"--config"}},
		{[]string{"migrate"}, []string{"--database-url", "--log-format"}},
		{[]string{"api", "senders"}, common},
		{[]string{"api", "targets"}, append([]string{"--sender"}, common...)},
		{[]string{"api", "deliveries"}, append([]string{"--sender", "--limit", "--event-type", "--cursor"}, common...)},
		{[]string{"api", "delivery"}, append([]string{"--sender"}, common...)},
		{[]string{"api", "event"}, common},
		{[]string{"api", "failed"}, append([]string{"--sender", "--target", "--since", "--until", "--limit", "--cursor"}, common...)},
		{[]string{"api", "forwards"}, append([]string{"--sender", "--target", "--state", "--since", "--until", "--limit", "--cursor"}, common...)},
		{[]string{"api", "redeliver"}, append([]string{"--event", "--sender", "--target", "--state", "--since", "--until"}, common...)},
		{[]string{"api", "pause"}, append([]string{"--sender", "--target", "--reason", "--until"}, common...)},
		{[]string{"api", "resume"}, append([]string{"--sender", "--target"}, common...)},
		{[]string{"api", "reload"}, common},
	} {
		var stdout, stderr bytes.Buffer
		if err := run(t.Context(), append(tc.args, "--help"), env, &stdout, &stderr); err != nil {
			t.Errorf("%q --help: %v", tc.args, err)
			continue
		}
		if got := flagLines(t, stdout.String()); strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("%q --help lists %q, want %q:\n%s", tc.args, got, tc.want, stdout.String())
		}
		if strings.Contains(stdout.String()+stderr.String(), token) {
			t.Errorf("%q --help prints the token", tc.args)
		}
	}
	// Every api subcommand is covered above.
	var stdout bytes.Buffer
	if err := run(t.Context(), []string{"api", "--help"}, env, &stdout, &stdout); err != nil {
		t.Fatal(err)
	}
	for _, s := range apiSubs {
		if !strings.Contains(stdout.String(), "\n  "+s.name+" ") {
			t.Errorf("hookgate api --help does not list %s:\n%s", s.name, stdout.String())
		}
	}
}

// TestAPIBlockedAndSkip runs `hookgate api blocked` and `skip` against a
// real hookgate whose ordered target refuses one event (422) and takes the
// others: the key is listed blocked by that event with one waiting; skip
// releases it, the waiting event arrives, and the listing is empty.
// Skipping again exits 1 with the API's not-blocked.
func TestAPIBlockedAndSkip(t *testing.T) {
	t.Parallel()
	_, dsn := pgtest.NewDB(t)
	var (
		mu  sync.Mutex
		got []string
	)
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Hookgate-Delivery-Id")
		if id == "ord-1" {
			http.Error(w, "no", http.StatusUnprocessableEntity)
			return
		}
		mu.Lock()
		got = append(got, id)
		mu.Unlock()
	}))
	t.Cleanup(target.Close)
	cfg := senderConfig + fmt.Sprintf("    forward:\n      - name: orders\n        url: %s\n        ordering: { json_pointer: /key }\n", target.URL)
	srv := startRunWith(t, dsn, cfg, "--admin-token", cliToken)
	bin := buildBinary(t)
	c := newClient(t)
	env := []string{"HOOKGATE_URL=" + srv.base, "HOOKGATE_TOKEN=" + cliToken}
	cli := func(args ...string) cliResult {
		t.Helper()
		return runCLI(t, bin, env, append([]string{"api"}, args...)...)
	}
	var first string
	for _, id := range []string{"ord-1", "ord-2"} {
		r, err := deliver(t.Context(), c, srv.base, id, []byte(`{"key":"order-7"}`))
		if err != nil {
			t.Fatal(err)
		}
		a, err := parseAccepted(r, id)
		if err != nil {
			t.Fatal(err)
		}
		if first == "" {
			first = a.EventID
		}
	}
	var out string
	testkit.Poll(t, time.Minute, "the key blocked", func() bool {
		r := cli("blocked", "--sender", "acme", "--target", "orders")
		out = r.stdout
		return r.code == 0 && strings.Contains(out, "order-7")
	})
	if !strings.HasPrefix(out, "KEY") || !strings.Contains(out, first) || !strings.Contains(out, "  1\n") {
		t.Errorf("blocked:\n%s", out)
	}
	mu.Lock()
	if len(got) != 0 {
		t.Errorf("the target got %v while the key was blocked, want nothing", got)
	}
	mu.Unlock()
	r := cli("skip", "--sender", "acme", "--target", "orders", "--event", first)
	if r.code != 0 || !strings.Contains(r.stdout, "skipped "+first) || !strings.Contains(r.stdout, "order-7") {
		t.Fatalf("skip: %s", r)
	}
	testkit.Poll(t, time.Minute, "the waiting event forwarded", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Equal(got, []string{"ord-2"})
	})
	if r := cli("blocked", "--sender", "acme", "--target", "orders"); r.code != 0 || !strings.Contains(r.stdout, "no key is blocked") {
		t.Errorf("blocked after the skip: %s", r)
	}
	if r := cli("skip", "--sender", "acme", "--target", "orders", "--event", first); r.code != 1 || !strings.Contains(r.stderr, "409 Forward does not block its key") {
		t.Errorf("skip again: %s, want exit 1 with not-blocked", r)
	}
}
