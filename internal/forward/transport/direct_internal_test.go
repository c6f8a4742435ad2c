package transport

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/hookgate/hookgate/internal/config"
)

// rawHTTP is a target that reads each request with net/http's parser and
// answers with what answer returns, written as is. It counts connections
// and requests, and keeps the requests' delivery IDs.
type rawHTTP struct {
	url   string
	conns atomic.Int32
	mu    sync.Mutex
	ids   []string
}

// newRawHTTP serves answer. close reports that the connection is closed
// after the answer, without saying so in it.
func newRawHTTP(t *testing.T, answer func(r *http.Request) (raw string, close bool)) *rawHTTP {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &rawHTTP{url: "http://" + ln.Addr().String()}
	var open sync.Map
	var wg sync.WaitGroup
	t.Cleanup(func() {
		_ = ln.Close()
		open.Range(func(c, _ any) bool { _ = c.(net.Conn).Close(); return true })
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.conns.Add(1)
			open.Store(c, true)
			wg.Go(func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					r, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, r.Body)
					s.mu.Lock()
					s.ids = append(s.ids, r.Header.Get("X-Hookgate-Delivery-Id"))
					s.mu.Unlock()
					raw, closeAfter := answer(r)
					if _, err := io.WriteString(c, raw); err != nil || closeAfter {
						return
					}
				}
			})
		}
	})
	return s
}

func (s *rawHTTP) received() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.ids...)
}

// directClient returns the transport of NewHTTPClient's client, whose
// idle connections close at the test's end.
func directClient(t *testing.T) *HTTP {
	c := NewHTTPClient(4)
	t.Cleanup(c.CloseIdleConnections)
	return NewHTTP(c, time.Now)
}

func directMessage(url, id string) Message {
	return Message{Sender: "acme", EventID: uuid.New(), DeliveryID: id, Body: []byte(`{"n":1}`),
		Headers: map[string][]string{"Content-Type": {"application/json"}},
		Target:  &config.Target{Name: "up", URL: url + "/hooks?x=1", Timeout: config.Duration(30 * time.Second)}}
}

// A forward goes over the client's own connections, which are reused for
// the next: ten forwards in turn take one connection, whether the answer
// has a Content-Length or is chunked.
func TestDirectReusesItsConnection(t *testing.T) {
	t.Parallel()
	for _, answer := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 202 Accepted\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
	} {
		s := newRawHTTP(t, func(*http.Request) (string, bool) { return answer, false })
		h := directClient(t)
		if h.direct == nil {
			t.Fatal("NewHTTPClient's client gives the transport no connections of its own")
		}
		for i := range 10 {
			if sent := h.Send(t.Context(), directMessage(s.url, fmt.Sprint(i))); sent.Verdict != VerdictDelivered || string(sent.Body) != "ok" {
				t.Fatalf("forward %d: %s %v, body %q", i, sent.Verdict, sent.Err, sent.Body)
			}
		}
		if n := s.conns.Load(); n != 1 {
			t.Errorf("%q: 10 forwards took %d connections, want 1", answer[:20], n)
		}
	}
}

// What the target receives is a well-formed POST: net/http's parser reads
// the path, the query, the Host, the body and every header of the forward.
func TestDirectSendsWhatNetHTTPSent(t *testing.T) {
	t.Parallel()
	got := make(chan *http.Request, 1)
	var body string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		body = string(b)
		got <- r
	}))
	t.Cleanup(srv.Close)
	h := directClient(t)
	m := directMessage(srv.URL, "d-1")
	m.Target.Headers = map[string]string{"Authorization": "Bearer b", "X-Env": " prod "}
	if sent := h.Send(t.Context(), m); sent.Verdict != VerdictDelivered {
		t.Fatalf("%s %v", sent.Verdict, sent.Err)
	}
	r := <-got
	want := h.header(m)
	if r.Method != http.MethodPost || r.URL.RequestURI() != "/hooks?x=1" || r.Host != strings.TrimPrefix(srv.URL, "http://") ||
		r.ContentLength != int64(len(m.Body)) || body != string(m.Body) || r.ProtoMajor != 1 || r.ProtoMinor != 1 {
		t.Errorf("received %s %s %s, Host %s, length %d, body %q", r.Method, r.URL, r.Proto, r.Host, r.ContentLength, body)
	}
	for k := range want {
		if k == "Webhook-Timestamp" {
			continue
		}
		if g, w := r.Header.Values(k), want.Values(k); len(g) != len(w) || g[0] != strings.TrimSpace(w[0]) {
			t.Errorf("%s received %q, want %q", k, g, w)
		}
	}
}

