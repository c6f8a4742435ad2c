package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// The forwarding phases compare a server's first deliveries with those of
// a server without a target. Measured one after the other, ten seconds
// each, the two rates carry whatever the machine did differently in
// those seconds: runs of the same code on this machine moved a ratio by
// ±0.1 and more, and two-second slices of one server's load moved by
// ±10% from slice to slice, with no server steadily faster than another.
// The phases also grow the tables, so a later one writes into larger
// ones. So each compared phase runs in slices taken in turn with a
// reference server's: the drift and the tables' growth fall on both
// alike, and the ratio divides rates measured over the same stretch of
// time.

// startReference starts the reference server: the bench sender without a
// target, --role api (with no target, the ingest of --role all; and it
// works no forward of the compared servers').
func (b *bench) startReference(ctx context.Context) (err error) {
	b.ref, err = b.startServer(ctx, "server-reference", benchConfig, "--role", "api")
	return err
}

// stopReference stops the reference server, checking its clean exit.
func (b *bench) stopReference() {
	if b.ref != nil {
		b.stop(b.ref, " (the reference without a target, --role api)")
		b.ref = nil
	}
}

// beside returns the PIDs of the servers that run beside srv: the
// reference, when srv is not it.
func (b *bench) beside(srv *server) []int {
	if b.ref == srv {
		return nil
	}
	return pidOf(b.ref)
}

// pidOf returns srv's PID as takeCPU's besidePID: none for a nil srv.
func pidOf(srv *server) []int {
	if srv == nil {
		return nil
	}
	return []int{srv.pid()}
}

// interleaveLength is how long interleave takes, drains aside: what a
// profile of the compared server covers.
func (b *bench) interleaveLength() time.Duration {
	return 2 * (b.duration + time.Duration(b.slices-1)*sliceWarmup(b.warmup) + b.warmup)
}

// sliceWarmup is a slice's warm-up: half the run's, at most 500 ms. Each
// slice opens new connections; the servers' pools are warm already.
func sliceWarmup(w time.Duration) time.Duration { return min(w/2, 500*time.Millisecond) }

// interleave measures srv in b.slices slices of b.duration/b.slices each,
// taken in turn with as many of the reference server's: reference, srv,
// srv, reference, reference, srv, … so that a steady drift, too, falls on
// both alike. Each slice has a warm-up of its own (sliceWarmup; the
// first of each server the run's); srv's delivery IDs are
// tagged tag, the reference's "ref". after, when not nil, runs after each
// of srv's slices (the wait for its forwards). It prints both merged
// loads and returns them: srv's, and the reference's.
func (b *bench) interleave(ctx context.Context, srv *server, name, tag string, cfg loadConfig, after func(*loadResult)) (x, ref *loadResult, err error) {
	var xs, rs []*loadResult
	per, warm := b.duration/time.Duration(b.slices), sliceWarmup(b.warmup)
	for i := range 2 * b.slices {
		// The first slice of each server warms up for the run's warm-up:
		// the phase's server has just started.
		w := warm
		if i < 2 {
			w = b.warmup
		}
		if measuredTurn(i) {
			c := cfg
			c.ids, c.duration, c.warmup = firstIDs(tag), per, w
			r := b.measure(ctx, srv, b.ref, c)
			if xs, err = append(xs, r), srv.alive(ctx); err == nil && after != nil {
				after(r)
			}
		} else {
			r := b.measure(ctx, b.ref, srv, loadConfig{ids: firstIDs("ref"), duration: per, warmup: w})
			rs, err = append(rs, r), b.ref.alive(ctx)
		}
		if err != nil {
			return nil, nil, err
		}
	}
	x, ref = merge(xs), merge(rs)
	counted := func(r *loadResult) string {
		return fmt.Sprintf("%d counted in %d slices of %s, %d requests incl. warm-ups", r.count, b.slices, per, r.requests)
	}
	b.report(srv, name, x, counted(x))
	b.report(b.ref, "  its reference, no target, api", ref, counted(ref)+"; taken in turn with the above")
	fmt.Fprintf(b.out, "  slices in turn, deliveries/s: this phase %s; its reference %s\n", rates(xs, (*loadResult).rate), rates(rs, (*loadResult).rate))
	return x, ref, nil
}

// measuredTurn reports whether slice i of a run in turn is the measured
// side's: the order is ABBA (the baseline, the measured, the measured, the
// baseline, …), so that each side has as many slices first and second.
func measuredTurn(i int) bool { return i%4 == 1 || i%4 == 2 }

// rates formats each slice's rate, as rate reads it, for a line of
// slices in turn.
func rates[T any](xs []T, rate func(T) float64) string {
	f := make([]string, len(xs))
	for i, x := range xs {
		f[i] = fmt.Sprintf("%.0f", rate(x))
	}
	return strings.Join(f, " ")
}

// compared measures srv's first deliveries, delivery IDs tagged tag, for
// a ratio to a server without a target: in slices taken in turn with the
// reference's (interleave, with after) when interleaved, or else in one
// load, compared with the first-delivery phase. With -pprof it profiles
// srv over the whole of it. It returns srv's load, the load it compares
// with (nil with -only-ordered) and that one's name.
func (b *bench) compared(ctx context.Context, srv *server, name, tag string, cfg loadConfig, interleaved bool, after func(*loadResult)) (load, ref *loadResult, refName string, err error) {
	if !interleaved {
		report := b.profile(ctx, srv, b.duration)
		cfg.ids = firstIDs(tag)
		load, err = b.load(ctx, srv, name, cfg)
		report()
		return load, b.first, "no-target phase", err
	}
	report := b.profile(ctx, srv, b.interleaveLength())
	load, ref, err = b.interleave(ctx, srv, name, tag, cfg, after)
	report()
	return load, ref, "its reference", err
}

