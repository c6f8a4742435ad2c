package doccheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/testing/pgtest"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// walkthroughs are the documents' sections whose console blocks are run
// by TestReadmeWalkthrough, in order, in one shell.
var walkthroughs = []struct{ file, heading string }{
	{"README.md", "## Walk-through with curl"},
	{"docs/providers.md", "## Standard Webhooks senders (e.g. Svix-based)"},
}

// step is one command of a console block and the output printed under it.
type step struct {
	where string // file:line
	cmd   string
	want  []string
}

var fenceStart = regexp.MustCompile("^(\\s*)```console\\s*$")

// steps returns the console blocks' commands of the section of text that
// starts at heading and ends at the next heading of the same level.
func steps(t *testing.T, file, text, heading string) []step {
	t.Helper()
	lines := strings.Split(text, "\n")
	start := -1
	for i, l := range lines {
		if l == heading {
			start = i
			break
		}
	}
	if start < 0 {
		t.Fatalf("%s: no heading %q", file, heading)
	}
	level := heading[:strings.IndexByte(heading, ' ')+1]
	var out []step
	for i := start + 1; i < len(lines); i++ {
		if strings.HasPrefix(lines[i], level) || strings.HasPrefix(lines[i], strings.TrimSuffix(level, "# ")+" ") {
			break
		}
		m := fenceStart.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		indent := m[1]
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			l := strings.TrimPrefix(lines[i], indent)
			if strings.HasPrefix(l, "$ ") {
				s := step{where: fmt.Sprintf("%s:%d", file, i+1), cmd: strings.TrimPrefix(l, "$ ")}
				for strings.HasSuffix(s.cmd, "\\") && i+1 < len(lines) {
					i++
					s.cmd += "\n" + strings.TrimPrefix(lines[i], indent) // bash joins the lines
				}
				out = append(out, s)
				continue
			}
			if len(out) == 0 {
				t.Fatalf("%s:%d: output before any command", file, i+1)
			}
			out[len(out)-1].want = append(out[len(out)-1].want, l)
		}
	}
	return out
}

// volatile are the JSON fields whose values differ from run to run: the
// document's value and the answer's must have the same form, and a value
// the document repeats must be repeated in the answers too.
var volatile = map[string]*regexp.Regexp{
	"event_id":    regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`),
	"received_at": timeForm,
	"since":       timeForm, // a pause's start
}

// timeForm is the form of the times the walk-through's answers carry.
var timeForm = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$`)

