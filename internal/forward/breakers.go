package forward

import "github.com/hookgate/hookgate/internal/store"

// The states of a target's circuit breaker, as the workers record them
// (store.Queries.RecordBreaker) and operators read them (store.BreakerState).
const (
	BreakerClosed   = store.BreakerClosed
	BreakerOpen     = store.BreakerOpen
	BreakerHalfOpen = store.BreakerHalfOpen
)
