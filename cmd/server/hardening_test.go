package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/testing/pgtest"
)

// Weak admin tokens are refused at start-up, with the reason: too short
// for 128 bits, only whitespace, a repeated pattern (32 × "a"); the token
// itself is not repeated. A token as make run generates it starts.
func TestRunRejectsWeakAdminToken(t *testing.T) {
	t.Parallel()
	for tok, why := range map[string]string{
		"short-admin-token-31-characters": "bits of entropy",
		strings.Repeat("a", 32):           "one character repeated",
		strings.Repeat(" ", 32):           "only whitespace",
		strings.Repeat("abcd", 12):        "pattern of 4 characters repeated",
	} {
		for _, tc := range []struct {
			args []string
			env  []string
		}{
			{[]string{"serve", "--admin-token", tok}, nil},
			{[]string{"serve"}, []string{"HOOKGATE_ADMIN_TOKEN", tok}},
		} {
			var stdout, stderr bytes.Buffer
			err := run(t.Context(), tc.args, envOf(append(tc.env, "DATABASE_URL", "postgres://127.0.0.1:1/x")...), &stdout, &stderr)
			if err == nil || !strings.Contains(err.Error(), "admin token") || !strings.Contains(err.Error(), why) {
				t.Errorf("%q: err = %v, want an error saying the admin token is weak (%s)", why, err, why)
			}
			if err != nil && strings.TrimSpace(tok) != "" && strings.Contains(err.Error()+stdout.String()+stderr.String(), tok) {
				t.Errorf("the refusal repeats the token: %v", err)
			}
		}
	}
	// make run's token, made by the command .ci/run-local.sh runs.
	script, err := os.ReadFile("../../.ci/run-local.sh")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`head -c \d+ /dev/urandom[^>]*`).Find(script)
	if m == nil {
		t.Fatal(".ci/run-local.sh makes no admin token with head -c N /dev/urandom any more: update this test")
	}
	out, err := exec.Command("bash", "-c", string(m)).Output()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := parseSettings("serve", []string{"--admin-token", string(out)}, envOf(), io.Discard); err != nil {
		t.Errorf("a token as make run makes it is refused: %v", err)
	}
}

// Read tokens (HOOKGATE_READ_TOKENS, --read-tokens) are checked at
// start-up as the admin token is: a weak one is refused with its name and
// the reason, and never its value; so is a read token without an admin
// token, one equal to the admin token, a name given twice, the name admin
// and a malformed list. Good ones start.
func TestRunRejectsWeakReadTokens(t *testing.T) {
	t.Parallel()
	const admin = "3f9a1c7e5b2d4f6a8c0e1b3d5f7a9c2e4b6d8f0a"
	const good, good2 = "7c1e9a3b5d2f8e6a4c10b7d9f1e3a5c7", "e2b4d6f8a0c1e3b5d7f9a2c4e6b8d0f1"
	for _, tc := range []struct {
		name   string
		admin  string
		tokens string
		want   string
		secret string // what the refusal must not repeat
	}{
		{"short", admin, "ci-reader:short-read-token-31-characters", `read token "ci-reader"`, "short-read-token-31-characters"},
		{"repeated", admin, "ci:" + good + ",grafana:" + strings.Repeat("ab", 20), `read token "grafana": it is a pattern`, strings.Repeat("ab", 20)},
		{"no admin", "", "ci:" + good, "without an admin token", good},
		{"same as admin", admin, "ci:" + admin, `same value as token "admin"`, admin},
		{"twice", admin, "ci:" + good + ",ci:" + good2, "given twice", good2},
		{"admin name", admin, "admin:" + good, `"admin" is the admin token's`, good},
		{"no name", admin, good, "must be name:token", good},
		{"bad name", admin, "CI:" + good, "its name must be lower-case", good},
	} {
		for _, via := range []string{"env", "flag"} {
			env := []string{"DATABASE_URL", "postgres://127.0.0.1:1/x"}
			if tc.admin != "" {
				env = append(env, "HOOKGATE_ADMIN_TOKEN", tc.admin)
			}
			args := []string{"serve"}
			if via == "env" {
				env = append(env, "HOOKGATE_READ_TOKENS", tc.tokens)
			} else {
				args = append(args, "--read-tokens", tc.tokens)
			}
			var stdout, stderr bytes.Buffer
			err := run(t.Context(), args, envOf(env...), &stdout, &stderr)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s (%s): err = %v, want an error with %q", tc.name, via, err, tc.want)
			}
			if err != nil && strings.Contains(err.Error()+stdout.String()+stderr.String(), tc.secret) {
				t.Errorf("%s (%s): the refusal repeats a token: %v", tc.name, via, err)
			}
		}
	}
	s, err := parseSettings("serve", nil, envOf("HOOKGATE_ADMIN_TOKEN", admin, "HOOKGATE_READ_TOKENS", " ci:"+good+" , grafana.prod:"+good2), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.handler.ReadTokens) != 2 || s.handler.ReadTokens[1].Name != "grafana.prod" || len(s.console.ReadTokens) != 2 {
		t.Errorf("read tokens: %+v, %+v", s.handler.ReadTokens, s.console.ReadTokens)
	}
}

