package dedup

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Routes sends each sender's delegated calls straight to the Citus worker
// that holds the sender's shard group, on a pool per worker. Through the
// coordinator, each call is planned again and its arguments turned to text.
// On the worker, calls ran 1.5 to 1.8 times as many batches per second
// (docs/distributed.md#figures). Every node with Citus's metadata can run
// the function: where the shard moved away, it writes through Citus, still
// correctly.
//
// The senders' placements are looked up in the background, when a sender
// is first seen and then every [RouteTTL]. Until a placement is known, and
// when a worker cannot be reached, calls go through the coordinator. So do
// the statement forms and the reads of what holds a key. Only the workers
// [RoutesConfig] allows are contacted: a worker's address comes from
// pg_dist_node, and the calls carry the password and the deliveries.
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

// RouteTTL is how often Routes reads the placements again. A shard the
// rebalancer moved is followed within it.
const RouteTTL = 10 * time.Second

// routeConnectTimeout bounds the connection test of a worker at NewRoutes.
const routeConnectTimeout = 5 * time.Second

// workersSQL lists the primary nodes that hold shards of
// processed_messages and have Citus's metadata.
const workersSQL = `SELECT DISTINCT n.nodename, n.nodeport
FROM pg_catalog.pg_dist_shard s
JOIN pg_catalog.pg_dist_placement p ON p.shardid = s.shardid
JOIN pg_catalog.pg_dist_node n ON n.groupid = p.groupid AND n.noderole = 'primary' AND n.isactive
  AND n.hasmetadata AND n.metadatasynced
WHERE s.logicalrelid = 'processed_messages'::regclass
ORDER BY 1, 2`

// placementsSQL gives the node that holds each sender's shard of
// processed_messages.
const placementsSQL = `SELECT x.sender, n.nodename, n.nodeport
FROM (SELECT s AS sender, get_shard_id_for_distribution_column('processed_messages', s) AS shardid FROM unnest($1::text[]) s) x
JOIN pg_catalog.pg_dist_placement p ON p.shardid = x.shardid
JOIN pg_catalog.pg_dist_node n ON n.groupid = p.groupid AND n.noderole = 'primary' AND n.isactive
  AND n.hasmetadata AND n.metadatasynced`

// RoutesConfig says which workers NewRoutes may send the coordinator's
// credentials to.
type RoutesConfig struct {
	// Workers lists the workers the calls may go to, as "host:port" the way
	// pg_dist_node names them. A worker outside the list is never contacted.
	// When it is empty, every worker is, but only if the coordinator's
	// connection verifies the server's name ([ErrWorkersUnverified]).
	Workers []string
	// Log receives a line for each worker left to the coordinator.
	Log *slog.Logger
}

// ErrWorkersUnverified is the error of [NewRoutes] when it may contact no
// worker. The coordinator's connection does not verify the server's name,
// and [RoutesConfig].Workers lists none. A worker's address comes from the
// database: a connection there could reach another host and hand it the
// password and the deliveries.
var ErrWorkersUnverified = errors.New("citus routes: DATABASE_URL's connection does not verify the server's name (sslmode=verify-full) and no worker is listed")

// NewRoutes returns the Routes of the Citus cluster behind coordinator. It
// opens a pool per node that holds shards of processed_messages, at the
// address pg_dist_node gives, with the coordinator's user, password, TLS
// and pool size. It contacts the nodes cfg lists. When cfg lists none, it
// contacts every node only if the coordinator's connection verifies the
// server's name, and then verifies each node against its own name.
// Otherwise it returns [ErrWorkersUnverified]. A worker connection keeps
// TLS when the coordinator's has it, and without TLS never sends the
// password in clear. A node it cannot reach within routeConnectTimeout is
// logged and left out. Close closes the pools.
func NewRoutes(ctx context.Context, coordinator *pgxpool.Pool, cfg RoutesConfig) (*Routes, error) {
	return newRoutes(ctx, coordinator, coordinator.Config(), cfg)
}

