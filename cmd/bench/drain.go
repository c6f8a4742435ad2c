package main

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// fillSQL writes $2 deliveries of the bench sender, each with one forward
// to the sink waiting in the outbox, as an api process's ingest leaves
// them: the key (processed_messages), the event (webhook_events) and an
// outbox row not leased, delivery IDs "$1-<n>". Their other values are
// those of a delivery the --role api phase accepted through HTTP (the
// template, "fwa-…"); one statement, so that a backlog of 200,000 takes
// seconds to write instead of a minute of HTTP.
const fillSQL = `WITH t AS (
  SELECT p.sender, p.request_sha256, p.response_status, p.response_content_type, p.response_body, p.expires_at - p.created_at AS keep,
    e.headers, e.body, e.event_type
  FROM processed_messages p JOIN webhook_events e USING (sender, delivery_id)
  WHERE p.sender = 'bench' AND starts_with(p.delivery_id, 'fwa-') LIMIT 1
), g AS MATERIALIZED (
  SELECT $1 || '-' || i AS delivery_id, gen_random_uuid() AS event_id FROM generate_series(1, $2::int) i
), pm AS (
  INSERT INTO processed_messages (sender, delivery_id, request_sha256, event_id, response_status, response_content_type, response_body, created_at, expires_at)
  SELECT t.sender, g.delivery_id, t.request_sha256, g.event_id, t.response_status, t.response_content_type, t.response_body, now(), now() + t.keep FROM t, g
), ev AS (
  INSERT INTO webhook_events (sender, id, delivery_id, received_at, headers, body, event_type)
  SELECT t.sender, g.event_id, g.delivery_id, now(), t.headers, t.body, t.event_type FROM t, g
)
INSERT INTO forward_outbox (sender, event_id, target, delivery_id, created_at)
SELECT t.sender, g.event_id, 'sink', g.delivery_id, now() FROM t, g`

// drainResult is one drain of a backlog by a lone worker process.
type drainResult struct {
	backlog, received int
	rate              float64 // forwards/s from the first arrival to the last
	firstRate         float64 // over the first drainFirst arrivals
	lastRate          float64 // over the last drainFirst
	cpu               cpuUse
}

// drainPhase measures a --role worker process alone draining backlogs of
// forwards to the sink (-drain-backlogs, 20,000 and 200,000 by default),
// each written by fillSQL with no process running, and checks the ratio
// of the largest backlog's rate to the smallest's. Each worker starts on
// its backlog and stops once the sink has every forward. The smallest
// backlog drains again after the largest, on a vacuumed job table that
// keeps the drains' history, and its rate is the mean of its two: one
// drain of 20,000 lasts a few seconds, and the machine's rate moves by
// ±10% over seconds and further over the minute between them.
func (b *bench) drainPhase(ctx context.Context, sk *sink, config string) error {
	var res []drainResult
	for i, n := range b.drainBacklogs {
		r, err := b.drainOnce(ctx, sk, config, fmt.Sprintf("dr%c", 'a'+i), n, "")
		if err != nil {
			return err
		}
		res = append(res, r)
	}
	if len(res) < 2 {
		return nil
	}
	// As autovacuum would, within its naptime, after the largest drain.
	if err := b.vacuumForwards(ctx); err != nil {
		return err
	}
	n := b.drainBacklogs[0]
	again, err := b.drainOnce(ctx, sk, config, fmt.Sprintf("dr%c", 'a'+len(res)), n, " again")
	if err != nil {
		return err
	}
	lo, hi := res[0], res[len(res)-1]
	fmt.Fprintf(b.out, "  drains of %d: %.0f/s before the drain of %d, %.0f/s after it; mean %.0f/s\n", n, lo.rate, hi.backlog, again.rate, (lo.rate+again.rate)/2)
	b.ratio(fmt.Sprintf("worker drain: %d waiting forwards %%.0f/s ÷ %d waiting %%.0f/s (the mean of the drains before and after it)", hi.backlog, n), hi.rate, (lo.rate+again.rate)/2, b.minDrainRatio,
		hi.cpu, busier(lo.cpu, again.cpu), fmt.Sprintf("drain of %d", hi.backlog), fmt.Sprintf("drains of %d", n))
	return nil
}

// drainOnce writes a backlog of n forwards tagged tag and measures a
// --role worker process alone draining it; what is added to its name.
func (b *bench) drainOnce(ctx context.Context, sk *sink, config, tag string, n int, what string) (r drainResult, err error) {
	t0 := time.Now()
	tg, err := b.conn.Exec(ctx, fillSQL, tag, n)
	if err != nil {
		return r, fmt.Errorf("fill the drain's backlog: %w", err)
	} else if tg.RowsAffected() != int64(n) {
		return r, fmt.Errorf("fill the drain's backlog: %d outbox rows written, want %d (no delivery of the --role api phase to copy?)", tg.RowsAffected(), n)
	}
	fill := time.Since(t0)
	b.checkpoint(ctx)
	srv, err := b.startServer(ctx, fmt.Sprintf("server-drain-%s-%d", tag, n), config, "--role", "worker")
	if err != nil {
		return r, err
	}
	defer func() { _ = srv.stop() }() // on failure paths; after b.stop, nothing
	cpu0 := takeCPU(srv.pid(), b.pgPID)
	t1 := time.Now()
	received := sk.wait(ctx, tag, n, b.drainTimeout, srv)
	wait := time.Since(t1)
	r = drainResult{backlog: n, received: received, cpu: cpuBetween(cpu0, takeCPU(srv.pid(), b.pgPID), nil)}
	at := sk.arrivals(tag)
	if len(at) > 1 {
		r.rate = float64(len(at)-1) / at[len(at)-1].Sub(at[0]).Seconds()
		k := min(len(at), drainFirst) - 1
		r.firstRate = float64(k) / at[k].Sub(at[0]).Seconds()
		r.lastRate = float64(k) / at[len(at)-1].Sub(at[len(at)-1-k]).Seconds()
	}
	name := fmt.Sprintf("drain of %d%s", n, what)
	fmt.Fprintf(b.out, "%-32s %9.0f forwards/s  %d of %d received %s after the worker started (written in %s, %.0f rows/s per table); over the first %d: %.0f/s, the last %d: %.0f/s\n  CPU cores: %s\n",
		name+", --role worker", r.rate, received, n, wait.Round(10*time.Millisecond), fill.Round(10*time.Millisecond),
		float64(n)/fill.Seconds(), min(drainFirst, len(at)), r.firstRate, min(drainFirst, len(at)), r.lastRate, r.cpu)
	b.noteDisturbed(name, r.cpu)
	if err := srv.alive(ctx); err != nil {
		return r, err
	}
	b.timed(received >= n, r.cpu, "worker drain%s: a --role worker process alone delivered %d of %d waiting forwards within %s", what, received, n, b.drainTimeout)
	b.stop(srv, fmt.Sprintf(" (--role worker, drain of %d%s)", n, what))
	return r, nil
}

// drainFirst is how many arrivals the drain's first and last rates cover:
// the first drained while the whole backlog waited, the last while the
// job table held the history of the rest.
const drainFirst = 20000

// arrivals returns, sorted, when each distinct delivery ID with tag first
// arrived.
func (s *sink) arrivals(tag string) []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	var at []time.Time
	for id, t := range s.seen {
		if len(id) > len(tag) && id[:len(tag)] == tag && id[len(tag)] == '-' {
			at = append(at, t)
		}
	}
	slices.SortFunc(at, func(x, y time.Time) int { return x.Compare(y) })
	return at
}
