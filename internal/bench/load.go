package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// maxReplayKeys bounds -replay-keys, so that the key ranges of runs against
// the same database (replayBase) do not overlap.
const maxReplayKeys = 100000

// idFunc appends the delivery ID of worker w's seq-th request to dst.
type idFunc func(dst []byte, w, seq int) []byte

// firstIDs returns unique delivery IDs: "<tag>-<run>-<worker>-<seq>", where
// tag names the phase (fd for the first-delivery phase, whose rows pgbench's
// parameters are taken from) and run is the time of the call, so that
// phases and runs against the same database do not collide.
func firstIDs(tag string) idFunc {
	prefix := tag + "-" + strconv.FormatInt(time.Now().UnixNano()/1e6, 36) + "-"
	return func(dst []byte, w, seq int) []byte {
		dst = append(dst, prefix...)
		dst = strconv.AppendInt(dst, int64(w), 10)
		dst = append(dst, '-')
		return strconv.AppendInt(dst, int64(seq), 10)
	}
}

// replayBase returns the first replay key of this run: a number, so that
// pgbench can compute keys from it, that differs between runs started at
// different seconds.
func replayBase() int64 {
	return 1_000_000_000 + (time.Now().Unix()%100_000)*maxReplayKeys
}

// replayIDs returns IDs drawn pseudo-randomly from base … base+n-1.
func replayIDs(base int64, n int) idFunc {
	return func(dst []byte, w, seq int) []byte {
		x := splitmix64(uint64(w)<<40 ^ uint64(seq))
		return strconv.AppendInt(dst, base+int64(x%uint64(n)), 10)
	}
}

func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// makeBody returns a JSON document of exactly size bytes (size ≥ 32).
func makeBody(size int) []byte {
	prefix := `{"type":"order.created","created":1767225600,"data":{"object":"order","id":"ord_1","amount":4200,"currency":"eur","note":"`
	suffix := `"}}`
	if size < len(prefix)+len(suffix) {
		prefix, suffix = `{"note":"`, `"}`
	}
	b := make([]byte, 0, size)
	b = append(b, prefix...)
	for i := 0; len(b) < size-len(suffix); i++ {
		b = append(b, "abcdefghijklmnopqrstuvwxyz0123456789"[i%36])
	}
	return append(b, suffix...)
}

// loadConfig describes one gateway phase.
type loadConfig struct {
	url              string
	workers          int
	warmup, duration time.Duration
	body             []byte
	ids              idFunc
	// wantReplayed: every answer must carry Idempotent-Replayed: true;
	// otherwise none may.
	wantReplayed bool
	// raw: use rawClient instead of net/http.
	raw bool
	// rate, when positive, paces the workers to this many requests per
	// second in all (an open-loop load), instead of as fast as they can.
	rate float64
	// acks, when not nil, receives the time each accepted delivery's 2xx
	// was read, by delivery ID.
	acks *sync.Map
}

// loadResult is what a gateway phase measured.
type loadResult struct {
	name       string
	measured   time.Duration
	count      int // requests that started after the warm-up and ended in the window, without error
	requests   int // all requests, warm-up included
	errors     int // all errors, warm-up included
	errSamples []string
	latencies  []time.Duration // of the counted requests, sorted
	rssPeakMB  float64
	cpu        cpuUse
}

func (r *loadResult) rate() float64 {
	if r.measured <= 0 {
		return 0
	}
	return float64(r.count) / r.measured.Seconds()
}

func (r *loadResult) p(q float64) time.Duration { return percentile(r.latencies, q) }

// percentile returns the nearest-rank q-quantile of sorted (0 when empty).
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*q+0.9999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// newClient returns an HTTP/1.1 client keeping up to workers connections alive.
func newClient(workers int) *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        2 * workers,
			MaxIdleConnsPerHost: 2 * workers,
			MaxConnsPerHost:     workers,
			IdleConnTimeout:     90 * time.Second,
		},
		Timeout: 30 * time.Second,
	}
}

// reusableBody is a request body that can be rewound and whose Close does
// nothing, so that a worker reuses one request for all its deliveries.
type reusableBody struct{ bytes.Reader }

func (*reusableBody) Close() error { return nil }

// worker is one load-generating loop's request and tallies.
type worker struct {
	cfg      *loadConfig
	client   *http.Client
	req      *http.Request
	body     reusableBody
	idVal    []string // req.Header["X-Delivery-Id"]
	idBuf    []byte
	raw      *rawClient
	lat      []time.Duration
	count    int
	requests int
	errors   int
	samples  []string
}

func newWorker(ctx context.Context, cfg *loadConfig, client *http.Client, capacity int) *worker {
	w := &worker{cfg: cfg, client: client, idVal: make([]string, 1), lat: make([]time.Duration, 0, capacity)}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, cfg.url, nil)
	req.Header = http.Header{
		"Content-Type":  {"application/json"},
		"User-Agent":    {"hookgate-bench/1.0"},
		"X-Event-Type":  {"order.created"},
		"X-Delivery-Id": w.idVal,
	}
	req.ContentLength = int64(len(cfg.body))
	body := cfg.body
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	w.req = req
	if cfg.raw {
		w.raw, _ = newRawClient(cfg.url, cfg.body) // the URL is ours and valid
	}
	return w
}

// close closes the worker's raw connection, if any.
func (w *worker) close() {
	if w.raw != nil {
		w.raw.close()
	}
}

