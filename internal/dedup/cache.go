package dedup

import (
	"bytes"
	"time"

	"github.com/hookgate/hookgate/internal/idempotency"
)

// The replay cache answers a retry of a delivery this process saw committed
// without a round trip: a retry storm is when the gateway must be fastest.
// An entry comes only from a committed outcome. It holds the stored
// response and the body's SHA-256. It is used only before the key's expiry,
// since retention deletes only expired keys, and for at most the cache's
// TTL, in case a key is deleted by hand. Another payload gets
// [ErrPayloadMismatch], as from the database. Anything else goes to the
// database.

// Defaults of the replay cache. A nil [Config.ReplayCache] has no cache.
const (
	DefaultReplayCacheSize = 10000
	DefaultReplayCacheTTL  = time.Minute
)

// cached is a committed delivery's outcome.
type cached struct {
	sum      [32]byte
	res      Result // Replayed false; Response shared, never modified
	expires  time.Time
	cachedAt time.Time
}

// fromCache returns the outcome of d, and true, if the cache holds its key
// still valid at d's arrival: a replay, or ErrPayloadMismatch.
func (s *Store) fromCache(d idempotency.Delivery) (Result, bool, error) {
	if s.cache == nil {
		return Result{}, false, nil
	}
	c, ok := s.cache.Get(d.Key)
	if !ok {
		return Result{}, false, nil
	}
	if !d.ReceivedAt.Before(c.expires) || s.now().Sub(c.cachedAt) > s.cacheTTL {
		s.cache.Remove(d.Key)
		return Result{}, false, nil
	}
	if !bytes.Equal(c.sum[:], d.RequestSHA256[:]) {
		return Result{}, true, ErrPayloadMismatch
	}
	res := c.res
	res.Replayed = true
	return res, true, nil
}

// remember caches what holds k after a COMMIT: the stored response and
// event ID, the stored request's SHA-256 and the key's expires_at.
func (s *Store) remember(k idempotency.Key, resp idempotency.Response, eventID [16]byte, sum []byte, expires time.Time) {
	if s.cache == nil || len(sum) != 32 {
		return
	}
	s.cache.Add(k, cached{sum: [32]byte(sum), res: Result{Response: resp, EventID: eventID}, expires: expires, cachedAt: s.now()})
}
