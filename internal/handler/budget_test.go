package handler_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/authlimit"
	"github.com/hookgate/hookgate/internal/handler"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// onlyReader hides a reader's length, so that the request is sent chunked
// (no Content-Length).
type onlyReader struct{ io.Reader }

// metric returns the value of the sample name (with its labels, if any) on
// s's /metrics.
func (s *server) metric(name string) string {
	s.t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindSubmatch(s.get("/metrics").body)
	if m == nil {
		s.t.Fatalf("no %s in /metrics", name)
	}
	return string(m[1])
}

// metricInt is metric as a whole number.
func (s *server) metricInt(name string) int64 {
	s.t.Helper()
	v, err := strconv.ParseFloat(s.metric(name), 64)
	if err != nil {
		s.t.Fatalf("%s: %v", name, err)
	}
	return int64(v)
}

// heldBody is a delivery written by hand on a connection of its own from a
// loopback address: its headers, and as much of its body as the test
// sends.
type heldBody struct {
	t    *testing.T
	conn net.Conn
	r    *bufio.Reader
}

// holdBody dials s from the loopback address ip, sends the headers of a
// delivery to sender hdr with delivery ID id and the given Content-Length
// (with extra header lines, each ending in \r\n), then the first sent
// bytes of the body. The connection is closed when the test ends.
func (s *server) holdBody(ip, id string, length, sent int, extra string) *heldBody {
	s.t.Helper()
	return s.holdRequest(ip, fmt.Sprintf("POST /webhooks/hdr HTTP/1.1\r\nHost: x\r\nX-Delivery-Id: %s\r\nContent-Length: %d\r\n%s\r\n", id, length, extra), sent)
}

// holdRequest is holdBody for the request head given.
func (s *server) holdRequest(ip, head string, sent int) *heldBody {
	s.t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	conn, err := d.DialContext(s.t.Context(), "tcp", s.srv.Listener.Addr().String())
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { conn.Close() })
	if _, err := io.WriteString(conn, head); err != nil {
		s.t.Fatal(err)
	}
	h := &heldBody{t: s.t, conn: conn, r: bufio.NewReader(conn)}
	h.send(sent)
	return h
}

// send writes n more bytes of the body.
func (h *heldBody) send(n int) {
	h.t.Helper()
	if _, err := h.conn.Write(bytes.Repeat([]byte("b"), n)); err != nil {
		h.t.Fatalf("write %d bytes of the body: %v", n, err)
	}
}

// answer reads the response and, when closing, reports whether the server
// closed the connection after it.
func (h *heldBody) answer(closing bool) (reply, bool) {
	h.t.Helper()
	_ = h.conn.SetReadDeadline(time.Now().Add(pollTimeout))
	resp, err := http.ReadResponse(h.r, nil)
	if err != nil {
		h.t.Fatalf("read the response: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		h.t.Fatalf("read the response's body: %v", err)
	}
	r := reply{status: resp.StatusCode, header: resp.Header, body: body}
	if !closing {
		return r, false
	}
	_, err = h.r.ReadByte()
	return r, errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)
}

