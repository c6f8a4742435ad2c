package dedup

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/hookgate/hookgate/internal/idempotency"
)

// Delegated describes a database function that runs a pipeline's claim and
// state change in one call ([Config.Delegated]). On Citus the function is
// distributed by its first parameter, the sender, and colocated with
// processed_messages. It then runs on the worker that holds the sender's
// shard: one round trip and one commit there. The statement forms cost a
// round trip to the worker per statement (docs/distributed.md#figures).
//
// The function's parameters are, in order:
//
//   - the sender (text);
//   - the in-flight wait as a lock_timeout value (text, such as '3000ms'),
//     which it sets for its transaction before the claim;
//   - the claim's eight columns as arrays, one element per delivery, in
//     claimSQL's order: delivery_id, request_sha256, event_id,
//     response_status, response_content_type, response_body, created_at,
//     expires_at;
//   - for each statement of Rows, one array per value of its rows.
//
// It inserts the keys under processed_messages_key with ON CONFLICT DO
// NOTHING, in the arrays' order. It returns the delivery ID and event ID of
// each key it inserted. It writes the rows of Rows whose delivery's key it
// inserted, and nothing else. A delivery whose key it did not insert runs
// again in the statement forms, which read what holds the key.
type Delegated struct {
	// Function is the function's name: an SQL identifier, optionally
	// schema-qualified.
	Function string
	// Rows are the multi-row statements the function performs, in the order
	// of its parameters, with the number of values of their rows. A
	// pipeline that adds another statement runs in the statement forms.
	Rows []DelegatedRow
}

// DelegatedRow is a multi-row statement that a Delegated function performs.
type DelegatedRow struct {
	SQL    string // as given to Batch.Row
	Values int    // values of each row
}

func (d *Delegated) validate() error {
	if !validFunctionName(d.Function) {
		return fmt.Errorf("dedup config: Delegated.Function %q: must be an SQL identifier (letters, digits, underscores; schema.name allowed)", d.Function)
	}
	seen := make(map[string]bool, len(d.Rows))
	for i, r := range d.Rows {
		if r.Values < 1 {
			return fmt.Errorf("dedup config: Delegated.Rows[%d]: Values %d: must be at least 1", i, r.Values)
		}
		if seen[r.SQL] {
			return fmt.Errorf("dedup config: Delegated.Rows[%d]: the same statement twice", i)
		}
		seen[r.SQL] = true
	}
	return nil
}

// validFunctionName reports whether s is [schema.]name, each part of
// letters, digits and underscores, not starting with a digit.
func validFunctionName(s string) bool {
	parts := strings.Split(s, ".")
	if len(parts) > 2 {
		return false
	}
	for _, p := range parts {
		if p == "" || (p[0] >= '0' && p[0] <= '9') {
			return false
		}
		for _, c := range p {
			if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
				return false
			}
		}
	}
	return true
}

// delegation is a Store's Delegated, ready to plan with.
type delegation struct {
	call string         // SELECT * FROM fn($1, …)
	at   map[string]int // a Rows statement → its index
	rows []DelegatedRow
}

func newDelegation(d *Delegated) *delegation {
	n := 2 + 8
	at := make(map[string]int, len(d.Rows))
	for i, r := range d.Rows {
		at[r.SQL] = i
		n += r.Values
	}
	var b strings.Builder
	b.WriteString("SELECT * FROM ")
	b.WriteString(d.Function)
	b.WriteByte('(')
	for i := 1; i <= n; i++ {
		if i > 1 {
			b.WriteString(", ")
		}
		b.WriteString("$" + strconv.Itoa(i))
	}
	b.WriteByte(')')
	return &delegation{call: b.String(), at: at, rows: d.Rows}
}

// delegating reports whether the store's pipelines go through its
// delegated function first: on a distributed layout with Config.Delegated.
func (s *Store) delegating() bool {
	return s.delegated != nil && s.layout.Load() == layoutDistributed
}

