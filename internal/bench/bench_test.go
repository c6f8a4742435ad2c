package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/ingestsql"
	"github.com/hookgate/hookgate/internal/sender"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestParsePgbench(t *testing.T) {
	t.Parallel()
	out := `pgbench (15.18 (Debian 15.18-0+deb12u1))
transaction type: /tmp/x.sql
scaling factor: 1
query mode: prepared
number of clients: 32
number of threads: 2
maximum number of tries: 1
duration: 10 s
number of transactions actually processed: 98765
number of failed transactions: 3 (0.003%)
latency average = 3.240 ms
initial connection time = 25.123 ms
tps = 9876.543210 (without initial connection time)
`
	tps, processed, failed, err := parsePgbench(out)
	if err != nil || tps != 9876.543210 || processed != 98765 || failed != 3 {
		t.Fatalf("parsePgbench = %v, %d, %d, %v", tps, processed, failed, err)
	}
	// PostgreSQL 13 and older.
	tps, _, _, err = parsePgbench("tps = 12.5 (including connections establishing)\ntps = 13.25 (excluding connections establishing)\n")
	if err != nil || tps != 13.25 {
		t.Fatalf("old format: %v, %v", tps, err)
	}
	if _, _, _, err := parsePgbench("pgbench: error: connection failed\n"); err == nil {
		t.Fatal("no error for output without tps")
	}
}

func TestParsePgbenchLog(t *testing.T) {
	t.Parallel()
	log := "0 1 2500 0 1700000000 123\n1 1 failed 0 1700000000 200\n1 2 900 0 1700000000 300\n\n"
	lat, err := parsePgbenchLog(strings.NewReader(log), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(lat) != 2 || lat[0] != 2500*time.Microsecond || lat[1] != 900*time.Microsecond {
		t.Fatalf("latencies = %v", lat)
	}
}

func TestPercentile(t *testing.T) {
	t.Parallel()
	var s []time.Duration
	for i := 1; i <= 100; i++ {
		s = append(s, time.Duration(i))
	}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 50}, {0.99, 99}, {1, 100}, {0, 1}} {
		if got := percentile(s, tc.q); got != tc.want {
			t.Errorf("percentile(%v) = %v, want %v", tc.q, got, tc.want)
		}
	}
	if got := percentile(nil, 0.5); got != 0 {
		t.Errorf("percentile(nil) = %v", got)
	}
	if got := percentile([]time.Duration{7}, 0.99); got != 7 {
		t.Errorf("percentile of one = %v", got)
	}
}

func TestParseVmRSS(t *testing.T) {
	t.Parallel()
	kb, ok := parseVmRSS([]byte("Name:\thookgate\nVmPeak:\t  999 kB\nVmRSS:\t   34567 kB\nThreads: 8\n"))
	if !ok || kb != 34567 {
		t.Fatalf("parseVmRSS = %d, %v", kb, ok)
	}
	if _, ok := parseVmRSS([]byte("Name:\tx\n")); ok {
		t.Fatal("VmRSS found where there is none")
	}
}

func TestParseProcStat(t *testing.T) {
	t.Parallel()
	line := "1234 (post gres) S 77 1234 1234 0 -1 4194560 100 0 0 0 250 75 10 5 20 0 1 0 100 1000 10\n"
	st, ok := parseProcStat([]byte(line))
	if !ok || st.comm != "post gres" || st.ppid != 77 || st.utime != 250 || st.stime != 75 || st.cutime != 10 || st.cstime != 5 {
		t.Fatalf("parseProcStat = %+v, %v", st, ok)
	}
}

