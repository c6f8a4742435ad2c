// Package authlimit slows down guessing of the admin token: it remembers,
// per client address, how many wrong or missing tokens came lately. The
// operator API (internal/handler) and the console (internal/console) share
// one Limiter, so a guesser cannot double its rate by using both.
package authlimit

import (
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Limits on wrong admin tokens, per client address: a client may get a
// burst of FailureBurst refusals (401), then one per FailureEvery;
// beyond that its operator requests are answered 429 without the token being
// looked at.
const (
	// FailureBurst refusals are allowed at once, then one per FailureEvery.
	FailureBurst = 10
	FailureEvery = time.Second
	// MaxClients bounds the clients whose failures are remembered.
	MaxClients = 10000
)

// Limiter slows down guessing of the admin token: a token bucket per
// client address (an IPv6 address's /64, where one client usually has many
// addresses), taken from only by requests whose token was missing or wrong.
// Its memory is bounded: past MaxClients, the clients whose bucket has
// filled up again (who told it nothing) are forgotten first, then arbitrary
// ones.
type Limiter struct {
	mu      sync.Mutex
	clients map[netip.Prefix]*rate.Limiter
	now     func() time.Time
}

// New returns an empty Limiter.
func New() *Limiter {
	return &Limiter{clients: map[netip.Prefix]*rate.Limiter{}, now: time.Now}
}

// ClientKey returns the client address of r (its TCP peer; forwarding
// headers, which the client writes, are ignored) as a prefix: the address
// itself for IPv4, its /64 for IPv6.
func ClientKey(r *http.Request) netip.Prefix {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Prefix{}
	}
	a = a.Unmap()
	if a.Is4() {
		return netip.PrefixFrom(a, 32)
	}
	p, _ := a.Prefix(64)
	return p
}

// Blocked returns how long the client of r must wait before its next
// attempt, 0 when it may try now.
func (l *Limiter) Blocked(r *http.Request) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	lim, ok := l.clients[ClientKey(r)]
	if !ok {
		return 0
	}
	now := l.now()
	if lim.TokensAt(now) >= 1 {
		return 0
	}
	res := lim.ReserveN(now, 1)
	d := res.DelayFrom(now)
	res.CancelAt(now)
	return d
}

// Failed records a refused attempt by the client of r.
func (l *Limiter) Failed(r *http.Request) {
	l.mu.Lock()
	defer l.mu.Unlock()
	key := ClientKey(r)
	now := l.now()
	lim, ok := l.clients[key]
	if !ok {
		l.evict(now)
		lim = rate.NewLimiter(rate.Every(FailureEvery), FailureBurst)
		l.clients[key] = lim
	}
	lim.AllowN(now, 1)
}

// evict makes room for one more client when the map is full: it forgets the
// clients whose bucket is full again, and if that is not enough, arbitrary
// ones, down to three quarters of the bound.
func (l *Limiter) evict(now time.Time) {
	if len(l.clients) < MaxClients {
		return
	}
	for k, lim := range l.clients {
		if lim.TokensAt(now) >= FailureBurst {
			delete(l.clients, k)
		}
	}
	for k := range l.clients {
		if len(l.clients) < MaxClients*3/4 {
			break
		}
		delete(l.clients, k)
	}
}

// size returns how many clients are remembered.
func (l *Limiter) size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.clients)
}
