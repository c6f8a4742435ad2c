package dedup

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Worker returns the address of the worker r sends sender's calls to, ""
// for the coordinator.
func (r *Routes) Worker(sender string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.senders[sender]
	for addr, q := range r.pools {
		if p != nil && q == p {
			return addr
		}
	}
	return ""
}

// Acquires returns how many connections each worker's pool gave, by address.
func (r *Routes) Acquires() map[string]int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := make(map[string]int64, len(r.pools))
	for addr, p := range r.pools {
		if p != nil {
			n[addr] = p.Stat().AcquireCount()
		}
	}
	return n
}

// Force makes r send sender's calls to pool (a worker's, or any) and read
// no placements for an hour.
func (r *Routes) Force(sender string, pool *pgxpool.Pool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.senders[sender] = pool
	r.stale.Store(false)
	r.looked = r.now().Add(time.Hour)
}

// Pool returns the pool of the worker at addr, nil when none.
func (r *Routes) Pool(addr string) *pgxpool.Pool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pools[addr]
}

// WaitRoute waits until r knows where sender's calls go (a worker), or ctx ends.
func (r *Routes) WaitRoute(ctx context.Context, sender string) string {
	for {
		if w := r.Worker(sender); w != "" || ctx.Err() != nil {
			return w
		}
		r.pool(sender)
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// NewRoutesFrom is NewRoutes with the workers' pools made from base (a
// configuration parsed from a DATABASE_URL) rather than from coordinator's
// own: the TLS settings of a URL the test server could not serve.
func NewRoutesFrom(ctx context.Context, coordinator *pgxpool.Pool, base *pgxpool.Config, cfg RoutesConfig) (*Routes, error) {
	return newRoutes(ctx, coordinator, base, cfg)
}
