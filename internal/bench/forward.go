package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/riverqueue/river/rivertype"

	"github.com/hookgate/hookgate/internal/store"
)

// forwardConfig is the hookgate.yaml of the forwarding phases: the bench
// sender with one forward target, url, that asks for the event types the
// load sends (X-Event-Type: order.created), so that the routing decision is
// part of what is measured.
func forwardConfig(url string) string {
	return benchConfig + "    forward:\n      - name: sink\n        url: " + url + "\n        event_types: [\"order.*\"]\n"
}

// sink is the forward target of the forwarding phases: a minimal HTTP/1.1
// keep-alive server on 127.0.0.1 that reads each request's head and body
// and answers 204 at once. It counts requests, and distinct delivery IDs
// (X-Hookgate-Delivery-Id, which the forwards carry) by their tag, the part
// before the first "-", so that a phase's forwards can be told from
// another's and a forward delivered twice (at least once) counts once.
//
// It is lean for the reason the load generator's client is (-client raw):
// it runs on the two cores it measures, and net/http's server cost about
// 30–50 µs of them per forward, which --role all's intake paid for a
// target that a real deployment runs elsewhere. It parses only what the
// gateway's forwards send (a request line, header fields, a
// Content-Length body); anything else (a chunked body, a malformed head)
// gets a 400 and the connection closed, which the gateway reports as a
// failed forward, so the check would fail rather than mismeasure.
type sink struct {
	ln       net.Listener
	done     chan struct{}
	requests atomic.Int64

	mu       sync.Mutex
	conns    map[net.Conn]struct{}
	closing  bool
	wg       sync.WaitGroup
	seen     map[string]time.Time // by delivery ID: when its first forward arrived
	byTag    map[string]int
	noID     int
	firstErr error
}

// startSink listens on a free port of 127.0.0.1 and serves until close.
func startSink() (*sink, error) {
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("forward sink: %w", err)
	}
	s := &sink{ln: ln, done: make(chan struct{}), conns: map[net.Conn]struct{}{}, seen: map[string]time.Time{}, byTag: map[string]int{}}
	go func() {
		defer close(s.done)
		for {
			c, err := ln.Accept()
			if err != nil {
				s.mu.Lock()
				if !s.closing {
					s.firstErr = err
				}
				s.mu.Unlock()
				return
			}
			s.mu.Lock()
			if s.closing {
				s.mu.Unlock()
				c.Close()
				return
			}
			s.conns[c] = struct{}{}
			s.wg.Add(1)
			s.mu.Unlock()
			go s.serve(c)
		}
	}()
	return s, nil
}

func (s *sink) url() string { return "http://" + s.ln.Addr().String() + "/sink" }

var (
	sinkNoContent  = []byte("HTTP/1.1 204 No Content\r\n\r\n")
	sinkBadRequest = []byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
	hdrLength      = []byte("Content-Length")
	hdrDeliveryID  = []byte("X-Hookgate-Delivery-Id")
	hdrEncoding    = []byte("Transfer-Encoding")
)

// serve answers the requests of one connection until it closes or a
// request is not one it reads.
func (s *sink) serve(c net.Conn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		c.Close()
	}()
	br := bufio.NewReaderSize(c, 8<<10)
	for {
		id, ok, err := sinkRequest(br)
		if err != nil {
			if ok {
				_, _ = c.Write(sinkBadRequest)
			}
			return
		}
		s.received1(id, time.Now())
		if _, err := c.Write(sinkNoContent); err != nil {
			return
		}
	}
}

// sinkRequest reads one request's head and discards its body, and returns
// its X-Hookgate-Delivery-Id. An error with bad set is a request it does
// not read (to answer 400); without, the connection ended.
func sinkRequest(br *bufio.Reader) (id string, bad bool, err error) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		return "", false, err
	}
	if !bytes.HasPrefix(line, []byte("POST ")) {
		return "", true, errors.New("not a POST")
	}
	length := -1
	for {
		line, err = br.ReadSlice('\n')
		if err != nil {
			return "", !errors.Is(err, io.EOF), err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			break
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return "", true, errors.New("malformed header field")
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, hdrLength):
			n, err := strconv.Atoi(string(value))
			if err != nil || n < 0 {
				return "", true, errors.New("bad Content-Length")
			}
			length = n
		case bytes.EqualFold(name, hdrDeliveryID):
			id = string(value)
		case bytes.EqualFold(name, hdrEncoding):
			return "", true, errors.New("transfer encodings are not read")
		}
	}
	if length < 0 {
		return "", true, errors.New("no Content-Length")
	}
	if _, err := br.Discard(length); err != nil {
		return "", false, err
	}
	return id, false, nil
}