// The body budget holds the bytes that arrived, not the ones announced:
// a request announcing 700 KB that sent 1,000 bytes holds a small first
// step of its buffer only; as the rest arrives (all but the last byte) it
// holds its length. Then a large body of unknown length, taken step by
// step, finds no room in the share of large bodies and gets 503 overloaded
// with Retry-After (counted as shed for body_budget), and so does a gzip
// body whose inflated bytes find none; a small delivery is accepted; once
// the held request ends its room is given back and the large bodies are
// accepted, and nothing is counted in flight any more. The clients are
// apart (another loopback address each), so that no client's share of the
// budget is what refuses them.
func TestBodyBudget(t *testing.T) {
	t.Parallel()
	s, db := newDBServer(t, options{
		yaml: sendersYAML + `
  - name: zipped
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    accept_encodings: [gzip]
`,
		config: func(hc *handler.Config) { hc.BodyBudget, hc.BodyBudgetWait = 1<<20, 50*time.Millisecond }})

	held := s.holdBody("127.0.0.2", "held", 700_000, 1000, "")
	testkit.Poll(t, pollTimeout, "the held request to take its first step", func() bool { return s.metricInt("hookgate_ingest_body_bytes_in_flight") > 0 })
	if got := s.metricInt("hookgate_ingest_body_bytes_in_flight"); got > 16<<10 {
		t.Errorf("a request announcing 700000 bytes that sent 1000 holds %d bytes of the budget, want a small first step (its announced length is no reason to hold more)", got)
	}
	held.send(700_000 - 1000 - 1)
	testkit.Poll(t, pollTimeout, "the held request to hold its length as its bytes arrive", func() bool {
		return s.metric("hookgate_ingest_body_bytes_in_flight") == "700000"
	})

	large := bytes.Repeat([]byte("l"), 300_000)
	r := s.from(t, "127.0.0.3").do(s.postRequest("hdr", "large", nil, func(req *http.Request) {
		req.Body, req.ContentLength = io.NopCloser(onlyReader{bytes.NewReader(large)}), -1
	}))
	wantProblem(t, r, http.StatusServiceUnavailable, "overloaded")
	wantRetryAfter(t, r)

	var zipped bytes.Buffer
	zw := gzip.NewWriter(&zipped)
	_, _ = zw.Write(large)
	_ = zw.Close()
	r = s.from(t, "127.0.0.4").do(s.postRequest("zipped", "zipped", zipped.Bytes(), func(req *http.Request) { req.Header.Set("Content-Encoding", "gzip") }))
	wantProblem(t, r, http.StatusServiceUnavailable, "overloaded")
	if got := s.metric(`hookgate_ingest_shed_total{reason="body_budget"}`); got != "2" {
		t.Errorf("shed for body_budget: %s, want 2", got)
	}

	wantAccepted(t, s.from(t, "127.0.0.5").post("hdr", "small", bytes.Repeat([]byte("s"), 1000)), "hdr", "small")

	held.conn.Close()
	testkit.Poll(t, pollTimeout, "the held request to give its share back", func() bool { return s.metric("hookgate_ingest_body_bytes_in_flight") == "0" })
	r = s.from(t, "127.0.0.3").do(s.postRequest("hdr", "large", nil, func(req *http.Request) {
		req.Body, req.ContentLength = io.NopCloser(onlyReader{bytes.NewReader(large)}), -1
	}))
	wantAccepted(t, r, "hdr", "large")
	wantAccepted(t, s.from(t, "127.0.0.4").do(s.postRequest("zipped", "zipped", zipped.Bytes(), func(req *http.Request) { req.Header.Set("Content-Encoding", "gzip") })), "zipped", "zipped")
	var stored []byte
	if err := db.QueryRow(t.Context(), `SELECT body FROM webhook_events WHERE delivery_id = 'large'`).Scan(&stored); err != nil || !bytes.Equal(stored, large) {
		t.Errorf("stored body of the chunked delivery: %d bytes, %v; want the %d sent", len(stored), err, len(large))
	}
	if got := s.metric("hookgate_ingest_body_bytes_in_flight"); got != "0" {
		t.Errorf("body bytes in flight after every request ended: %s", got)
	}
	if got := s.metric("hookgate_ingest_body_clients"); got != "0" {
		t.Errorf("clients holding body bytes after every request ended: %s", got)
	}
}

