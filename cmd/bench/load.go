package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// idFunc appends the delivery ID of worker w's seq-th request to dst.
type idFunc func(dst []byte, w, seq int) []byte

// firstIDs returns unique delivery IDs "<tag>-<run>-<worker>-<seq>": tag
// names the phase (the sink counts by it), run the time of the call.
func firstIDs(tag string) idFunc {
	prefix := tag + "-" + strconv.FormatInt(time.Now().UnixNano()/1e6, 36) + "-"
	return func(dst []byte, w, seq int) []byte {
		return strconv.AppendInt(append(strconv.AppendInt(append(dst, prefix...), int64(w), 10), '-'), int64(seq), 10)
	}
}

// replayIDs returns IDs drawn pseudo-randomly from base … base+n-1.
func replayIDs(base int64, n int) idFunc {
	return func(dst []byte, w, seq int) []byte {
		return strconv.AppendInt(dst, base+int64(draw(w, seq, n)), 10)
	}
}

// draw returns a pseudo-random number in 0 … n-1 for worker w's seq-th
// request (splitmix64).
func draw(w, seq, n int) int {
	x := (uint64(w)<<40 ^ uint64(seq)) + 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return int((x ^ (x >> 31)) % uint64(n))
}

// keyedPrefix starts keyedBody: the ordered phases' key, four digits the
// load sets per request (setKey), is the body's first member.
const keyedPrefix = `{"key":"0000",`

// keyedBody returns makeBody's document of size bytes with the member
// "key" first: the ordered phases' targets read it at /key.
func keyedBody(size int) []byte {
	return append([]byte(keyedPrefix), makeBody(size - len(keyedPrefix) + 1)[1:]...)
}

// setKey writes key k (0 … 9999) into a keyedBody.
func setKey(body []byte, k int) {
	for i := 11; i >= 8; i-- {
		body[i], k = byte('0'+k%10), k/10
	}
}

// bodyKey returns a keyedBody's key, or "" for another body.
func bodyKey(body []byte) string {
	if len(body) < len(keyedPrefix) || !bytes.Equal(body[:8], []byte(keyedPrefix[:8])) || body[12] != '"' {
		return ""
	}
	return string(body[8:12])
}

// makeBody returns a JSON document of exactly size bytes (480 to 1500):
// a Stripe charge.succeeded event of a Connect account, in live mode, with
// the card holder's e-mail and address, as the rules of docs/forwarding.md
// read it (the rules phase's filter passes on it), its description padded.
func makeBody(size int) []byte {
	const head = `{"id":"evt_3PqWz2LkdIwHu7ix0Vb1cXyZ","object":"event","account":"acct_1Nv0FGQ9RKHgCVdK","created":1767225600,"livemode":true,` +
		`"type":"charge.succeeded","data":{"object":{"id":"ch_3PqWz2LkdIwHu7ix0Wm9aBcD","object":"charge","amount":4200,"currency":"eur",` +
		`"status":"succeeded","billing_details":{"address":{"city":"Berlin","country":"DE","line1":"Friedrichstrasse 12","postal_code":"10117"},` +
		`"email":"jenny.rosen@example.com","name":"Jenny Rosen","phone":null},"description":"`
	return []byte(head + strings.Repeat("abcdefghijklmnopqrstuvwxyz0123456789", 42)[:size-len(head)-4] + `"}}}`)
}

// The load generator's client and the sink share the two cores with what
// they measure, where net/http's client cost about 100 µs per request and
// its server 30–50 µs per forward (docs/design-notes.md): they write
// prepared bytes on keep-alive connections and use only net/http's message
// parsers (about 2 µs per request and 3 µs per forward).

// rawClient POSTs deliveries to /webhooks/bench at addr over one
// keep-alive connection, each request a template written in one write.
type rawClient struct {
	addr             string
	head, body, wbuf []byte // head: up to "X-Delivery-Id: "
	conn             net.Conn
	br               *bufio.Reader
}

func newRawClient(addr string, body []byte) *rawClient {
	h := "POST /webhooks/bench HTTP/1.1\r\nHost: " + addr + "\r\nUser-Agent: hookgate-bench/1.0\r\nContent-Length: " + strconv.Itoa(len(body)) +
		"\r\nContent-Type: application/json\r\nX-Event-Type: charge.succeeded\r\nAccept-Encoding: gzip\r\nX-Delivery-Id: "
	return &rawClient{addr: addr, head: []byte(h), body: body, br: bufio.NewReaderSize(nil, 4096)}
}

func (c *rawClient) close() {
	if c.conn != nil {
		c.conn.Close()
		c.conn = nil
	}
}