// compare returns how got (a command's output) differs from want (the
// lines the document prints under it): the status line, each header shown
// (the answer may have more), and the body (JSON compared as values).
// seen maps the document's volatile values to the answers'.
func compare(want []string, got string, seen map[string]string) error {
	for len(want) > 0 && strings.TrimSpace(want[len(want)-1]) == "" {
		want = want[:len(want)-1]
	}
	if len(want) == 0 {
		return nil
	}
	got = strings.ReplaceAll(got, "\r\n", "\n")
	gl := strings.Split(strings.TrimRight(got, "\n"), "\n")
	var wantBody, gotBody string
	if strings.HasPrefix(want[0], "HTTP/") {
		if gl[0] != want[0] {
			return fmt.Errorf("status line %q, the document says %q", gl[0], want[0])
		}
		headers := http.Header{}
		j := 1
		for ; j < len(gl) && gl[j] != ""; j++ {
			name, value, _ := strings.Cut(gl[j], ":")
			headers.Add(name, strings.TrimSpace(value))
		}
		gotBody = strings.Join(gl[min(j+1, len(gl)):], "\n")
		k := 1
		for ; k < len(want) && want[k] != ""; k++ {
			name, value, _ := strings.Cut(want[k], ":")
			value = strings.TrimSpace(value)
			if g := headers.Values(name); len(g) != 1 || g[0] != value {
				return fmt.Errorf("header %s: %q, the document says %q", name, g, value)
			}
		}
		wantBody = strings.Join(want[min(k+1, len(want)):], "\n")
	} else {
		wantBody, gotBody = strings.Join(want, "\n"), strings.Join(gl, "\n")
	}
	wantBody, gotBody = strings.TrimSpace(wantBody), strings.TrimSpace(gotBody)
	if wantBody == "" {
		return nil
	}
	var wj, gj map[string]any
	if json.Unmarshal([]byte(wantBody), &wj) != nil {
		if gotBody != wantBody {
			return fmt.Errorf("body %q, the document says %q", gotBody, wantBody)
		}
		return nil
	}
	if err := json.Unmarshal([]byte(gotBody), &gj); err != nil {
		return fmt.Errorf("body %q is not the JSON the document shows: %w", gotBody, err)
	}
	for k, wv := range wj {
		gv, ok := gj[k]
		if !ok {
			return fmt.Errorf("body has no %q, the document shows %v", k, wv)
		}
		if re, ok := volatile[k]; ok && (wv != nil || gv != nil) { // null where the document shows null
			ws, _ := wv.(string)
			gs, _ := gv.(string)
			if !re.MatchString(ws) || !re.MatchString(gs) {
				return fmt.Errorf("%s: %q in the answer, %q in the document: not of the form %s", k, gs, ws, re)
			}
			if prev, ok := seen[k+"="+ws]; ok && prev != gs {
				return fmt.Errorf("%s: %q, but where the document repeats %q the earlier answer had %q", k, gs, ws, prev)
			}
			seen[k+"="+ws] = gs
			continue
		}
		if fmt.Sprint(gv) != fmt.Sprint(wv) {
			return fmt.Errorf("%s: %v, the document says %v", k, gv, wv)
		}
	}
	for k := range gj {
		if _, ok := wj[k]; !ok {
			return fmt.Errorf("body has %q, which the document does not show", k)
		}
	}
	return nil
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestReadmeWalkthrough runs the README's curl walk-through (and the
// Standard Webhooks signing example of docs/providers.md) as printed,
// against hookgate started as make run starts it (hookgate.example.yaml,
// its sink, a token made by .ci/run-local.sh's command in .data/admin-token,
// HOOKGATE_ALLOW_EXAMPLE_SECRETS=1), with localhost:8080 and the sink's
// 127.0.0.1:9099 pointed at this run's ports; each answer must be what the
// document prints under its command.
func TestReadmeWalkthrough(t *testing.T) {
	testkit.Slow(t, "runs the README walk-through against the real binary (make check-walkthrough runs it too)")
	t.Parallel()
	for _, tool := range []string{"bash", "curl", "openssl", "od", "base64"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not installed: the walk-through needs it as a new user would", tool)
		}
	}
	root := repoRoot(t)
	_, dsn := pgtest.NewDB(t)
	work := t.TempDir()
	bin := filepath.Join(work, "hookgate")
	build := exec.Command("go", "build", "-o", bin, "./cmd/server")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	gw, sink := freePort(t), freePort(t)
	example, err := os.ReadFile(filepath.Join(root, "hookgate.example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := bytes.ReplaceAll(example, []byte("127.0.0.1:9099"), []byte(sink))
	if err := os.WriteFile(filepath.Join(work, "hookgate.yaml"), cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	script, err := os.ReadFile(filepath.Join(root, ".ci", "run-local.sh"))
	if err != nil {
		t.Fatal(err)
	}
	mk := regexp.MustCompile(`head -c \d+ /dev/urandom[^>]*`).Find(script)
	if mk == nil {
		t.Fatal(".ci/run-local.sh makes no admin token with head -c N /dev/urandom any more: update this test")
	}
	if err := os.Mkdir(filepath.Join(work, ".data"), 0o700); err != nil {
		t.Fatal(err)
	}
	token, err := exec.Command("bash", "-c", string(mk)).Output()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, ".data", "admin-token"), token, 0o600); err != nil {
		t.Fatal(err)
	}
	start := func(args []string, env ...string) {
		cmd := exec.Command(bin, args...)
		cmd.Dir = work
		cmd.Env = append(os.Environ(), env...)
		var log bytes.Buffer
		cmd.Stdout, cmd.Stderr = &log, &log
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		t.Cleanup(func() {
			_ = cmd.Process.Signal(os.Interrupt)
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
			if t.Failed() {
				t.Logf("%s log:\n%s", args[0], log.String())
			}
		})
	}
	start([]string{"sink", "--addr", sink}, "HOOKGATE_CONFIG=hookgate.yaml", "DATABASE_URL="+dsn)
	start([]string{"serve"}, "HOOKGATE_LOG_FORMAT=text", "HOOKGATE_ALLOW_EXAMPLE_SECRETS=1", "DATABASE_URL="+dsn,
		"HOOKGATE_ADMIN_TOKEN="+string(token), "HOOKGATE_CONFIG=hookgate.yaml", "HOOKGATE_ADDR="+gw)
	deadline := time.Now().Add(time.Minute)
	for {
		r, err := http.Get("http://" + gw + "/readyz")
		if err == nil {
			r.Body.Close()
			if r.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the gateway is not ready after a minute: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // polling with a deadline
	}

	var all []step
	for _, w := range walkthroughs {
		text, err := os.ReadFile(filepath.Join(root, w.file))
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, steps(t, w.file, string(text), w.heading)...)
	}
	checked := 0
	var sh strings.Builder
	for i, s := range all {
		if len(s.want) > 0 {
			checked++
		}
		cmd := strings.ReplaceAll(s.cmd, "localhost:8080", "localhost:"+gw[strings.LastIndexByte(gw, ':')+1:])
		cmd = strings.ReplaceAll(cmd, "127.0.0.1:9099", sink)
		fmt.Fprintf(&sh, "printf '\\n@@@ %d @@@\\n'\n%s\n", i, cmd)
	}
	if checked < 4 {
		t.Fatalf("only %d commands with a printed answer found: the walk-through's format changed?", checked)
	}
	run := exec.Command("bash", "-c", sh.String())
	run.Dir = work
	var stderr bytes.Buffer
	run.Stderr = &stderr // curl's progress meter, as a terminal would not show it
	out, err := run.Output()
	defer func() {
		if t.Failed() {
			t.Logf("the walk-through's standard error:\n%s", stderr.String())
		}
	}()
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatal(err)
		}
	}
	parts := regexp.MustCompile(`\n@@@ (\d+) @@@\n`).Split(string(out), -1)
	if len(parts) != len(all)+1 {
		t.Fatalf("the walk-through printed %d answers for %d commands:\n%s", len(parts)-1, len(all), out)
	}
	seen := map[string]string{}
	for i, s := range all {
		if err := compare(s.want, parts[i+1], seen); err != nil {
			t.Errorf("%s: $ %s\n  %v\n  the whole answer:\n%s", s.where, s.cmd, err, parts[i+1])
		}
	}
}