// A target that closed an idle connection gets the next forward on a new
// one, once: the forward is delivered and reaches it once.
func TestDirectReplacesAClosedIdleConnection(t *testing.T) {
	t.Parallel()
	s := newRawHTTP(t, func(*http.Request) (string, bool) { return "HTTP/1.1 204 No Content\r\n\r\n", true })
	h := directClient(t)
	for _, id := range []string{"a", "b", "c"} {
		if sent := h.Send(t.Context(), directMessage(s.url, id)); sent.Verdict != VerdictDelivered {
			t.Fatalf("forward %s: %s %v", id, sent.Verdict, sent.Err)
		}
		time.Sleep(10 * time.Millisecond) // the target's close arrives
	}
	if got := strings.Join(s.received(), ","); got != "a,b,c" {
		t.Errorf("the target received %s, want a,b,c", got)
	}
	if n := s.conns.Load(); n != 3 {
		t.Errorf("%d connections, want 3", n)
	}
}

// When the target closed every idle connection, as a restart does, the
// forward that finds the first closed dials a new one rather than try the
// next from the pool: it is delivered, and received once.
func TestDirectDialsAfterAClosedIdleConnection(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	both := make(chan struct{})
	s := newRawHTTP(t, func(*http.Request) (string, bool) {
		if n.Add(1) == 2 {
			close(both)
		}
		<-both // the first two are answered together, on two connections
		return "HTTP/1.1 204 No Content\r\n\r\n", true
	})
	h := directClient(t)
	var wg sync.WaitGroup
	for _, id := range []string{"a", "b"} {
		wg.Go(func() {
			if sent := h.Send(t.Context(), directMessage(s.url, id)); sent.Verdict != VerdictDelivered {
				t.Errorf("forward %s: %s %v", id, sent.Verdict, sent.Err)
			}
		})
	}
	wg.Wait()
	time.Sleep(10 * time.Millisecond) // the target's closes arrive
	if sent := h.Send(t.Context(), directMessage(s.url, "c")); sent.Verdict != VerdictDelivered {
		t.Fatalf("forward c, with two closed connections in the pool: %s %v", sent.Verdict, sent.Err)
	}
	if got := s.received(); len(got) != 3 || got[2] != "c" {
		t.Errorf("the target received %v, want a and b, then c once", got)
	}
}

// A connection is not reused after an answer that says Connection: close,
// a body longer than is read, a body that ends with the connection, or
// bytes after the answer.
func TestDirectDropsAConnectionItCannotReuse(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", maxResponseBytes+1)
	for name, answer := range map[string]string{
		"Connection: close": "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok",
		"a long body":       fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(long), long),
		"HTTP/1.0":          "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok",
		"bytes after it":    "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 500 Internal Server Error\r\n\r\n",
	} {
		s := newRawHTTP(t, func(*http.Request) (string, bool) { return answer, false })
		h := directClient(t)
		for i := range 2 {
			if sent := h.Send(t.Context(), directMessage(s.url, fmt.Sprint(i))); sent.Verdict != VerdictDelivered {
				t.Fatalf("%s: %s %v", name, sent.Verdict, sent.Err)
			}
		}
		if n := s.conns.Load(); n != 2 {
			t.Errorf("%s: two forwards took %d connections, want 2", name, n)
		}
	}
}

// An answer whose head is longer than 64 KiB is refused, and so is a
// header value with a line break: neither is read nor sent further.
func TestDirectBounds(t *testing.T) {
	t.Parallel()
	huge := "HTTP/1.1 200 OK\r\nX-Big: " + strings.Repeat("b", maxResponseHeaderBytes) + "\r\nContent-Length: 0\r\n\r\n"
	s := newRawHTTP(t, func(*http.Request) (string, bool) { return huge, false })
	h := directClient(t)
	if sent := h.Send(t.Context(), directMessage(s.url, "big")); sent.Verdict != VerdictRetry || !strings.Contains(fmt.Sprint(sent.Err), "exceeded") {
		t.Errorf("an answer with a huge head: %s %v, want retry, headers exceeded", sent.Verdict, sent.Err)
	}
	m := directMessage(s.url, "smuggle")
	m.AddHeaders = map[string]string{"X-Tenant": "t\r\nContent-Length: 0\r\n\r\nPOST /admin HTTP/1.1"}
	if sent := h.Send(t.Context(), m); sent.Verdict == VerdictDelivered || sent.Err == nil {
		t.Errorf("a header with a line break: %s, want an error", sent.Verdict)
	}
	for _, id := range s.received() {
		if id == "smuggle" || id == "" {
			t.Errorf("the target received a request %q", id)
		}
	}
}

