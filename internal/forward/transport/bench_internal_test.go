package transport

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"strconv"
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
	h := NewHTTP(NewHTTPClient(64), time.Now)
	m := Message{Sender: "bench", EventID: uuid.New(), DeliveryID: "d-1", EventType: "charge.succeeded",
		Target:  &config.Target{Name: "sink", URL: url + "/hooks", Timeout: config.Duration(5 * time.Second)},
		Headers: map[string][]string{"Content-Type": {"application/json"}}, Body: make([]byte, 512)}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if s := h.Send(context.Background(), m); s.Verdict != VerdictDelivered {
				b.Fatalf("verdict %v: %v", s.Verdict, s.Err)
			}
		}
	})
}

// rawTarget serves HTTP/1.1 keep-alive connections with a fixed 200 and
// allocates next to nothing per request, so that a benchmark in the same
// process counts the client's allocations. It returns its base URL.
func rawTarget(b *testing.B) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = ln.Close() })
	answer := []byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"ok\":true}")
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
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
