package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/hookgate/hookgate/internal/rules"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParsePgbench(t *testing.T) {
	t.Parallel()
	tps, processed, failed, err := parsePgbench("number of transactions actually processed: 98765\nnumber of failed transactions: 3 (0.003%)\ntps = 9876.5 (without initial connection time)\n")
	if err != nil || tps != 9876.5 || processed != 98765 || failed != 3 {
		t.Fatalf("parsePgbench = %v, %v, %v, %v", tps, processed, failed, err)
	}
	if tps, _, _, err := parsePgbench("tps = 12.5 (including connections establishing)\ntps = 13.25 (excluding connections establishing)\n"); err != nil || tps != 13.25 { // PostgreSQL ≤ 13
		t.Fatalf("old format: %v, %v", tps, err)
	}
	if _, _, _, err := parsePgbench("pgbench: error: connection failed\n"); err == nil {
		t.Fatal("no error for output without tps")
	}
	_, lat := pgbenchWindow([]byte("0 1 2500 0 1700000000 123\n1 1 failed 0 1700000000 200\n1 2 900 0 1700000000 300\n\n"), 0) // the whole log
	if len(lat) != 2 || lat[0] != 2500*time.Microsecond || lat[1] != 900*time.Microsecond {
		t.Fatalf("pgbenchWindow(log, 0) = %v", lat)
	}
}

// TestPgbenchWindow: a sliced pgbench run's rate counts the transactions
// that ended within the window of the last one's end, not its warm-up's,
// nor a failed one.
func TestPgbenchWindow(t *testing.T) {
	t.Parallel()
	log := "0 1 900 0 1700000000 100000\n" + // 1.9 s before the last: warm-up
		"1 1 1200 0 1700000001 200000\n" + // 0.8 s before
		"0 2 failed 0 1700000001 500000\n" +
		"1 2 700 0 1700000001 999999\n" + // the last
		"0 3 800 0 1700000000 999999\n" + // exactly 1 s before: outside
		"\n"
	n, lat := pgbenchWindow([]byte(log), time.Second)
	if slices.Sort(lat); n != 2 || !slices.Equal(lat, []time.Duration{700 * time.Microsecond, 1200 * time.Microsecond}) {
		t.Errorf("pgbenchWindow = %d, %v; want 2 transactions of 700 and 1200 µs", n, lat)
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
	for _, n := range []int{480, 512, 1500} {
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
// client: how each answer is judged, and what the sink counts.
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
		case id == "chunked": // read whole, judged by its status
			_, _ = w.Write([]byte("x"))
			w.(http.Flusher).Flush()
		default:
			w.WriteHeader(http.StatusAccepted)
			_, _ = w.Write([]byte(`{"event_id":"e"}`))
		}
	}))
	defer srv.Close()
	c := newRawClient(srv.Listener.Addr().String(), []byte(`{"x":1}`))
	defer c.close()
	for _, tc := range []struct {
		id            string
		replayed, err bool
	}{{"first", false, false}, {"replayed", true, false}, {"replayed", false, true}, {"first", true, true}, {"chunked", false, true}, {"again", false, false}} {
		if err := c.do([]byte(tc.id), tc.replayed); (err != nil) != tc.err {
			t.Errorf("%s, replayed %v: %v", tc.id, tc.replayed, err)
		}
	}

	sk, err := startSink()
	if err != nil {
		t.Fatal(err)
	}
	defer sk.close()
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	post := func(id string, body io.Reader, tenant ...string) int {
		req, _ := http.NewRequest(http.MethodPost, sk.url(), body)
		req.Header.Set("X-Hookgate-Delivery-Id", id)
		for _, v := range tenant {
			req.Header.Set("X-Tenant", v)
		}
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
	if code := post("fwb-x-3", io.MultiReader(strings.NewReader(`{}`))); code != http.StatusNoContent { // chunked
		t.Errorf("chunked request: %d, want 204", code)
	}
	if sk.received("fwb") != 3 || sk.received("fwa") != 1 {
		t.Errorf("received fwb %d, fwa %d; want 3, 1", sk.received("fwb"), sk.received("fwa"))
	}
	// The rules phase's forwards count as transformed with the header and
	// the body's mark, each once.
	for i, f := range []struct{ id, body, tenant string }{
		{"fwr-x-1", "{" + rulesMark + "}", rulesTenant}, {"fwr-x-1", "{" + rulesMark + "}", rulesTenant},
		{"fwr-x-2", "{" + rulesMark + "}", "acct_other"}, {"fwr-x-3", `{"billing_details":{"email":"e"}}`, rulesTenant},
		{"fwr-x-4", "{" + rulesMark + "}", rulesTenant},
	} {
		if code := post(f.id, strings.NewReader(f.body), f.tenant); code != http.StatusNoContent {
			t.Errorf("forward %d: sink answered %d", i, code)
		}
	}
	if sk.received("fwr") != 4 || sk.transformed("fwr") != 2 || sk.transformed("fwb") != 0 {
		t.Errorf("fwr: received %d, transformed %d (want 4, 2); fwb transformed %d", sk.received("fwr"), sk.transformed("fwr"), sk.transformed("fwb"))
	}
	acks := map[string]time.Time{"fwb-x-1": time.Now(), "nope": time.Now()}
	if l := sk.lags(acks); len(l) != 1 || l[0] != 0 { // received before its 2xx was noted
		t.Errorf("lags = %v", l)
	}
}

