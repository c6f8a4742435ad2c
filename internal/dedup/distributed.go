package dedup

import (
	"context"
	"fmt"
)

// ClaimedJoin is the guard of a multi-row statement in the form Citus runs
// on the sender's shard alone. It is a join that yields one row k for each
// row whose delivery took the key of the sender $1, and none otherwise.
// deliveryID and eventID are the row's SQL expressions. Write the statement
//
//	INSERT INTO t (sender, …) SELECT k.sender, x.* FROM unnest(…) AS x(…) <ClaimedJoin>
//
// Taking the sender from k.sender lets Citus push the INSERT down to the
// key's shard. A sender taken from $1, or a guard in WHERE EXISTS, makes
// Citus pull the rows to the coordinator and commit in two phases. On
// PostgreSQL it is [ClaimedRow]'s probe of the key's index.
func ClaimedJoin(deliveryID, eventID string) string {
	return claimedJoinHead + deliveryID + claimedJoinUpper + deliveryID + claimedJoinMid + eventID + claimedJoinTail
}

// Citus describes the database's Citus setup, as Inspect found it.
type Citus struct {
	// Distributed is true when processed_messages is a distributed table
	// (Citus's create_distributed_table): run the store with
	// LayoutDistributed.
	Distributed bool
	// PropagateSetCommands is the session's citus.propagate_set_commands.
	// Unless it is "local", SET LOCAL lock_timeout stays on the
	// coordinator and the in-flight wait never ends a claim that waits on
	// a worker.
	PropagateSetCommands string
}

// inspectSQL reads, without failing on a database without Citus, whether
// processed_messages is distributed and the session's setting.
const inspectSQL = `SELECT to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL,
  coalesce(current_setting('citus.propagate_set_commands', true), '')`

// InspectCitus tells whether db's processed_messages is distributed by
// Citus, and how SET commands propagate. On PostgreSQL without Citus it
// returns the zero Citus.
func InspectCitus(ctx context.Context, db Querier) (Citus, error) {
	var (
		c       Citus
		hasDist bool
	)
	if err := db.QueryRow(ctx, inspectSQL).Scan(&hasDist, &c.PropagateSetCommands); err != nil {
		return c, fmt.Errorf("inspect citus: %w", err)
	}
	if !hasDist {
		return c, nil
	}
	if err := db.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_catalog.pg_dist_partition
  WHERE logicalrelid = 'processed_messages'::regclass AND partmethod = 'h')`).Scan(&c.Distributed); err != nil {
		return c, fmt.Errorf("inspect citus: %w", err)
	}
	return c, nil
}

// The values of Store.layout.
const (
	layoutUnknown     = int32(LayoutDetect)
	layoutPlain       = int32(LayoutPlain)
	layoutDistributed = int32(LayoutDistributed)
)

// detectLayout finds out, once, whether the tables are distributed, unless
// Config.Layout said so.
func (s *Store) detectLayout(ctx context.Context) error {
	if s.layout.Load() != layoutUnknown {
		return nil
	}
	c, err := InspectCitus(ctx, s.db)
	if err != nil {
		return fmt.Errorf("claim delivery: %w", err)
	}
	l := layoutPlain
	if c.Distributed {
		l = layoutDistributed
	}
	s.layout.CompareAndSwap(layoutUnknown, l)
	return nil
}