// newRoutes is [NewRoutes] with base, the coordinator's configuration the
// workers' pools are made from.
func newRoutes(ctx context.Context, coordinator *pgxpool.Pool, base *pgxpool.Config, cfg RoutesConfig) (*Routes, error) {
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	listed := make(map[string]bool, len(cfg.Workers))
	for _, w := range cfg.Workers {
		host, port, err := splitWorker(w)
		if err != nil {
			return nil, fmt.Errorf("citus routes: %w", err)
		}
		listed[workerKey(host, port)] = true
	}
	if len(listed) == 0 && !verifiesServer(base.ConnConfig.TLSConfig) {
		return nil, ErrWorkersUnverified
	}
	r := &Routes{
		coordinator: coordinator,
		base:        base,
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
		r.pools[addr] = nil
		if len(listed) > 0 && !listed[workerKey(n.Host, int(n.Port))] {
			log.Warn("citus: a worker not in --citus-worker-hosts is not contacted; the calls of its senders go through the coordinator",
				"worker", addr)
			continue
		}
		pool, err := r.connect(ctx, n.Host, uint16(n.Port))
		if err != nil {
			log.Warn("citus: cannot connect to a worker; the calls of its senders go through the coordinator",
				"worker", addr, "error", err)
			continue
		}
		r.pools[addr] = pool
	}
	return r, nil
}

// verifiesServer reports whether a connection with the TLS config c
// verifies the server's certificate and name: sslmode verify-full.
// verify-ca checks the chain alone, and require and prefer nothing.
func verifiesServer(c *tls.Config) bool {
	return c != nil && !c.InsecureSkipVerify
}

// connect opens a pool on host:port with the coordinator's configuration
// and tests it. When the coordinator's connection tries TLS first, so does
// this one, with no plain fallback, verified against host when the
// coordinator's is. Without TLS, the password is never sent in clear.
func (r *Routes) connect(ctx context.Context, host string, port uint16) (*pgxpool.Pool, error) {
	cfg := r.base.Copy()
	cc := cfg.ConnConfig
	cc.Host, cc.Port, cc.Fallbacks = host, port, nil
	if cc.TLSConfig != nil {
		cc.TLSConfig = cc.TLSConfig.Clone()
		cc.TLSConfig.ServerName = host
	} else {
		cc.RequireAuth = withoutClearPassword(cc.RequireAuth)
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

// withoutClearPassword returns the require_auth list ra with the clear-text
// password refused too. ra uses libpq's syntax; "" allows every method.
func withoutClearPassword(ra string) string {
	var items []string
	for m := range strings.SplitSeq(ra, ",") {
		if m = strings.TrimSpace(m); m != "" && m != "password" && m != "!password" {
			items = append(items, m)
		}
	}
	switch {
	case len(items) > 0 && !strings.HasPrefix(items[0], "!"):
		return strings.Join(items, ",") // the methods allowed but password
	case len(items) == 0 && strings.TrimSpace(ra) == "password":
		return "none" // password alone was allowed: only no authentication is
	default:
		return strings.Join(append(items, "!password"), ",") // the methods refused, and password
	}
}

// ParseWorkerHosts parses --citus-worker-hosts: comma-separated host:port
// of Citus workers, as pg_dist_node names them. An empty list is nil.
func ParseWorkerHosts(s string) ([]string, error) {
	var ws []string
	for e := range strings.SplitSeq(s, ",") {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		if _, _, err := splitWorker(e); err != nil {
			return nil, err
		}
		ws = append(ws, e)
	}
	return ws, nil
}

func splitWorker(w string) (string, int, error) {
	host, p, err := net.SplitHostPort(w)
	port, perr := strconv.Atoi(p)
	if err != nil || perr != nil || host == "" || port < 1 || port > 65535 || strings.ContainsAny(host, "/@*, ") {
		return "", 0, fmt.Errorf("citus worker %q: must be host:port as pg_dist_node names the worker, such as worker-1.internal:5432 or 10.0.0.7:5432", w)
	}
	return host, port, nil
}

// workerKey is the worker host:port compared with the list: the name in
// lower case without a final dot, an address in its usual form.
func workerKey(host string, port int) string {
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	if a, err := netip.ParseAddr(h); err == nil {
		h = a.Unmap().String()
	}
	return net.JoinHostPort(h, strconv.Itoa(port))
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

// pool returns the pool of the worker that holds sender's shard group. It
// returns nil for the coordinator's, when none is known or reachable. A new
// sender, or stale placements, start a look in the background.
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