// The rules phase's target is valid, its filter passes on the bench's body,
// and its transform makes what the sink counts as transformed: otherwise
// the phase would measure errors, or nothing.
func TestRulesPhaseConfig(t *testing.T) {
	t.Parallel()
	sk, err := startSink()
	if err != nil {
		t.Fatal(err)
	}
	defer sk.close()
	tg := testkit.ConfigTarget(t, testkit.ParseConfig(t, rulesConfig(sk)), "bench", "sink-rules")
	if tg.Filter == nil || tg.Transform == nil || tg.URL != sk.url() {
		t.Fatal("the rules phase's target has no filter or no transform")
	}
	body := makeBody(bodySize)
	in := rules.Input{Sender: "bench", DeliveryID: "fwr-x-1", EventType: "charge.succeeded", Body: body,
		Headers: http.Header{"Content-Type": {"application/json"}}, ContentType: "application/json"}
	if ok, err := tg.Filter.Eval(rules.NewActivation(in)); !ok || err != nil {
		t.Fatalf("the filter on the bench's body: %v, %v; want it to pass", ok, err)
	}
	r, err := tg.Transform.Apply(rules.NewActivation(in), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(r.Body, []byte(rulesMark)) || bytes.Contains(r.Body, []byte("email")) || bytes.Contains(r.Body, []byte("address")) ||
		!bytes.Contains(r.Body, []byte(`"amount":4200`)) || r.Headers["X-Tenant"] != rulesTenant {
		t.Errorf("transformed: %s, headers %v", r.Body, r.Headers)
	}
	// The forward config without rules is the same target.
	if tg := testkit.ConfigTarget(t, testkit.ParseConfig(t, forwardConfig(sk)), "bench", "sink"); tg.Filter != nil || tg.Transform != nil || tg.URL != sk.url() {
		t.Errorf("forwardConfig's target: %+v", tg)
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

// TestMerge: slices merged are one load of their counts and measured
// times added, their latencies together, and their CPU use weighted by
// each interval's length.
func TestMerge(t *testing.T) {
	t.Parallel()
	a := &loadResult{measured: 2 * time.Second, count: 100, requests: 120, accepted: 119, errors: 1, errSamples: []string{"x"}, latencies: []time.Duration{3, 5},
		gatewayPG: time.Second, secs: 2.5, cpu: cpuUse{ok: true, server: 0.8, postgres: 0.4, machine: 1.5, cores: 2, others: 0.3, topOthers: "hog 0.30"}}
	b := &loadResult{measured: 2 * time.Second, count: 300, requests: 330, accepted: 330, errSamples: []string{"x", "y"}, latencies: []time.Duration{1, 4},
		gatewayPG: 3 * time.Second, secs: 7.5, cpu: cpuUse{ok: true, server: 0.4, postgres: 0.8, machine: 1.5, cores: 2, beside: 0.04}}
	m := merge([]*loadResult{a, b})
	if m.rate() != 100 || m.requests != 450 || m.accepted != 449 || m.errors != 1 || m.gatewayPG != 4*time.Second || m.secs != 10 {
		t.Errorf("merge: rate %v, requests %d, accepted %d, errors %d, gateway+PostgreSQL %s, secs %v", m.rate(), m.requests, m.accepted, m.errors, m.gatewayPG, m.secs)
	}
	if !slices.Equal(m.latencies, []time.Duration{1, 3, 4, 5}) || !slices.Equal(m.errSamples, []string{"x", "y"}) {
		t.Errorf("merge: latencies %v, error samples %q", m.latencies, m.errSamples)
	}
	near := func(x, want float64) bool { return x > want-1e-9 && x < want+1e-9 }
	if u := m.cpu; !u.ok || !near(u.server, 0.5) || !near(u.postgres, 0.7) || !near(u.others, 0.075) || !near(u.beside, 0.03) || !near(u.cores, 2) || u.topOthers != "hog 0.30" {
		t.Errorf("merged CPU = %+v; want server 0.5, postgres 0.7, others 0.075, beside 0.03 (weighted 1:3) and the busiest slice's names", u)
	}
	if u := mergeCPU([]cpuUse{{ok: true}, {}}, []float64{1, 1}); u.ok {
		t.Error("mergeCPU of a slice without CPU figures is ok")
	}
}

// TestTimedVerdict: a bound on time that failed while other processes
// loaded the machine is inconclusive, not a FAIL; a pass stays a pass.
func TestTimedVerdict(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		ok     bool
		others float64
		want   string
	}{
		{true, 0, "PASS"}, {true, 0.9, "PASS"}, {false, 0, "FAIL"}, {false, disturbedAbove, "FAIL"}, {false, 0.5, "????"},
	} {
		if got := timedVerdict(tc.ok, tc.others); got != tc.want {
			t.Errorf("timedVerdict(%v, %.2f) = %s, want %s", tc.ok, tc.others, got, tc.want)
		}
	}
}

func TestParseFlags(t *testing.T) {
	t.Parallel()
	b, err := parseFlags([]string{"-d", "5s", "-skip-forward", "-skip-replay", "-skip-pgbench", "-server-arg=--role=api", "-server-env", "GOGC=400"}, io.Discard) // .ci/bench-citus.sh's
	if err != nil || b.duration != 5*time.Second || !b.skipForward || b.minRatio != 0.7 || b.serverArgs[0] != "--role=api" || b.serverEnv[0] != "GOGC=400" {
		t.Fatalf("parseFlags = %+v, %v", b, err)
	} else if !slices.Equal(b.drainBacklogs, []int{20000, 200000}) || b.minDrainRatio != 0.9 {
		t.Errorf("the drain's defaults: backlogs %v, ratio %v; want 20000,200000 and 0.9", b.drainBacklogs, b.minDrainRatio)
	}
	if b, err := parseFlags([]string{"-drain-backlogs", "2000, 20000"}, io.Discard); err != nil || !slices.Equal(b.drainBacklogs, []int{2000, 20000}) {
		t.Errorf("parseFlags(-drain-backlogs 2000, 20000) = %v, %v", b, err)
	}
	if b, err := parseFlags([]string{"-only-forward", "-skip-forward"}, io.Discard); err != nil || !b.onlyForward || b.skipForward || !b.skipPgbench || !b.skipReplay || !b.skipDrain {
		t.Errorf("parseFlags(-only-forward) = %+v, %v", b, err)
	}
	if b, err := parseFlags([]string{"-only-ordered"}, io.Discard); err != nil || !b.onlyOrdered || b.skipForward || !b.skipPgbench || !b.skipReplay || !b.skipDrain {
		t.Errorf("parseFlags(-only-ordered) = %+v, %v", b, err)
	}
	if b.slices != 10 {
		t.Errorf("-slices defaults to %d, want 10", b.slices)
	}
	if b, err := parseFlags([]string{"-pgstat"}, io.Discard); err != nil || b.slices != 0 {
		t.Errorf("parseFlags(-pgstat): slices %d, %v; want 0 (pg_stat_statements would count the reference's statements)", b.slices, err)
	}
	for _, args := range [][]string{{"-slices", "-1"}, {"-only-forward", "-only-ordered"}, {"-server-env", "GOGC"}, {"-forward-drain-timeout", "-1s"}, {"x"}, {"-drain-backlogs", "20000,2000"}, {"-drain-backlogs", "1"}, {"-drain-backlogs", "a"}} {
		if _, err := parseFlags(args, io.Discard); err == nil {
			t.Errorf("parseFlags(%q): no error", args)
		}
	}
}

// The ordered phases' bodies carry the key their target reads at /key,
// and the sink tells a forward that overtook one accepted before it on
// its key and connection.
func TestOrderedPhases(t *testing.T) {
	t.Parallel()
	sk, err := startSink()
	if err != nil {
		t.Fatal(err)
	}
	defer sk.close()
	if tg := testkit.ConfigTarget(t, testkit.ParseConfig(t, keyedConfig(sk, "sink-ordered", true)), "bench", "sink-ordered"); tg.Ordering == nil || tg.Ordering.JSONPointer != "/key" || tg.URL != sk.url() {
		t.Fatalf("the ordered phase's target: %+v", tg)
	}
	if tg := testkit.ConfigTarget(t, testkit.ParseConfig(t, keyedConfig(sk, "sink-keyed", false)), "bench", "sink-keyed"); tg.Ordering != nil {
		t.Errorf("the unordered phase's target orders: %+v", tg.Ordering)
	}
	body := keyedBody(bodySize)
	setKey(body, 42)
	var doc struct{ Key, Type string }
	if err := json.Unmarshal(body, &doc); err != nil || len(body) != bodySize || doc.Key != "0042" || doc.Type != "charge.succeeded" || bodyKey(body) != "0042" {
		t.Fatalf("keyedBody with key 42: %s (%v)", body, err)
	}
	if k := bodyKey(makeBody(bodySize)); k != "" {
		t.Errorf("bodyKey of a body without a key = %q", k)
	}
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	for _, f := range []struct {
		id  string
		key int
	}{{"oo-r-0-1", 1}, {"oo-r-0-0", 2}, {"oo-r-0-0", 1}, {"oo-r-0-2", 1}, {"oo-r-1-0", 1}, {"oo-r-0-3", 1}, {"ou-r-0-1", 1}} {
		setKey(body, f.key)
		req, _ := http.NewRequest(http.MethodPost, sk.url(), bytes.NewReader(body))
		req.Header.Set("X-Hookgate-Delivery-Id", f.id)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	// On key 1, connection 0: seq 1, then 2 and 3 after it; seq 0 arrived
	// first with key 2 (a forward counts once). Connection 1 is alone.
	if pairs, late := sk.outOfOrder("oo"); pairs != 2 || late != 0 {
		t.Errorf("outOfOrder = %d pairs, %d late; want 2, 0", pairs, late)
	}
	setKey(body, 1)
	req, _ := http.NewRequest(http.MethodPost, sk.url(), bytes.NewReader(body))
	req.Header.Set("X-Hookgate-Delivery-Id", "oo-r-0-0") // already seen: changes nothing
	if resp, err := client.Do(req); err == nil {
		resp.Body.Close()
	}
	for _, id := range []string{"oo-r-2-1", "oo-r-2-0"} {
		req, _ := http.NewRequest(http.MethodPost, sk.url(), bytes.NewReader(body))
		req.Header.Set("X-Hookgate-Delivery-Id", id)
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
		}
	}
	if pairs, late := sk.outOfOrder("oo"); pairs != 3 || late != 1 {
		t.Errorf("after seq 0 behind seq 1 on connection 2: outOfOrder = %d pairs, %d late; want 3, 1", pairs, late)
	}
}
