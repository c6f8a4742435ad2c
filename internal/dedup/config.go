package dedup

import (
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Config configures a [Store]: its pool and its settings.
//
// Zero means zero: no field takes a default from a 0, and validate refuses
// a 0 where it means nothing. [DefaultConfig] has hookgate serve's
// defaults. A feature whose field is nil is off. A Config with only a Pool
// and an InFlightWait has no group commit, replay cache or shedding.
type Config struct {
	// Pool is the database the deliveries are stored in. Each pipeline runs
	// on a connection of its own. Required.
	Pool *pgxpool.Pool

	// InFlightWait bounds how long a delivery waits for a concurrent one of
	// the same key before Run gives up with [ErrInFlight]. It is positive,
	// at most [MaxInFlightWait], and rounded up to whole milliseconds.
	InFlightWait time.Duration
	// Batching turns group commit on. With nil, each delivery runs in a
	// transaction of its own.
	Batching *Batching
	// ReplayCache turns the replay cache on. With nil, every retry reads
	// its stored response from the database.
	ReplayCache *ReplayCache
	// Shedding turns shedding on delay on. With nil, a delivery waits for
	// the database as long as its context allows.
	Shedding *ShedPolicy
	// Layout says whether the tables are distributed by sender, which
	// decides the statements' forms. With [LayoutDetect], the store's first
	// delivery finds out.
	Layout Layout
	// Delegated is a database function that runs a pipeline's claim and
	// change in one call. On a distributed layout, each pipeline whose
	// changes it performs calls it first. It is unused on [LayoutPlain].
	Delegated *Delegated
	// Routes sends each sender's delegated calls to the Citus worker that
	// holds its shard group, rather than to Pool. The caller closes it after
	// the store's last delivery.
	Routes *Routes
}

// Batching configures group commit.
type Batching struct {
	// MaxBatch is the most deliveries of one sender in one transaction, at
	// least 1. With 1, group commit is off.
	MaxBatch int
	// MaxInFlight is the most batches of one sender in flight, at least 1.
	MaxInFlight int
	// OverlapAfter, when positive, starts a sender's further batch beside
	// those in flight only once each of them has run for OverlapAfter.
	// While the database keeps up, one batch runs at a time, and the
	// deliveries that arrive meanwhile make the next one larger: fewer
	// transactions and WAL flushes for as many deliveries. A batch held up
	// (a key another transaction holds, a slow statement) does not hold
	// up its sender for longer. Zero starts a batch whenever fewer than
	// MaxInFlight run.
	OverlapAfter time.Duration
	// Observe, when not nil, is called with the size of each batch sent.
	Observe func(size int)
}

// ReplayCache configures the replay cache.
type ReplayCache struct {
	// Size is the most committed outcomes kept, at least 1.
	Size int
	// TTL is the longest an outcome is used, never past its key's expiry.
	TTL time.Duration
}

// Layout says which statement forms a Store runs.
type Layout int32

// The layouts of Config.Layout.
const (
	// LayoutDetect lets the store's first delivery find out.
	LayoutDetect Layout = iota
	// LayoutPlain runs the forms for PostgreSQL.
	LayoutPlain
	// LayoutDistributed runs the forms that Citus routes to the sender's
	// shard. The claim is a multi-row INSERT … VALUES, and no generic plans
	// are forced. A batch's claim returns the keys it inserted instead of a
	// read. The change's statements must be routable too ([ClaimedJoin]).
	LayoutDistributed
)

// DefaultConfig returns hookgate serve's defaults: the in-flight wait,
// group commit, the replay cache and shedding on delay. The layout is found
// at the first delivery. It has no Pool: the caller gives it.
func DefaultConfig() Config {
	return Config{
		InFlightWait: DefaultInFlightWait,
		Batching:     &Batching{MaxBatch: DefaultMaxBatch, MaxInFlight: DefaultMaxInFlight, OverlapAfter: DefaultOverlapAfter},
		ReplayCache:  &ReplayCache{Size: DefaultReplayCacheSize, TTL: DefaultReplayCacheTTL},
		Shedding:     &ShedPolicy{Target: DefaultShedTarget, Interval: DefaultShedInterval, MaxWait: DefaultMaxQueueWait},
	}
}

// validate returns an error naming the fields at fault, or nil.
func (c Config) validate() error {
	var errs []error
	if c.Pool == nil {
		errs = append(errs, errors.New("dedup config: Pool: nil: the pool deliveries are stored in is required"))
	}
	if c.InFlightWait <= 0 || c.InFlightWait > MaxInFlightWait {
		errs = append(errs, fmt.Errorf("dedup config: InFlightWait %s: must be positive and at most %s", c.InFlightWait, MaxInFlightWait))
	}
	if b := c.Batching; b != nil {
		if b.MaxBatch < 1 {
			errs = append(errs, fmt.Errorf("dedup config: Batching.MaxBatch %d: must be at least 1 (1: batches of one)", b.MaxBatch))
		}
		if b.MaxInFlight < 1 {
			errs = append(errs, fmt.Errorf("dedup config: Batching.MaxInFlight %d: must be at least 1", b.MaxInFlight))
		}
		if b.OverlapAfter < 0 {
			errs = append(errs, fmt.Errorf("dedup config: Batching.OverlapAfter %s: must not be negative (0: no wait)", b.OverlapAfter))
		}
	}
	if r := c.ReplayCache; r != nil {
		if r.Size < 1 {
			errs = append(errs, fmt.Errorf("dedup config: ReplayCache.Size %d: must be at least 1 (a nil ReplayCache is no cache)", r.Size))
		}
		if r.TTL <= 0 {
			errs = append(errs, fmt.Errorf("dedup config: ReplayCache.TTL %s: must be positive", r.TTL))
		}
	}
	if p := c.Shedding; p != nil {
		for _, f := range []struct {
			name string
			d    time.Duration
		}{{"Target", p.Target}, {"Interval", p.Interval}, {"MaxWait", p.MaxWait}} {
			if f.d <= 0 {
				errs = append(errs, fmt.Errorf("dedup config: Shedding.%s %s: must be positive (a nil Shedding is no shedding)", f.name, f.d))
			}
		}
	}
	if c.Delegated != nil {
		if err := c.Delegated.validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if c.Layout < LayoutDetect || c.Layout > LayoutDistributed {
		errs = append(errs, fmt.Errorf("dedup config: Layout %d: must be LayoutDetect, LayoutPlain or LayoutDistributed", c.Layout))
	}
	return errors.Join(errs...)
}
