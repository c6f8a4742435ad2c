package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookgate/hookgate/internal/testing/pgtest"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// reloadSecret is a signing secret the reload tests put in the files they
// load, refused or not: it must never show in a log, a metric or an answer.
const reloadSecret = "reload-test-secret-do-not-leak-7f3a9c1e5b"

// genericSender is the YAML of a generic sender name (delivery ID in
// X-Delivery-Id), with the extra lines given (indented by four spaces).
func genericSender(name string, extra ...string) string {
	s := "  - name: " + name + "\n    preset: generic\n    delivery_id: { header: X-Delivery-Id }\n"
	for _, e := range extra {
		s += "    " + e + "\n"
	}
	return s
}

// seriesValue returns the value of the series series (name and labels as
// /metrics writes them) in the exposition text body, or -1 when absent.
func seriesValue(body []byte, series string) float64 {
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`)
	m := re.FindSubmatch(body)
	if m == nil {
		return -1
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		return -1
	}
	return v
}

// metricsBody returns base's /metrics.
func metricsBody(t *testing.T, c *http.Client, base string) []byte {
	t.Helper()
	r, err := get(t.Context(), c, base+"/metrics")
	if err != nil || r.status != http.StatusOK {
		t.Fatalf("GET %s/metrics: %v %v", base, r, err)
	}
	return r.body
}

// sha256Hex is the hex SHA-256 of content, as sha256sum prints it.
func sha256Hex(content string) string {
	sum := sha256.Sum256([]byte(content))
	return hex.EncodeToString(sum[:])
}

// statusOf POSTs a delivery to sender through base and returns the status.
func statusOf(t *testing.T, c *http.Client, base, sender, id string) int {
	t.Helper()
	r, err := deliverAs(t.Context(), c, base, sender, id, bodyFor(id))
	if err != nil {
		t.Fatalf("deliver %s/%s: %v", sender, id, err)
	}
	return r.status
}

// writeFile replaces the file at path with content, atomically (a rename),
// as an editor or a deployment tool would.
func writeFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TestReloadOnSIGHUP: the real binary reloads hookgate.yaml on SIGHUP: a
// sender added answers at once, one removed answers 404 while its stored
// delivery stays (a replay of it is still answered from its row after it
// comes back); a file that fails a check is refused with the check's
// message naming the field, logged at ERROR without the secret it holds,
// counted, and the running configuration keeps serving. SIGHUP never ends
// the process.
func TestReloadOnSIGHUP(t *testing.T) {
	testkit.Slow(t, "starts the gateway binary")
	t.Parallel()
	bin := buildBinary(t)
	pool, dsn := pgtest.NewDB(t)
	c := newClient(t)
	one := "senders:\n" + genericSender("acme")
	two := one + genericSender("bravo")
	path := writeConfig(t, one)
	addr := freeAddr(t)
	p := startBinaryWith(t, bin, dsn, addr, path)
	base := "http://" + addr
	waitHealthy(t, c, base, p)
	hup := func() {
		t.Helper()
		if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	}

	if got := statusOf(t, c, base, "bravo", "b-0"); got != http.StatusNotFound {
		t.Fatalf("bravo before it is configured: %d, want 404", got)
	}
	writeFile(t, path, two)
	hup()
	testkit.Poll(t, time.Minute, "bravo to be accepted after SIGHUP", func() bool {
		return statusOf(t, c, base, "bravo", "b-1") == http.StatusAccepted
	})
	body := metricsBody(t, c, base)
	if v := seriesValue(body, `hookgate_config_info{hash="`+sha256Hex(two)+`"}`); v != 1 {
		t.Errorf("hookgate_config_info of the new file's hash: %v, want 1", v)
	}
	if v := seriesValue(body, `hookgate_config_info{hash="`+sha256Hex(one)+`"}`); v != -1 {
		t.Errorf("hookgate_config_info still shows the old file's hash (%v)", v)
	}
	if v := seriesValue(body, `hookgate_config_reloads_total{result="applied"}`); v != 1 {
		t.Errorf(`hookgate_config_reloads_total{result="applied"} = %v, want 1`, v)
	}

	// An invalid file (a sender name in capitals) with a secret in it.
	bad := two + genericSender("Charlie", `signature: { scheme: hmac-sha256, header: X-Sig }`, "secret: "+reloadSecret)
	writeFile(t, path, bad)
	hup()
	testkit.Poll(t, time.Minute, "the invalid file to be refused", func() bool {
		return p.log.count("configuration reload refused: the running configuration keeps serving") == 1
	})
	if got := statusOf(t, c, base, "bravo", "b-2"); got != http.StatusAccepted {
		t.Errorf("bravo after a refused reload: %d, want 202 (the running configuration serves on)", got)
	}
	logs := p.log.tail(1000)
	if !strings.Contains(logs, `"level":"ERROR"`) || !strings.Contains(logs, "senders[2].name") {
		t.Errorf("the refusal is not logged at ERROR naming senders[2].name:\n%s", p.log.tail(5))
	}
	body = metricsBody(t, c, base)
	if v := seriesValue(body, `hookgate_config_reloads_total{result="refused"}`); v != 1 {
		t.Errorf(`hookgate_config_reloads_total{result="refused"} = %v, want 1`, v)
	}
	if v := seriesValue(body, `hookgate_config_info{hash="`+sha256Hex(two)+`"}`); v != 1 {
		t.Errorf("hookgate_config_info after a refused reload: %v, want 1 for the running file's hash", v)
	}

	// bravo removed: new deliveries 404, its stored delivery stays.
	writeFile(t, path, one)
	hup()
	// A probe sent while the reload is under way may still be accepted
	// with the configuration it began with: its key is not counted.
	testkit.Poll(t, time.Minute, "bravo to answer 404 once removed", func() bool {
		return statusOf(t, c, base, "bravo", "b-probe") == http.StatusNotFound
	})
	var kept int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM processed_messages WHERE sender = 'bravo' AND delivery_id IN ('b-1', 'b-2')`).Scan(&kept); err != nil {
		t.Fatal(err)
	}
	if kept != 2 {
		t.Errorf("bravo's stored keys after its removal: %d, want 2 (b-1, b-2)", kept)
	}
	writeFile(t, path, two)
	hup()
	testkit.Poll(t, time.Minute, "bravo to be back", func() bool {
		r, err := deliverAs(t.Context(), c, base, "bravo", "b-1", bodyFor("b-1"))
		return err == nil && r.status == http.StatusAccepted && r.header.Get("Idempotent-Replayed") == "true"
	})
	select {
	case <-p.done:
		t.Fatalf("the process ended: %v", p.err)
	default:
	}
	if strings.Contains(p.log.tail(1000), reloadSecret) {
		t.Error("the log holds the secret of the refused file")
	}
}