// do sends the delivery with ID id; it returns an error unless the answer
// is a 202 with Idempotent-Replayed: true when replayed, without it when
// not. On an error it closes the connection (the next call dials again).
func (c *rawClient) do(id []byte, replayed bool) (err error) {
	if c.conn == nil {
		if c.conn, err = (&net.Dialer{Timeout: 5 * time.Second}).DialContext(context.Background(), "tcp", c.addr); err != nil {
			return err
		}
		c.br.Reset(c.conn)
	}
	c.wbuf = append(append(append(append(c.wbuf[:0], c.head...), id...), "\r\n\r\n"...), c.body...)
	_ = c.conn.SetDeadline(time.Now().Add(30 * time.Second))
	var resp *http.Response
	if _, err = c.conn.Write(c.wbuf); err == nil {
		resp, err = http.ReadResponse(c.br, nil)
	}
	if err == nil {
		var snippet []byte
		if resp.StatusCode != 202 {
			snippet, _ = io.ReadAll(io.LimitReader(resp.Body, 300))
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		switch r := resp.Header.Get("Idempotent-Replayed"); {
		case err != nil:
		case resp.StatusCode != 202:
			err = fmt.Errorf("%d: %s", resp.StatusCode, strings.TrimSpace(string(snippet)))
		case replayed && r != "true", !replayed && r != "":
			err = fmt.Errorf("%d with Idempotent-Replayed %q", resp.StatusCode, r)
		}
	}
	if err != nil || resp.Close {
		c.close()
	}
	return err
}

// sink is the forward target: it answers every POST with 204 at once and
// notes when each delivery ID (X-Hookgate-Delivery-Id) first arrived, and
// how many arrived by tag (the ID up to its first "-"), and of those how
// many the rules phase's transform made (rulesTenant, rulesMark), and the
// key of a keyedBody; a forward delivered twice (at least once) counts
// once. Its peers are the servers, which stop before it does.
type sink struct {
	ln                   net.Listener
	wg                   sync.WaitGroup
	mu                   sync.Mutex
	seen                 map[string]time.Time
	keys                 map[string]string // of the IDs whose body is a keyedBody
	byTag, transformedBy map[string]int
}

func startSink() (*sink, error) {
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("forward sink: %w", err)
	}
	s := &sink{ln: ln, seen: map[string]time.Time{}, keys: map[string]string{}, byTag: map[string]int{}, transformedBy: map[string]int{}}
	s.wg.Go(func() {
		for c, err := ln.Accept(); err == nil; c, err = ln.Accept() {
			s.wg.Go(func() { s.serve(c) })
		}
	})
	return s, nil
}

func (s *sink) url() string { return "http://" + s.ln.Addr().String() + "/sink" }

// serve answers one connection's requests until it closes.
func (s *sink) serve(c net.Conn) {
	defer c.Close()
	var body bytes.Buffer
	for br := bufio.NewReaderSize(c, 8<<10); ; {
		req, err := http.ReadRequest(br)
		if err == nil {
			body.Reset()
			_, err = body.ReadFrom(req.Body)
		}
		if err != nil {
			return
		}
		s.mu.Lock()
		if id := req.Header.Get("X-Hookgate-Delivery-Id"); id != "" && s.seen[id].IsZero() {
			s.seen[id] = time.Now()
			tag, _, _ := strings.Cut(id, "-")
			s.byTag[tag]++
			if req.Header.Get("X-Tenant") == rulesTenant && bytes.Contains(body.Bytes(), []byte(rulesMark)) {
				s.transformedBy[tag]++
			}
			if k := bodyKey(body.Bytes()); k != "" {
				s.keys[id] = k
			}
		}
		s.mu.Unlock()
		if _, err := c.Write([]byte("HTTP/1.1 204 No Content\r\n\r\n")); err != nil || req.Close {
			return
		}
	}
}

// received returns how many distinct delivery IDs with tag arrived.
func (s *sink) received(tag string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byTag[tag]
}

// transformed returns how many of them the rules phase's transform made.
func (s *sink) transformed(tag string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.transformedBy[tag]
}

// wait waits up to d for n of them, while srv runs, and returns how many.
func (s *sink) wait(ctx context.Context, tag string, n int, d time.Duration, srv *server) int {
	for t0 := time.Now(); s.received(tag) < n && time.Since(t0) < d && ctx.Err() == nil && !srv.exited(); {
		time.Sleep(50 * time.Millisecond)
	}
	return s.received(tag)
}