func TestScriptsBindEveryParameter(t *testing.T) {
	t.Parallel()
	for _, m := range []pgbenchMode{modePipeline, modeReplay} {
		s := m.script()
		if strings.Contains(s, "$") {
			t.Errorf("%s: unbound placeholder in\n%s", m.name, s)
		}
		// The scripts' SQL text is what the test examines: raw SQL on purpose.
		for _, want := range []string{"\\startpipeline\nBEGIN;\n" + lockTimeoutSQL + ";\n" + ingestsql.GenericPlans + ";\nINSERT INTO processed_messages",
			"SELECT :sender::text, d.* FROM unnest(ARRAY[:did]::text[], ARRAY[:sha]::bytea[], ARRAY[md5(:did::text)::uuid]::uuid[], ARRAY[:status]::int2[], ARRAY[:ctype]::text[], ARRAY[:resp]::bytea[], ARRAY[:ts]::timestamptz[], ARRAY[:exp]::timestamptz[]) AS d\nON CONFLICT ON CONSTRAINT processed_messages_key DO NOTHING;\n",
			"SELECT k.sender, e.* FROM unnest(ARRAY[md5(:did::text)::uuid]::uuid[], ARRAY[:did]::text[],",
			"k.sender = :sender AND k.delivery_id = e.delivery_id AND k.event_id = e.id OFFSET 0) AS k;\n",
			"WHERE sender = :sender AND delivery_id = d.delivery_id OFFSET 0) AS p;\nCOMMIT;\n\\endpipeline\n"} {
			if !strings.Contains(s, want) {
				t.Errorf("%s script lacks %q:\n%s", m.name, want, s)
			}
		}
	}
}

// The plain baseline is the minimal SQL for the same rows: two scalar
// INSERT … VALUES between BEGIN and COMMIT, in one pipeline, nothing of
// the gateway's own statements (arrays, guards, the read, its settings).
func TestPlainScriptIsMinimal(t *testing.T) {
	t.Parallel()
	s := modePlain.script()
	// The script's SQL text is what the test examines: raw SQL on purpose.
	want := uniqueKey + "\\startpipeline\nBEGIN;\nINSERT INTO processed_messages\n" +
		"  (sender, delivery_id, request_sha256, event_id, response_status, response_content_type, response_body, created_at, expires_at)\n" +
		"VALUES (:sender, :did, :sha, md5(:did::text)::uuid, :status, :ctype, :resp, :ts, :exp);\n" +
		"INSERT INTO webhook_events (sender, id, delivery_id, received_at, headers, body, event_type)\n" +
		"VALUES (:sender, md5(:did::text)::uuid, :did, :ts, :headers, :body, :etype);\nCOMMIT;\n\\endpipeline\n"
	if s != want {
		t.Errorf("plain script:\n%s\nwant:\n%s", s, want)
	}
}

func TestMakeBody(t *testing.T) {
	t.Parallel()
	for _, n := range []int{32, 100, 512, 4096} {
		b := makeBody(n)
		if len(b) != n {
			t.Errorf("makeBody(%d) has %d bytes", n, len(b))
		}
		if !json.Valid(b) {
			t.Errorf("makeBody(%d) is not JSON: %s", n, b)
		}
	}
}

func TestIDs(t *testing.T) {
	t.Parallel()
	ids := firstIDs("fd")
	seen := map[string]bool{}
	for w := range 4 {
		for seq := range 100 {
			id := string(ids(nil, w, seq))
			if seen[id] {
				t.Fatalf("duplicate first-delivery ID %s", id)
			}
			seen[id] = true
		}
	}
	replay := replayIDs(1000, 10)
	hit := map[string]bool{}
	for seq := range 1000 {
		id := string(replay(nil, seq%32, seq))
		if id < "1000" || id > "1009" || len(id) != 4 {
			t.Fatalf("replay ID %s outside 1000…1009", id)
		}
		hit[id] = true
	}
	if len(hit) != 10 {
		t.Fatalf("replay IDs hit %d of 10 keys", len(hit))
	}
}

func TestCleanEnv(t *testing.T) {
	t.Parallel()
	got := cleanEnv([]string{"PATH=/bin", "DATABASE_URL=x", "HOOKGATE_ADDR=:1", "HOME=/root"})
	if strings.Join(got, " ") != "PATH=/bin HOME=/root" {
		t.Fatalf("cleanEnv = %v", got)
	}
}

