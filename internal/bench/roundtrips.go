package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/dedup"
	"github.com/hookgate/hookgate/internal/events"
	"github.com/hookgate/hookgate/internal/forward"
	"github.com/hookgate/hookgate/internal/store"
)

// countingConn counts the writes on a connection to PostgreSQL: pgx sends a
// pipeline, a query or a prepare (up to its Sync) in one write, so writes
// are round trips.
type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// countingDialer returns a DialFunc whose connections count their writes
// in writes.
func countingDialer(writes *atomic.Int64) func(ctx context.Context, network, addr string) (net.Conn, error) {
	dialer := &net.Dialer{Timeout: 10 * time.Second}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dialer.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &countingConn{Conn: c, writes: writes}, nil
	}
}

// roundTripCounts are the round trips per delivery measured by roundTrips.
type roundTripCounts struct {
	first, replay, firstAfterReplay, mismatch, forward float64
	// reprepared is how many statements the connection prepared after its
	// warm-up: it must stay 0.
	reprepared int
}

// roundTrips runs the gateway's own transaction code (internal/dedup's Store
// with internal/events' insert and, for a sender with a forward target,
// internal/forward's outbox insert as the change) on a pool of a single pgx
// connection whose socket writes it counts, and reports how many round trips each
// outcome takes once the connection has prepared its statements, and
// whether any statement was prepared again.
func roundTrips(ctx context.Context, dbURL string, body []byte, out io.Writer) (*roundTripCounts, error) {
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return nil, err
	}
	// A pool of one connection, never pinged on acquire: the store runs as
	// it does in the gateway (dedup.New on a pool), and every write on the
	// one socket is the store's.
	cfg.MaxConns, cfg.MinConns = 1, 0
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	cfg.ConnConfig.RuntimeParams["application_name"] = benchAppName
	var writes atomic.Int64
	cfg.ConnConfig.DialFunc = countingDialer(&writes)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("round trips: connect: %w", err)
	}
	defer pool.Close()

	sender := "bench-roundtrips-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	targets := []string{"sink"}
	// The store without group commit, replay cache or shedding: each
	// delivery's own pipeline is what is counted.
	ingest, err := dedup.New(pool, dedup.Config{InFlightWait: dedup.DefaultInFlightWait})
	if err != nil {
		return nil, err
	}
	deliver := func(id string, payload []byte, withTarget bool) (dedup.Result, error) {
		now := time.Now().UTC().Truncate(time.Microsecond)
		eventID, _ := uuid.NewV7()
		d := dedup.Delivery{
			Key:           dedup.Key{Sender: sender, DeliveryID: id},
			RequestSHA256: sha256.Sum256(payload),
			EventID:       eventID,
			Response:      dedup.Response{Status: http.StatusAccepted, ContentType: "application/json", Body: []byte(`{"ok":true}` + "\n")},
			ReceivedAt:    now,
			ExpiresAt:     now.Add(time.Hour),
		}
		return ingest.Run(ctx, d, func(b *dedup.Batch) {
			events.QueueInsert(b, events.Event{ID: eventID, Sender: sender, DeliveryID: id, ReceivedAt: now, Headers: roundTripHeaders, Body: payload})
			if withTarget {
				forward.QueueOutbox(b, eventID, id, now, targets, forward.Lease{})
			}
		})
	}
	expect := func(id string, payload []byte, withTarget, replayed bool) func(int) error {
		return func(i int) error {
			key := id + strconv.Itoa(i)
			res, err := deliver(key, payload, withTarget)
			if err == nil && res.Replayed != replayed {
				err = fmt.Errorf("key %s: Replayed %v, want %v", key, res.Replayed, replayed)
			}
			return err
		}
	}
	mismatch := func(i int) error {
		_, err := deliver("k"+strconv.Itoa(i), append([]byte("other"), body...), false)
		if !errors.Is(err, dedup.ErrPayloadMismatch) {
			return fmt.Errorf("key k%d with another payload: %w, want a payload mismatch", i, err)
		}
		return nil
	}
	// measure returns the writes per call of n calls of f(i).
	measure := func(n int, f func(i int) error) (float64, error) {
		before := writes.Load()
		for i := range n {
			if err := f(i); err != nil {
				return 0, err
			}
		}
		return float64(writes.Load()-before) / float64(n), nil
	}
	const n = 20
	first, replay := expect("k", body, false, false), expect("k", body, false, true)
	// Warm up: every statement gets prepared once.
	for _, f := range []func(int) error{
		func(int) error { return first(n + 1) }, func(int) error { return replay(n + 1) },
		func(int) error { return mismatch(n + 1) }, func(int) error { return expect("f", body, true, false)(n + 1) },
	} {
		if _, err := measure(1, f); err != nil {
			return nil, fmt.Errorf("round trips: %w", err)
		}
	}
	before, err := preparedCount(ctx, pool)
	if err != nil {
		return nil, err
	}
	var c roundTripCounts
	steps := []struct {
		dst *float64
		n   int
		f   func(int) error
	}{
		{&c.first, n, first},
		{&c.replay, n, replay},
		{&c.firstAfterReplay, 1, func(int) error { return first(n + 2) }},
		{&c.mismatch, n, mismatch},
		{&c.forward, n, expect("f", body, true, false)},
	}
	for _, st := range steps {
		if *st.dst, err = measure(st.n, st.f); err != nil {
			return nil, fmt.Errorf("round trips: %w", err)
		}
	}
	after, err := preparedCount(ctx, pool)
	if err != nil {
		return nil, err
	}
	c.reprepared = after - before
	// Leave no outbox row for a relay to find: the target does not exist.
	if _, err := store.New(pool).DeleteOutboxOf(ctx, sender, ""); err != nil {
		return nil, fmt.Errorf("delete the round-trip count's outbox rows: %w", err)
	}

	fmt.Fprintf(out, "round trips to PostgreSQL per delivery (internal/dedup + internal/events + internal/forward's outbox on a pool of one pgx connection):\n")
	fmt.Fprintf(out, "  first delivery: %.1f;  replay: %.1f;  first delivery after a replay: %.1f;  payload mismatch: %.1f;  first delivery with one forward target: %.1f\n",
		c.first, c.replay, c.firstAfterReplay, c.mismatch, c.forward)
	fmt.Fprintf(out, "  statements prepared again after the warm-up: %d\n", c.reprepared)
	return &c, nil
}

// preparedCount returns how many statements pool's one connection has
// prepared, read with the simple protocol, which prepares nothing. Preparation times make a
// statement prepared again count as new.
func preparedCount(ctx context.Context, pool *pgxpool.Pool) (int, error) {
	var n int
	err := pool.QueryRow(ctx, `SELECT count(DISTINCT (name, prepare_time)) FROM pg_prepared_statements`, pgx.QueryExecModeSimpleProtocol).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count prepared statements: %w", err)
	}
	return n, nil
}

// roundTripHeaders are the request headers the round-trip count stores.
var roundTripHeaders = http.Header{"Content-Type": {"application/json"}, "User-Agent": {"hookgate-bench/1.0"}}