// compare finds the differences the walk-through must catch.
func TestWalkthroughCompare(t *testing.T) {
	t.Parallel()
	want := []string{"HTTP/1.1 202 Accepted", "Content-Type: application/json", "", `{"event_id":"01a228cf-3b24-7c83-9e90-cdd66669eb21","sender":"orders"}`}
	ok := "HTTP/1.1 202 Accepted\r\nContent-Type: application/json\r\nDate: x\r\n\r\n" + `{"event_id":"01a228cf-aaaa-7c83-9e90-cdd66669eb21","sender":"orders"}`
	if err := compare(want, ok, map[string]string{}); err != nil {
		t.Errorf("a matching answer: %v", err)
	}
	for name, got := range map[string]string{
		"status":        strings.Replace(ok, "202 Accepted", "200 OK", 1),
		"header":        strings.Replace(ok, "application/json", "text/plain", 1),
		"field":         strings.Replace(ok, `"orders"`, `"billing"`, 1),
		"extra field":   strings.Replace(ok, `"sender"`, `"x":1,"sender"`, 1),
		"event ID form": strings.Replace(ok, "01a228cf-aaaa", "nope", 1),
	} {
		if err := compare(want, got, map[string]string{}); err == nil {
			t.Errorf("%s: a different answer passes", name)
		}
	}
	// A volatile field the document shows null must be null in the answer.
	pause := []string{`{"paused":false,"since":null}`}
	if err := compare(pause, `{"paused":false,"since":null}`, map[string]string{}); err != nil {
		t.Errorf("a null start where the document shows null: %v", err)
	}
	if err := compare(pause, `{"paused":false,"since":"2026-11-29T19:36:41.102Z"}`, map[string]string{}); err == nil {
		t.Error("a start where the document shows null passes")
	}
	seen := map[string]string{}
	_ = compare(want, ok, seen)
	other := strings.Replace(ok, "01a228cf-aaaa", "01a228cf-bbbb", 1)
	if err := compare(want, other, seen); err == nil {
		t.Error("a repeated event ID of the document answered with another one passes")
	}
}