// received1 counts one request with delivery ID id, arrived at at.
func (s *sink) received1(id string, at time.Time) {
	s.requests.Add(1)
	s.mu.Lock()
	if id == "" {
		s.noID++
	} else if _, dup := s.seen[id]; !dup {
		s.seen[id] = at
		tag, _, _ := strings.Cut(id, "-")
		s.byTag[tag]++
	}
	s.mu.Unlock()
}

// lags returns, sorted, the time from each 2xx in acks (by delivery ID) to
// the arrival of that event's first forward; 0 for a forward that arrived
// before the load generator read the 2xx.
func (s *sink) lags(acks *sync.Map) []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	var l []time.Duration
	acks.Range(func(id, ack any) bool {
		if at, ok := s.seen[id.(string)]; ok {
			l = append(l, max(at.Sub(ack.(time.Time)), 0))
		}
		return true
	})
	slices.Sort(l)
	return l
}

// received returns the number of distinct delivery IDs with tag received.
func (s *sink) received(tag string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byTag[tag]
}

// close stops listening, closes the open connections and waits for their
// goroutines.
func (s *sink) close() {
	s.mu.Lock()
	s.closing = true
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	_ = s.ln.Close()
	<-s.done
	s.wg.Wait()
}

// forwardResult is what a forwarding phase measured.
type forwardResult struct {
	load        *loadResult
	role        string
	tag         string
	accepted    int // events of the phase stored (webhook_events rows)
	jobs        int // forward jobs of the phase (River jobs, through store.ForwardJobStates)
	jobsQueued  int // of which still available (not worked) after the phase
	jobStates   string
	received    int           // distinct events the sink received (role all)
	drainWait   time.Duration // after the load, until the sink had them all (or the timeout)
	drained     bool
	shutdownErr error
	// From the 2xx to the target's receipt of the forward, at 100
	// deliveries/s and at half the phase's intake (role all).
	lags100, lagsHalf []time.Duration
	lagRate           float64
	// cpuPerForward is the gateway's and PostgreSQL's CPU time per accepted
	// event during the load and the drain, less phase 1's per delivery
	// (role all); 0 when not measured.
	cpuPerForward time.Duration
}

