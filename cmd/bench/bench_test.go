package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParsePgbench(t *testing.T) {
	t.Parallel()
	tps, processed, failed, err := parsePgbench("number of transactions actually processed: 98765\nnumber of failed transactions: 3 (0.003%)\ntps = 9876.5 (without initial connection time)\n")
	if err != nil || tps != 9876.5 || processed != 98765 || failed != 3 {
		t.Fatalf("parsePgbench = %v, %d, %d, %v", tps, processed, failed, err)
	}
	if tps, _, _, err := parsePgbench("tps = 13.25 (excluding connections establishing)\n"); err != nil || tps != 13.25 { // PostgreSQL ≤ 13
		t.Fatalf("old format: %v, %v", tps, err)
	}
	if _, _, _, err := parsePgbench("pgbench: error: connection failed\n"); err == nil {
		t.Fatal("no error for output without tps")
	}
	lat, err := parsePgbenchLog(strings.NewReader("0 1 2500 0 1700000000 123\n1 1 failed 0 1700000000 200\n1 2 900 0 1700000000 300\n\n"), nil)
	if err != nil || len(lat) != 2 || lat[0] != 2500*time.Microsecond || lat[1] != 900*time.Microsecond {
		t.Fatalf("parsePgbenchLog = %v, %v", lat, err)
	}
}

func TestPercentileAndIDs(t *testing.T) {
	t.Parallel()
	var s []time.Duration
	for i := 1; i <= 100; i++ {
		s = append(s, time.Duration(i))
	}
	if percentile(s, .5) != 50 || percentile(s, .99) != 99 || percentile(s, 1) != 100 || percentile(nil, .5) != 0 {
		t.Fatal("percentile")
	}
	for _, n := range []int{32, 512, 4096} {
		if b := makeBody(n); len(b) != n || !json.Valid(b) {
			t.Errorf("makeBody(%d) = %s", n, b)
		}
	}
	if id := string(firstIDs("fwb")(nil, 3, 7)); !strings.HasPrefix(id, "fwb-") || !strings.HasSuffix(id, "-3-7") {
		t.Errorf("firstIDs = %s", id)
	}
	hit := map[string]bool{}
	for seq := range 1000 {
		id := string(replayIDs(1000, 10)(nil, seq%32, seq))
		if id < "1000" || id > "1009" || len(id) != 4 {
			t.Fatalf("replay ID %s outside 1000…1009", id)
		}
		hit[id] = true
	}
	if len(hit) != 10 {
		t.Errorf("replay IDs hit %d of 10 keys", len(hit))
	}
}

// The load generator's client and the sink against net/http's server and
// client: what they read, and what they refuse to.
func TestClientAndSink(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		switch id := r.Header.Get("X-Delivery-Id"); {
		case string(body) != `{"x":1}` || r.Header.Get("X-Event-Type") == "":
			w.WriteHeader(http.StatusBadRequest)
		case id == "replayed":
			w.Header().Set("Idempotent-Replayed", "true")
			w.WriteHeader(http.StatusAccepted)
		case id == "chunked":
			_, _ = w.Write([]byte("x"))
			w.(http.Flusher).Flush()
		default:
			w.WriteHeader(http.StatusAccepted)
			_, _ = w.Write([]byte(`{"event_id":"e"}`))
		}
	}))
	defer srv.Close()
	c, _ := newRawClient(srv.URL+"/webhooks/bench", []byte(`{"x":1}`))
	defer c.close()
	for _, tc := range []struct {
		id, replayed string
		status       int
		err          bool
	}{{"first", "", 202, false}, {"replayed", "true", 202, false}, {"chunked", "", 200, true}, {"again", "", 202, false}} {
		status, replayed, _, err := c.do([]byte(tc.id))
		if (err != nil) != tc.err || !tc.err && (status != tc.status || replayed != tc.replayed) {
			t.Errorf("%s: %d, %q, %v", tc.id, status, replayed, err)
		}
	}

	sk, err := startSink()
	if err != nil {
		t.Fatal(err)
	}
	defer sk.close()
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	post := func(id string, body io.Reader) int {
		req, _ := http.NewRequest(http.MethodPost, sk.url(), body)
		req.Header.Set("X-Hookgate-Delivery-Id", id)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, id := range []string{"fwb-x-1", "fwb-x-2", "fwb-x-1", "fwa-x-1"} { // a duplicate counts once
		if code := post(id, strings.NewReader(`{}`)); code != http.StatusNoContent {
			t.Errorf("sink answered %d", code)
		}
	}
	if code := post("fwb-x-3", io.MultiReader(strings.NewReader(`{}`))); code != http.StatusBadRequest { // chunked: not read
		t.Errorf("chunked request: %d, want 400", code)
	}
	if sk.received("fwb") != 2 || sk.received("fwa") != 1 {
		t.Errorf("received fwb %d, fwa %d; want 2, 1", sk.received("fwb"), sk.received("fwa"))
	}
}

func TestRatioCheck(t *testing.T) {
	t.Parallel()
	quiet, busy := cpuUse{ok: true}, cpuUse{ok: true, others: 0.5}
	for _, tc := range []struct {
		rate             float64
		rateCPU, refCPU  cpuUse
		pass, conclusive bool
	}{
		{70, quiet, quiet, true, true}, {50, quiet, quiet, false, true},
		{50, busy, quiet, false, false}, {70, busy, quiet, true, true}, // a disturbed measured phase may hide a pass
		{70, quiet, busy, true, false}, {50, quiet, busy, false, true}, // a disturbed reference may hide a fail
	} {
		if pass, conclusive := ratioCheck(tc.rate, 100, 0.6, tc.rateCPU, tc.refCPU); pass != tc.pass || conclusive != tc.conclusive {
			t.Errorf("ratioCheck(%v, rate other %.1f, ref other %.1f) = %v, %v", tc.rate, tc.rateCPU.others, tc.refCPU.others, pass, conclusive)
		}
	}
}

func TestParseFlags(t *testing.T) {
	t.Parallel()
	o, err := parseFlags([]string{"-d", "5s", "-skip-forward", "-server-arg=--role=api", "-server-env", "GOGC=400"}, io.Discard)
	if err != nil || o.duration != 5*time.Second || !o.skipForward || o.minRatio != 0.7 || o.serverArgs[0] != "--role=api" || o.serverEnv[0] != "GOGC=400" {
		t.Fatalf("parseFlags = %+v, %v", o, err)
	}
	for _, args := range [][]string{{"-server-env", "GOGC"}, {"-forward-drain-timeout", "-1s"}, {"x"}} {
		if _, err := parseFlags(args, io.Discard); err == nil {
			t.Errorf("parseFlags(%q): no error", args)
		}
	}
}
