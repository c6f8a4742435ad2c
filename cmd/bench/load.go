package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// maxReplayKeys bounds -replay-keys, so that the key ranges of runs against
// one database (replayBase) do not overlap.
const maxReplayKeys = 100000

// idFunc appends the delivery ID of worker w's seq-th request to dst.
type idFunc func(dst []byte, w, seq int) []byte

// firstIDs returns unique delivery IDs "<tag>-<run>-<worker>-<seq>": tag
// names the phase, run the time of the call.
func firstIDs(tag string) idFunc {
	prefix := tag + "-" + strconv.FormatInt(time.Now().UnixNano()/1e6, 36) + "-"
	return func(dst []byte, w, seq int) []byte {
		dst = strconv.AppendInt(append(dst, prefix...), int64(w), 10)
		return strconv.AppendInt(append(dst, '-'), int64(seq), 10)
	}
}

// replayBase returns the first replay key of a run, different for runs
// started at different seconds.
func replayBase() int64 { return 1_000_000_000 + (time.Now().Unix()%100_000)*maxReplayKeys }

// keyIDs returns base+seq, whatever the worker.
func keyIDs(base int64) idFunc {
	return func(dst []byte, _, seq int) []byte { return strconv.AppendInt(dst, base+int64(seq), 10) }
}

// replayIDs returns IDs drawn pseudo-randomly (splitmix64) from base …
// base+n-1.
func replayIDs(base int64, n int) idFunc {
	return func(dst []byte, w, seq int) []byte {
		x := (uint64(w)<<40 ^ uint64(seq)) + 0x9e3779b97f4a7c15
		x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
		x = (x ^ (x >> 27)) * 0x94d049bb133111eb
		return strconv.AppendInt(dst, base+int64((x^(x>>31))%uint64(n)), 10)
	}
}

// makeBody returns a JSON document of exactly size bytes (size ≥ 32).
func makeBody(size int) []byte {
	prefix, suffix := `{"type":"order.created","created":1767225600,"data":{"object":"order","id":"ord_1","amount":4200,"currency":"eur","note":"`, `"}}`
	if size < len(prefix)+len(suffix) {
		prefix, suffix = `{"note":"`, `"}`
	}
	b := append(make([]byte, 0, size), prefix...)
	for i := 0; len(b) < size-len(suffix); i++ {
		b = append(b, "abcdefghijklmnopqrstuvwxyz0123456789"[i%36])
	}
	return append(b, suffix...)
}

// The load generator's client and the sink speak just the HTTP/1.1 that
// hookgate and they exchange (keep-alive, Content-Length bodies, a few
// header fields read): they share the two cores with what they measure,
// where net/http's client cost about 100 µs per request and its server
// 30–50 µs per forward (docs/design-notes.md). A message they do not read
// (a chunked body, a malformed head) is an error, so that a check fails
// rather than mismeasures.
var errUnread = errors.New("HTTP message not read")

// head is what readHead read of a message head: its first line,
// Content-Length (-1: none), Connection: close, and one other field.
type head struct {
	first  string
	length int
	close  bool
	field  string
}

