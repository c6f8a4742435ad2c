// Package authlimit slows down guessing of the admin token: it remembers,
// per client address, how many wrong or missing tokens came lately. The
// operator API (internal/handler) and the console (internal/console) share
// one Limiter, so a guesser cannot double its rate by using both. A request
// with the right token is never refused by it: callers check the token
// first and ask Blocked only for a wrong one. Weak tokens, which would make
// that unsafe, are refused at start-up (CheckToken).
package authlimit

import (
	"net"
	"net/http"
	"net/netip"
	"strings"
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
	trusted []netip.Prefix
}

// New returns an empty Limiter. trusted are the reverse proxies whose
// X-Forwarded-For names the client (HOOKGATE_TRUSTED_PROXIES); from any
// other peer the header is ignored.
func New(trusted ...netip.Prefix) *Limiter {
	return &Limiter{clients: map[netip.Prefix]*rate.Limiter{}, now: time.Now, trusted: trusted}
}

// Client returns the client address of r: its TCP peer, or, when the peer
// is a trusted proxy, the last address in X-Forwarded-For that is not a
// trusted proxy itself (the first one when all are; the peer when the
// header is missing or ends in something that is not an address).
func Client(r *http.Request, trusted []netip.Prefix) netip.Addr {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	peer, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}
	}
	client := peer.Unmap()
	if !isTrusted(client, trusted) {
		return client
	}
	var hops []string
	for _, v := range r.Header.Values("X-Forwarded-For") {
		hops = append(hops, strings.Split(v, ",")...)
	}
	for i := len(hops) - 1; i >= 0; i-- {
		a, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
		if err != nil {
			break
		}
		client = a.Unmap()
		if !isTrusted(client, trusted) {
			break
		}
	}
	return client
}

func isTrusted(a netip.Addr, trusted []netip.Prefix) bool {
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// ClientOf returns the client of r (Client) under the Limiter's trusted
// proxies: the zero Addr when r's peer is not an address.
func (l *Limiter) ClientOf(r *http.Request) netip.Addr { return Client(r, l.trusted) }

// ClientKey returns the client of r (Client) as the prefix its failures
// are counted under: the address itself for IPv4, its /64 for IPv6.
func (l *Limiter) ClientKey(r *http.Request) netip.Prefix {
	a := Client(r, l.trusted)
	if !a.IsValid() {
		return netip.Prefix{}
	}
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
	lim, ok := l.clients[l.ClientKey(r)]
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
	key := l.ClientKey(r)
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