func TestRawClient(t *testing.T) {
	t.Parallel()
	var gotIDs []string
	var gotHeaders http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if string(body) != `{"x":1}` {
			t.Errorf("body %q", body)
		}
		id := r.Header.Get("X-Delivery-Id")
		gotIDs = append(gotIDs, id)
		gotHeaders = r.Header
		switch id {
		case "replayed":
			w.Header().Set("Idempotent-Replayed", "true")
			w.WriteHeader(http.StatusAccepted)
			_, _ = w.Write([]byte(`{"event_id":"e"}`))
		case "chunked":
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("unavailable"))
			w.(http.Flusher).Flush()
			_, _ = w.Write([]byte(" now"))
		default:
			w.WriteHeader(http.StatusAccepted)
		}
	}))
	defer srv.Close()
	c, err := newRawClient(srv.URL+"/webhooks/bench", []byte(`{"x":1}`))
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	if _, err := c.do([]byte("first")); err != nil || c.status != 202 || len(c.replayed) != 0 {
		t.Fatalf("first: status %d, replayed %q, err %v", c.status, c.replayed, err)
	}
	if _, err := c.do([]byte("replayed")); err != nil || c.status != 202 || string(c.replayed) != "true" {
		t.Fatalf("replayed: status %d, replayed %q, err %v", c.status, c.replayed, err)
	}
	snippet, err := c.do([]byte("chunked"))
	if err != nil || c.status != 503 || string(snippet) != "unavailable now" {
		t.Fatalf("chunked: status %d, snippet %q, err %v", c.status, snippet, err)
	}
	if _, err := c.do([]byte("again")); err != nil || c.status != 202 {
		t.Fatalf("after chunked: status %d, err %v", c.status, err)
	}
	if strings.Join(gotIDs, ",") != "first,replayed,chunked,again" {
		t.Fatalf("IDs %v", gotIDs)
	}
	for _, h := range []string{"Content-Type", "User-Agent", "X-Event-Type", "Accept-Encoding"} {
		if gotHeaders.Get(h) == "" {
			t.Errorf("header %s not sent", h)
		}
	}
}

func TestCheckSQL(t *testing.T) {
	t.Parallel()
	counts := map[string]int{"a": 500, "b": 400, "job": 1, "extra": 5, "parse": 9}
	seen := []string{"a", "b", "job", "extra", "parse"}
	missing, unexpected, frequent := checkSQL(seen, counts, []string{"a", "b", "c"}, []string{"parse"})
	if strings.Join(missing, ",") != "c" {
		t.Errorf("missing = %v", missing)
	}
	if len(unexpected) != 2 || !frequent {
		t.Errorf("unexpected = %v, frequent = %v", unexpected, frequent)
	}
	delete(counts, "extra")
	_, unexpected, frequent = checkSQL([]string{"a", "b", "job"}, counts, []string{"a", "b"}, nil)
	if len(unexpected) != 1 || frequent {
		t.Errorf("a background job's single sample: unexpected = %v, frequent = %v", unexpected, frequent)
	}
}

func TestFirstIDsTag(t *testing.T) {
	t.Parallel()
	id := string(firstIDs("fwb")(nil, 3, 7))
	if !strings.HasPrefix(id, "fwb-") || !strings.HasSuffix(id, "-3-7") {
		t.Fatalf("firstIDs(fwb) = %s", id)
	}
}

