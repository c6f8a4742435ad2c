package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// Retry storms against the real binary with its default settings (issue
// 17): copies of one delivery, a burst of distinct deliveries, and clients
// holding large bodies open. The checks are outcomes (statuses, counts) and
// the server process's peak RSS growth, read from /proc.

// stormConfig is the senders file of the storm tests: acme as in every
// test, with a body limit that lets 4 MiB bodies in.
const stormConfig = `senders:
  - name: acme
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    max_body_bytes: 8388608
`

// startStormBinary starts the real binary on a fresh database and returns
// its base URL and process.
func startStormBinary(t *testing.T, c *http.Client) (string, *proc) {
	t.Helper()
	bin := buildBinary(t)
	addr := freeAddr(t)
	p := startBinary(t, bin, emptyDB(t), addr, writeConfig(t, stormConfig))
	base := "http://" + addr
	waitHealthy(t, c, base, p)
	return base, p
}

// procKB returns field (VmRSS, VmHWM) of the process's /proc status, in
// bytes.
func procKB(t *testing.T, p *proc, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^` + field + `:\s+(\d+) kB$`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no %s in /proc/%d/status", field, p.cmd.Process.Pid)
	}
	n, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return n << 10
}

// burst sends n requests built by mk at once (each on a connection of its
// own, released together) and returns their replies.
func burst(t *testing.T, c *http.Client, n int, mk func(i int) *http.Request) []reply {
	t.Helper()
	replies := make([]reply, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		req := mk(i)
		wg.Go(func() {
			<-start
			replies[i], errs[i] = do(c, req)
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("request %d of the burst: %v", i, err)
		}
	}
	return replies
}

// stormClient returns a client that opens as many connections as requests
// run at once, and waits generously for them on a loaded machine (a burst
// of connections may overflow the listen backlog: the kernel then drops
// SYNs, and the client retries them after 1 s, 3 s, …).
func stormClient(t *testing.T) *http.Client {
	c := newClient(t)
	tr := c.Transport.(*http.Transport)
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = 0, 0
	tr.DialContext = (&net.Dialer{Timeout: time.Minute}).DialContext
	c.Timeout = 2 * time.Minute
	return c
}

func postTo(t *testing.T, base, id string, body []byte) *http.Request {
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/webhooks/acme", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("X-Delivery-Id", id)
	return req
}

// 200 copies of one delivery with a 900 KB body, released at once: one is
// accepted, 199 are replays (the copies wait for the first, none is shed),
// and the server's peak RSS grows by less than 250 MB.
func TestStormSameKeyBigBodies(t *testing.T) {
	testkit.Slow(t, "a retry storm against the real binary (load)")
	t.Parallel()
	c := stormClient(t)
	base, p := startStormBinary(t, c)
	if r, err := deliver(t.Context(), c, base, "warm-up", bodyFor("warm-up")); err != nil || r.status != http.StatusAccepted {
		t.Fatalf("warm-up delivery: %s, %v", r, err)
	}
	before := procKB(t, p, "VmRSS")

	body := bytes.Repeat([]byte("0123456789abcdef"), 900_000/16)
	replies := burst(t, c, 200, func(int) *http.Request { return postTo(t, base, "storm-same-key", body) })
	accepted, replayed := 0, 0
	other := map[int]int{}
	for _, r := range replies {
		switch {
		case r.status == http.StatusAccepted && r.header.Get("Idempotent-Replayed") == "true":
			replayed++
		case r.status == http.StatusAccepted:
			accepted++
		default:
			other[r.status]++
		}
	}
	growth := procKB(t, p, "VmHWM") - before
	t.Logf("200 copies of one 900 KB delivery: %d accepted, %d replays, others %v; peak RSS %d MB over %d MB before",
		accepted, replayed, other, growth>>20, before>>20)
	if accepted != 1 || replayed != 199 {
		t.Errorf("%d accepted and %d replays (others: %v), want 1 and 199", accepted, replayed, other)
	}
	if growth >= 250<<20 {
		t.Errorf("peak RSS grew by %d MB, want under 250 MB", growth>>20)
	}
}

// 1,000 distinct deliveries released at once: the database drains them in
// about a second, so none is shed: 1,000 × 202.
func TestStormDistinctBurst(t *testing.T) {
	testkit.Slow(t, "a retry storm against the real binary (load)")
	t.Parallel()
	c := stormClient(t)
	base, _ := startStormBinary(t, c)
	replies := burst(t, c, 1000, func(i int) *http.Request {
		id := fmt.Sprintf("distinct-%04d", i)
		return postTo(t, base, id, bodyFor(id))
	})
	statuses := map[int]int{}
	for _, r := range replies {
		statuses[r.status]++
	}
	t.Logf("1,000 distinct deliveries at once: %v", statuses)
	if statuses[http.StatusAccepted] != 1000 {
		t.Errorf("statuses %v, want 1000 × 202", statuses)
	}
}

// 150 connections, each from a client of its own (127.0.1.1 to
// 127.0.1.150, so that no client's share is what limits them), send the
// headers and all but the last heldBack bytes of 4 MiB bodies, then one
// byte every 2 s (holdBack: a body that stalls is cut after 5 s), and
// never the last
// back. They hold at most the body budget's share of large bodies (and the
// oldest of them one body more); the others get 503 with Retry-After once
// their wait for room runs out. Meanwhile a 1 KB delivery from another
// client is accepted, peak RSS grows by less than 250 MB, and once the
// connections close the budget is whole again.
func TestStormHeldBodies(t *testing.T) {
	testkit.Slow(t, "a retry storm against the real binary (load)")
	t.Parallel()
	c := stormClient(t)
	base, p := startStormBinary(t, c)
	addr := strings.TrimPrefix(base, "http://")
	before := procKB(t, p, "VmRSS")

	const (
		conns = 150
		size  = 4 << 20
	)
	body := bytes.Repeat([]byte{'x'}, size-heldBack)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		answers = map[string]int{} // status line and Retry-After of the answers
	)
	for i := range conns {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 1, byte(1+i))}}
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			defer conn.Close()
			go func() {
				<-ctx.Done()
				conn.Close()
			}()
			head := fmt.Sprintf("POST /webhooks/acme HTTP/1.1\r\nHost: %s\r\nContent-Type: application/octet-stream\r\nX-Delivery-Id: held-%d\r\nContent-Length: %d\r\n\r\n", addr, i, size)
			go func() {
				// The body, but for its last bytes; the write ends when the
				// server answers and closes, or when the test does.
				if _, err := conn.Write([]byte(head)); err == nil {
					if _, err := conn.Write(body); err == nil {
						holdBack(ctx, conn)
					}
				}
			}()
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				return // held until the test closed it
			}
			resp.Body.Close()
			mu.Lock()
			answers[fmt.Sprintf("%d Retry-After=%s", resp.StatusCode, resp.Header.Get("Retry-After"))]++
			mu.Unlock()
		})
	}

	// Every connection either holds its body's share of the budget or was
	// answered 503 (shed for the budget).
	metric := func(body []byte, name string) int64 {
		m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindSubmatch(body)
		if m == nil {
			t.Fatalf("no %s in /metrics", name)
		}
		v, _ := strconv.ParseFloat(string(m[1]), 64)
		return int64(v)
	}
	var held, shed int64
	testkit.Poll(t, time.Minute, "every held connection to hold its share of the budget or to be shed", func() bool {
		r, err := get(t.Context(), c, base+"/metrics")
		if err != nil {
			return false
		}
		inFlight := metric(r.body, "hookgate_ingest_body_bytes_in_flight")
		held, shed = inFlight/size, metric(r.body, `hookgate_ingest_shed_total{reason="body_budget"}`)
		return inFlight%size == 0 && held+shed == conns
	}, func() string { return fmt.Sprintf("%d bodies held, %d shed", held, shed) })
	start := time.Now()
	small, err := deliver(t.Context(), c, base, "small-while-held", bytes.Repeat([]byte{'s'}, 1000))
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if small.status != http.StatusAccepted {
		t.Errorf("a 1 KB delivery while large bodies hold the budget: %s, want 202", small)
	}
	growth := procKB(t, p, "VmHWM") - before
	t.Logf("%d connections hold 4 MiB bodies, %d shed; a 1 KB delivery answered %d in %s; peak RSS %d MB over %d MB before",
		held, shed, small.status, took.Round(time.Millisecond), growth>>20, before>>20)
	if held == 0 || held*size > 64<<20+size {
		t.Errorf("%d bodies of 4 MiB held at once, want some, within the default budget of 64 MiB and one body", held)
	}
	if growth >= 250<<20 {
		t.Errorf("peak RSS grew by %d MB, want under 250 MB", growth>>20)
	}

	testkit.Poll(t, time.Minute, "the shed connections to read their answers", func() bool {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, v := range answers {
			n += v
		}
		return int64(n) >= shed
	})
	cancel()
	wg.Wait()
	mu.Lock()
	for a, n := range answers {
		if a != "503 Retry-After=2" {
			t.Errorf("%d held connections were answered %s, want 503 with Retry-After", n, a)
		}
	}
	if int64(answers["503 Retry-After=2"]) != shed {
		t.Errorf("%d connections were answered 503, and %d counted as shed", answers["503 Retry-After=2"], shed)
	}
	mu.Unlock()
	testkit.Poll(t, time.Minute, "the body budget to be whole again once the connections closed", func() bool {
		r, err := get(t.Context(), c, base+"/metrics")
		return err == nil && metric(r.body, "hookgate_ingest_body_bytes_in_flight") == 0
	})
}
