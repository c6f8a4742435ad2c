package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/testkit"
)

// Slow bodies against the real binary with its default settings (issue 29,
// finding 2): a client that holds more than its share of the body budget.

// metricValue returns the value of the sample name (with its labels) in a
// /metrics page.
func metricValue(t *testing.T, page []byte, name string) int64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindSubmatch(page)
	if m == nil {
		t.Fatalf("no %s in /metrics", name)
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return int64(v)
}

// metricsOf reads base's /metrics page; nil when it cannot be read.
func metricsOf(t *testing.T, c *http.Client, base string) []byte {
	r, err := get(t.Context(), c, base+"/metrics")
	if err != nil || r.status != http.StatusOK {
		return nil
	}
	return r.body
}

// One client (127.0.0.3) sends eight 4 MiB bodies but for their last byte:
// 32 MiB, which the budget (64 MiB, 48 MiB of it for large bodies) would
// hold, but a client holds at most a quarter of it (16 MiB, and its oldest
// body may exceed that). So some of them are answered 503 overloaded
// (shed for body_client_share), the others hold at most 20 MiB, and
// meanwhile other clients' deliveries, of 1 MiB and of 1 KB, are
// accepted. Once the connections close, the budget is whole again and no
// client is remembered.
func TestStormClientShare(t *testing.T) {
	testkit.Slow(t, "a client holding large bodies against the real binary (load)")
	t.Parallel()
	c := stormClient(t)
	base, _ := startStormBinary(t, c)
	addr := strings.TrimPrefix(base, "http://")

	const (
		conns = 8
		size  = 4 << 20
	)
	body := bytes.Repeat([]byte{'x'}, size-1)
	var (
		mu      sync.Mutex
		answers = map[int]int{}
		wg      sync.WaitGroup
	)
	ctx, cancel := context.WithCancel(t.Context())
	defer func() {
		cancel()
		wg.Wait()
	}()
	for i := range conns {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.3")}}
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
			go func() {
				if _, err := fmt.Fprintf(conn, "POST /webhooks/acme HTTP/1.1\r\nHost: %s\r\nContent-Type: application/octet-stream\r\nX-Delivery-Id: share-%d\r\nContent-Length: %d\r\n\r\n", addr, i, size); err == nil {
					_, _ = conn.Write(body)
				}
			}()
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				return // held until the test closed it
			}
			resp.Body.Close()
			mu.Lock()
			answers[resp.StatusCode]++
			mu.Unlock()
		})
	}
	var held, shed int64
	testkit.Poll(t, time.Minute, "every connection of the client to hold its body or to be shed", func() bool {
		page := metricsOf(t, c, base)
		if page == nil {
			return false
		}
		inFlight := metricValue(t, page, "hookgate_ingest_body_bytes_in_flight")
		held, shed = inFlight/size, metricValue(t, page, `hookgate_ingest_shed_total{reason="body_client_share"}`)
		return inFlight%size == 0 && held+shed == conns
	}, func() string { return fmt.Sprintf("%d bodies held, %d shed", held, shed) })
	t.Logf("one client sending %d bodies of 4 MiB: %d held, %d shed for its share", conns, held, shed)
	if shed == 0 || held*size > 20<<20 {
		t.Errorf("%d bodies of 4 MiB held by one client and %d shed; want some shed, and at most 20 MiB held (a quarter of the budget and one body)", held, shed)
	}
	other, err := do(c, postTo(t, base, "other-client-large", bytes.Repeat([]byte{'o'}, 1<<20)))
	if err != nil || other.status != http.StatusAccepted {
		t.Errorf("a 1 MiB delivery from another client: %s, %v; want 202", other, err)
	}
	small, err := deliver(t.Context(), c, base, "other-client-small", bytes.Repeat([]byte{'s'}, 1000))
	if err != nil || small.status != http.StatusAccepted {
		t.Errorf("a 1 KB delivery from another client: %s, %v; want 202", small, err)
	}
	testkit.Poll(t, time.Minute, "the shed connections to read their answers", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return int64(answers[http.StatusServiceUnavailable]) >= shed
	})
	cancel()
	wg.Wait()
	mu.Lock()
	if int64(answers[http.StatusServiceUnavailable]) != shed || len(answers) != 1 {
		t.Errorf("the client's connections were answered %v; want %d × 503", answers, shed)
	}
	mu.Unlock()
	testkit.Poll(t, time.Minute, "the budget to be whole again and no client remembered", func() bool {
		page := metricsOf(t, c, base)
		return page != nil && metricValue(t, page, "hookgate_ingest_body_bytes_in_flight") == 0 &&
			metricValue(t, page, "hookgate_ingest_body_clients") == 0
	})
}