// TestConfigWatchFollowsConfigMapSwap: with --config-watch, the real binary
// loads a new configuration when a Kubernetes ConfigMap volume is updated
// (the file is a symbolic link through ..data, and the update points
// ..data at a new directory by a rename), and refuses a file that fails a
// check the same way, once, keeping the running configuration.
func TestConfigWatchFollowsConfigMapSwap(t *testing.T) {
	testkit.Slow(t, "starts the gateway binary")
	t.Parallel()
	bin := buildBinary(t)
	_, dsn := pgtest.NewDB(t)
	c := newClient(t)
	dir := t.TempDir()
	gen := 0
	// publish writes content as the kubelet updates a ConfigMap volume: a
	// new timestamped directory, a link to it renamed over ..data, the old
	// directory removed.
	publish := func(content string) {
		t.Helper()
		gen++
		ts := fmt.Sprintf("..2026_12_01_10_00_%02d.%d", gen, gen)
		if err := os.Mkdir(filepath.Join(dir, ts), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, ts, "hookgate.yaml"), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		old, _ := os.Readlink(filepath.Join(dir, "..data"))
		if err := os.Symlink(ts, filepath.Join(dir, "..data_tmp")); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
		if old != "" {
			if err := os.RemoveAll(filepath.Join(dir, old)); err != nil {
				t.Fatal(err)
			}
		}
	}
	one := "senders:\n" + genericSender("acme")
	two := one + genericSender("bravo")
	publish(one)
	path := filepath.Join(dir, "hookgate.yaml")
	if err := os.Symlink(filepath.Join("..data", "hookgate.yaml"), path); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	p := startBinaryWith(t, bin, dsn, addr, path, "--config-watch")
	base := "http://" + addr
	waitHealthy(t, c, base, p)

	publish(two)
	testkit.Poll(t, time.Minute, "bravo to be accepted after the ConfigMap update", func() bool {
		return statusOf(t, c, base, "bravo", "b-1") == http.StatusAccepted
	})
	if v := seriesValue(metricsBody(t, c, base), `hookgate_config_info{hash="`+sha256Hex(two)+`"}`); v != 1 {
		t.Errorf("hookgate_config_info of the new file's hash: %v, want 1", v)
	}

	publish(two + genericSender("charlie", "retention: 1ms"))
	testkit.Poll(t, time.Minute, "the invalid file to be refused", func() bool {
		return seriesValue(metricsBody(t, c, base), `hookgate_config_reloads_total{result="refused"}`) == 1
	})
	if got := statusOf(t, c, base, "bravo", "b-2"); got != http.StatusAccepted {
		t.Errorf("bravo after a refused update: %d, want 202", got)
	}
	if got := statusOf(t, c, base, "charlie", "c-1"); got != http.StatusNotFound {
		t.Errorf("charlie of the refused file: %d, want 404", got)
	}
	if !strings.Contains(p.log.tail(1000), "senders[2].retention") {
		t.Errorf("the refusal does not name senders[2].retention:\n%s", p.log.tail(5))
	}
	// The refused content is not tried again every second.
	publish(one)
	testkit.Poll(t, time.Minute, "bravo to be removed by the next update", func() bool {
		return statusOf(t, c, base, "bravo", "b-3") == http.StatusNotFound
	})
	body := metricsBody(t, c, base)
	if v := seriesValue(body, `hookgate_config_reloads_total{result="refused"}`); v != 1 {
		t.Errorf(`hookgate_config_reloads_total{result="refused"} = %v, want 1 (a refused content is tried once)`, v)
	}
	if v := seriesValue(body, `hookgate_config_reloads_total{result="applied"}`); v != 2 {
		t.Errorf(`hookgate_config_reloads_total{result="applied"} = %v, want 2`, v)
	}
}