// planDelegated lays out the pipeline of ds (all of one sender) with their
// changes as one call of the delegated function, outside a transaction
// block (autocommit), whose in-flight wait is wait ('3000ms'). It returns
// nil when a change has a statement the function does not perform.
func (s *Store) planDelegated(ds []idempotency.Delivery, changes []Change, wait string) (*plan, error) {
	g := s.delegated
	claim, err := claimColumns(ds)
	if err != nil {
		return nil, err
	}
	groups, own, err := collectChanges(ds[0].Sender, len(ds), changes)
	if err != nil {
		return nil, err
	}
	if len(own) > 0 {
		return nil, nil
	}
	cols := make([][]any, len(g.rows)) // by statement of Rows: its columns
	for _, st := range groups {
		i, ok := g.at[st.sql]
		if !ok || len(st.args)-1 != g.rows[i].Values {
			return nil, nil
		}
		cols[i] = st.args[1:]
	}
	args := make([]any, 0, 2+len(claim)+8)
	args = append(args, ds[0].Sender, wait)
	args = append(args, claim...)
	for i, r := range g.rows {
		if cols[i] == nil { // no row of this statement: empty arrays
			for range r.Values {
				args = append(args, column{})
			}
			continue
		}
		args = append(args, cols[i]...)
	}
	return &plan{
		stmts: []statement{{sql: g.call, args: args}},
		ds:    ds, n: len(ds),
		claim: 0, changes: 1, changesEnd: 1, read: -1,
		returning: true, autocommit: true,
	}, nil
}

// runDelegated runs d with change as one call of the delegated function.
// claimed is false, with a nil error, when the function did not insert the
// key (held by another delivery, maybe expired), or when the change has a
// statement the function does not perform: then the statement forms run
// it. A key held past the in-flight wait is ErrInFlight.
func (s *Store) runDelegated(ctx context.Context, d idempotency.Delivery, change Change) (res Result, claimed bool, err error) {
	p, err := s.planDelegated([]idempotency.Delivery{d}, []Change{change}, s.inFlightWait)
	if err != nil || p == nil {
		return Result{}, false, err
	}
	conn, release, err := s.acquireDelegated(ctx, d.Sender, ticketOf(ctx))
	if err != nil {
		return Result{}, false, fmt.Errorf("claim delivery: acquire connection: %w: %w", ErrUnavailable, err)
	}
	defer release()
	out, err := s.pipeline(ctx, conn, p)
	if err == nil {
		err = out.failure(p)
	}
	switch {
	case errors.Is(err, errClaimConflict): // not with ON CONFLICT; the statement forms sort it out
		return Result{}, false, nil
	case err != nil:
		return Result{}, false, err
	case !out.claimed[0]:
		return Result{}, false, nil
	}
	res, err = s.result(d, outcome{claimed: true})
	return res, true, err
}

// delegatedFunctionSQL tells whether the function $1 is distributed by its
// first parameter and colocated with processed_messages (DelegatedFunction).
const delegatedFunctionSQL = `SELECT EXISTS (
  SELECT FROM pg_catalog.pg_dist_object o, pg_catalog.pg_dist_partition t
  WHERE o.classid = 'pg_catalog.pg_proc'::regclass AND o.objid = $1::regproc::oid
    AND o.distribution_argument_index = 0
    AND t.logicalrelid = 'processed_messages'::regclass AND o.colocationid = t.colocationid)`

// DelegatedFunction reports whether the function named function (one
// function of that name) is distributed by Citus by its first parameter and
// colocated with processed_messages: whether Citus delegates its calls to
// the worker of the sender's shard (Delegated). On PostgreSQL without
// Citus, or with processed_messages not distributed, it is false.
func DelegatedFunction(ctx context.Context, db Querier, function string) (bool, error) {
	c, err := InspectCitus(ctx, db)
	if err != nil || !c.Distributed {
		return false, err
	}
	var exists bool
	if err := db.QueryRow(ctx, `SELECT to_regproc($1) IS NOT NULL`, function).Scan(&exists); err != nil {
		return false, fmt.Errorf("inspect citus: function %s: %w", function, err)
	}
	if !exists {
		return false, nil
	}
	var ok bool
	if err := db.QueryRow(ctx, delegatedFunctionSQL, function).Scan(&ok); err != nil {
		return false, fmt.Errorf("inspect citus: function %s: %w", function, err)
	}
	return ok, nil
}