// A request header section over 64 KiB (net/http's default is 1 MiB) is
// refused with 431; --max-header-bytes raises the bound.
func TestRunMaxHeaderBytes(t *testing.T) {
	t.Parallel()
	_, dsn := pgtest.NewDB(t)
	c := newClient(t)
	big := strings.Repeat("h", 100_000)
	for _, tc := range []struct {
		args []string
		want int
	}{
		{nil, http.StatusRequestHeaderFieldsTooLarge},
		{[]string{"--max-header-bytes", "262144"}, http.StatusOK},
	} {
		s := startRun(t, dsn, tc.args...)
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, s.base+"/healthz", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Big", big)
		r, err := do(c, req)
		if err != nil {
			t.Fatal(err)
		}
		if r.status != tc.want {
			t.Errorf("%q: a 100,000-byte header got %d, want %d", tc.args, r.status, tc.want)
		}
	}
	err := run(t.Context(), []string{"serve", "--max-header-bytes", "100"}, envOf("DATABASE_URL", dsn), io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "max header bytes") {
		t.Errorf("--max-header-bytes 100: err = %v, want a refusal", err)
	}
}

// The header section limit is what --max-header-bytes says, not 4 KiB
// more (net/http's allowance): 300 bytes under it pass, 300 over get 431.
func TestRunMaxHeaderBytesIsExact(t *testing.T) {
	t.Parallel()
	_, dsn := pgtest.NewDB(t)
	s := startRun(t, dsn)
	for _, tc := range []struct {
		size int
		want string
	}{{65536 - 300, "200"}, {65536 + 300, "431"}} {
		conn, err := net.Dial("tcp", s.addr)
		if err != nil {
			t.Fatal(err)
		}
		head := "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Big: "
		req := head + strings.Repeat("h", tc.size-len(head)-4) + "\r\n\r\n"
		if len(req) != tc.size {
			t.Fatalf("built %d bytes, want %d", len(req), tc.size)
		}
		if _, err := conn.Write([]byte(req)); err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(conn).ReadString('\n')
		conn.Close()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(line, "HTTP/1.1 "+tc.want) {
			t.Errorf("a %d-byte header section: %q, want %s", tc.size, line, tc.want)
		}
	}
}

// Idle connections are closed after a minute unless the URL says otherwise,
// so that pools shrink after a burst.
func TestNewPoolShrinksWhenIdle(t *testing.T) {
	t.Parallel()
	for url, want := range map[string]time.Duration{
		"postgres://127.0.0.1:1/x":                                  time.Minute,
		"postgres://127.0.0.1:1/x?pool_max_conn_idle_time=5m":       5 * time.Minute,
		"postgres://127.0.0.1:1/x?pool_max_conns=4&sslmode=disable": time.Minute,
	} {
		pool, err := newPool(t.Context(), url) // connects lazily
		if err != nil {
			t.Fatalf("%s: %v", url, err)
		}
		if got := pool.Config().MaxConnIdleTime; got != want {
			t.Errorf("%s: MaxConnIdleTime %v, want %v", url, got, want)
		}
		pool.Close()
	}
}