// forwardPhase runs one forwarding phase on a server of its own: the bench
// sender with one forward target (the sink), serve --role role, fresh keys
// tagged tag. With role all it then waits (up to -forward-drain-timeout)
// until the sink has received every event the phase stored.
// ref is phase 1's rate (no forward target), which the phase's is compared with.
// refCPU is phase 1's gateway and PostgreSQL CPU time per delivery.
func forwardPhase(ctx context.Context, o *options, bin, tmp, dbURL string, db *benchDB, sk *sink, body []byte, role, tag string, ref float64, refCPU time.Duration, pgPID int, out io.Writer) (*forwardResult, error) {
	spec := serverSpec{name: "server-forward-" + role, config: forwardConfig(sk.url()), args: []string{"--role", role}}
	srv, err := startServer(ctx, bin, tmp, dbURL, o, spec)
	if err != nil {
		return nil, err
	}
	defer srv.kill()
	fmt.Fprintf(out, "server pid %d: %s (one forward target, the sink %s; log %s)\n",
		srv.pid(), strings.Join(srv.cmd.Args[1:], " "), sk.url(), filepath.Base(srv.logPath))
	rss := newRSSSampler(srv.pid(), 200*time.Millisecond)
	defer rss.stop()
	if err := db.checkpoint(ctx); err != nil {
		return nil, err
	}
	watch := watchSQL(ctx, dbURL, o.warmup, firstSQL...)
	var prof *profiler
	if o.pprof && role == "all" {
		prof = startProfile(ctx, o.pprofAddr, filepath.Join(tmp, "cpu-forward-all.pprof"), o.duration)
	}
	cpu0 := takeCPU(srv.pid(), pgPID)
	rss.mark()
	load := runLoad(ctx, loadConfig{
		url: srv.url(), workers: o.concurrency, warmup: o.warmup, duration: o.duration,
		body: body, ids: firstIDs(tag), wantReplayed: false, raw: o.client == "raw",
	})
	cpu1 := takeCPU(srv.pid(), pgPID)
	load.rssPeakMB = rss.phasePeakMB()
	load.cpu = cpuBetween(cpu0, cpu1, nil)
	load.name = "first delivery, 1 target, " + role
	r := &forwardResult{load: load, role: role, tag: tag}
	printLoad(out, load)
	if ref > 0 {
		kind := "the -min-forward-ratio check"
		if role != "api" {
			kind = "the -min-forward-all-ratio check"
		}
		fmt.Fprintf(out, "  ÷ first delivery without a forward target (phase 1, %.0f/s) = %.2f (%s)\n", ref, load.rate()/ref, kind)
	}
	batchText, _ := srv.batchReport([2]float64{}) // the server is new: all its batches are this phase's
	fmt.Fprintf(out, "  batches: %s\n", batchText)
	if prof != nil {
		prof.report(out)
	}
	printSQLSeen(out, watch, firstSQL)
	if err := phaseEnd(ctx, srv); err != nil {
		return nil, err
	}
	if r.accepted, err = db.countEvents(ctx, tag); err != nil {
		return nil, err
	}

	if role == "all" {
		// The same process works the forwards: wait for the backlog.
		t0 := time.Now()
		deadline := t0.Add(o.forwardDrain)
		for {
			r.received = sk.received(tag)
			if r.received >= r.accepted {
				r.drained = true
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil || srv.exited() {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		r.drainWait = time.Since(t0)
		cpu2 := takeCPU(srv.pid(), pgPID)
		if r.drained && ref > 0 && r.accepted > 0 {
			r.cpuPerForward = gatewayPGTime(cpu0, cpu2)/time.Duration(r.accepted) - refCPU
			fmt.Fprintf(out, "  CPU per forward (gateway + PostgreSQL, load and drain, per accepted event, less %s per delivery without a target): %d µs\n",
				refCPU.Round(time.Microsecond), r.cpuPerForward.Microseconds())
		}
		draining := ""
		if r.drainWait >= time.Second {
			draining = "; CPU cores while draining: " + cpuBetween(cpu1, cpu2, nil).String()
		}
		if r.drained {
			fmt.Fprintf(out, "  sink: received all %d accepted events %s after the load ended (%.0f forwards/s over warm-up + load + drain)%s\n",
				r.accepted, r.drainWait.Round(10*time.Millisecond), float64(r.accepted)/(o.warmup+o.duration+r.drainWait).Seconds(), draining)
		} else {
			fmt.Fprintf(out, "  sink: received %d of %d accepted events after waiting %s: backlog left %d (%.0f forwards/s over warm-up + load + wait)%s\n",
				r.received, r.accepted, r.drainWait.Round(10*time.Millisecond), r.accepted-r.received,
				float64(r.received)/(o.warmup+o.duration+r.drainWait).Seconds(), draining)
		}
	}
	if role == "all" && r.drained && load.rate() > 0 && ref > 0 {
		// From the 2xx to the target's receipt: at 100 deliveries/s, and at
		// half the intake this phase reached (this server's maximum with
		// the forwarding it also does).
		paced := func(rate float64, tag string) ([]time.Duration, *loadResult) {
			var acks sync.Map
			l := runLoad(ctx, loadConfig{
				url: srv.url(), workers: o.concurrency, warmup: 0, duration: 5 * time.Second,
				body: body, ids: firstIDs(tag), wantReplayed: false, raw: o.client == "raw", rate: rate, acks: &acks,
			})
			t0 := time.Now()
			for sk.received(tag) < l.requests && time.Since(t0) < o.forwardDrain && ctx.Err() == nil {
				time.Sleep(50 * time.Millisecond)
			}
			return sk.lags(&acks), l
		}
		var l *loadResult
		r.lags100, l = paced(100, tag+"slow")
		fmt.Fprintf(out, "  at 100 deliveries/s (%.0f/s accepted, %d errors): from the 2xx to the target's receipt p50 %s, p99 %s (%d forwards)\n",
			l.rate(), l.errors, ms(percentile(r.lags100, .5)), ms(percentile(r.lags100, .99)), len(r.lags100))
		half := load.rate() / 2
		r.lagsHalf, l = paced(half, tag+"lag")
		r.lagRate = l.rate()
		fmt.Fprintf(out, "  at half this phase's intake (%.0f/s offered, %.0f/s accepted, %d errors): from the 2xx to the target's receipt p50 %s, p99 %s (%d forwards)\n",
			half, l.rate(), l.errors, ms(percentile(r.lagsHalf, .5)), ms(percentile(r.lagsHalf, .99)), len(r.lagsHalf))
	}
	r.shutdownErr = srv.stop(25 * time.Second)
	if r.shutdownErr != nil {
		fmt.Fprintf(out, "  server shutdown: %v\n", r.shutdownErr)
	}
	if r.jobs, r.jobsQueued, r.jobStates, err = db.forwardJobs(ctx, tag); err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "  forward jobs of the phase: %d for %d accepted events (%s)\n", r.jobs, r.accepted, r.jobStates)
	if r.jobsQueued > 0 {
		// Nobody is to work them: the next phase's server would, on its CPU.
		n, err := db.deleteQueuedForwardJobs(ctx, tag)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(out, "  removed the %d forward jobs left available, so that the next server does not work them\n", n)
	}
	return r, nil
}

// countEvents returns the number of events of sender bench whose delivery
// ID has tag.
func (db *benchDB) countEvents(ctx context.Context, tag string) (int, error) {
	db.mu.Lock()
	defer db.mu.Unlock()
	n, err := store.New(db.conn).CountEventsOf(ctx, "bench", tag+"-")
	if err != nil {
		return 0, fmt.Errorf("count the phase's events: %w", err)
	}
	return int(n), nil
}

// forwardJobs returns the number of forwards of the events with tag (outbox
// rows not yet relayed, jobs and the fast path's delivered forwards), how many are still waiting (outbox or
// available), and the count by state. It reads them through internal/store
// (whose jobs.go alone names river_job's columns).
func (db *benchDB) forwardJobs(ctx context.Context, tag string) (total, available int, states string, err error) {
	db.mu.Lock()
	defer db.mu.Unlock()
	q := store.New(db.conn)
	byState, err := q.ForwardJobStates(ctx, tag+"-")
	if err != nil {
		return 0, 0, "", fmt.Errorf("count the phase's forward jobs: %w", err)
	}
	outbox, err := q.CountOutboxOf(ctx, "bench", tag+"-")
	if err != nil {
		return 0, 0, "", fmt.Errorf("count the phase's forward jobs: %w", err)
	}
	type count struct {
		state string
		n     int64
	}
	counts := make([]count, 0, len(byState)+1)
	for st, n := range byState {
		counts = append(counts, count{string(st), n})
	}
	if outbox > 0 {
		counts = append(counts, count{"outbox", outbox})
	}
	slices.SortFunc(counts, func(a, b count) int { return cmp.Or(cmp.Compare(b.n, a.n), cmp.Compare(a.state, b.state)) })
	var parts []string
	for _, c := range counts {
		total += int(c.n)
		if c.state == string(rivertype.JobStateAvailable) || c.state == "outbox" {
			available += int(c.n)
		}
		parts = append(parts, fmt.Sprintf("%s %d", c.state, c.n))
	}
	if len(parts) == 0 {
		parts = []string{"none"}
	}
	return total, available, strings.Join(parts, ", "), nil
}

// deleteQueuedForwardJobs deletes the outbox rows and available forward jobs
// of the events with tag.
func (db *benchDB) deleteQueuedForwardJobs(ctx context.Context, tag string) (int64, error) {
	db.mu.Lock()
	defer db.mu.Unlock()
	q := store.New(db.conn)
	jobs, err := q.DeleteAvailableForwardJobs(ctx, tag+"-")
	if err != nil {
		return 0, fmt.Errorf("delete the phase's queued forward jobs: %w", err)
	}
	outbox, err := q.DeleteOutboxOf(ctx, "bench", tag+"-")
	if err != nil {
		return 0, fmt.Errorf("delete the phase's outbox rows: %w", err)
	}
	// The deleted rows' index entries stay until a vacuum, and the next
	// phase's relay would walk them on each look (about 100 index pages a
	// look after the --role api phase's 40,000 rows, 40 looks a second):
	// vacuum now, as autovacuum would within its naptime, so that the
	// --role all phase does not pay for this phase's leftovers.
	if err := q.VacuumOutbox(ctx); err != nil {
		return 0, err
	}
	if err := q.AnalyzeJobs(ctx); err != nil {
		return 0, err
	}
	return jobs + outbox, nil
}

// printSQLSeen stops w and prints, for information, the statements it saw
// besides known, most frequent first.
func printSQLSeen(out io.Writer, w *sqlWatcher, known []string) {
	seen := w.stop()
	total := 0
	for _, n := range w.seen {
		total += n
	}
	missing, _, _ := checkSQL(seen, w.seen, known, nil)
	for _, m := range missing {
		fmt.Fprintf(out, "  SQL seen: never saw %q\n", oneLine(m))
	}
	shown := 0
	for _, q := range seen {
		if slices.Contains(known, q) {
			continue
		}
		if shown == 4 {
			fmt.Fprintln(out, "  SQL seen: …")
			break
		}
		fmt.Fprintf(out, "  SQL seen besides the first-delivery statements (%d of %d samples): %q\n", w.seen[q], total, oneLine(q))
		shown++
	}
}
