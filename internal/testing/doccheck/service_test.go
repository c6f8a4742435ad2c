package doccheck

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"go/format"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/hookgate/hookgate/internal/testing/pgtest"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// serviceSection is the README's section whose Go program and
// hookgate.yaml snippet TestReadmeService runs.
const serviceSection = "## The services behind hookgate"

// serviceAddr is where the README's service listens, in its program and in
// the target's url; the test replaces it with a free address.
const serviceAddr = "127.0.0.1:9000"

// fencedBlocks returns the text of the blocks fenced as lang (```go,
// ```yaml) in the section of text that starts at heading and ends at the
// next heading of the same or a higher level.
func fencedBlocks(t *testing.T, file, text, heading, lang string) []string {
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
	level := strings.IndexByte(heading, ' ') // the heading's number of #
	var out []string
	for i := start + 1; i < len(lines); i++ {
		if h, _, ok := strings.Cut(lines[i], " "); ok && h != "" && strings.Trim(h, "#") == "" && len(h) <= level {
			break // the next section
		}
		fence, ok := strings.CutPrefix(lines[i], "```")
		if !ok {
			continue
		}
		var b strings.Builder
		for i++; i < len(lines) && lines[i] != "```"; i++ {
			b.WriteString(lines[i] + "\n")
		}
		if fence == lang {
			out = append(out, b.String())
		}
	}
	return out
}