// Each client holds at most a quarter of the budget: while one client's
// held body takes most of its share (256 KiB of 1 MiB), its next delivery
// finds no room, waits for it and gets 503 overloaded with Retry-After
// (shed for body_client_share), and its connection is closed, while the
// same delivery from another client is accepted. The client is the TCP peer, or the client a trusted
// proxy names in X-Forwarded-For: two deliveries through the proxy for two
// clients are two clients, two through it for one client are one. Once
// the held body's request ends, the client holds nothing and is
// forgotten, and its delivery is accepted.
func TestBodyClientShare(t *testing.T) {
	t.Parallel()
	s, db := newDBServer(t, options{config: func(hc *handler.Config) {
		hc.BodyBudget, hc.BodyBudgetWait = 1<<20, 50*time.Millisecond
		hc.AuthLimiter = authlimit.New(netip.MustParsePrefix("127.0.0.9/32")) // the trusted proxy
	}})
	body := bytes.Repeat([]byte("c"), 100_000)

	held := s.holdBody("127.0.0.2", "held", 200_000, 200_000-1, "")
	testkit.Poll(t, pollTimeout, "the held request to hold its body", func() bool {
		return s.metric("hookgate_ingest_body_bytes_in_flight") == "200000"
	})
	r := s.from(t, "127.0.0.2").post("hdr", "same-client", body)
	wantProblem(t, r, http.StatusServiceUnavailable, "overloaded")
	wantRetryAfter(t, r)
	// Answered before its body was read whole, a request's connection is
	// closed, and the rest of its body never read (net/http would wait for
	// it before answering).
	partial := s.holdBody("127.0.0.2", "same-client-partial", 100_000, 50_000, "")
	r, closed := partial.answer(true)
	wantProblem(t, r, http.StatusServiceUnavailable, "overloaded")
	if !closed {
		t.Errorf("the connection of a request answered before its body was read stayed open")
	}
	if got := s.metric(`hookgate_ingest_shed_total{reason="body_client_share"}`); got != "2" {
		t.Errorf("shed for body_client_share: %s, want 2", got)
	}
	wantAccepted(t, s.from(t, "127.0.0.3").post("hdr", "other-client", body), "hdr", "other-client")
	if got := s.metric("hookgate_ingest_body_clients"); got != "1" {
		t.Errorf("clients holding body bytes: %s, want 1", got)
	}

	// Through the trusted proxy: X-Forwarded-For names the client.
	viaProxy := s.from(t, "127.0.0.9")
	proxyHeld := s.holdBody("127.0.0.9", "proxy-held", 200_000, 200_000-1, "X-Forwarded-For: 192.0.2.1\r\n")
	testkit.Poll(t, pollTimeout, "the request through the proxy to hold its body", func() bool {
		return s.metric("hookgate_ingest_body_bytes_in_flight") == "400000"
	})
	forClient := func(ip string) func(*http.Request) {
		return func(req *http.Request) { req.Header.Set("X-Forwarded-For", ip) }
	}
	wantProblem(t, viaProxy.post("hdr", "proxy-same-client", body, forClient("192.0.2.1")), http.StatusServiceUnavailable, "overloaded")
	wantAccepted(t, viaProxy.post("hdr", "proxy-other-client", body, forClient("192.0.2.2")), "hdr", "proxy-other-client")
	// A peer that is not a trusted proxy is its own client, whatever it says.
	wantAccepted(t, s.from(t, "127.0.0.4").post("hdr", "untrusted-xff", body, forClient("127.0.0.2")), "hdr", "untrusted-xff")
	if got := s.metric(`hookgate_ingest_shed_total{reason="body_client_share"}`); got != "3" {
		t.Errorf("shed for body_client_share: %s, want 3", got)
	}

	held.conn.Close()
	proxyHeld.conn.Close()
	testkit.Poll(t, pollTimeout, "the clients to hold nothing and be forgotten", func() bool {
		return s.metric("hookgate_ingest_body_bytes_in_flight") == "0" && s.metric("hookgate_ingest_body_clients") == "0"
	})
	wantAccepted(t, s.from(t, "127.0.0.2").post("hdr", "same-client", body), "hdr", "same-client")
	wantCounts(t, db, 4, 4)
}

