package handler

import (
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// MinAdminTokenLen is the shortest admin token hookgate starts with.
const MinAdminTokenLen = 32

// Limits on wrong admin tokens, per client address: a client may get a
// burst of authFailureBurst refusals (401), then one per authFailureEvery;
// beyond that its operator requests are answered 429 without the token being
// looked at.
const (
	authFailureBurst = 10
	authFailureEvery = time.Second
	// maxAuthClients bounds the clients whose failures are remembered.
	maxAuthClients = 10000
)

// authLimiter slows down guessing of the admin token: a token bucket per
// client address (an IPv6 address's /64, where one client usually has many
// addresses), taken from only by requests whose token was missing or wrong.
// Its memory is bounded: past maxAuthClients, the clients whose bucket has
// filled up again (who told it nothing) are forgotten first, then arbitrary
// ones.
type authLimiter struct {
	mu      sync.Mutex
	clients map[netip.Prefix]*rate.Limiter
	now     func() time.Time
}

func newAuthLimiter() *authLimiter {
	return &authLimiter{clients: map[netip.Prefix]*rate.Limiter{}, now: time.Now}
}

// clientKey returns the client address of r (its TCP peer; forwarding
// headers, which the client writes, are ignored) as a prefix: the address
// itself for IPv4, its /64 for IPv6.
func clientKey(r *http.Request) netip.Prefix {
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

// blocked returns how long the client of r must wait before its next
// attempt, 0 when it may try now.
func (l *authLimiter) blocked(r *http.Request) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	lim, ok := l.clients[clientKey(r)]
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

// failed records a refused attempt by the client of r.
func (l *authLimiter) failed(r *http.Request) {
	l.mu.Lock()
	defer l.mu.Unlock()
	key := clientKey(r)
	now := l.now()
	lim, ok := l.clients[key]
	if !ok {
		l.evict(now)
		lim = rate.NewLimiter(rate.Every(authFailureEvery), authFailureBurst)
		l.clients[key] = lim
	}
	lim.AllowN(now, 1)
}

// evict makes room for one more client when the map is full: it forgets the
// clients whose bucket is full again, and if that is not enough, arbitrary
// ones, down to three quarters of the bound.
func (l *authLimiter) evict(now time.Time) {
	if len(l.clients) < maxAuthClients {
		return
	}
	for k, lim := range l.clients {
		if lim.TokensAt(now) >= authFailureBurst {
			delete(l.clients, k)
		}
	}
	for k := range l.clients {
		if len(l.clients) < maxAuthClients*3/4 {
			break
		}
		delete(l.clients, k)
	}
}

// size returns how many clients are remembered.
func (l *authLimiter) size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.clients)
}