func TestForwardConfigParses(t *testing.T) {
	t.Parallel()
	cfg, err := config.Parse([]byte(forwardConfig("http://127.0.0.1:1234/sink")), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	s, ok := sender.MustCompile(cfg).Get("bench")
	if !ok || len(s.Forward) != 1 || s.Forward[0].URL != "http://127.0.0.1:1234/sink" {
		t.Fatalf("sender %+v", s)
	}
	// The load's event type (X-Event-Type: order.created) routes to the
	// sink through its event_types.
	h := http.Header{"X-Event-Type": {"order.created"}}
	in := s.Inspect(nil)
	if et := s.EventTypeOf(h, &in); et != "order.created" || len(s.Forward[0].EventTypes) == 0 || !slices.Equal(s.Route(et, h, &in), []string{"sink"}) {
		t.Fatalf("event type %q, event_types %v, route %v", et, s.Forward[0].EventTypes, s.Route(et, h, &in))
	}
	plain, err := config.Parse([]byte(benchConfig), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := plain.Sender("bench"); len(s.Forward) != 0 {
		t.Fatalf("benchConfig has forward targets: %+v", s.Forward)
	}
}

func TestSink(t *testing.T) {
	t.Parallel()
	sk, err := startSink()
	if err != nil {
		t.Fatal(err)
	}
	defer sk.close()
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	post := func(id string) {
		req, _ := http.NewRequest(http.MethodPost, sk.url(), strings.NewReader(`{"x":1}`))
		if id != "" {
			req.Header.Set("X-Hookgate-Delivery-Id", id)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			t.Fatalf("sink answered %d", resp.StatusCode)
		}
	}
	for i := range 5 {
		post(fmt.Sprintf("fwb-x-0-%d", i))
	}
	post("fwb-x-0-1") // at least once: a duplicate counts once
	post("fwa-x-0-1")
	post("")
	if got := sk.received("fwb"); got != 5 {
		t.Errorf("received(fwb) = %d, want 5", got)
	}
	if got := sk.received("fwa"); got != 1 {
		t.Errorf("received(fwa) = %d, want 1", got)
	}
	if got := sk.requests.Load(); got != 8 {
		t.Errorf("requests = %d, want 8", got)
	}
	// What it does not read (here a chunked body) is a 400, not a count.
	req, _ := http.NewRequest(http.MethodPost, sk.url(), io.MultiReader(strings.NewReader(`{"x":1}`)))
	req.Header.Set("X-Hookgate-Delivery-Id", "fwb-x-0-9")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("chunked request: sink answered %d, want 400", resp.StatusCode)
	}
	if got := sk.received("fwb"); got != 5 {
		t.Errorf("after a chunked request: received(fwb) = %d, want 5", got)
	}
}

func TestRatioCheck(t *testing.T) {
	t.Parallel()
	quiet := cpuUse{ok: true}
	busy := cpuUse{ok: true, others: 0.5}
	for _, tc := range []struct {
		rate, ref        float64
		rateCPU, refCPU  cpuUse
		pass, conclusive bool
	}{
		{70, 100, quiet, quiet, true, true},
		{50, 100, quiet, quiet, false, true},
		{50, 100, busy, quiet, false, false}, // a disturbed measured phase may hide a pass
		{70, 100, busy, quiet, true, true},
		{70, 100, quiet, busy, true, false}, // a disturbed reference may hide a fail
		{50, 100, quiet, busy, false, true},
	} {
		pass, conclusive := ratioCheck(tc.rate, tc.ref, 0.6, tc.rateCPU, tc.refCPU)
		if pass != tc.pass || conclusive != tc.conclusive {
			t.Errorf("ratioCheck(%v, %v, rate other %.1f, ref other %.1f) = %v, %v; want %v, %v",
				tc.rate, tc.ref, tc.rateCPU.others, tc.refCPU.others, pass, conclusive, tc.pass, tc.conclusive)
		}
	}
}

func TestWithPoolMaxConns(t *testing.T) {
	t.Parallel()
	got, err := withPoolMaxConns("postgres://u@127.0.0.1:5432/db?sslmode=disable", 8)
	if err != nil || got != "postgres://u@127.0.0.1:5432/db?pool_max_conns=8&sslmode=disable" {
		t.Fatalf("withPoolMaxConns = %q, %v", got, err)
	}
	if got, _ := withPoolMaxConns("host=/tmp dbname=x", 0); got != "host=/tmp dbname=x" {
		t.Fatalf("withPoolMaxConns(…, 0) = %q", got)
	}
	if _, err := withPoolMaxConns("host=/tmp dbname=x", 8); err == nil {
		t.Fatal("no error for a keyword/value DSN")
	}
}

func TestParseFlags(t *testing.T) {
	t.Parallel()
	o, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.minRatio != 0.7 || o.minForwardRatio != 0.85 || o.minReplayRatio != 1.5 || o.forwardDrain != 5*time.Second || o.maxCPUPerForward != 350*time.Microsecond || o.skipForward {
		t.Fatalf("defaults: %+v", o)
	}
	o, err = parseFlags([]string{"-min-forward-ratio", "0.9", "-skip-forward", "-server-arg=--forward-workers=100", "-server-arg", "--role=api", "-pool-max-conns", "16"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.minForwardRatio != 0.9 || !o.skipForward || strings.Join(o.serverArgs, " ") != "--forward-workers=100 --role=api" || o.poolMaxConns != 16 {
		t.Fatalf("parsed: %+v", o)
	}
	for _, args := range [][]string{
		{"-server", "harness", "-server-arg=--forward-workers=100"},
		{"-forward-drain-timeout", "-1s"},
		{"-server-log", "discard"},
	} {
		if _, err := parseFlags(args, io.Discard); err == nil {
			t.Errorf("parseFlags(%q): no error", args)
		}
	}
}