// A body must keep arriving: after a grace period (here 300 ms), at the
// minimum rate (here 4 KiB/s) on average. A body that stops after its
// first bytes, one that trickles a byte at a time, and one of unknown
// length that trickles are answered 408 request-timeout, with the
// connection closed and nothing recorded; a body that arrives slowly but
// above the rate, for longer than the grace period, is accepted whole.
func TestBodyMinRate(t *testing.T) {
	t.Parallel()
	s, db := newDBServer(t, options{config: func(hc *handler.Config) {
		hc.BodyMinRate, hc.BodyMinRateGrace = 4096, 300*time.Millisecond
	}})
	want408 := func(name string, h *heldBody, start time.Time) {
		t.Helper()
		r, closed := h.answer(true)
		if took := time.Since(start); took < 300*time.Millisecond {
			t.Errorf("%s: answered after %s, within the grace period", name, took)
		}
		wantProblem(t, r, http.StatusRequestTimeout, "request-timeout")
		if !closed {
			t.Errorf("%s: the connection stayed open after the 408", name)
		}
	}

	start := time.Now()
	stalled := s.holdBody("127.0.0.2", "stalled", 1000, 10, "")
	want408("a body that stopped", stalled, start)

	start = time.Now()
	trickle := s.holdBody("127.0.0.2", "trickle", 1000, 1, "")
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if _, err := trickle.conn.Write([]byte("t")); err != nil {
					return
				}
			}
		}
	}()
	want408("a body that trickles", trickle, start)

	start = time.Now()
	chunked := s.holdChunked("127.0.0.3", "chunked")
	want408("a chunked body that stopped", chunked, start)

	// 12 KiB in 1 KiB steps every 100 ms: about 10 KiB/s for 1.1 s.
	steady := s.holdBody("127.0.0.4", "slow-but-steady", 12<<10, 1<<10, "")
	go func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for range 11 {
			select {
			case <-stop:
				return
			case <-tick.C:
				if _, err := steady.conn.Write(bytes.Repeat([]byte("b"), 1<<10)); err != nil {
					return
				}
			}
		}
	}()
	r, _ := steady.answer(false)
	wantAccepted(t, r, "hdr", "slow-but-steady")
	var stored []byte
	if err := db.QueryRow(t.Context(), `SELECT body FROM webhook_events WHERE delivery_id = 'slow-but-steady'`).Scan(&stored); err != nil || !bytes.Equal(stored, bytes.Repeat([]byte("b"), 12<<10)) {
		t.Errorf("stored body of the slow delivery: %d bytes, %v; want the %d sent", len(stored), err, 12<<10)
	}
	wantCounts(t, db, 1, 1)
}

// holdChunked is holdBody for a chunked body: headers, then the first
// chunk of 10 bytes, and no more.
func (s *server) holdChunked(ip, id string) *heldBody {
	s.t.Helper()
	return s.holdRequest(ip, "POST /webhooks/hdr HTTP/1.1\r\nHost: x\r\nX-Delivery-Id: "+id+"\r\nTransfer-Encoding: chunked\r\n\r\na\r\n0123456789\r\n", 0)
}

// A delivery refused before its body is read (an unknown sender, an
// encoding the sender does not accept) is answered at once, however slowly
// its body comes, and its connection is closed: net/http would otherwise
// read up to 256 KiB of the body before answering, for as long as the
// client takes.
func TestUnreadBodyClosesConnection(t *testing.T) {
	t.Parallel()
	s, _ := newDBServer(t, options{})
	for _, tc := range []struct {
		name, head string
		status     int
		slug       string
	}{
		{"unknown sender", "POST /webhooks/nobody HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n", http.StatusNotFound, "unknown-sender"},
		{"an encoding refused", "POST /webhooks/hdr HTTP/1.1\r\nHost: x\r\nX-Delivery-Id: br\r\nContent-Encoding: br\r\nContent-Length: 1000\r\n\r\n", http.StatusUnsupportedMediaType, "unsupported-encoding"},
	} {
		r, closed := s.holdRequest("127.0.0.2", tc.head, 10).answer(true)
		wantProblem(t, r, tc.status, tc.slug)
		if !closed {
			t.Errorf("%s: the connection stayed open", tc.name)
		}
	}
}