func readHead(br *bufio.Reader, field string) (h head, err error) {
	line, err := br.ReadSlice('\n')
	h.first, h.length = string(bytes.TrimRight(line, "\r\n")), -1
	for err == nil {
		if line, err = br.ReadSlice('\n'); err != nil {
			break
		}
		if line = bytes.TrimRight(line, "\r\n"); len(line) == 0 {
			return h, nil
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		value = bytes.TrimSpace(value)
		switch n := string(name); {
		case !ok || strings.EqualFold(n, "Transfer-Encoding"):
			return h, fmt.Errorf("%w: %q", errUnread, line)
		case strings.EqualFold(n, "Content-Length"):
			if h.length, err = strconv.Atoi(string(value)); err != nil || h.length < 0 {
				return h, fmt.Errorf("%w: Content-Length %q", errUnread, value)
			}
		case strings.EqualFold(n, "Connection"):
			h.close = bytes.EqualFold(value, []byte("close"))
		case strings.EqualFold(n, field):
			h.field = string(value)
		}
	}
	return h, err
}

// rawClient POSTs deliveries over one keep-alive connection, each request
// a template written in one write.
type rawClient struct {
	addr       string
	head, body []byte // head: up to "X-Delivery-Id: "
	conn       net.Conn
	br         *bufio.Reader
	wbuf       []byte
}

func newRawClient(rawURL string, body []byte) (*rawClient, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	h := "POST " + u.RequestURI() + " HTTP/1.1\r\nHost: " + u.Host + "\r\nUser-Agent: hookgate-bench/1.0\r\nContent-Length: " + strconv.Itoa(len(body)) +
		"\r\nContent-Type: application/json\r\nX-Event-Type: order.created\r\nAccept-Encoding: gzip\r\nX-Delivery-Id: "
	return &rawClient{addr: u.Host, head: []byte(h), body: body, br: bufio.NewReaderSize(nil, 4096)}, nil
}

func (c *rawClient) close() {
	if c.conn != nil {
		c.conn.Close()
		c.conn = nil
	}
}

// do sends the delivery with ID id; it returns the answer's status, its
// Idempotent-Replayed and, for a status other than 202, the start of its
// body. On an error it closes the connection (the next call dials again).
func (c *rawClient) do(id []byte) (status int, replayed string, snippet []byte, err error) {
	if c.conn == nil {
		if c.conn, err = (&net.Dialer{Timeout: 5 * time.Second}).DialContext(context.Background(), "tcp", c.addr); err != nil {
			return 0, "", nil, err
		}
		c.br.Reset(c.conn)
	}
	c.wbuf = append(append(append(append(c.wbuf[:0], c.head...), id...), "\r\n\r\n"...), c.body...)
	_ = c.conn.SetDeadline(time.Now().Add(30 * time.Second))
	var h head
	if _, err = c.conn.Write(c.wbuf); err == nil {
		h, err = readHead(c.br, "Idempotent-Replayed")
	}
	if err == nil && (len(h.first) < 12 || !strings.HasPrefix(h.first, "HTTP/1.") || h.length < 0) {
		err = fmt.Errorf("%w: %q without Content-Length", errUnread, h.first)
	}
	if err == nil {
		if status, err = strconv.Atoi(h.first[9:12]); status != 202 && err == nil {
			snippet, err = io.ReadAll(io.LimitReader(c.br, int64(min(h.length, 300))))
		}
	}
	if err == nil {
		_, err = c.br.Discard(h.length - len(snippet))
	}
	if err != nil || h.close {
		c.close()
	}
	return status, h.field, snippet, err
}

// loadConfig describes one load.
type loadConfig struct {
	url              string
	workers          int
	warmup, duration time.Duration
	body             []byte
	ids              idFunc
	wantReplayed     bool      // every answer must carry Idempotent-Replayed: true; otherwise none may
	keys             int       // when positive: the IDs of seq 0 … keys-1 once each, untimed
	rate             float64   // when positive: requests per second in all (an open-loop load)
	acks             *sync.Map // when not nil: when each 2xx was read, by delivery ID
}

// loadResult is what a load measured.
type loadResult struct {
	name       string
	measured   time.Duration
	count      int // requests started after the warm-up and ended in the window, without error
	requests   int // all, warm-up included
	accepted   int // answers judged right (202), warm-up included
	errors     int
	errSamples []string
	latencies  []time.Duration // of the counted requests, sorted
	rssPeak    float64         // the server's, MB
	cpu        cpuUse
	gatewayPG  time.Duration // the gateway's and PostgreSQL's CPU time
	end        cpuSnap
}

func (r *loadResult) rate() float64 { return float64(r.count) / max(r.measured.Seconds(), 1e-9) }

func (r *loadResult) p(q float64) time.Duration { return percentile(r.latencies, q) }

// percentile returns the nearest-rank q-quantile of sorted (0 when empty).
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(max(int(float64(len(sorted))*q+0.9999999)-1, 0), len(sorted)-1)]
}