// lags returns, sorted, the time from each 2xx in acks (by delivery ID) to
// its forward's arrival; 0 for one that arrived before the 2xx was read.
func (s *sink) lags(acks map[string]time.Time) (l []time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, ack := range acks {
		if at, ok := s.seen[id]; ok {
			l = append(l, max(at.Sub(ack), 0))
		}
	}
	slices.Sort(l)
	return l
}

func (s *sink) close() {
	_ = s.ln.Close()
	s.wg.Wait()
}

// loadConfig describes one load.
type loadConfig struct {
	addr             string // the server's
	workers          int
	warmup, duration time.Duration
	body             []byte
	ids              idFunc
	replayed         bool                 // every answer must carry Idempotent-Replayed: true; otherwise none may
	keys             int                  // when positive: ids of w+seq·workers < keys once each, untimed
	orderKeys        int                  // when positive: body is a keyedBody, each request's key drawn from 0 … orderKeys-1
	rate             float64              // when positive: requests per second in all (an open-loop load)
	acks             map[string]time.Time // when not nil: when each 2xx was read, by delivery ID
}

// loadResult is what a load measured. count: requests started after the
// warm-up and ended in the window, without error; the others count all.
type loadResult struct {
	measured                          time.Duration
	count, requests, accepted, errors int
	errSamples                        []string
	latencies                         []time.Duration // of the counted requests, sorted
	cpu                               cpuUse
	gatewayPG                         time.Duration // the gateway's and PostgreSQL's CPU time
	secs                              float64       // the seconds over which cpu was read
	end                               cpuSnap
}

// merge returns rs as one load: their counts, latencies and measured
// times added, their CPU use over all their intervals, and the last's end.
func merge(rs []*loadResult) *loadResult {
	m := &loadResult{}
	var us []cpuUse
	var secs []float64
	for _, r := range rs {
		m.measured, m.count, m.requests, m.accepted, m.errors = m.measured+r.measured, m.count+r.count, m.requests+r.requests, m.accepted+r.accepted, m.errors+r.errors
		m.latencies = append(m.latencies, r.latencies...)
		for _, e := range r.errSamples {
			if len(m.errSamples) < 5 && !slices.Contains(m.errSamples, e) {
				m.errSamples = append(m.errSamples, e)
			}
		}
		m.gatewayPG, m.secs, m.end = m.gatewayPG+r.gatewayPG, m.secs+r.secs, r.end
		us, secs = append(us, r.cpu), append(secs, r.secs)
	}
	slices.Sort(m.latencies)
	m.cpu = mergeCPU(us, secs)
	return m
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

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }

// runLoad runs cfg.workers workers, each on a connection of its own.
func runLoad(ctx context.Context, cfg loadConfig) *loadResult {
	start := time.Now()
	warmEnd := start.Add(cfg.warmup)
	end := warmEnd.Add(cfg.duration)
	var (
		mu sync.Mutex
		wg sync.WaitGroup
		r  = &loadResult{measured: cfg.duration}
	)
	for w := range cfg.workers {
		wg.Go(func() {
			c := newRawClient(cfg.addr, cfg.body)
			defer c.close()
			if cfg.orderKeys > 0 {
				c.body = slices.Clone(cfg.body)
			}
			var (
				id   []byte
				mine loadResult
				acks = map[string]time.Time{}
			)
			for seq := 0; ctx.Err() == nil; seq++ {
				if cfg.keys > 0 && seq*cfg.workers+w >= cfg.keys {
					break
				} else if cfg.rate > 0 {
					time.Sleep(time.Until(start.Add(time.Duration(float64(seq*cfg.workers+w) / cfg.rate * float64(time.Second)))))
				}
				t0 := time.Now()
				if cfg.keys == 0 && !t0.Before(end) {
					break
				}
				id = cfg.ids(id[:0], w, seq)
				if cfg.orderKeys > 0 {
					setKey(c.body, draw(w, seq, cfg.orderKeys))
				}
				err := c.do(id, cfg.replayed)
				t1 := time.Now()
				if mine.requests++; err != nil {
					if mine.errors++; len(mine.errSamples) < 3 {
						mine.errSamples = append(mine.errSamples, err.Error())
					}
					time.Sleep(10 * time.Millisecond) // do not spin when the server is down
					continue
				}
				if mine.accepted++; cfg.acks != nil {
					acks[string(id)] = t1
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
			for _, e := range mine.errSamples {
				if len(r.errSamples) < 5 && !slices.Contains(r.errSamples, e) {
					r.errSamples = append(r.errSamples, e)
				}
			}
			maps.Copy(cfg.acks, acks)
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		r.measured = max(time.Since(warmEnd), 0)
	}
	slices.Sort(r.latencies)
	return r
}