// 1xx answers before the final one are read past.
func TestDirectReadsPastInformationalAnswers(t *testing.T) {
	t.Parallel()
	s := newRawHTTP(t, func(*http.Request) (string, bool) {
		return "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok", false
	})
	sent := directClient(t).Send(t.Context(), directMessage(s.url, "x"))
	if sent.Verdict != VerdictDelivered || sent.Status != http.StatusCreated || string(sent.Body) != "ok" {
		t.Errorf("%s %d %q %v, want 201 delivered", sent.Verdict, sent.Status, sent.Body, sent.Err)
	}
}

// A send whose context is cancelled while the target holds the answer
// ends without a verdict, long before the target's timeout.
func TestDirectEndsWithItsContext(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	s := newRawHTTP(t, func(*http.Request) (string, bool) { <-release; return "", true })
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(50*time.Millisecond, cancel)
	sent := directClient(t).Send(ctx, directMessage(s.url, "x")) // timeout 30 s
	close(release)
	if sent.Verdict != VerdictNone || sent.Err == nil {
		t.Errorf("%s %v, want no verdict", sent.Verdict, sent.Err)
	}
}

// Over https the forward goes over TLS, as HTTP/1.1, and the connection is
// reused.
func TestDirectOverTLS(t *testing.T) {
	t.Parallel()
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || r.ProtoMajor != 1 {
			w.WriteHeader(http.StatusBadRequest)
		}
	}))
	srv.EnableHTTP2 = true
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	c := NewHTTPClient(4)
	t.Cleanup(c.CloseIdleConnections)
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	c.Transport.(*guardedTransport).direct.tlsConfig = &tls.Config{RootCAs: roots}
	h := NewHTTP(c, time.Now)
	for i := range 3 {
		if sent := h.Send(t.Context(), directMessage(srv.URL, fmt.Sprint(i))); sent.Verdict != VerdictDelivered {
			t.Fatalf("%s %d %v", sent.Verdict, sent.Status, sent.Err)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("3 forwards took %d connections, want 1", n)
	}
	// Without the target's certificate among the roots, nothing is sent.
	if sent := directClient(t).Send(t.Context(), directMessage(srv.URL, "x")); sent.Verdict != VerdictRetry {
		t.Errorf("an unknown certificate: %s %v, want retry", sent.Verdict, sent.Err)
	}
}

// Many forwards at once share the pool without a race, and each reaches
// the target once.
func TestDirectConcurrent(t *testing.T) {
	t.Parallel()
	s := newRawHTTP(t, func(*http.Request) (string, bool) { return "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", false })
	h := directClient(t)
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 50 {
				if sent := h.Send(t.Context(), directMessage(s.url, fmt.Sprintf("%d-%d", g, i))); sent.Verdict != VerdictDelivered {
					t.Errorf("%s %v", sent.Verdict, sent.Err)
				}
			}
		})
	}
	wg.Wait()
	seen := map[string]bool{}
	for _, id := range s.received() {
		if seen[id] {
			t.Errorf("%s received twice", id)
		}
		seen[id] = true
	}
	if len(seen) != 16*50 {
		t.Errorf("%d forwards received, want %d", len(seen), 16*50)
	}
}

// A target that a proxy from the environment covers is posted through
// net/http's Transport, which goes through the proxy: the own connections
// would dial the target itself. net/http reads the environment once per
// process, so the check runs in a process of its own.
func TestDirectLeavesProxiedTargetsToNetHTTP(t *testing.T) {
	if os.Getenv("HOOKGATE_TEST_PROXY_CHILD") != "" {
		c := NewHTTPClient(4)
		defer c.CloseIdleConnections()
		h := NewHTTP(c, time.Now)
		m := directMessage("http://target.invalid", "proxied")
		sent := h.Send(t.Context(), m)
		if sent.Verdict != VerdictDelivered || string(sent.Body) != "via proxy" {
			t.Fatalf("%s %v, body %q: want delivered through the proxy", sent.Verdict, sent.Err, sent.Body)
		}
		return
	}
	t.Parallel()
	var hits atomic.Int32
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Host == "target.invalid" && r.Header.Get("X-Hookgate-Delivery-Id") == "proxied" {
			hits.Add(1)
			_, _ = io.WriteString(w, "via proxy")
			return
		}
		w.WriteHeader(http.StatusBadGateway)
	}))
	t.Cleanup(proxy.Close)
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestDirectLeavesProxiedTargetsToNetHTTP$", "-test.count=1")
	cmd.Env = append(os.Environ(), "HOOKGATE_TEST_PROXY_CHILD=1", "HTTP_PROXY="+proxy.URL, "http_proxy="+proxy.URL, "NO_PROXY=", "no_proxy=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the child: %v\n%s", err, out)
	}
	if hits.Load() != 1 {
		t.Errorf("the proxy carried %d forwards, want 1", hits.Load())
	}
}