// heldConfig is the hookgate.yaml of TestRemovedTargetsForwardsHeldAndResumed:
// acme forwarding to t1 at url1 and, with t2, to url2 as well.
func heldConfig(url1, url2 string, t2 bool) string {
	s := "senders:\n" + genericSender("acme", "forward:",
		"  - { name: t1, url: '"+url1+"', max_attempts: 1000 }")
	if t2 {
		s += "      - { name: t2, url: '" + url2 + "', max_attempts: 1000 }\n"
	}
	return s
}

// TestRemovedTargetsForwardsHeldAndResumed: a target removed by a reload
// while its forwards are retrying (it answers 503) keeps them: none is
// attempted again or failed, none uses an attempt, each is counted as held
// (hookgate_forward_waits_total's reason target_removed), and deliveries
// accepted meanwhile get no forward to it. When a reload brings it back
// under the same name (and it answers 200), its held forwards are woken
// and delivered, each once, with exactly one more attempt.
func TestRemovedTargetsForwardsHeldAndResumed(t *testing.T) {
	testkit.Slow(t, "starts the gateway binary")
	t.Parallel()
	bin := buildBinary(t)
	pool, dsn := pgtest.NewDB(t)
	c := newClient(t)
	t1 := testkit.NewTarget(t, testkit.Always(http.StatusOK))
	t2 := testkit.NewTarget(t, testkit.Always(http.StatusServiceUnavailable))
	path := writeConfig(t, heldConfig(t1.URL, t2.URL, true))
	addr := freeAddr(t)
	p := startBinaryWith(t, bin, dsn, addr, path, fastForwardFlags...)
	base := "http://" + addr
	waitHealthy(t, c, base, p)
	reload := func(content string, n int) {
		t.Helper()
		writeFile(t, path, content)
		if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		testkit.Poll(t, time.Minute, "the reload", func() bool { return p.log.count("configuration reloaded") == n })
	}
	t2Jobs := func() map[string]int { // event → attempt, of t2's unfinished jobs
		out := map[string]int{}
		for _, j := range forwardJobs(t, pool) {
			if j.Target == "t2" {
				if j.State != "scheduled" && j.State != "available" && j.State != "retryable" && j.State != "running" {
					t.Errorf("t2's forward of %s is %s, want it held (waiting)", j.EventID, j.State)
				}
				out[j.EventID] = j.Attempt
			}
		}
		return out
	}

	first := deliverAll(t, c, base, makeIDs("held", 20))
	testkit.Poll(t, time.Minute, "every forward to reach t1, and to be tried at t2", func() bool {
		d := t1.Delivered()
		for _, ev := range first {
			if d[ev] == 0 || len(t2.HitsFor(ev)) == 0 {
				return false
			}
		}
		return true
	})

	reload(heldConfig(t1.URL, t2.URL, false), 1)
	waits := `hookgate_forward_waits_total{reason="target_removed",sender="acme",target="t2"}`
	testkit.Poll(t, time.Minute, "every forward to t2 to be held", func() bool {
		if seriesValue(metricsBody(t, c, base), waits) < float64(len(first)) {
			return false
		}
		for _, j := range forwardJobs(t, pool) { // River has written each one's snooze
			if j.Target == "t2" && j.State != "scheduled" {
				return false
			}
		}
		return true
	})
	hits := len(t2.Hits())
	held := t2Jobs()
	if len(held) != len(first) {
		t.Fatalf("%d forwards to t2 waiting, want %d", len(held), len(first))
	}
	second := deliverAll(t, c, base, makeIDs("after", 5))
	testkit.Poll(t, time.Minute, "the new deliveries to reach t1", func() bool {
		d := t1.Delivered()
		for _, ev := range second {
			if d[ev] == 0 {
				return false
			}
		}
		return true
	})
	if n := len(t2.Hits()); n != hits {
		t.Errorf("t2 got %d requests while removed, want none", n-hits)
	}
	for ev, attempt := range t2Jobs() {
		if attempt != held[ev] {
			t.Errorf("t2's forward of %s: attempt %d while held, was %d", ev, attempt, held[ev])
		}
	}

	t2.SetDecide(testkit.Always(http.StatusOK))
	reload(heldConfig(t1.URL, t2.URL, true), 2)
	// Woken by the reload, not at the end of their wait (a minute or more).
	testkit.Poll(t, 45*time.Second, "every held forward to reach t2", func() bool {
		d := t2.Delivered()
		for _, ev := range first {
			if d[ev] == 0 {
				return false
			}
		}
		return true
	})
	d1, d2 := t1.Delivered(), t2.Delivered()
	for _, ev := range first {
		if d1[ev] != 1 || d2[ev] != 1 {
			t.Errorf("event %s delivered %d times to t1 and %d to t2, want once each", ev, d1[ev], d2[ev])
		}
	}
	for _, ev := range second {
		if d1[ev] != 1 || d2[ev] != 0 || len(t2.HitsFor(ev)) != 0 {
			t.Errorf("event %s accepted while t2 was removed: %d to t1, %d requests to t2; want 1 and none", ev, d1[ev], len(t2.HitsFor(ev)))
		}
	}
	testkit.Poll(t, 30*time.Second, "t2's jobs to be completed", func() bool {
		for _, j := range forwardJobs(t, pool) {
			if j.Target == "t2" && j.State != "completed" {
				return false
			}
		}
		return true
	})
	for _, j := range forwardJobs(t, pool) {
		if j.Target == "t2" && j.Attempt != held[j.EventID]+1 {
			t.Errorf("t2's forward of %s: %d attempts, want %d (one more than when it was held)", j.EventID, j.Attempt, held[j.EventID]+1)
		}
	}
}