// TestReadmeService builds the README's complete service (the Go program of
// "The services behind hookgate", in a module of its own that requires this
// checkout's module, as the README says to build it), runs it on a
// database of its own, and runs hookgate with the README's hookgate.yaml
// target pointing at it (a free port instead of 9000 in both, the same
// signing secret in ORDERS_SIGNING_SECRET). A delivery to hookgate must
// become one row of the service's orders table; a redelivery of the event
// must be delivered too, answered from the stored response without a
// second row; a signed copy sent straight to the service gets the stored
// 204 with Idempotent-Replayed: true, and a bad signature 401.
func TestReadmeService(t *testing.T) {
	testkit.Slow(t, "builds the README's service and runs it behind the real binary")
	t.Parallel()
	root := repoRoot(t)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	programs := fencedBlocks(t, "README.md", string(readme), serviceSection, "go")
	snippets := fencedBlocks(t, "README.md", string(readme), serviceSection, "yaml")
	if len(programs) != 1 || len(snippets) != 1 {
		t.Fatalf("README.md %q: %d go and %d yaml blocks, want one of each (the service and its target)", serviceSection, len(programs), len(snippets))
	}
	program, snippet := programs[0], snippets[0]
	if formatted, err := format.Source([]byte(program)); err != nil || string(formatted) != program {
		t.Errorf("README.md's service is not gofmt'd (%v); gofmt would print:\n%s", err, formatted)
	}
	for what, text := range map[string]string{"the program": program, "the hookgate.yaml target": snippet} {
		if !strings.Contains(text, serviceAddr) {
			t.Fatalf("%s in README.md does not name %s any more: update this test", what, serviceAddr)
		}
	}
	if !strings.Contains(snippet, "${ORDERS_SIGNING_SECRET}") || !strings.Contains(program, `"ORDERS_SIGNING_SECRET"`) {
		t.Fatal("README.md's service and target no longer share ORDERS_SIGNING_SECRET: update this test")
	}

	work := t.TempDir()
	addr := freePort(t)
	// The module, as the README builds it: go mod init, a replace directive
	// naming this checkout, go mod tidy. The checkout's go.sum holds the
	// sums of every module the program can need, and GOPROXY=off keeps the
	// build off the network (a module missing from the cache is a failure
	// to report, not to download).
	svcDir := filepath.Join(work, "orders")
	if err := os.Mkdir(svcDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(svcDir, "main.go"), []byte(strings.ReplaceAll(program, serviceAddr, addr)), 0o644); err != nil {
		t.Fatal(err)
	}
	sums, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(svcDir, "go.sum"), sums, 0o644); err != nil {
		t.Fatal(err)
	}
	svcBin, gwBin := filepath.Join(work, "orders-service"), filepath.Join(work, "hookgate")
	for _, c := range []struct {
		dir  string
		args []string
	}{
		{svcDir, []string{"mod", "init", "orders"}},
		{svcDir, []string{"mod", "edit", "-replace", "github.com/hookgate/hookgate=" + root}},
		{svcDir, []string{"mod", "tidy"}},
		{svcDir, []string{"build", "-o", svcBin, "."}},
		{root, []string{"build", "-o", gwBin, "./cmd/server"}},
	} {
		cmd := exec.Command("go", c.args...)
		cmd.Dir = c.dir
		cmd.Env = append(os.Environ(), "GOPROXY=off", "GOWORK=off")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(c.args, " "), err, out)
		}
	}

	_, gwDSN := pgtest.NewDB(t)
	svcPool, svcDSN := pgtest.NewDB(t)
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	secret := "whsec_" + base64.StdEncoding.EncodeToString(key)
	cfg := strings.ReplaceAll(snippet, serviceAddr, addr)
	if err := os.WriteFile(filepath.Join(work, "hookgate.yaml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	tokenBytes := make([]byte, 32)
	if _, err := rand.Read(tokenBytes); err != nil {
		t.Fatal(err)
	}
	token := fmt.Sprintf("%x", tokenBytes)
	gw := freePort(t)

	svcLog := start(t, work, svcBin, nil, "DATABASE_URL="+svcDSN, "ORDERS_SIGNING_SECRET="+secret)
	start(t, work, gwBin, []string{"serve"}, "DATABASE_URL="+gwDSN, "HOOKGATE_CONFIG=hookgate.yaml", "HOOKGATE_ADDR="+gw,
		"HOOKGATE_ADMIN_TOKEN="+token, "ORDERS_SIGNING_SECRET="+secret, "HOOKGATE_LOG_FORMAT=text")
	testkit.Poll(t, time.Minute, "the gateway to be ready and the service to listen", func() bool {
		r, err := http.Get("http://" + gw + "/readyz")
		if err != nil {
			return false
		}
		r.Body.Close()
		if r.StatusCode != http.StatusOK {
			return false
		}
		r, err = http.Get("http://" + addr + "/")
		if err != nil {
			return false
		}
		r.Body.Close()
		return true
	}, svcLog.String)
	if !strings.Contains(svcLog.String(), "orders: listening on "+addr) {
		t.Errorf("the service did not log where it listens:\n%s", svcLog.String())
	}

	ctx := t.Context()
	api := func(method, path string) []byte {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, "http://"+gw+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode/100 != 2 {
			t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
		}
		return b
	}
	body := `{"order":42}`
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+gw+"/webhooks/orders", strings.NewReader(body))
	req.Header.Set("X-Delivery-Id", "d1")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var accepted struct {
		EventID string `json:"event_id"`
	}
	err = json.NewDecoder(resp.Body).Decode(&accepted)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusAccepted || accepted.EventID == "" {
		t.Fatalf("POST /webhooks/orders: %d, event %q (%v)", resp.StatusCode, accepted.EventID, err)
	}
	type forward struct {
		State      string `json:"state"`
		LastStatus *int   `json:"last_status"`
	}
	forwards := func() []forward {
		var d struct {
			Forwards []forward `json:"forwards"`
		}
		if err := json.Unmarshal(api(http.MethodGet, "/v1/senders/orders/deliveries/d1"), &d); err != nil {
			t.Fatal(err)
		}
		return d.Forwards
	}
	delivered := func(n int) func() bool {
		return func() bool {
			fs := forwards()
			if len(fs) != n {
				return false
			}
			for _, f := range fs {
				if f.State != "delivered" || f.LastStatus == nil || *f.LastStatus != http.StatusNoContent {
					return false
				}
			}
			return true
		}
	}
	state := func() string {
		var rows, keys int
		_ = svcPool.QueryRow(ctx, `SELECT count(*) FROM orders`).Scan(&rows)
		_ = svcPool.QueryRow(ctx, `SELECT count(*) FROM consumer_processed_messages`).Scan(&keys)
		return fmt.Sprintf("forwards %+v; the service's orders rows %d, consumer keys %d; its log:\n%s", forwards(), rows, keys, svcLog.String())
	}
	testkit.Poll(t, time.Minute, "the forward to be delivered (204)", delivered(1), state)
	orders := func() (n int, stored string) {
		t.Helper()
		if err := svcPool.QueryRow(ctx, `SELECT count(*), string_agg(convert_from(body, 'UTF8'), '') FROM orders WHERE event_id = $1`, accepted.EventID).Scan(&n, &stored); err != nil {
			t.Fatalf("the service's orders table: %v", err)
		}
		return n, stored
	}
	if n, stored := orders(); n != 1 || stored != body {
		t.Fatalf("the service's orders table holds %d rows of event %s (body %q), want 1 with the delivery's body", n, accepted.EventID, stored)
	}

	// A redelivery: the same webhook-id, answered from the stored response
	// (a second INSERT would violate the primary key, be answered 503, and
	// never be delivered).
	api(http.MethodPost, "/v1/events/"+accepted.EventID+"/redeliver")
	testkit.Poll(t, time.Minute, "the redelivered forward to be delivered (the stored 204)", delivered(2), state)
	if n, _ := orders(); n != 1 {
		t.Fatalf("after the redelivery the service's orders table holds %d rows of the event, want 1", n)
	}

	// Straight to the service, signed as hookgate signs: the stored 204
	// with Idempotent-Replayed; a bad signature: 401.
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		sign     string
		status   int
		replayed string
	}{
		{"a signed copy", secret, http.StatusNoContent, "true"},
		{"a bad signature", "whsec_" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32)), http.StatusUnauthorized, ""},
	} {
		signer := wh
		if tc.sign != secret {
			if signer, err = standardwebhooks.NewWebhook(tc.sign); err != nil {
				t.Fatal(err)
			}
		}
		now := time.Now()
		sig, err := signer.Sign(accepted.EventID, now, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/hooks/orders", strings.NewReader(body))
		req.Header.Set("webhook-id", accepted.EventID)
		req.Header.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
		req.Header.Set("webhook-signature", sig)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.status || resp.Header.Get("Idempotent-Replayed") != tc.replayed {
			t.Errorf("%s: %d, Idempotent-Replayed %q; want %d, %q", tc.name, resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), tc.status, tc.replayed)
		}
	}
	if n, _ := orders(); n != 1 {
		t.Errorf("the service's orders table holds %d rows of the event, want 1", n)
	}
}

// start runs bin with args in dir, with the environment and env, until
// the test ends (then SIGINT, SIGKILL after 30s), and returns its output;
// the test's log shows it when the test failed.
func start(t *testing.T, dir, bin string, args []string, env ...string) *testkit.LogBuffer {
	t.Helper()
	cmd := exec.CommandContext(context.WithoutCancel(t.Context()), bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	log := &testkit.LogBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
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
			t.Logf("%s log:\n%s", filepath.Base(bin), log.String())
		}
	})
	return log
}
