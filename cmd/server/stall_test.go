package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// Bodies sent fast and then stalled (security round four, finding 1),
// against the real binary with its default settings: five clients
// (127.0.0.2 to .6) keep 256 connections each that send 65,535 of the
// 65,536 bytes they announce at once and then nothing, and reopen each
// connection as soon as it is answered. Together they ask for more than
// the body budget (5 × 16 MiB of 64 MiB). Meanwhile a client that holds
// nothing (127.0.0.9) sends a 1 KB delivery every half second: each is
// accepted (202), none shed, because a client that holds nothing takes
// room from the client that holds the most. Every stalled body is answered
// long before the 60 s a body may take in all, 408 request-timeout (it
// made no progress for the idle timeout, whatever it sent before) or 503
// overloaded (shed, or preempted for the newcomer), its connection closed,
// and none of them is recorded.
func TestStormStalledBodies(t *testing.T) {
	testkit.Slow(t, "1,280 stalled connections against the real binary (load)")
	const (
		clients   = 5
		perIP     = 256
		length    = 65536
		attack    = 12 * time.Second // more than two idle timeouts
		minProbes = 5
		answerBy  = 30 * time.Second // the old deadline was 60 s
	)
	needFiles(t, clients*perIP*2+1024)
	c := stormClient(t)
	bin := buildBinary(t)
	addr := freeAddr(t)
	dsn := emptyDB(t)
	p := startBinary(t, bin, dsn, addr, writeConfig(t, stormConfig))
	base := "http://" + addr
	waitHealthy(t, c, base, p)

	type answer struct {
		status  int
		typ     string
		after   time.Duration // from the body's last byte sent
		closed  bool
		readErr string
	}
	var (
		mu      sync.Mutex
		answers []answer
		wg      sync.WaitGroup
		held    = strings.Repeat("x", length-1)
	)
	// stall opens one connection from ip, sends all but the last byte of a
	// delivery and waits for the answer.
	stall := func(ip, id string) {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: time.Minute}
		conn, err := d.DialContext(context.Background(), "tcp", addr)
		if err != nil {
			mu.Lock()
			answers = append(answers, answer{readErr: "dial: " + err.Error()})
			mu.Unlock()
			return
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(2 * time.Minute)) // the test's bound, not the gateway's
		if _, err := fmt.Fprintf(conn, "POST /webhooks/acme HTTP/1.1\r\nHost: %s\r\nContent-Type: application/octet-stream\r\nX-Delivery-Id: %s\r\nContent-Length: %d\r\n\r\n%s", addr, id, length, held); err != nil {
			return // answered and closed before it was all written (shed)
		}
		sent := time.Now()
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		a := answer{after: time.Since(sent)}
		if err != nil {
			a.readErr = err.Error()
		} else {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var pr struct {
				Type string `json:"type"`
			}
			_ = json.Unmarshal(body, &pr)
			a.status, a.typ = resp.StatusCode, pr.Type
			_, err = br.ReadByte()
			a.closed = err != nil
		}
		mu.Lock()
		answers = append(answers, a)
		mu.Unlock()
	}
	// The attack lasts attack, and until the client that holds nothing has
	// sent minProbes deliveries beside it, however slow the machine.
	stop := time.Now().Add(attack)
	var stopped atomic.Bool
	for i := range clients {
		ip := fmt.Sprintf("127.0.0.%d", 2+i)
		for j := range perIP {
			wg.Go(func() {
				for n := 0; !stopped.Load(); n++ {
					stall(ip, fmt.Sprintf("stall-%d-%d-%d", i, j, n))
				}
			})
		}
	}

	// The client that holds nothing.
	probe := stormClient(t)
	probe.Transport.(*http.Transport).DialContext = (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.9")}, Timeout: time.Minute}).DialContext
	probes := map[string]int{}
	body := []byte(`{"pad":"` + strings.Repeat("p", 1000) + `"}`)
	time.Sleep(time.Second) // (the stalled bodies fill the budget first)
	for n := 0; time.Now().Before(stop) || n < minProbes; n++ {
		start := time.Now()
		r, err := deliver(t.Context(), probe, base, fmt.Sprintf("probe-%d", n), body)
		took := time.Since(start).Round(10 * time.Millisecond)
		switch {
		case err != nil:
			probes["error: "+err.Error()]++
		case r.status != http.StatusAccepted:
			probes[fmt.Sprintf("%d after %s: %s", r.status, took, r.body)]++
		default:
			probes["202"]++
		}
		time.Sleep(500 * time.Millisecond)
	}
	stopped.Store(true)
	t.Logf("a client that holds nothing, beside %d stalled connections: %v", clients*perIP, probes)
	if len(probes) != 1 || probes["202"] < minProbes {
		t.Errorf("the deliveries of a client that holds nothing: %v; want every one 202 (at least %d)", probes, minProbes)
	}

	// Every stalled body is answered in time (the test's own bound on the
	// connections is 2 minutes).
	wg.Wait()
	kinds := map[string]int{}
	for _, a := range answers {
		switch {
		case a.readErr != "":
			kinds["no answer: "+a.readErr]++
		case a.after > answerBy:
			kinds[fmt.Sprintf("%d %s after %s", a.status, a.typ, a.after.Round(time.Second))]++
		default:
			kinds[fmt.Sprintf("%d %s closed=%t", a.status, a.typ, a.closed)]++
		}
	}
	t.Logf("%d stalled bodies answered: %v", len(answers), kinds)
	for k, n := range kinds {
		switch k {
		case "408 urn:hookgate:problem:request-timeout closed=true", "503 urn:hookgate:problem:overloaded closed=true":
		default:
			t.Errorf("%d stalled bodies answered %s; want 408 request-timeout or 503 overloaded, the connection closed, within %s", n, k, answerBy)
		}
	}
	if kinds["408 urn:hookgate:problem:request-timeout closed=true"] < clients*perIP/2 {
		t.Errorf("only %d stalled bodies were answered 408; want most of the %d held open at first", kinds["408 urn:hookgate:problem:request-timeout closed=true"], clients*perIP)
	}
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var recorded int
	if err := conn.QueryRow(t.Context(), `SELECT count(*) FROM processed_messages WHERE delivery_id LIKE 'stall-%'`).Scan(&recorded); err != nil {
		t.Fatal(err)
	}
	if recorded != 0 {
		t.Errorf("%d stalled deliveries were recorded, want none", recorded)
	}
	page := metricsOf(t, c, base)
	t.Logf("shed: budget %d, client share %d, preempted %d", metricValue(t, page, `hookgate_ingest_shed_total{reason="body_budget"}`),
		metricValue(t, page, `hookgate_ingest_shed_total{reason="body_client_share"}`), metricValue(t, page, `hookgate_ingest_shed_total{reason="body_preempted"}`))
	testkit.Poll(t, time.Minute, "the gateway to hold no body", func() bool {
		page := metricsOf(t, c, base)
		return page != nil && metricValue(t, page, "hookgate_ingest_body_bytes_in_flight") == 0 &&
			metricValue(t, page, "hookgate_ingest_body_clients") == 0
	})
}
