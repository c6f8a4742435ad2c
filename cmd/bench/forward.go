package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"
)

// sink is the forward target: it answers every POST with 204 at once and
// notes when each delivery ID (X-Hookgate-Delivery-Id) first arrived, and
// how many arrived by tag (the ID up to its first "-"); a forward delivered
// twice (at least once) counts once.
type sink struct {
	ln    net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns map[net.Conn]bool // nil once closed
	seen  map[string]time.Time
	byTag map[string]int
}

func startSink() (*sink, error) {
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("forward sink: %w", err)
	}
	s := &sink{ln: ln, conns: map[net.Conn]bool{}, seen: map[string]time.Time{}, byTag: map[string]int{}}
	s.wg.Go(func() {
		for c, err := ln.Accept(); err == nil; c, err = ln.Accept() {
			s.mu.Lock()
			if s.conns == nil {
				c.Close()
			} else {
				s.conns[c] = true
				s.wg.Go(func() { s.serve(c) })
			}
			s.mu.Unlock()
		}
	})
	return s, nil
}

func (s *sink) url() string { return "http://" + s.ln.Addr().String() + "/sink" }

// serve answers one connection's requests until it closes, or sends one
// the sink does not read (400).
func (s *sink) serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReaderSize(c, 8<<10)
	for {
		h, err := readHead(br, "X-Hookgate-Delivery-Id")
		if err == nil && (!strings.HasPrefix(h.first, "POST ") || h.length < 0) {
			err = errUnread
		}
		if err == nil {
			_, err = br.Discard(h.length)
		}
		if errors.Is(err, errUnread) {
			_, _ = c.Write([]byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"))
		}
		if err != nil {
			return
		}
		s.mu.Lock()
		if _, dup := s.seen[h.field]; !dup && h.field != "" {
			s.seen[h.field] = time.Now()
			tag, _, _ := strings.Cut(h.field, "-")
			s.byTag[tag]++
		}
		s.mu.Unlock()
		if _, err := c.Write([]byte("HTTP/1.1 204 No Content\r\n\r\n")); err != nil {
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

// lags returns, sorted, the time from each 2xx in acks (by delivery ID) to
// its forward's arrival; 0 for one that arrived before the 2xx was read.
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

func (s *sink) close() {
	_ = s.ln.Close()
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.conns = nil
	s.mu.Unlock()
	s.wg.Wait()
}

// forwardResult is what a forwarding phase measured.
type forwardResult struct {
	load      *loadResult
	role      string
	accepted  int      // deliveries of the load accepted, warm-up included
	expected  int      // of the whole phase, the paced loads' included
	forwards  forwards // the target's, at the phase's end (operator API)
	received  int      // distinct events of the load the sink received (role all)
	drainWait time.Duration
	drained   bool
	// From the 2xx to the sink's receipt, at 100 deliveries/s and at half
	// the phase's intake (role all).
	lags100, lagsHalf []time.Duration
	lagRate           float64
	// cpuPerForward is the gateway's and PostgreSQL's CPU time per accepted
	// event over the load and the drain, less a delivery's without a
	// target (role all; 0 when not measured).
	cpuPerForward time.Duration
	shutdownErr   error
}

// forwardPhase runs a forwarding phase on a server of its own: the bench
// sender with the sink as its one target, serve --role role, keys tagged
// tag.
func (b *bench) forwardPhase(ctx context.Context, sk *sink, role, tag string) (*forwardResult, error) {
	srv, err := b.startServer(ctx, "server-forward-"+role, forwardConfig(sk.url()), "--role", role)
	if err != nil {
		return nil, err
	}
	defer srv.kill()
	b.db.checkpoint(ctx, b.out)
	var prof *profiler
	if role == "all" {
		prof = b.profile(ctx)
	}
	var batches [2]float64
	load := b.load(ctx, srv, "first delivery, 1 target, "+role, loadConfig{ids: firstIDs(tag)})
	r := &forwardResult{load: load, role: role, accepted: load.accepted, expected: load.accepted}
	if ref := b.s.first.rate(); ref > 0 {
		fmt.Fprintf(b.out, "  ÷ first delivery without a forward target (phase 1, %.0f/s) = %.2f\n", ref, load.rate()/ref)
	}
	fmt.Fprintf(b.out, "  batches: %s\n", srv.batchReport(&batches))
	prof.report(b.out)
	if err := srv.alive(ctx); err != nil {
		return nil, err
	}
	if role == "all" {
		// The same process works the forwards: wait for the backlog.
		t0 := time.Now()
		for r.received = sk.received(tag); r.received < r.accepted && time.Since(t0) < b.o.forwardDrain && ctx.Err() == nil && !srv.exited(); r.received = sk.received(tag) {
			time.Sleep(50 * time.Millisecond)
		}
		r.drained, r.drainWait = r.received >= r.accepted, time.Since(t0)
		drained := takeCPU(srv.pid(), b.pgPID)
		if r.drained && b.firstCPU > 0 && r.accepted > 0 {
			r.cpuPerForward = (load.gatewayPG+gatewayPGTime(load.end, drained))/time.Duration(r.accepted) - b.firstCPU
			fmt.Fprintf(b.out, "  CPU per forward (gateway + PostgreSQL, load and drain, per accepted event, less %s per delivery without a target): %d µs\n",
				b.firstCPU.Round(time.Microsecond), r.cpuPerForward.Microseconds())
		}
		draining := ""
		if r.drainWait >= time.Second {
			draining = "; CPU cores while draining: " + cpuBetween(load.end, drained, nil).String()
		}
		fmt.Fprintf(b.out, "  sink: received %d of %d accepted events %s after the load ended (%.0f forwards/s over warm-up + load + drain)%s\n",
			r.received, r.accepted, r.drainWait.Round(10*time.Millisecond), float64(r.received)/(b.o.warmup+b.o.duration+r.drainWait).Seconds(), draining)
	}
	if role == "all" && r.drained && load.rate() > 0 {
		// From the 2xx to the receipt at 100/s, and at half this phase's
		// intake (this server's maximum with the forwarding it also does).
		paced := func(rate float64, tag string) ([]time.Duration, *loadResult) {
			var acks sync.Map
			l := runLoad(ctx, loadConfig{url: srv.url(), workers: b.o.concurrency, duration: 5 * time.Second, body: b.body, ids: firstIDs(tag), rate: rate, acks: &acks})
			for t0 := time.Now(); sk.received(tag) < l.accepted && time.Since(t0) < b.o.forwardDrain && ctx.Err() == nil; {
				time.Sleep(50 * time.Millisecond)
			}
			r.expected += l.accepted
			lags := sk.lags(&acks)
			fmt.Fprintf(b.out, "  at %.0f deliveries/s offered (%.0f/s accepted, %d errors): from the 2xx to the target's receipt p50 %s, p99 %s (%d forwards)\n",
				rate, l.rate(), l.errors, ms(percentile(lags, .5)), ms(percentile(lags, .99)), len(lags))
			return lags, l
		}
		r.lags100, _ = paced(100, tag+"slow")
		var l *loadResult
		r.lagsHalf, l = paced(load.rate()/2, tag+"lag")
		r.lagRate = l.rate()
	}
	if r.forwards, err = srv.forwards(ctx, role == "all", b.o.forwardDrain); err != nil {
		return nil, err
	}
	fmt.Fprintf(b.out, "  the target's forwards (operator API): %d for %d accepted deliveries (%s)\n", r.forwards.total(), r.expected, r.forwards)
	if r.shutdownErr = srv.stop(); r.shutdownErr != nil {
		fmt.Fprintf(b.out, "  server shutdown: %v\n", r.shutdownErr)
	}
	if role == "api" {
		// Nothing works them; the next phase's relay would, on its CPU.
		n, err := b.db.dropQueued(ctx, tag)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(b.out, "  removed the %d outbox rows left, so that the next server does not work them\n", n)
	}
	return r, nil
}
