package dedup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Routes sends each sender's delegated calls (Delegated) straight to the
// Citus worker that holds the sender's shard group, on a pool of its own
// per worker, instead of through the coordinator, which would plan the
// call, turn its arguments to text and send them on: measured
// (docs/distributed.md#figures), a call on the worker ran 1.5 to 1.8
// times as many batches per second as the same call on the coordinator.
// Since Citus 11 every node with the metadata can run the function: on
// the worker that holds the shard it writes the shards themselves and
// commits there, one commit on one node as through the coordinator; on a
// node that no longer holds it (a shard moved since the last look) it
// writes through Citus, still correct.
//
// The senders' placements are looked up on the coordinator in the
// background, when a sender is first seen and then every RouteTTL; until
// a sender's placement is known, and for a worker that could not be
// reached, its calls go through the coordinator (Config.Pool), as they do
// when a worker's pool cannot give a connection. Everything else (the
// statement forms, the reads of what holds a key) goes to the coordinator.
type Routes struct {
	coordinator *pgxpool.Pool
	base        *pgxpool.Config
	log         *slog.Logger
	now         func() time.Time

	mu      sync.Mutex
	pools   map[string]*pgxpool.Pool // host:port → pool; nil: not reachable
	senders map[string]*pgxpool.Pool // sender → its worker's pool; nil: the coordinator
	looked  time.Time                // when the placements were last read
	stale   atomic.Bool              // a sender without a placement was seen since
	busy    atomic.Bool              // a look is running
	closed  bool
	wg      sync.WaitGroup
}

// RouteTTL is how often Routes reads the senders' placements again: a
// shard moved by the rebalancer is followed within it (meanwhile the calls
// on the old worker write through Citus).
const RouteTTL = 10 * time.Second

// routeConnectTimeout bounds the connection test of a worker at NewRoutes.
const routeConnectTimeout = 5 * time.Second

// workersSQL lists the primary nodes that hold shards of processed_messages
// and have Citus's metadata (the function reads it), as placementsSQL.
const workersSQL = `SELECT DISTINCT n.nodename, n.nodeport
FROM pg_catalog.pg_dist_shard s
JOIN pg_catalog.pg_dist_placement p ON p.shardid = s.shardid
JOIN pg_catalog.pg_dist_node n ON n.groupid = p.groupid AND n.noderole = 'primary' AND n.isactive
  AND n.hasmetadata AND n.metadatasynced
WHERE s.logicalrelid = 'processed_messages'::regclass
ORDER BY 1, 2`

// placementsSQL gives, for each sender of $1, the node that holds its shard
// of processed_messages (the shard group its delegated call runs on).
const placementsSQL = `SELECT x.sender, n.nodename, n.nodeport
FROM (SELECT s AS sender, get_shard_id_for_distribution_column('processed_messages', s) AS shardid FROM unnest($1::text[]) s) x
JOIN pg_catalog.pg_dist_placement p ON p.shardid = x.shardid
JOIN pg_catalog.pg_dist_node n ON n.groupid = p.groupid AND n.noderole = 'primary' AND n.isactive
  AND n.hasmetadata AND n.metadatasynced`

// NewRoutes returns the Routes of the Citus cluster whose coordinator
// coordinator is: a pool per node that holds shards of processed_messages,
// at the node's name and port as pg_dist_node has them, with coordinator's
// configuration otherwise (user, password, TLS, pool size). A node it
// cannot connect to within routeConnectTimeout is logged and left out: its
// senders go through the coordinator. Close closes the pools.
func NewRoutes(ctx context.Context, coordinator *pgxpool.Pool, log *slog.Logger) (*Routes, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Routes{
		coordinator: coordinator,
		base:        coordinator.Config(),
		log:         log,
		now:         time.Now,
		pools:       map[string]*pgxpool.Pool{},
		senders:     map[string]*pgxpool.Pool{},
	}
	rows, err := coordinator.Query(ctx, workersSQL)
	if err != nil {
		return nil, fmt.Errorf("citus routes: list workers: %w", err)
	}
	type node struct {
		Host string
		Port int32
	}
	nodes, err := pgx.CollectRows(rows, pgx.RowToStructByPos[node])
	if err != nil {
		return nil, fmt.Errorf("citus routes: list workers: %w", err)
	}
	for _, n := range nodes {
		addr := net.JoinHostPort(n.Host, strconv.Itoa(int(n.Port)))
		pool, err := r.connect(ctx, n.Host, uint16(n.Port))
		if err != nil {
			log.Warn("citus: cannot connect to a worker; the calls of its senders go through the coordinator",
				"worker", addr, "error", err)
			r.pools[addr] = nil
			continue
		}
		r.pools[addr] = pool
	}
	return r, nil
}

// connect opens a pool on host:port with the coordinator's configuration
// and tests it.
func (r *Routes) connect(ctx context.Context, host string, port uint16) (*pgxpool.Pool, error) {
	cfg := r.base.Copy()
	cc := cfg.ConnConfig
	cc.Host, cc.Port, cc.Fallbacks = host, port, nil
	if cc.TLSConfig != nil {
		cc.TLSConfig = cc.TLSConfig.Clone()
		cc.TLSConfig.ServerName = host
	}
	cfg.MinConns = 0
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, routeConnectTimeout)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

// Workers returns the number of workers the calls can go to.
func (r *Routes) Workers() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, p := range r.pools {
		if p != nil {
			n++
		}
	}
	return n
}

// pool returns the pool of the worker that holds sender's shard group, nil
// for the coordinator's (not known yet, or not reachable). A sender not
// seen before, or placements older than RouteTTL, start a look in the
// background.
func (r *Routes) pool(sender string) *pgxpool.Pool {
	r.mu.Lock()
	p, known := r.senders[sender]
	if !known {
		r.senders[sender] = nil
		r.stale.Store(true)
	}
	due := r.stale.Load() || r.now().Sub(r.looked) >= RouteTTL
	closed := r.closed
	if due && !closed && r.busy.CompareAndSwap(false, true) {
		r.wg.Add(1)
		go r.look()
	}
	r.mu.Unlock()
	return p
}

// look reads the placements of the senders seen so far.
func (r *Routes) look() {
	defer r.wg.Done()
	defer r.busy.Store(false)
	r.mu.Lock()
	r.stale.Store(false)
	senders := make([]string, 0, len(r.senders))
	for s := range r.senders {
		senders = append(senders, s)
	}
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), routeConnectTimeout)
	defer cancel()
	rows, err := r.coordinator.Query(ctx, placementsSQL, senders)
	var found map[string]string
	if err == nil {
		found = make(map[string]string, len(senders))
		for rows.Next() {
			var (
				s, host string
				port    int32
			)
			if err = rows.Scan(&s, &host, &port); err != nil {
				break
			}
			found[s] = net.JoinHostPort(host, strconv.Itoa(int(port)))
		}
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.looked = r.now()
	if err != nil {
		// Keep the routes known: a call on a worker that no longer holds
		// the shard is still correct.
		if !errors.Is(err, context.Canceled) {
			r.log.Warn("citus: cannot read where the senders' shards are; keeping the last routes", "error", err)
		}
		return
	}
	for _, s := range senders {
		r.senders[s] = r.pools[found[s]] // nil: a node without a pool, or no placement found
	}
}

// Close closes the workers' pools, after any look still running.
func (r *Routes) Close() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.wg.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.pools {
		if p != nil {
			p.Close()
		}
	}
}