// forwardsDrained waits, up to d, until no outbox row of srv's deliveries
// tagged tag is left: their outcomes are recorded, and srv's recording
// will not run into the next slice of the reference.
func (b *bench) forwardsDrained(ctx context.Context, srv *server, tag string, d time.Duration) {
	for t0 := time.Now(); time.Since(t0) < d && ctx.Err() == nil && !srv.exited(); time.Sleep(10 * time.Millisecond) {
		var left bool
		if err := b.conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM forward_outbox WHERE sender = 'bench' AND starts_with(delivery_id, $1))`, tag+"-").Scan(&left); err != nil || !left {
			return
		}
	}
}

// drain is what the waits for a phase's forwards saw: how many arrived,
// the longest wait and the waits' sum, the gateway's and PostgreSQL's CPU
// time over them, and the CPU use of the busiest.
type drain struct {
	received     int
	wait, waited time.Duration
	gatewayPG    time.Duration
	cpu          cpuUse
}

// add runs wait, which returns how many forwards arrived, and adds what it
// took from from, the end of the load it waits for, to srv's drain.
func (d *drain) add(b *bench, srv *server, wait func() int, from cpuSnap) {
	t0 := time.Now()
	d.received = wait()
	end := takeCPU(srv.pid(), b.pgPID, b.beside(srv)...)
	w := time.Since(t0)
	d.wait, d.waited, d.gatewayPG = max(d.wait, w), d.waited+w, d.gatewayPG+gatewayPGTime(from, end)
	d.cpu = busier(d.cpu, cpuBetween(from, end, nil))
}

// afterSlices returns interleave's after for a --role all server whose
// forwards tagged tag wait(n) counts, waiting up to the drain timeout for
// n: after each slice it waits for every forward accepted so far, then
// for their outcomes' recording, and adds what that took to d.
func (d *drain) afterSlices(ctx context.Context, b *bench, srv *server, tag string, wait func(n int) int) func(*loadResult) {
	var accepted int
	return func(r *loadResult) {
		accepted += r.accepted
		d.add(b, srv, func() int {
			n := wait(accepted)
			if n >= accepted {
				b.forwardsDrained(ctx, srv, tag, b.forwardDrain)
			}
			return n
		}, r.end)
	}
}

// firstAndPgbench measures first deliveries on srv in b.slices slices
// taken in turn with as many runs of pgbench (the baseline), gateway
// first: pgbench's parameters are those of a delivery the gateway stored.
// Each pgbench slice writes under a sender of its own. It prints both
// merged and returns them.
func (b *bench) firstAndPgbench(ctx context.Context, srv *server) (first *loadResult, pg pgbenchRun, err error) {
	var xs []*loadResult
	var ps []pgbenchRun
	per, warm := b.duration/time.Duration(b.slices), sliceWarmup(b.warmup)
	for i := range 2 * b.slices {
		if measuredTurn(i) {
			defs, err := b.pgbenchDefs(ctx, fmt.Sprintf("-%d", i))
			if err != nil {
				return nil, pg, err
			}
			// pgbench has no warm-up of its own: it runs a warm-up
			// longer, and its rate is read from its log over the last per.
			r, err := b.pgbenchOnce(ctx, defs, per+warm, fmt.Sprintf("pgbench-log-%d", i), srv, per)
			if err != nil {
				return nil, pg, err
			}
			ps = append(ps, r)
			continue
		}
		w := warm
		if i == 0 {
			w = b.warmup
		}
		xs = append(xs, b.measure(ctx, srv, nil, loadConfig{ids: firstIDs("fd"), duration: per, warmup: w}))
		if err := srv.alive(ctx); err != nil {
			return nil, pg, err
		}
	}
	first = merge(xs)
	var us []cpuUse
	var secs []float64
	var busy float64 // pgbench's seconds of transactions: processed ÷ tps
	for _, r := range ps {
		pg.processed, pg.failed, pg.lat = pg.processed+r.processed, pg.failed+r.failed, append(pg.lat, r.lat...)
		busy += r.processed / max(r.tps, 1e-9)
		us, secs = append(us, r.cpu), append(secs, r.secs)
	}
	slices.Sort(pg.lat)
	pg.tps, pg.cpu = pg.processed/max(busy, 1e-9), mergeCPU(us, secs)
	b.report(srv, "first delivery: gateway", first, fmt.Sprintf("%d counted in %d slices of %s, %d requests incl. warm-ups", first.count, b.slices, per, first.requests))
	b.reportPgbench(pg, fmt.Sprintf("%.0f transactions counted in the last %s of %d runs of %ds, taken in turn with the above", pg.processed, per, b.slices, max(int(math.Ceil((per+warm).Seconds())), 1)))
	fmt.Fprintf(b.out, "  slices in turn: gateway %s deliveries/s; pgbench %s tps\n",
		rates(xs, (*loadResult).rate), rates(ps, func(r pgbenchRun) float64 { return r.tps }))
	return first, pg, nil
}
