package authlimit

import (
	"net/http/httptest"
	"strconv"
	"testing"
	"time"
)

// The limiter remembers at most MaxClients clients; when full it
// forgets those whose bucket has refilled before those still limited.
func TestAuthLimiterMemoryIsBounded(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_000_000, 0)
	l := New()
	l.now = func() time.Time { return now }
	from := func(i int) string {
		return "10." + strconv.Itoa(i>>16&255) + "." + strconv.Itoa(i>>8&255) + "." + strconv.Itoa(i&255) + ":1234"
	}
	// A client that is limited now.
	limited := httptest.NewRequest("GET", "/v1/senders", nil)
	limited.RemoteAddr = "192.0.2.1:5555"
	for range FailureBurst + 1 {
		l.Failed(limited)
	}
	if l.Blocked(limited) <= 0 {
		t.Fatal("a client past its burst is not blocked")
	}
	// Many clients with one failure each, long ago.
	now = now.Add(time.Hour)
	for i := range 3 * MaxClients {
		r := httptest.NewRequest("GET", "/v1/senders", nil)
		r.RemoteAddr = from(i)
		l.Failed(r)
		if i == MaxClients {
			now = now.Add(time.Hour) // all of these have refilled
		}
		if n := l.size(); n > MaxClients {
			t.Fatalf("after %d clients the limiter remembers %d, more than %d", i+1, n, MaxClients)
		}
	}
	// IPv6 clients of one /64 share a bucket.
	for i := range FailureBurst + 1 {
		r := httptest.NewRequest("GET", "/v1/senders", nil)
		r.RemoteAddr = "[2001:db8::" + strconv.Itoa(i+1) + "]:443"
		l.Failed(r)
	}
	r := httptest.NewRequest("GET", "/v1/senders", nil)
	r.RemoteAddr = "[2001:db8::ffff]:443"
	if l.Blocked(r) <= 0 {
		t.Error("another address of the same IPv6 /64 is not blocked")
	}
}