// A connection attempt gives up on a host after 5 s unless the URL sets
// connect_timeout (pgx's own default waits for ever).
func TestNewPoolConnectTimeout(t *testing.T) {
	t.Parallel()
	for url, want := range map[string]time.Duration{
		"postgres://127.0.0.1:1/x":                         defaultConnectTimeout,
		"postgres://127.0.0.1:1/x?connect_timeout=2":       2 * time.Second,
		"host=127.0.0.1 port=1 dbname=x":                   defaultConnectTimeout,
		"host=127.0.0.1 port=1 dbname=x connect_timeout=9": 9 * time.Second,
	} {
		pool, err := newPool(t.Context(), url) // connects lazily
		if err != nil {
			t.Fatalf("%s: %v", url, err)
		}
		if got := pool.Config().ConnConfig.ConnectTimeout; got != want {
			t.Errorf("%s: ConnectTimeout %v, want %v", url, got, want)
		}
		pool.Close()
	}
}

// A configuration with a secret of hookgate.example.yaml is refused, naming
// the field, unless HOOKGATE_ALLOW_EXAMPLE_SECRETS=1, which starts with a
// warning.
func TestRunExampleSecrets(t *testing.T) {
	t.Parallel()
	_, dsn := pgtest.NewDB(t)
	cfg := writeConfig(t, "senders:\n  - name: github\n    preset: github\n    secret: dev-github-secret\n")
	stderr := newLogSink()
	err := run(t.Context(), []string{"serve", "--addr", "127.0.0.1:0", "--config", cfg}, envOf("DATABASE_URL", dsn), io.Discard, stderr)
	if err == nil || !strings.Contains(err.Error(), "senders[0].secret (github)") || !strings.Contains(err.Error(), "HOOKGATE_ALLOW_EXAMPLE_SECRETS") {
		t.Fatalf("example secret: err = %v, want a refusal naming the field and HOOKGATE_ALLOW_EXAMPLE_SECRETS", err)
	}
	if strings.Contains(err.Error(), "dev-github-secret") || stderr.count("listening") != 0 {
		t.Errorf("the refusal quotes the secret, or the server listened: %v", err)
	}

	ctx, cancel := context.WithCancel(t.Context())
	sink := newLogSink()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--addr", "127.0.0.1:0", "--config", cfg},
			envOf("DATABASE_URL", dsn, "HOOKGATE_ALLOW_EXAMPLE_SECRETS", "1"), io.Discard, sink)
	}()
	select {
	case <-sink.addrs:
	case err := <-done:
		t.Fatalf("with HOOKGATE_ALLOW_EXAMPLE_SECRETS=1, run returned: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("no listening line within a minute")
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("run: %v", err)
	}
	if sink.count("INSECURE: the configuration uses a secret published in hookgate.example.yaml; anyone can sign requests for these senders. Use it for a local trial only.") != 1 {
		t.Errorf("no warning logged:\n%s", sink.tail(20))
	}
}

