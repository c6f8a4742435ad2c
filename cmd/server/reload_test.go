package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/pgtest"
	"github.com/hookgate/hookgate/internal/testkit"
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

// scrape returns base's /metrics.
func scrape(t *testing.T, c *http.Client, base string) []byte {
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
	body := scrape(t, c, base)
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
	body = scrape(t, c, base)
	if v := seriesValue(body, `hookgate_config_reloads_total{result="refused"}`); v != 1 {
		t.Errorf(`hookgate_config_reloads_total{result="refused"} = %v, want 1`, v)
	}
	if v := seriesValue(body, `hookgate_config_info{hash="`+sha256Hex(two)+`"}`); v != 1 {
		t.Errorf("hookgate_config_info after a refused reload: %v, want 1 for the running file's hash", v)
	}

	// bravo removed: new deliveries 404, its stored delivery stays.
	writeFile(t, path, one)
	hup()
	testkit.Poll(t, time.Minute, "bravo to answer 404 once removed", func() bool {
		return statusOf(t, c, base, "bravo", "b-3") == http.StatusNotFound
	})
	var kept int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM processed_messages WHERE sender = 'bravo'`).Scan(&kept); err != nil {
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
	if v := seriesValue(scrape(t, c, base), `hookgate_config_info{hash="`+sha256Hex(two)+`"}`); v != 1 {
		t.Errorf("hookgate_config_info of the new file's hash: %v, want 1", v)
	}

	publish(two + genericSender("charlie", "retention: 1ms"))
	testkit.Poll(t, time.Minute, "the invalid file to be refused", func() bool {
		return seriesValue(scrape(t, c, base), `hookgate_config_reloads_total{result="refused"}`) == 1
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
	body := scrape(t, c, base)
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
		if seriesValue(scrape(t, c, base), waits) < float64(len(first)) {
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
