package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/dedup"
	"github.com/hookgate/hookgate/internal/events"
	"github.com/hookgate/hookgate/internal/forward"
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
	first, replay, firstAfterReplay, forward float64
}

// roundTrips runs the gateway's own transaction code (internal/dedup's Store
// with internal/events' insert as the change, and for a sender with a
// forward target internal/forward's Enqueue on River's client as the apply)
// on a single pgx connection configured like the server's pool (statement
// cache on) and reports how many round trips a first delivery and a replay
// take in steady state.
func roundTrips(ctx context.Context, dbURL string, body []byte, out io.Writer) (*roundTripCounts, error) {
	cfg, err := pgx.ParseConfig(dbURL)
	if err != nil {
		return nil, err
	}
	cfg.RuntimeParams["application_name"] = benchAppName
	var writes atomic.Int64
	cfg.DialFunc = countingDialer(&writes)
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("round trips: connect: %w", err)
	}
	defer conn.Close(context.Background())

	sender := "bench-roundtrips-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	run := func(store *dedup.Store, id string, apply func(eventID uuid.UUID) dedup.Apply) (dedup.Result, error) {
		now := time.Now().UTC().Truncate(time.Microsecond)
		eventID, _ := uuid.NewV7()
		d := dedup.Delivery{
			Key:           dedup.Key{Sender: sender, DeliveryID: id},
			RequestSHA256: sha256.Sum256(body),
			EventID:       eventID,
			Response:      dedup.Response{Status: http.StatusAccepted, ContentType: "application/json", Body: []byte(`{"ok":true}` + "\n")},
			ReceivedAt:    now,
			ExpiresAt:     now.Add(time.Hour),
		}
		var a dedup.Apply
		if apply != nil {
			a = apply(eventID)
		}
		return store.RunTx(ctx, d, func(b *pgx.Batch) {
			events.QueueInsert(b, events.Event{ID: eventID, Sender: sender, DeliveryID: id, ReceivedAt: now, Headers: roundTripHeaders, Body: body})
		}, a)
	}
	store := dedup.New(conn, 0)
	deliver := func(id string) (dedup.Result, error) { return run(store, id, nil) }
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
	first := func(i int) error {
		res, err := deliver("k" + strconv.Itoa(i))
		if err == nil && res.Replayed {
			err = fmt.Errorf("key k%d replayed on its first delivery", i)
		}
		return err
	}
	replay := func(i int) error {
		res, err := deliver("k" + strconv.Itoa(i))
		if err == nil && !res.Replayed {
			err = fmt.Errorf("key k%d not replayed", i)
		}
		return err
	}
	// Warm the statement cache: one first delivery and one replay.
	if _, err := measure(1, func(int) error { return first(n + 1) }); err != nil {
		return nil, fmt.Errorf("round trips: %w", err)
	}
	if _, err := measure(1, func(int) error { return replay(n + 1) }); err != nil {
		return nil, fmt.Errorf("round trips: %w", err)
	}
	if _, err := measure(1, func(int) error { return first(n + 2) }); err != nil {
		return nil, fmt.Errorf("round trips: %w", err)
	}
	var c roundTripCounts
	if c.first, err = measure(n, first); err != nil {
		return nil, fmt.Errorf("round trips: %w", err)
	}
	if c.replay, err = measure(n, replay); err != nil {
		return nil, fmt.Errorf("round trips: %w", err)
	}
	if c.firstAfterReplay, err = measure(1, func(int) error { return first(n + 3) }); err != nil {
		return nil, fmt.Errorf("round trips: %w", err)
	}

	// A sender with one forward target: RunTx with River's InsertManyTx,
	// on a pool of one counted connection (RunTx's apply needs a pool).
	var fwdWrites atomic.Int64
	fc, err := forwardRoundTrips(ctx, dbURL, &fwdWrites, func(store *dedup.Store, apply func(uuid.UUID) dedup.Apply) (float64, error) {
		fwdFirst := func(i int) error {
			res, err := run(store, "f"+strconv.Itoa(i), apply)
			if err == nil && res.Replayed {
				err = fmt.Errorf("key f%d replayed on its first delivery", i)
			}
			return err
		}
		if err := fwdFirst(n + 1); err != nil { // warm the statement cache
			return 0, err
		}
		before := fwdWrites.Load()
		for i := range n {
			if err := fwdFirst(i); err != nil {
				return 0, err
			}
		}
		return float64(fwdWrites.Load()-before) / n, nil
	})
	if err != nil {
		return nil, fmt.Errorf("round trips with a forward target: %w", err)
	}
	c.forward = fc

	fmt.Fprintf(out, "round trips to PostgreSQL per delivery (internal/dedup + internal/events on one pgx connection, statement cache on):\n")
	fmt.Fprintf(out, "  first delivery after first deliveries: %.1f;  replay after replays: %.1f;  first delivery after a replay: %.1f\n",
		c.first, c.replay, c.firstAfterReplay)
	fmt.Fprintf(out, "  first delivery of a sender with one forward target (RunTx + River InsertManyTx): %.1f\n", c.forward)
	if c.replay > 2.5 || c.firstAfterReplay > 1.5 {
		fmt.Fprintln(out, "  (more than 2 per replay / 1 per first delivery: the conflict makes pgx drop the batch's statements from its cache,"+
			" so the connection's next batch deallocates and re-prepares them: extra round trips and a parse/plan on the server)")
	}
	return &c, nil
}

// roundTripHeaders are the request headers the round-trip count stores.
var roundTripHeaders = http.Header{"Content-Type": {"application/json"}, "User-Agent": {"hookgate-bench/1.0"}}

// forwardRoundTrips sets up what cmd/server sets up for a sender with a
// forward target (a pool, River's insert-only client as in --role api, and
// internal/forward's Enqueue as the apply), on one connection that counts
// its writes in writes, and returns f's result.
func forwardRoundTrips(ctx context.Context, dbURL string, writes *atomic.Int64,
	f func(store *dedup.Store, apply func(eventID uuid.UUID) dedup.Apply) (float64, error)) (float64, error) {
	pc, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return 0, err
	}
	pc.ConnConfig.RuntimeParams["application_name"] = benchAppName
	pc.ConnConfig.DialFunc = countingDialer(writes)
	pc.MaxConns, pc.MinConns = 1, 0
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return 0, err
	}
	defer pool.Close()
	cfg, err := config.Parse([]byte(forwardConfig("http://127.0.0.1:9/roundtrips")), func(string) (string, bool) { return "", false })
	if err != nil {
		return 0, err
	}
	sender, _ := cfg.Sender("bench")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	client, err := forward.NewClient(pool, cfg, forward.Options{}, forward.NewMetrics(prometheus.NewRegistry()), log)
	if err != nil {
		return 0, err
	}
	store := dedup.New(pool, 0)
	var enqueued []uuid.UUID
	rt, err := f(store, func(eventID uuid.UUID) dedup.Apply {
		return func(ctx context.Context, tx pgx.Tx) error {
			enqueued = append(enqueued, eventID)
			return forward.Enqueue(ctx, client, tx, sender, eventID, "roundtrips")
		}
	})
	if err != nil {
		return 0, err
	}
	// Leave no job for a worker to find: the target does not exist.
	ids := make([][16]byte, len(enqueued))
	for i, id := range enqueued {
		ids[i] = id
	}
	if _, err := pool.Exec(ctx, `DELETE FROM river_job WHERE kind = 'hookgate_forward' AND (args->>'event_id')::uuid = ANY($1)`, ids); err != nil {
		return 0, fmt.Errorf("delete the round-trip count's forward jobs: %w", err)
	}
	return rt, nil
}