// operator sends method path to base with the admin token tok ("" for
// none) and returns the reply.
func operator(t *testing.T, c *http.Client, method, base, path, tok string) reply {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	r, err := do(c, req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

// configAPISender is acme with its secrets: a signature secret, a target
// URL with a secret query value, a signing secret and an extra header's
// value, none of which the API may show; then extra lines.
func configAPISender(url, timeout string, extra ...string) string {
	return genericSender("acme", append([]string{
		`signature: { scheme: hmac-sha256, header: X-Sig }`,
		"secret: " + reloadSecret,
		"forward:",
		"  - name: t1",
		"    url: " + url + "?token=qtok-9e1d7c0b5a",
		"    timeout: " + timeout,
		"    signing_secret: whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
		"    headers: { X-Api-Key: hdr-5d0c4b2a19 }",
	}, extra...)...)
}

// TestConfigAPI: GET /v1/config shows the configuration in force (its
// file's hash, when it was loaded, its senders without a secret); POST
// /v1/config/reload reloads the file and answers what changed (names,
// never values), the settings only a restart changes that it kept, or,
// for a file that fails a check, 422 with the check's message naming the
// field (a target timeout the running rescue horizon cannot cover is one),
// the running configuration serving on. Both need the admin token.
func TestConfigAPI(t *testing.T) {
	t.Parallel()
	dsn := emptyDB(t)
	c := newClient(t)
	tok := randHex(32)
	one := "senders:\n" + configAPISender("http://127.0.0.1:1/a", "10s")
	path := writeConfig(t, one)
	s := startRunAt(t, dsn, path, "--admin-token", tok)
	secrets := []string{reloadSecret, "qtok-9e1d7c0b5a", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "hdr-5d0c4b2a19"}
	noSecret := func(what string, r reply) {
		t.Helper()
		for _, sec := range secrets {
			if strings.Contains(string(r.body), sec) {
				t.Errorf("%s shows the secret %s: %s", what, sec, r.body)
			}
		}
	}

	for _, rq := range [][2]string{{http.MethodGet, "/v1/config"}, {http.MethodPost, "/v1/config/reload"}} {
		if r := operator(t, c, rq[0], s.base, rq[1], ""); r.status != http.StatusUnauthorized {
			t.Errorf("%s %s without the token: %s, want 401", rq[0], rq[1], r)
		}
	}
	var info struct {
		Hash     string    `json:"hash"`
		LoadedAt time.Time `json:"loaded_at"`
		Senders  []struct {
			Name    string `json:"name"`
			Forward []struct {
				Name, URL string
			} `json:"forward"`
		} `json:"senders"`
	}
	getInfo := func() {
		t.Helper()
		r := operator(t, c, http.MethodGet, s.base, "/v1/config", tok)
		if r.status != http.StatusOK {
			t.Fatalf("GET /v1/config: %s", r)
		}
		noSecret("GET /v1/config", r)
		if err := json.Unmarshal(r.body, &info); err != nil {
			t.Fatal(err)
		}
	}
	getInfo()
	if info.Hash != sha256Hex(one) || info.LoadedAt.IsZero() || len(info.Senders) != 1 || info.Senders[0].Name != "acme" ||
		len(info.Senders[0].Forward) != 1 || !strings.Contains(info.Senders[0].Forward[0].URL, "xxxxx") {
		t.Errorf("GET /v1/config: %+v; want the file's hash %s, a load time, acme and its target with its URL redacted", info, sha256Hex(one))
	}

	// t1's URL and timeout change, t2 and bravo are added, acme's
	// retention grows.
	two := "senders:\n" + configAPISender("http://127.0.0.1:2/b", "20s", "  - { name: t2, url: 'http://127.0.0.1:3/' }", "retention: 720h") +
		genericSender("bravo")
	writeFile(t, path, two)
	r := operator(t, c, http.MethodPost, s.base, "/v1/config/reload", tok)
	if r.status != http.StatusOK {
		t.Fatalf("POST /v1/config/reload: %s", r)
	}
	noSecret("POST /v1/config/reload", r)
	var res struct {
		Changed  bool      `json:"changed"`
		H        string    `json:"hash"`
		P        string    `json:"previous_hash"`
		LoadedAt time.Time `json:"loaded_at"`
		Senders  struct {
			Added, Removed []string
			Changed        []struct {
				Sender string
				Fields []string
			}
		} `json:"senders"`
		Targets struct {
			Added, Removed []struct{ Sender, Target string }
			Changed        []struct {
				Sender, Target string
				Fields         []string
			}
		} `json:"targets"`
		Kept []struct{ Setting, Running, File string } `json:"kept"`
	}
	if err := json.Unmarshal(r.body, &res); err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprintf("%v %s→%s senders +%v -%v ~%v targets +%v -%v ~%v", res.Changed, res.P, res.H,
		res.Senders.Added, res.Senders.Removed, res.Senders.Changed, res.Targets.Added, res.Targets.Removed, res.Targets.Changed)
	want := fmt.Sprintf("true %s→%s senders +[bravo] -[] ~[{acme [retention event_retention]}] targets +[{acme t2}] -[] ~[{acme t1 [url timeout]}]",
		sha256Hex(one), sha256Hex(two))
	if got != want {
		t.Errorf("reload answered\n %s\nwant\n %s", got, want)
	}
	kept := map[string][2]string{}
	for _, k := range res.Kept {
		kept[strings.Fields(k.Setting)[1]] = [2]string{k.Running, k.File}
	}
	if kept["job"] != [2]string{"168h", "720h"} || kept["rescue"] != [2]string{"1m15s", "1m25s"} {
		t.Errorf("kept %+v; want the forward job retention 168h (not 720h) and the rescue horizon 1m15s (not 1m25s)", res.Kept)
	}
	if got := statusOf(t, c, s.base, "bravo", "b-1"); got != http.StatusAccepted {
		t.Errorf("bravo after the reload: %d, want 202", got)
	}

	r = operator(t, c, http.MethodPost, s.base, "/v1/config/reload", tok)
	if r.status != http.StatusOK || !strings.Contains(string(r.body), `"changed":false`) {
		t.Errorf("a reload of the same file: %s, want 200 with changed false", r)
	}

	// A timeout the running rescue horizon (1m15s) cannot cover, and an
	// invalid name beside a secret: refused, 422, naming the field.
	for _, bad := range []struct{ content, field string }{
		{"senders:\n" + configAPISender("http://127.0.0.1:2/b", "2m"), "senders[0].forward[0].timeout"},
		{two + genericSender("Carol", `signature: { scheme: hmac-sha256, header: X-Sig }`, "secret: "+reloadSecret), "senders[2].name"},
	} {
		writeFile(t, path, bad.content)
		r := operator(t, c, http.MethodPost, s.base, "/v1/config/reload", tok)
		if err := checkProblemNoRetry(r, http.StatusUnprocessableEntity); err != nil || !strings.Contains(string(r.body), "config-refused") ||
			!strings.Contains(string(r.body), bad.field) || !strings.Contains(string(r.body), "The running configuration keeps serving") {
			t.Errorf("reload of a file with a bad %s: %s (%v); want 422 config-refused naming it", bad.field, r, err)
		}
		noSecret("a refused reload", r)
		getInfo()
		if info.Hash != sha256Hex(two) {
			t.Errorf("after a refused reload GET /v1/config shows hash %s, want the running %s", info.Hash, sha256Hex(two))
		}
	}
	body := metricsBody(t, c, s.base)
	for res, want := range map[string]float64{"applied": 1, "unchanged": 1, "refused": 2} {
		if v := seriesValue(body, `hookgate_config_reloads_total{result="`+res+`"}`); v != want {
			t.Errorf(`hookgate_config_reloads_total{result="%s"} = %v, want %v`, res, v, want)
		}
	}
	if strings.Contains(s.log.tail(1000), reloadSecret) {
		t.Error("the log holds a secret")
	}
}

// checkProblemNoRetry returns why r is not an RFC 9457 problem with status
// want, or nil.
func checkProblemNoRetry(r reply, want int) error {
	if r.status != want || r.header.Get("Content-Type") != "application/problem+json" {
		return fmt.Errorf("status %d %s, want %d application/problem+json", r.status, r.header.Get("Content-Type"), want)
	}
	return nil
}

// reloadLoadConfig is a file of TestReloadsUnderLoadAcrossTwoProcesses.
// Its first form (second false): acme forwards to t1 at urlA. Its second:
// acme's t1 at urlB instead, and t2 at url2; and a sender bravo,
// forwarding to t1 at urlB.
func reloadLoadConfig(second bool, urlA, urlB, url2 string) string {
	if !second {
		return "senders:\n" + genericSender("acme", "forward:", "  - { name: t1, url: '"+urlA+"', max_attempts: 1000 }")
	}
	return "senders:\n" +
		genericSender("acme", "forward:", "  - { name: t1, url: '"+urlB+"', max_attempts: 1000 }", "  - { name: t2, url: '"+url2+"', max_attempts: 1000 }") +
		genericSender("bravo", "forward:", "  - { name: t1, url: '"+urlB+"', max_attempts: 1000 }")
}

// TestReloadsUnderLoadAcrossTwoProcesses: two gateway processes (--role
// all, the fast path on) on one database take deliveries of acme and bravo
// while their files are reloaded ten times, one process by POST
// /v1/config/reload and the other by SIGHUP, alternating two files (t1's
// URL changed, a target t2 added and removed, the sender bravo added and
// removed), one of the ten an invalid file. No delivery is answered 5xx;
// the invalid file is refused by both (422, and a log line) while the
// configuration before it serves on; every accepted delivery is stored
// once and each of its forwards reaches its target once, counted by
// Idempotency-Key at the targets: t1's at the URL in force at its attempt,
// and t2's, held while t2 was removed, once the last reload brings it back.
func TestReloadsUnderLoadAcrossTwoProcesses(t *testing.T) {
	testkit.Slow(t, "two gateway processes under load, reloaded ten times")
	t.Parallel()
	bin := buildBinary(t)
	pool, dsn := pgtest.NewDB(t)
	c := newClient(t)
	tok := randHex(32)
	sinkA := testkit.NewTarget(t, testkit.Always(http.StatusOK))
	sinkB := testkit.NewTarget(t, testkit.Always(http.StatusOK))
	sink2 := testkit.NewTarget(t, testkit.Always(http.StatusOK))
	first := reloadLoadConfig(false, sinkA.URL, sinkB.URL, sink2.URL)
	second := reloadLoadConfig(true, sinkA.URL, sinkB.URL, sink2.URL)
	invalid := second + genericSender("carol", "retention: 1ms")

	type gateway struct {
		p          *proc
		base, path string
	}
	var gws []gateway
	for range 2 {
		path := writeConfig(t, first)
		addr := freeAddr(t)
		p := startBinaryWith(t, bin, dsn, addr, path, append([]string{"--admin-token", tok}, fastForwardFlags...)...)
		waitHealthy(t, c, "http://"+addr, p)
		gws = append(gws, gateway{p: p, base: "http://" + addr, path: path})
	}
	hashOf := func(g gateway) string {
		var info struct {
			Hash string `json:"hash"`
		}
		r := operator(t, c, http.MethodGet, g.base, "/v1/config", tok)
		if r.status != http.StatusOK || json.Unmarshal(r.body, &info) != nil {
			t.Fatalf("GET /v1/config: %s", r)
		}
		return info.Hash
	}

	// The load: acme's deliveries, each sent until it is answered 2xx, and
	// bravo's, each sent until it is answered 2xx or 404 (bravo is not
	// configured), paced, through both processes in turn, until stopped.
	var (
		mu       sync.Mutex
		statuses = map[int]int{}
		events   = map[string]string{} // delivery ID → event ID of its 2xx
		progress atomic.Int64          // acme deliveries accepted
		next     atomic.Int64
		stop     atomic.Bool
		abort    atomic.Bool // the test failed: deliveries under way are given up
		wg       sync.WaitGroup
	)
	pace := time.NewTicker(5 * time.Millisecond)
	send := func(sender, id string, n int64, giveUpOn404 bool) {
		for attempt := 0; !abort.Load(); attempt++ {
			<-pace.C
			r, err := deliverAs(context.Background(), c, gws[(n+int64(attempt))%2].base, sender, id, bodyFor(id))
			if err != nil {
				t.Errorf("deliver %s/%s: %v", sender, id, err)
				return
			}
			mu.Lock()
			statuses[r.status]++
			if r.status == http.StatusAccepted {
				var a acceptedBody
				if err := json.Unmarshal(r.body, &a); err != nil {
					t.Errorf("deliver %s/%s: %s", sender, id, r)
				}
				events[sender+"/"+id] = a.EventID
			}
			mu.Unlock()
			switch {
			case r.status == http.StatusAccepted:
				if sender == "acme" {
					progress.Add(1)
				}
				return
			case r.status == http.StatusNotFound && giveUpOn404:
				return
			case attempt >= 100:
				t.Errorf("deliver %s/%s: still %s after 100 attempts", sender, id, r)
				return
			}
		}
	}
	for w := range 4 {
		wg.Go(func() {
			for !stop.Load() {
				n := next.Add(1)
				if w == 0 {
					send("bravo", fmt.Sprintf("b-%05d", n), n, true)
				} else {
					send("acme", fmt.Sprintf("a-%05d", n), n, false)
				}
			}
		})
	}
	stopLoad := sync.OnceFunc(func() { stop.Store(true); wg.Wait() })
	t.Cleanup(func() {
		abort.Store(true)
		stopLoad()
		pace.Stop()
	})

	// Ten reloads, alternating the two files, the sixth an invalid file.
	plan := []string{second, first, second, first, second, invalid, first, second, first, second}
	running := first
	for i, content := range plan {
		from := progress.Load()
		testkit.Poll(t, time.Minute, "deliveries to be accepted between reloads", func() bool { return progress.Load() >= from+20 })
		for _, g := range gws {
			writeFile(t, g.path, content)
		}
		r := operator(t, c, http.MethodPost, gws[0].base, "/v1/config/reload", tok)
		if err := gws[1].p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		if content == invalid {
			if r.status != http.StatusUnprocessableEntity || !strings.Contains(string(r.body), "senders[2].retention") {
				t.Errorf("reload %d of the invalid file: %s, want 422 naming senders[2].retention", i+1, r)
			}
			testkit.Poll(t, time.Minute, "the SIGHUP reload of the invalid file to be refused", func() bool {
				return gws[1].p.log.count("configuration reload refused: the running configuration keeps serving") == 1
			})
			for _, g := range gws {
				if h := hashOf(g); h != sha256Hex(running) {
					t.Errorf("after the invalid file, a process runs %s, want the configuration before it (%s)", h, sha256Hex(running))
				}
			}
			continue
		}
		if r.status != http.StatusOK {
			t.Fatalf("reload %d: %s", i+1, r)
		}
		testkit.Poll(t, time.Minute, "the SIGHUP reload", func() bool { return hashOf(gws[1]) == sha256Hex(content) })
		running = content
	}
	from := progress.Load()
	testkit.Poll(t, time.Minute, "deliveries after the last reload", func() bool { return progress.Load() >= from+20 })
	stopLoad()

	for status, n := range statuses {
		if status >= 500 {
			t.Errorf("%d deliveries answered %d", n, status)
		}
	}
	t.Logf("answers by status: %v; %d deliveries accepted", statuses, len(events))

	// Every accepted delivery is stored once, with the event its 2xx named.
	stored := map[string]string{}
	rows, err := pool.Query(t.Context(), `SELECT sender || '/' || delivery_id, event_id::text FROM processed_messages`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k, ev string
		if err := rows.Scan(&k, &ev); err != nil {
			t.Fatal(err)
		}
		stored[k] = ev
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(stored) != len(events) {
		t.Errorf("%d deliveries stored, %d accepted", len(stored), len(events))
	}
	for k, ev := range events {
		if stored[k] != ev {
			t.Errorf("delivery %s: accepted as event %s, stored as %q", k, ev, stored[k])
		}
	}

	// Every forward reaches its target once: t1's (acme's and bravo's) at
	// sinkA or sinkB, t2's at sink2.
	// The outbox first: a forward leaves it in the transaction that makes
	// its job (or records the fast path's attempt), so each is in one read
	// or the other; read the other way round, one moved in between was in
	// neither.
	withT2 := map[string]bool{}
	var outboxT2 []string
	orows, err := pool.Query(t.Context(), `SELECT event_id::text FROM forward_outbox WHERE target = 't2'`)
	if err == nil {
		outboxT2, err = pgx.CollectRows(orows, pgx.RowTo[string])
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range forwardJobs(t, pool) {
		if j.Target == "t2" {
			withT2[j.EventID] = true
		}
	}
	for _, ev := range outboxT2 {
		withT2[ev] = true
	}
	delivered := func() (missing []string) {
		a, b, two := sinkA.Delivered(), sinkB.Delivered(), sink2.Delivered()
		for _, ev := range events {
			if a[ev]+b[ev] == 0 {
				missing = append(missing, "t1 "+ev)
			}
		}
		for ev := range withT2 {
			if two[ev] == 0 {
				missing = append(missing, "t2 "+ev)
			}
		}
		return missing
	}
	testkit.Poll(t, 90*time.Second, "every forward to reach its target", func() bool { return len(delivered()) == 0 },
		func() string { m := delivered(); return fmt.Sprintf("%d missing, e.g. %v", len(m), m[:min(5, len(m))]) })
	a, b, two := sinkA.Delivered(), sinkB.Delivered(), sink2.Delivered()
	bad := 0
	for k, ev := range events {
		n2 := 0
		if strings.HasPrefix(k, "acme/") && withT2[ev] {
			n2 = 1
		}
		if a[ev]+b[ev] != 1 || two[ev] != n2 {
			if bad++; bad <= 10 {
				t.Errorf("delivery %s (event %s): t1 delivered %d times (sinkA %d, sinkB %d), t2 %d times; want 1 and %d", k, ev, a[ev]+b[ev], a[ev], b[ev], two[ev], n2)
			}
		}
	}
	if len(withT2) == 0 || len(a) == 0 || len(b) == 0 {
		t.Errorf("forwards: %d with t2, %d to sinkA, %d to sinkB: the reloads did not change where forwards went", len(withT2), len(a), len(b))
	}
	t.Logf("%d deliveries, %d forwards to t2, t1 at sinkA %d and at sinkB %d", len(events), len(withT2), len(a), len(b))
}
