package handler_test

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/handler"
	"github.com/hookgate/hookgate/internal/testkit"
)

// onlyReader hides a reader's length, so that the request is sent chunked
// (no Content-Length).
type onlyReader struct{ io.Reader }

// The body budget: while a request holds most of the share of large bodies
// (its Content-Length announced, its last byte held back), a large body of
// unknown length, taken chunk by chunk, finds no room and gets 503
// overloaded with Retry-After (counted as shed for body_budget) and so does
// a gzip body whose inflated bytes find none; a small delivery is accepted;
// once the held request ends its room is given back and the large body is
// accepted, and nothing is counted in flight any more.
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
	metric := func(name string) string {
		m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindSubmatch(s.get("/metrics").body)
		if m == nil {
			t.Fatalf("no %s in /metrics", name)
		}
		return string(m[1])
	}

	// A request announcing 700 KB holds them from its headers on.
	conn, err := net.Dial("tcp", strings.TrimPrefix(s.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /webhooks/hdr HTTP/1.1\r\nHost: x\r\nX-Delivery-Id: held\r\nContent-Length: 700000\r\n\r\n%s", bytes.Repeat([]byte("h"), 1000))
	testkit.Poll(t, pollTimeout, "the held request to take its share", func() bool { return metric("hookgate_ingest_body_bytes_in_flight") == "700000" })

	large := bytes.Repeat([]byte("l"), 300_000)
	r := s.do(s.postRequest("hdr", "large", nil, func(req *http.Request) {
		req.Body, req.ContentLength = io.NopCloser(onlyReader{bytes.NewReader(large)}), -1
	}))
	wantProblem(t, r, http.StatusServiceUnavailable, "overloaded")
	wantRetryAfter(t, r)

	var zipped bytes.Buffer
	zw := gzip.NewWriter(&zipped)
	_, _ = zw.Write(large)
	_ = zw.Close()
	r = s.do(s.postRequest("zipped", "zipped", zipped.Bytes(), func(req *http.Request) { req.Header.Set("Content-Encoding", "gzip") }))
	wantProblem(t, r, http.StatusServiceUnavailable, "overloaded")
	if got := metric(`hookgate_ingest_shed_total{reason="body_budget"}`); got != "2" {
		t.Errorf("shed for body_budget: %s, want 2", got)
	}

	wantAccepted(t, s.post("hdr", "small", bytes.Repeat([]byte("s"), 1000)), "hdr", "small")

	conn.Close()
	testkit.Poll(t, pollTimeout, "the held request to give its share back", func() bool { return metric("hookgate_ingest_body_bytes_in_flight") == "0" })
	r = s.do(s.postRequest("hdr", "large", nil, func(req *http.Request) {
		req.Body, req.ContentLength = io.NopCloser(onlyReader{bytes.NewReader(large)}), -1
	}))
	wantAccepted(t, r, "hdr", "large")
	wantAccepted(t, s.do(s.postRequest("zipped", "zipped", zipped.Bytes(), func(req *http.Request) { req.Header.Set("Content-Encoding", "gzip") })), "zipped", "zipped")
	var stored []byte
	if err := db.QueryRow(t.Context(), `SELECT body FROM webhook_events WHERE delivery_id = 'large'`).Scan(&stored); err != nil || !bytes.Equal(stored, large) {
		t.Errorf("stored body of the chunked delivery: %d bytes, %v; want the %d sent", len(stored), err, len(large))
	}
	if got := metric("hookgate_ingest_body_bytes_in_flight"); got != "0" {
		t.Errorf("body bytes in flight after every request ended: %s", got)
	}
}
