package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/hookgate/hookgate/internal/testing/pgtest"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// cleanupM runs the tests, then removes the binary the tests built when it
// is in a temporary directory (binDir), so that goleak.VerifyTestMain checks
// for leaks after everything else.
type cleanupM struct{ m interface{ Run() int } }

func (c cleanupM) Run() int {
	code := c.m.Run()
	if built.dir != "" {
		_ = os.RemoveAll(built.dir)
	}
	return code
}

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(cleanupM{pgtest.M(m)})
}

// senderConfig is the hookgate.yaml of every test: one generic sender whose
// delivery ID is in the X-Delivery-Id header.
const senderConfig = `senders:
  - name: acme
    preset: generic
    delivery_id: { header: X-Delivery-Id }
`

// stallTimeout bounds a wait whose length a test logs rather than asserts
// (a recovery after a kill or an outage, a backlog): minutes, so that it
// fails on a stall, not on a busy machine.
const stallTimeout = 3 * time.Minute

// writeConfig writes content to a hookgate.yaml in a temporary directory and
// returns its path.
func writeConfig(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "hookgate.yaml")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// envOf returns a getenv that knows only the given key/value pairs, so the
// tests never depend on the environment of the process running them.
func envOf(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// freeAddr returns 127.0.0.1:<port> for a port that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// emptyDB creates a database with nothing in it (not migrated) on the test
// server, drops it when the test ends, and returns its URL.
func emptyDB(t *testing.T) string {
	t.Helper()
	admin := pgtest.URL(t)
	name := fmt.Sprintf("hgt_srv_%d_%s", os.Getpid(), randHex(4))
	adminExec(t, admin, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	t.Cleanup(func() {
		adminExec(t, admin, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	})
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatalf("parse %s: %v", pgtest.EnvURL, err)
	}
	u.Path = "/" + name
	u.RawPath = ""
	return u.String()
}

// withParam returns dsn, a URL, with the query parameter kv ("name=value")
// added.
func withParam(dsn, kv string) string {
	if strings.Contains(dsn, "?") {
		return dsn + "&" + kv
	}
	return dsn + "?" + kv
}

func adminExec(t *testing.T, dsn, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// logSink collects a server's JSON log lines (run's stderr, or a child
// process's) and hands out the address of each "listening" line. It is safe
// for concurrent use.
type logSink struct {
	mu      sync.Mutex
	lines   []string
	pending []byte
	msgs    map[string]int
	addrs   chan string
}

func newLogSink() *logSink {
	return &logSink{msgs: map[string]int{}, addrs: make(chan string, 8)}
}

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pending = append(s.pending, p...)
	for {
		i := bytes.IndexByte(s.pending, '\n')
		if i < 0 {
			break
		}
		line := string(s.pending[:i])
		s.pending = s.pending[i+1:]
		s.lines = append(s.lines, line)
		var rec struct {
			Msg  string `json:"msg"`
			Addr string `json:"addr"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg != "" {
			s.msgs[rec.Msg]++
			if rec.Msg == "listening" {
				select {
				case s.addrs <- rec.Addr:
				default:
				}
			}
		}
	}
	return len(p), nil
}

// count returns how many lines had msg as their message.
func (s *logSink) count(msg string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.msgs[msg]
}

// tail returns the last n lines, and any unterminated output.
func (s *logSink) tail(n int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	lines := s.lines
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n") + "\n" + string(s.pending)
}

// inproc is hookgate's run function serving in a goroutine of the test.
type inproc struct {
	addr   string // host:port it listens on
	base   string // http://addr
	log    *logSink
	cancel context.CancelFunc
	done   chan struct{} // closed when run has returned
	err    error         // run's result, once done is closed
}

// startRun calls run(ctx, serve --addr 127.0.0.1:0 --config <senderConfig>
// args…) with DATABASE_URL=dsn in a goroutine and returns once the server
// logged the address it listens on. When the test ends, the context is
// cancelled and the test waits for run to return.
// startRunWith is startRun with the configuration content cfg instead of
// senderConfig.
func startRunWith(t *testing.T, dsn, cfg string, args ...string) *inproc {
	t.Helper()
	return startRunAt(t, dsn, writeConfig(t, cfg), args...)
}

// startRunAt is startRunWith with the configuration file at path.
func startRunAt(t *testing.T, dsn, path string, args ...string) *inproc {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &inproc{log: newLogSink(), cancel: cancel, done: make(chan struct{})}
	// The servers in the test process share its heap: the heap floor is
	// the binary's business (TestHeapFloorInForce), and would only grow
	// the test process's memory under -race. A later --heap-floor in args
	// wins.
	full := append([]string{"serve", "--addr", "127.0.0.1:0", "--config", path, "--heap-floor", "0"}, args...)
	go func() {
		defer close(s.done)
		s.err = run(ctx, full, envOf("DATABASE_URL", dsn), io.Discard, s.log)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-s.done:
		case <-time.After(time.Minute):
			t.Errorf("run did not return within a minute of its context being cancelled")
		}
		if t.Failed() {
			t.Logf("server log (tail):\n%s", s.log.tail(60))
		}
	})
	select {
	case s.addr = <-s.log.addrs:
	case <-s.done:
		t.Fatalf("run returned before listening: %v", s.err)
	case <-time.After(time.Minute):
		t.Fatal("the server logged no \"listening\" line within a minute")
	}
	s.base = "http://" + s.addr
	return s
}

func startRun(t *testing.T, dsn string, args ...string) *inproc {
	t.Helper()
	return startRunWith(t, dsn, senderConfig, args...)
}

// wait waits (boundedly) for run to return and returns its error.
func (s *inproc) wait(t *testing.T) error {
	t.Helper()
	select {
	case <-s.done:
		return s.err
	case <-time.After(time.Minute):
		t.Fatal("run did not return within a minute")
		return nil
	}
}

// proc is a hookgate binary running as a child process.
type proc struct {
	cmd  *exec.Cmd
	log  *logSink
	done chan struct{} // closed when the process has exited
	err  error         // cmd.Wait's result, once done is closed
}

// built is the hookgate binary the tests build, once per test process.
var built struct {
	once sync.Once
	dir  string // a temporary directory to remove at the end, if any
	path string
	err  error
}

// buildBinary builds this package (the real hookgate command) once per test
// process and returns the binary's path. It builds into binDir: go build
// leaves a binary that is up to date alone, so a later run of the same code
// finds it linked already instead of linking it again (about 2 s of CPU).
func buildBinary(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		dir, lock, err := binDir()
		if err != nil {
			built.err = err
			return
		}
		if lock != nil {
			defer lock.Close() // releases the lock
		} else {
			built.dir = dir
		}
		path := filepath.Join(dir, "hookgate")
		out, err := exec.Command("go", "build", "-o", path, ".").CombinedOutput()
		if err != nil {
			built.err = fmt.Errorf("go build: %w\n%s", err, out)
			return
		}
		built.path = path
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.path
}

// binDirAge is how long a directory of binDir's stays unused before a later
// binDir removes it.
const binDirAge = 24 * time.Hour

// binDir returns the directory to build the hookgate binary in, and a file
// that holds an exclusive lock on it until closed, so that concurrent test
// processes of the same code build one after the other (the second finds
// the binary up to date). The directory is under gateway in
// HOOKGATE_TEST_CACHE (.ci/test.sh sets it: beside Go's build cache), or in
// the user's cache when it is unset, and named after the hash of this test
// binary: a different version of the code makes a different test binary,
// so it never runs or replaces the binary of another. Directories unused
// for binDirAge are removed. With HOOKGATE_TEST_CACHE empty, or
// without a user cache, it is a new temporary directory (and the lock nil)
// that cleanupM removes.
func binDir() (string, *os.File, error) {
	cache, set := os.LookupEnv("HOOKGATE_TEST_CACHE")
	if !set {
		if dir, err := os.UserCacheDir(); err == nil {
			cache = filepath.Join(dir, "hookgate-test")
		}
	}
	if cache == "" {
		dir, err := os.MkdirTemp("", "hookgate-bin-")
		return dir, nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return "", nil, err
	}
	f, err := os.Open(exe)
	if err != nil {
		return "", nil, err
	}
	h := sha256.New()
	_, err = io.Copy(h, f)
	f.Close()
	if err != nil {
		return "", nil, fmt.Errorf("hash %s: %w", exe, err)
	}
	root := filepath.Join(cache, "gateway")
	if old, err := os.ReadDir(root); err == nil {
		for _, e := range old {
			if info, err := e.Info(); err == nil && e.IsDir() && time.Since(info.ModTime()) > binDirAge {
				_ = os.RemoveAll(filepath.Join(root, e.Name()))
			}
		}
	}
	dir := filepath.Join(root, hex.EncodeToString(h.Sum(nil))[:16])
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", nil, err
	}
	now := time.Now()
	if err := os.Chtimes(dir, now, now); err != nil { // in use: not removed
		return "", nil, err
	}
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return "", nil, err
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		lock.Close()
		return "", nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	return dir, lock, nil
}

// waitHealthy polls GET /healthz until it answers 200; it fails the test when
// the process exits first or a minute passes.
func waitHealthy(t *testing.T, c *http.Client, base string, p *proc) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		r, err := get(context.Background(), c, base+"/healthz")
		if err == nil && r.status == http.StatusOK {
			return
		}
		select {
		case <-p.done:
			t.Fatalf("process exited before it was healthy: %v", p.err)
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /healthz did not answer 200 within a minute (last: %d, %v)", r.status, err)
		}
	}
}

// newClient returns an HTTP client with its own transport (no proxy, so
// traffic goes only to 127.0.0.1), whose idle connections are closed when the
// test ends.
func newClient(t *testing.T) *http.Client {
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConns:        64,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// reply is a complete HTTP response.
type reply struct {
	status int
	header http.Header
	body   []byte
}

func (r reply) String() string {
	return fmt.Sprintf("%d %s %q", r.status, r.header.Get("Content-Type"), r.body)
}

func do(c *http.Client, req *http.Request) (reply, error) {
	resp, err := c.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return reply{}, err
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: body}, nil
}

func get(ctx context.Context, c *http.Client, u string) (reply, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return reply{}, err
	}
	return do(c, req)
}

// deliver POSTs body to the sender acme with delivery ID id.
func deliver(ctx context.Context, c *http.Client, base, id string, body []byte) (reply, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/webhooks/acme", bytes.NewReader(body))
	if err != nil {
		return reply{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Delivery-Id", id)
	return do(c, req)
}

// bodyFor is the request body of delivery id: always the same for one id.
func bodyFor(id string) []byte {
	return []byte(`{"id":"` + id + `","payload":"` + strings.Repeat("x", 64) + `"}`)
}

// acceptedBody is the JSON body of a 202.
type acceptedBody struct {
	EventID    string    `json:"event_id"`
	Sender     string    `json:"sender"`
	DeliveryID string    `json:"delivery_id"`
	ReceivedAt time.Time `json:"received_at"`
}

// parseAccepted checks that r is a 202 for delivery id of sender acme with a
// UUIDv7 event ID, and returns its body.
func parseAccepted(r reply, id string) (acceptedBody, error) {
	var a acceptedBody
	if r.status != http.StatusAccepted {
		return a, fmt.Errorf("status %d, want 202: %s", r.status, r)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		return a, fmt.Errorf("Content-Type %q, want application/json", ct)
	}
	if err := json.Unmarshal(r.body, &a); err != nil {
		return a, fmt.Errorf("decode 202 body %q: %w", r.body, err)
	}
	u, err := uuid.Parse(a.EventID)
	if err != nil || u.Version() != 7 {
		return a, fmt.Errorf("event_id %q is not a UUIDv7 (%w)", a.EventID, err)
	}
	if a.Sender != "acme" || a.DeliveryID != id || a.ReceivedAt.IsZero() {
		return a, fmt.Errorf("202 body %q: want sender acme, delivery_id %q and a received_at", r.body, id)
	}
	return a, nil
}

// checkProblem returns why r is not an RFC 9457 problem with status want and
// a Retry-After header, or nil.
func checkProblem(r reply, want int) error {
	if r.status != want {
		return fmt.Errorf("status %d, want %d", r.status, want)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		return fmt.Errorf("Content-Type %q, want application/problem+json", ct)
	}
	if ra := r.header.Get("Retry-After"); ra == "" {
		return fmt.Errorf("no Retry-After header")
	}
	var p struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}
	if err := json.Unmarshal(r.body, &p); err != nil {
		return fmt.Errorf("body %q is not JSON: %w", r.body, err)
	}
	if p.Type == "" || p.Title == "" || p.Detail == "" || p.Status != want {
		return fmt.Errorf("problem %q lacks type, title or detail, or has the wrong status", r.body)
	}
	return nil
}

// loadStats is what a load of senders observed.
type loadStats struct {
	mu sync.Mutex
	// events holds the event_id of every 2xx answer, by delivery ID.
	events map[string][]string
	// errors lists malformed answers: a 2xx that is not a valid 202 body, an
	// error response that is not a problem with Retry-After (first 20).
	errors []string
	// statuses counts the non-2xx answers by status.
	statuses map[int]int
	// connErrs counts requests that got no HTTP answer at all.
	connErrs int
	// firstReplayed counts deliveries whose first 2xx was a replay (the
	// delivery had been committed, but its answer never reached the sender).
	firstReplayed int
	// unfinished lists delivery IDs that never got a 2xx.
	unfinished []string
}

func (s *loadStats) addError(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.errors) < 20 {
		s.errors = append(s.errors, fmt.Sprintf(format, args...))
	}
}

// load is a set of senders that deliver every ID until it is answered 2xx,
// the way a webhook sender retries.
type load struct {
	client  *http.Client
	base    string
	ids     []string
	senders int
	backoff time.Duration
	// hold, when set, is called before ID number i is first sent; returning
	// false abandons it (the context is done).
	hold func(ctx context.Context, i int) bool
	// observe, when set, is called after every attempt, from the sender's
	// goroutine.
	observe func(r reply, err error)
}

// maxAttempts bounds the attempts of one delivery; the context bounds time.
const maxAttempts = 5000

// run delivers every ID and returns what the senders saw. It returns when
// every ID got a 2xx or ctx is done.
// runningLoad is a load running in the background: done is closed when it
// ends, and st is set then.
type runningLoad struct {
	done chan struct{}
	st   *loadStats
}

// start runs l in the background for at most 90s. When the test ends the
// load is cancelled and awaited.
func (l *load) start(t *testing.T) *runningLoad {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	rl := &runningLoad{done: make(chan struct{})}
	go func() {
		defer close(rl.done)
		rl.st = l.run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-rl.done
	})
	return rl
}

func (l *load) run(ctx context.Context) *loadStats {
	st := &loadStats{events: map[string][]string{}, statuses: map[int]int{}}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range l.senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(l.ids) {
					return
				}
				id := l.ids[i]
				if (l.hold != nil && !l.hold(ctx, i)) || !l.deliverUntil2xx(ctx, st, id) {
					st.mu.Lock()
					st.unfinished = append(st.unfinished, id)
					st.mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return st
}

// deliverUntil2xx sends id until it is answered 2xx; false when it never was.
func (l *load) deliverUntil2xx(ctx context.Context, st *loadStats, id string) bool {
	body := bodyFor(id)
	for range maxAttempts {
		if ctx.Err() != nil {
			return false
		}
		r, err := deliver(ctx, l.client, l.base, id, body)
		if l.observe != nil {
			l.observe(r, err)
		}
		switch {
		case err != nil:
			st.mu.Lock()
			st.connErrs++
			st.mu.Unlock()
		case r.status >= 200 && r.status < 300:
			a, err := parseAccepted(r, id)
			if err != nil {
				st.addError("delivery %s: %v", id, err)
			}
			st.mu.Lock()
			st.events[id] = append(st.events[id], a.EventID)
			if r.header.Get("Idempotent-Replayed") == "true" {
				st.firstReplayed++
			}
			st.mu.Unlock()
			return true
		default:
			if perr := checkProblem(r, r.status); perr != nil {
				st.addError("delivery %s: error response %s: %v", id, r, perr)
			}
			st.mu.Lock()
			st.statuses[r.status]++
			st.mu.Unlock()
		}
		timer := time.NewTimer(l.backoff)
		select {
		case <-ctx.Done():
			timer.Stop()
			return false
		case <-timer.C:
		}
	}
	return false
}

// replayAll delivers every ID once more after the load and records the
// answers: each must be a replay of the stored 202.
func replayAll(t *testing.T, c *http.Client, base string, ids []string, st *loadStats) {
	t.Helper()
	bad := 0
	for _, id := range ids {
		r, err := deliver(context.Background(), c, base, id, bodyFor(id))
		if err != nil {
			t.Fatalf("replay %s: %v", id, err)
		}
		a, err := parseAccepted(r, id)
		if err == nil && r.header.Get("Idempotent-Replayed") != "true" {
			err = fmt.Errorf("no Idempotent-Replayed: true header")
		}
		if err != nil {
			if bad++; bad <= 5 {
				t.Errorf("replay %s: %v", id, err)
			}
		}
		st.events[id] = append(st.events[id], a.EventID)
	}
	if bad > 5 {
		t.Errorf("… %d of %d replays are wrong in all", bad, len(ids))
	}
}

// burstStoredAndForwarded delivers n IDs (prefix-0000…) to base from 16
// concurrent senders, each until it is answered 2xx, then once more: each
// retry must be a replay. Each delivery must be stored once (read through
// db), and its forward must reach tg.
func burstStoredAndForwarded(t *testing.T, base string, db querier, tg *testkit.Target, prefix string, n int) {
	t.Helper()
	c := newClient(t)
	ids := makeIDs(prefix, n)
	rl := (&load{client: c, base: base, ids: ids, senders: 16, backoff: 20 * time.Millisecond}).start(t)
	<-rl.done
	reportLoad(t, rl.st)
	replayAll(t, c, base, ids, rl.st)
	checkStored(t, db, ids, rl.st)
	testkit.Poll(t, stallTimeout, "every forward to reach the target", func() bool {
		return len(tg.Delivered()) == len(ids)
	})
}

type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// checkStored asserts that the load delivered each ID exactly once: one
// processed_messages row and one webhook_events row per delivery ID (and no
// other rows), the same event in both, and every 2xx answer for the ID
// carrying that event_id.
func checkStored(t *testing.T, db querier, ids []string, st *loadStats) {
	t.Helper()
	ctx := context.Background()
	type row struct {
		n       int
		eventID string
	}
	read := func(sql string) map[string]row {
		rows, err := db.Query(ctx, sql)
		if err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		out := map[string]row{}
		for rows.Next() {
			var id string
			var r row
			if err := rows.Scan(&id, &r.n, &r.eventID); err != nil {
				t.Fatal(err)
			}
			out[id] = r
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	keys := read(`SELECT delivery_id, count(*), min(event_id::text) FROM processed_messages WHERE sender = 'acme' GROUP BY delivery_id`)
	events := read(`SELECT delivery_id, count(*), min(id::text) FROM webhook_events WHERE sender = 'acme' GROUP BY delivery_id`)
	if len(keys) != len(ids) || len(events) != len(ids) {
		t.Errorf("stored keys of %d and events of %d delivery IDs, want %d", len(keys), len(events), len(ids))
	}
	bad := 0
	for _, id := range ids {
		k, e := keys[id], events[id]
		var msgs []string
		if k.n != 1 {
			msgs = append(msgs, fmt.Sprintf("%d processed_messages rows", k.n))
		}
		if e.n != 1 {
			msgs = append(msgs, fmt.Sprintf("%d webhook_events rows", e.n))
		}
		if k.eventID != e.eventID {
			msgs = append(msgs, fmt.Sprintf("key event_id %s, event id %s", k.eventID, e.eventID))
		}
		got := st.events[id]
		if len(got) == 0 {
			msgs = append(msgs, "no 2xx answer")
		}
		for _, ev := range got {
			if ev != k.eventID {
				msgs = append(msgs, fmt.Sprintf("2xx answers carry event_ids %v, stored %s", got, k.eventID))
				break
			}
		}
		if len(msgs) > 0 {
			if bad++; bad <= 10 {
				t.Errorf("delivery %s: %s", id, strings.Join(msgs, "; "))
			}
		}
	}
	if bad > 10 {
		t.Errorf("… %d delivery IDs are wrong in all", bad)
	}
}

// makeIDs returns n delivery IDs prefix-000, prefix-001, …
func makeIDs(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%03d", prefix, i)
	}
	return out
}

// reportLoad fails the test on what the senders saw that breaks the contract,
// and logs a summary.
func reportLoad(t *testing.T, st *loadStats) {
	t.Helper()
	for _, e := range st.errors {
		t.Error(e)
	}
	if len(st.unfinished) > 0 {
		t.Errorf("%d deliveries never got a 2xx, e.g. %v", len(st.unfinished), st.unfinished[:min(5, len(st.unfinished))])
	}
	t.Logf("load: %d connection errors, error statuses %v, %d deliveries first answered by a replay",
		st.connErrs, st.statuses, st.firstReplayed)
}

// startBinary starts the binary serving on addr with DATABASE_URL=dsn. The
// process is killed when the test ends, if it still runs.
func startBinary(t *testing.T, bin, dsn, addr, cfg string) *proc {
	t.Helper()
	return startBinaryWith(t, bin, dsn, addr, cfg)
}