// --metrics-addr (and HOOKGATE_METRICS_ADDR) serves /metrics on an address
// of its own, and the main listener no longer does; without it the main
// listener serves them.
func TestRunMetricsAddr(t *testing.T) {
	t.Parallel()
	_, dsn := pgtest.NewDB(t)
	c := newClient(t)
	get := func(url string) (int, string) {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		r, err := do(c, req)
		if err != nil {
			t.Fatal(err)
		}
		return r.status, string(r.body)
	}
	metrics := freeAddr(t)
	s := startRun(t, dsn, "--metrics-addr", metrics)
	if st, body := get("http://" + metrics + "/metrics"); st != http.StatusOK || !strings.Contains(body, "hookgate_") {
		t.Errorf("/metrics on --metrics-addr: %d %.200s", st, body)
	}
	if st, _ := get("http://" + metrics + "/webhooks/acme"); st != http.StatusNotFound && st != http.StatusMethodNotAllowed {
		t.Errorf("the metrics address serves more than /metrics: %d", st)
	}
	if st, body := get(s.base + "/metrics"); st != http.StatusNotFound || strings.Contains(body, "hookgate_") {
		t.Errorf("/metrics on the main listener with --metrics-addr: %d %.200s, want 404", st, body)
	}
	if st, _ := get(s.base + "/healthz"); st != http.StatusOK {
		t.Errorf("/healthz on the main listener: %d", st)
	}
	plain := startRun(t, dsn)
	if st, body := get(plain.base + "/metrics"); st != http.StatusOK || !strings.Contains(body, "hookgate_") {
		t.Errorf("/metrics without --metrics-addr: %d", st)
	}
	st, err := parseSettings("serve", nil, envOf("HOOKGATE_METRICS_ADDR", "127.0.0.1:9999"), io.Discard)
	if err != nil || st.metricsAddr != "127.0.0.1:9999" {
		t.Errorf("HOOKGATE_METRICS_ADDR: %+v %v", st, err)
	}
}

// Sign-out in the console of one hookgate process ends the session in
// another process on the same database: the old cookie is refused there,
// and so is a redeliver POST with it and its CSRF token.
func TestRunConsoleSignOutReachesAnotherProcess(t *testing.T) {
	t.Parallel()
	_, dsn := pgtest.NewDB(t)
	tok := randHex(32)
	a := startRun(t, dsn, "--admin-token", tok)
	b := startRun(t, dsn, "--admin-token", tok)
	c := &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	send := func(method, target, cookie string, form url.Values) (int, http.Header, string) {
		t.Helper()
		var body io.Reader
		if form != nil {
			body = strings.NewReader(form.Encode())
		}
		req, err := http.NewRequestWithContext(t.Context(), method, target, body)
		if err != nil {
			t.Fatal(err)
		}
		if form != nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		if cookie != "" {
			req.Header.Set("Cookie", cookie)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b)
	}
	st, h, _ := send(http.MethodPost, a.base+"/console/login", "", url.Values{"token": {tok}})
	if st != http.StatusSeeOther || len(h.Values("Set-Cookie")) == 0 {
		t.Fatalf("sign-in: %d", st)
	}
	cookie, _, _ := strings.Cut(h.Get("Set-Cookie"), ";")
	st, _, page := send(http.MethodGet, b.base+"/console/", cookie, nil)
	if st != http.StatusOK {
		t.Fatalf("the other process refuses the session before sign-out: %d", st)
	}
	m := regexp.MustCompile(`name="csrf_token" value="([^"]+)"`).FindStringSubmatch(page)
	if m == nil {
		t.Fatal("no CSRF token on the overview")
	}
	if st, _, _ := send(http.MethodPost, a.base+"/console/logout", cookie, url.Values{"csrf_token": {m[1]}}); st != http.StatusSeeOther {
		t.Fatalf("sign-out: %d", st)
	}
	if st, h, _ := send(http.MethodGet, b.base+"/console/", cookie, nil); st != http.StatusSeeOther || h.Get("Location") != "/console/login" {
		t.Errorf("the other process after sign-out: %d %q, want a redirect to the sign-in", st, h.Get("Location"))
	}
	if st, _, _ := send(http.MethodPost, b.base+"/console/senders/acme/deliveries/x/redeliver", cookie, url.Values{"csrf_token": {m[1]}}); st != http.StatusForbidden {
		t.Errorf("a redeliver POST with the signed-out cookie and its CSRF token on the other process: %d, want 403", st)
	}
}