// do sends one delivery with ID id and returns whether it succeeded.
func (w *worker) do(id []byte) bool {
	w.requests++
	if w.raw != nil {
		snippet, err := w.raw.do(id)
		if err != nil {
			w.fail(err.Error())
			return false
		}
		return w.judge(w.raw.status, string(w.raw.replayed), snippet)
	}
	w.idVal[0] = string(id)
	w.body.Reset(w.cfg.body)
	w.req.Body = &w.body
	resp, err := w.client.Do(w.req)
	if err != nil {
		w.fail(err.Error())
		return false
	}
	var snippet []byte
	if resp.StatusCode != http.StatusAccepted {
		snippet, _ = io.ReadAll(io.LimitReader(resp.Body, 300))
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return w.judge(resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), snippet)
}

// judge checks an answer: 202, with Idempotent-Replayed: true exactly when
// the phase sends duplicates.
func (w *worker) judge(status int, replayed string, snippet []byte) bool {
	var problem string
	switch {
	case status != http.StatusAccepted:
		problem = fmt.Sprintf("%d %s: %s", status, http.StatusText(status), bytes.TrimSpace(snippet))
	case w.cfg.wantReplayed && replayed != "true":
		problem = fmt.Sprintf("%d without Idempotent-Replayed: true", status)
	case !w.cfg.wantReplayed && replayed != "":
		problem = fmt.Sprintf("%d with Idempotent-Replayed: %s on a first delivery", status, replayed)
	}
	if problem != "" {
		w.fail(problem)
		return false
	}
	return true
}

func (w *worker) fail(msg string) {
	w.errors++
	if len(w.samples) < 3 {
		w.samples = append(w.samples, msg)
	}
}

// runLoad runs cfg.workers workers sending deliveries until warm-up plus
// duration have passed (or ctx ends) and returns the tallies.
func runLoad(ctx context.Context, cfg loadConfig) *loadResult {
	client := newClient(cfg.workers)
	defer client.CloseIdleConnections()
	start := time.Now()
	warmEnd := start.Add(cfg.warmup)
	end := warmEnd.Add(cfg.duration)
	workers := make([]*worker, cfg.workers)
	var wg sync.WaitGroup
	for i := range workers {
		w := newWorker(ctx, &cfg, client, 1<<14)
		workers[i] = w
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer w.close()
			for seq := 0; ctx.Err() == nil; seq++ {
				if cfg.rate > 0 {
					slot := float64(seq*len(workers)+i) / cfg.rate
					time.Sleep(time.Until(start.Add(time.Duration(slot * float64(time.Second)))))
				}
				t0 := time.Now()
				if !t0.Before(end) {
					return
				}
				w.idBuf = cfg.ids(w.idBuf[:0], i, seq)
				ok := w.do(w.idBuf)
				t1 := time.Now()
				if !ok {
					// Do not spin when the server is down.
					time.Sleep(10 * time.Millisecond)
					continue
				}
				if cfg.acks != nil {
					cfg.acks.Store(string(w.idBuf), t1)
				}
				if !t0.Before(warmEnd) && !t1.After(end) {
					w.count++
					w.lat = append(w.lat, t1.Sub(t0))
				}
			}
		}()
	}
	wg.Wait()
	r := &loadResult{measured: cfg.duration}
	if ctx.Err() != nil {
		r.measured = max(time.Since(warmEnd), 0)
	}
	for _, w := range workers {
		r.count += w.count
		r.requests += w.requests
		r.errors += w.errors
		r.latencies = append(r.latencies, w.lat...)
		for _, s := range w.samples {
			if len(r.errSamples) < 5 && !slices.Contains(r.errSamples, s) {
				r.errSamples = append(r.errSamples, s)
			}
		}
	}
	slices.Sort(r.latencies)
	return r
}

// createResult is the outcome of createKeys.
type createResult struct {
	errors     int
	errSamples []string
}

// createKeys delivers keys base … base+n-1 once each through the gateway,
// with workers concurrent requests.
func createKeys(ctx context.Context, url string, workers int, body []byte, base int64, n int, raw bool) createResult {
	cfg := loadConfig{url: url, workers: workers, body: body, raw: raw}
	client := newClient(workers)
	defer client.CloseIdleConnections()
	var next atomic.Int64
	var mu sync.Mutex
	var res createResult
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := newWorker(ctx, &cfg, client, 0)
			defer w.close()
			for ctx.Err() == nil {
				i := next.Add(1) - 1
				if i >= int64(n) {
					break
				}
				w.do(strconv.AppendInt(w.idBuf[:0], base+i, 10))
			}
			mu.Lock()
			res.errors += w.errors
			for _, s := range w.samples {
				if len(res.errSamples) < 5 {
					res.errSamples = append(res.errSamples, s)
				}
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	return res
}

// ms formats d in milliseconds.
func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 2, 64) + " ms"
}

func printLoad(out io.Writer, r *loadResult) {
	fmt.Fprintf(out, "%-32s %9.0f deliveries/s  p50 %s  p99 %s  errors %d  (%d counted in %s, %d requests incl. warm-up)\n",
		r.name, r.rate(), ms(r.p(0.50)), ms(r.p(0.99)), r.errors, r.count, r.measured, r.requests)
	fmt.Fprintf(out, "  server RSS peak %.1f MB; CPU cores: %s\n", r.rssPeakMB, r.cpu)
	if rate := r.rate(); rate > 0 && r.cpu.ok {
		us := func(cores float64) float64 { return cores / rate * 1e6 }
		fmt.Fprintf(out, "  CPU per delivery: gateway %.0f µs, postgres %.0f µs, machine %.0f µs\n", us(r.cpu.server), us(r.cpu.postgres), us(r.cpu.machine))
	}
	warnDisturbed(out, r.cpu)
	if len(r.errSamples) > 0 {
		fmt.Fprintf(out, "  errors, e.g.: %s\n", strings.Join(r.errSamples, " | "))
	}
}
