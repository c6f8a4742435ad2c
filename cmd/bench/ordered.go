package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

const (
	// orderKeys is how many keys the ordered phase's bodies spread over.
	orderKeys = 1000
	// orderedAim is what the ordered phase's rate ÷ the same target's
	// unordered should be (issue 48). It is reported, not checked, as the
	// rules phase's aim is.
	orderedAim = 0.8
	// oneKeyTarget is the one-key phase's target.
	oneKeyTarget = "sink-one-key"
)

// keyedTarget is the name of the keyed phases' target: its own, so that
// the operator API counts its forwards apart.
func keyedTarget(ordered bool) string {
	if ordered {
		return "sink-ordered"
	}
	return "sink-keyed"
}

// keyedConfig is forwardConfig's target named target, ordered by the
// body's key (keyedBody) when ordered.
func keyedConfig(sk *sink, target string, ordered bool) string {
	config := strings.Replace(forwardConfig(sk), "- name: sink\n", "- name: "+target+"\n", 1)
	if ordered {
		config += "        ordering: { json_pointer: /key }\n"
	}
	return config
}

// orderedPhases runs the --role all phase with the keyed bodies, spread
// over orderKeys keys, to a target without ordering, then to one ordered
// by the key, then the one-key phase.
func (b *bench) orderedPhases(ctx context.Context, sk *sink) error {
	for _, p := range []fwdPhase{{role: "all", tag: "ou", keys: orderKeys}, {role: "all", tag: "oo", keys: orderKeys, ordered: true}} {
		if err := b.forwardPhase(ctx, sk, p); err != nil {
			return err
		}
	}
	return b.oneKeyPhase(ctx, sk)
}

// orderedRatio reports the ordered phase's rate ÷ the unordered one's,
// and whether other processes loaded either.
func (b *bench) orderedRatio(load *loadResult) {
	if b.unordered == nil {
		return
	}
	busy := ""
	if o := max(load.cpu.others, b.unordered.cpu.others); o > disturbedAbove {
		busy = fmt.Sprintf("; other processes used %.2f and %.2f cores: the machine was busy", load.cpu.others, b.unordered.cpu.others)
	}
	b.line("info", "ordered: first delivery, --role all, one target ordered by the body's key, %d keys %.0f/s ÷ the same target unordered %.0f/s = %.2f (aim ≥ %.2f)%s",
		orderKeys, load.rate(), b.unordered.rate(), load.rate()/max(b.unordered.rate(), 1), orderedAim, busy)
}

// keyedOrder reports, once a keyed phase's forwards all arrived, whether
// each key's forwards from one connection of the load arrived in the order
// of their acceptance (a check when the target orders them), and the CPU
// per accepted event of the ordered phase beside the unordered one's.
func (b *bench) keyedOrder(sk *sink, p fwdPhase, perEvent time.Duration) {
	pairs, late := sk.outOfOrder(p.tag)
	if !p.ordered {
		b.unorderedPerEvent = perEvent
		fmt.Fprintf(b.out, "  unordered: %d of %d forwards arrived before one accepted earlier on their key and connection\n", late, pairs)
		return
	}
	b.check(pairs > 0 && late == 0, "ordered, %d keys: at the sink, %d forwards each came after the one accepted before it on its key and connection, %d before it", orderKeys, pairs-late, late)
	if b.unorderedPerEvent > 0 {
		b.line("info", "ordered: gateway and PostgreSQL CPU per accepted event, load and drain, %d µs ordered ÷ %d µs unordered = %.2f (%+d µs)",
			perEvent.Microseconds(), b.unorderedPerEvent.Microseconds(), float64(perEvent)/float64(b.unorderedPerEvent), (perEvent - b.unorderedPerEvent).Microseconds())
	}
}