// runLoad runs cfg.workers workers, each on a connection of its own.
func runLoad(ctx context.Context, cfg loadConfig) *loadResult {
	start := time.Now()
	warmEnd := start.Add(cfg.warmup)
	end := warmEnd.Add(cfg.duration)
	var (
		next atomic.Int64 // with keys
		mu   sync.Mutex
		wg   sync.WaitGroup
		r    = &loadResult{measured: cfg.duration}
	)
	for w := range cfg.workers {
		wg.Go(func() {
			c, _ := newRawClient(cfg.url, cfg.body) // the URL is ours and valid
			defer c.close()
			var (
				id      []byte
				mine    loadResult
				samples []string
			)
			for seq := 0; ctx.Err() == nil; seq++ {
				if cfg.keys > 0 {
					if seq = int(next.Add(1) - 1); seq >= cfg.keys {
						break
					}
				} else if cfg.rate > 0 {
					time.Sleep(time.Until(start.Add(time.Duration(float64(seq*cfg.workers+w) / cfg.rate * float64(time.Second)))))
				}
				t0 := time.Now()
				if cfg.keys == 0 && !t0.Before(end) {
					break
				}
				id = cfg.ids(id[:0], w, seq)
				status, replayed, snippet, err := c.do(id)
				t1 := time.Now()
				mine.requests++
				switch {
				case err != nil:
				case status != 202:
					err = fmt.Errorf("%d: %s", status, bytes.TrimSpace(snippet))
				case cfg.wantReplayed && replayed != "true", !cfg.wantReplayed && replayed != "":
					err = fmt.Errorf("%d with Idempotent-Replayed %q", status, replayed)
				}
				if err != nil {
					if mine.errors++; len(samples) < 3 {
						samples = append(samples, err.Error())
					}
					time.Sleep(10 * time.Millisecond) // do not spin when the server is down
					continue
				}
				mine.accepted++
				if cfg.acks != nil {
					cfg.acks.Store(string(id), t1)
				}
				if !t0.Before(warmEnd) && !t1.After(end) {
					mine.count++
					mine.latencies = append(mine.latencies, t1.Sub(t0))
				}
			}
			mu.Lock()
			defer mu.Unlock()
			r.count, r.requests, r.accepted, r.errors = r.count+mine.count, r.requests+mine.requests, r.accepted+mine.accepted, r.errors+mine.errors
			r.latencies = append(r.latencies, mine.latencies...)
			for _, s := range samples {
				if len(r.errSamples) < 5 && !slices.Contains(r.errSamples, s) {
					r.errSamples = append(r.errSamples, s)
				}
			}
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		r.measured = max(time.Since(warmEnd), 0)
	}
	slices.Sort(r.latencies)
	return r
}

// ms formats d in milliseconds.
func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 2, 64) + " ms"
}

func printLoad(out io.Writer, r *loadResult) {
	fmt.Fprintf(out, "%-32s %9.0f deliveries/s  p50 %s  p99 %s  errors %d  (%d counted in %s, %d requests incl. warm-up)\n",
		r.name, r.rate(), ms(r.p(0.50)), ms(r.p(0.99)), r.errors, r.count, r.measured, r.requests)
	fmt.Fprintf(out, "  server RSS peak %.1f MB; CPU cores: %s\n", r.rssPeak, r.cpu)
	if rate := r.rate(); rate > 0 && r.cpu.ok {
		us := func(cores float64) float64 { return cores / rate * 1e6 }
		fmt.Fprintf(out, "  CPU per delivery: gateway %.0f µs, postgres %.0f µs, machine %.0f µs\n", us(r.cpu.server), us(r.cpu.postgres), us(r.cpu.machine))
	}
	warnDisturbed(out, r.cpu)
	if len(r.errSamples) > 0 {
		fmt.Fprintf(out, "  errors, e.g.: %s\n", strings.Join(r.errSamples, " | "))
	}
}
