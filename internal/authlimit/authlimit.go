// Package authlimit slows down guessing of the admin token. It remembers,
// per client address, how many wrong or missing tokens came lately. The
// operator API and the console share one [Limiter], so a guesser cannot
// double its rate by using both. A request with the right token is never
// refused: callers check the token first and ask [Limiter.Blocked] only for
// a wrong one. That is safe because [CheckToken] refuses weak tokens at
// start-up.
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

// Limits on wrong admin tokens, per client address. A client may get a
// burst of FailureBurst refusals with 401, then one per FailureEvery.
// Beyond that, its operator requests get 429 without a look at the token.
const (
	// FailureBurst refusals are allowed at once, then one per FailureEvery.
	FailureBurst = 10
	FailureEvery = time.Second
	// MaxClients bounds the clients whose failures are remembered.
	MaxClients = 10000
)

// Limiter slows down guessing of the admin token with a token bucket per
// client address. For IPv6 it uses the /64, since one client usually has
// many addresses there. Only requests with a missing or wrong token take
// from the bucket. Past MaxClients, it forgets the clients whose bucket is
// full again first, then arbitrary ones.
type Limiter struct {
	mu      sync.Mutex
	clients map[netip.Prefix]*rate.Limiter
	now     func() time.Time
	trusted []netip.Prefix
}

// New returns an empty Limiter. trusted are the reverse proxies whose
// X-Forwarded-For names the client. From any other peer the header is
// ignored.
func New(trusted ...netip.Prefix) *Limiter {
	return &Limiter{clients: map[netip.Prefix]*rate.Limiter{}, now: time.Now, trusted: trusted}
}

// Client returns the client address of r. That is its TCP peer, unless the
// peer is a trusted proxy. Then it is the last address in X-Forwarded-For
// that is not a trusted proxy, or the first when all are. It stays the peer
// when the header is missing or ends in something that is not an address.
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

// ClientOf returns the [Client] of r under the Limiter's trusted proxies.
// It returns the zero Addr when r's peer is not an address.
func (l *Limiter) ClientOf(r *http.Request) netip.Addr { return Client(r, l.trusted) }

// ClientKey returns the prefix under which the failures of r's client are
// counted: the address itself for IPv4, its /64 for IPv6.
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

// evict makes room for one more client when the map is full. It forgets
// the clients whose bucket is full again, then arbitrary ones, down to
// three quarters of the bound.
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

func (l *Limiter) size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.clients)
}