// oneKeyPhase runs the --role all phase with every body on one key, to a
// target ordered by it. Each forward waits for the previous one's answer
// and its recording, so the sink receives far fewer than the gateway
// accepts: the phase reports the forwards received per second while the
// load ran, beside the target's latency as the gateway measured it
// (forward_attempts, and the first attempts kept in forward_delivered),
// and then removes the backlog left.
func (b *bench) oneKeyPhase(ctx context.Context, sk *sink) error {
	const tag = "o1"
	if err := b.vacuumForwards(ctx); err != nil {
		return err
	}
	srv, err := b.startServer(ctx, "server-forward-all-one-key", keyedConfig(sk, oneKeyTarget, true), "--role", "all")
	if err != nil {
		return err
	}
	defer func() { _ = srv.stop() }() // on failure paths; after b.stop, nothing
	b.checkpoint(ctx)
	t0 := time.Now()
	load, err := b.load(ctx, srv, "first delivery, 1 target ordered, 1 key, all", loadConfig{ids: firstIDs(tag), orderKeys: 1, body: keyedBody(bodySize)})
	if err != nil {
		return err
	}
	from, to := t0.Add(b.warmup), t0.Add(b.warmup+b.duration)
	at := sk.arrivals(tag)
	n := 0
	for _, t := range at {
		if !t.Before(from) && t.Before(to) {
			n++
		}
	}
	rate := float64(n) / b.duration.Seconds()
	var attempts int
	var p50, p99 float64
	if err := b.conn.QueryRow(ctx, `SELECT count(*), coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY took_us), 0), coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY took_us), 0)
FROM (SELECT took_us FROM forward_attempts WHERE sender = 'bench' AND target = $1
  UNION ALL SELECT took_us FROM forward_delivered WHERE sender = 'bench' AND target = $1 AND took_us IS NOT NULL) a`, oneKeyTarget).Scan(&attempts, &p50, &p99); err != nil {
		return fmt.Errorf("read the one key's attempts: %w", err)
	}
	every := time.Duration(float64(time.Second) / max(rate, 1e-9))
	latency := time.Duration(p50) * time.Microsecond
	fmt.Fprintf(b.out, "  sink: %.0f forwards/s on the one key while the load was measured (one every %s); %d of %d accepted events received by the load's end\n"+
		"  the target's latency, as the gateway timed its %d attempts: p50 %s, p99 %s\n",
		rate, ms(every), len(at), load.accepted, attempts, ms(latency), ms(time.Duration(p99)*time.Microsecond))
	ingest := ""
	if b.unordered != nil {
		ingest = fmt.Sprintf(" (÷ the same target unordered, %d keys: %.2f)", orderKeys, load.rate()/max(b.unordered.rate(), 1))
	}
	b.line("info", "ordered, one key: %.0f forwards/s, one every %s, one at a time: each waits for the previous one's answer (the target's latency, p50 %s) and its recording and hand-over to the next (the rest, %s); deliveries accepted meanwhile %.0f/s%s",
		rate, ms(every), ms(latency), ms(max(every-latency, 0)), load.rate(), ingest)
	pairs, late := sk.outOfOrder(tag)
	b.check(pairs > 0 && late == 0, "ordered, one key: at the sink, %d forwards each came after the one accepted before it on its connection, %d before it", pairs-late, late)
	b.check(load.errors == 0 && load.count > 0, "forwarding, --role all, one key: %d errors in %d requests", load.errors, load.requests)
	b.stop(srv, " (--role all, one target ordered, one key)")
	// The key's backlog waits in the outbox; the next phases' servers
	// would relay it, and find no such target.
	var rows, jobs int64
	for i, sql := range []string{`DELETE FROM forward_outbox WHERE sender = 'bench' AND target = $1`, `DELETE FROM forward_keys WHERE sender = 'bench' AND target = $1`,
		`DELETE FROM river_job WHERE args->>'sender' = 'bench' AND args->>'target' = $1 AND finalized_at IS NULL`} {
		tg, err := b.conn.Exec(ctx, sql, oneKeyTarget)
		if err != nil {
			return fmt.Errorf("remove the one key's backlog: %w", err)
		}
		switch i {
		case 0:
			rows = tg.RowsAffected()
		case 2:
			jobs = tg.RowsAffected()
		}
	}
	fmt.Fprintf(b.out, "  removed the one key's backlog: %d outbox rows and %d jobs\n", rows, jobs)
	return b.vacuumForwards(ctx)
}

// outOfOrder compares, for the forwards with tag, each key's (keyedBody)
// forwards from one connection of the load, in the order the load sent
// them, that is of their acceptance: it returns how many forwards had one
// before them, and how many of those arrived before it.
func (s *sink) outOfOrder(tag string) (pairs, late int) {
	type arrival struct {
		seq int
		at  time.Time
	}
	s.mu.Lock()
	groups := map[string][]arrival{}
	for id, at := range s.seen {
		rest, ok := strings.CutPrefix(id, tag+"-")
		i := strings.LastIndexByte(rest, '-')
		if !ok || i < 0 {
			continue
		}
		seq, err := strconv.Atoi(rest[i+1:])
		if g := s.keys[id] + "/" + rest[:i]; err == nil { // key/run-worker
			groups[g] = append(groups[g], arrival{seq, at})
		}
	}
	s.mu.Unlock()
	for _, g := range groups {
		slices.SortFunc(g, func(x, y arrival) int { return x.seq - y.seq })
		for i := 1; i < len(g); i++ {
			if pairs++; g[i].at.Before(g[i-1].at) {
				late++
			}
		}
	}
	return pairs, late
}
