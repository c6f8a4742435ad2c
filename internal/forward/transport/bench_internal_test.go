package transport

import (
	"bufio"
	"bytes"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/hookgate/hookgate/internal/config"
)

// BenchmarkHTTPSend is one forward posted to a local target that answers
// 200 with a short body, through the client forwards use: its time and
// its allocations per forward (make bench measures the whole path).
func BenchmarkHTTPSend(b *testing.B) {
	url := rawTarget(b)
	c := NewHTTPClient(64)
	b.Cleanup(c.CloseIdleConnections)
	h := NewHTTP(c, time.Now)
	m := Message{Sender: "bench", EventID: uuid.New(), DeliveryID: "d-1", EventType: "charge.succeeded",
		Target:  &config.Target{Name: "sink", URL: url + "/hooks", Timeout: config.Duration(5 * time.Second)},
		Headers: map[string][]string{"Content-Type": {"application/json"}}, Body: make([]byte, 512)}
	// A context that can end, as the dispatcher's: a send's own
	// context registers with it.
	ctx := b.Context()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if s := h.Send(ctx, m); s.Verdict != VerdictDelivered {
				b.Fatalf("verdict %v: %v", s.Verdict, s.Err)
			}
		}
	})
}

// rawTarget serves HTTP/1.1 keep-alive connections with a fixed 200 and
// allocates next to nothing per request, so that a benchmark in the same
// process counts the client's allocations. It returns its base URL. At the
// benchmark's end it closes the connections it accepted and waits for
// their goroutines.
func rawTarget(b *testing.B) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	var (
		mu     sync.Mutex
		conns  []net.Conn
		closed bool
		wg     sync.WaitGroup
	)
	b.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		closed = true
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	answer := []byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"ok\":true}")
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			if closed {
				mu.Unlock()
				_ = c.Close()
				return
			}
			conns = append(conns, c)
			wg.Add(1)
			mu.Unlock()
			go func() {
				defer wg.Done()
				defer c.Close()
				r := bufio.NewReaderSize(c, 8192)
				for {
					n := 0
					for { // the request's head
						line, err := r.ReadSlice('\n')
						if err != nil {
							return
						}
						if len(line) <= 2 {
							break
						}
						if k, v, ok := bytes.Cut(line, []byte(":")); ok && bytes.EqualFold(k, []byte("Content-Length")) {
							n, _ = strconv.Atoi(string(bytes.TrimSpace(v)))
						}
					}
					if _, err := r.Discard(n); err != nil {
						return
					}
					if _, err := c.Write(answer); err != nil {
						return
					}
				}
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}
