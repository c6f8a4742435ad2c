package store

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// Plans that no statistic can ruin (issue 28). The statements run per relay
// batch, per recording of the fast path, per forward job and per retention
// batch read tables whose rows come and go by thousands a second: the
// outbox, River's jobs, the delivered forwards. Their statistics are often
// wrong: after a crash PostgreSQL resets its activity counters, so
// autovacuum does not ANALYZE for a long time, and the planner may believe
// that a table of 25,000 rows holds one (or, after a bulk delete, that one
// of 1,000 holds 25,000). A plan chosen on such figures walked a sender's
// whole outbox per recorded forward, every forward job of River's table
// per forward job, and the relay's take ran a nested loop whose inner LIMIT
// subquery was scanned again for every outer row: 83 s for one statement,
// which deleted all 25,001 rows instead of its batch of 500.
//
// So these statements are written, and sent with transaction-local planner
// settings in the same round trip, so that the plan they need is the only
// one PostgreSQL may choose without a disabled node, whatever it believes
// about the tables:
//
//   - A batch is selected in an InitPlan, `ctid = ANY(ARRAY(SELECT ctid
//     ... ORDER BY <the index's columns> LIMIT n))`, evaluated once, so its
//     LIMIT holds (an IN (SELECT … LIMIT) may be a semi join that runs the
//     subquery again per outer row); the rows are then deleted or updated
//     by a TID scan. The ORDER BY is the index's own order, so the index
//     scan needs no sort and stops after n rows.
//   - Rows are found by key through a LATERAL subquery per input row (the
//     input's rows outside, an index probe inside, an order fixed by the
//     LATERAL), never through `col = ANY($n)`, which PostgreSQL 15 may
//     apply as a filter over an index scan of the key's first column
//     (indxpath.c keeps such a path for its order).
//   - Where an index must be chosen among several that take the same
//     conditions, the statement orders by that index's columns, one of them
//     compared by a range (`c >= $n AND c <= $n`, which unlike c = $n does
//     not make the order by c trivial): only that index yields the order
//     without a sort.
//   - The settings disable every other path: sequential and bitmap scans,
//     sorts and, where a TID scan must be the statement's own path, index
//     scans. A disabled path stays possible (PostgreSQL 15 adds
//     disable_cost, 1e10, to its cost; PostgreSQL 18 counts the disabled
//     nodes of a plan and compares that first), so the path wanted is the
//     one with the fewest disabled nodes: the ordered index scan under an
//     InitPlan has one (the index scan) where a sequential scan and a sort
//     have two. And JIT is off: disable_cost puts the plan's cost past
//     jit_above_cost, and compiling took 50–85 ms per execution of a
//     statement that runs in 1–2 ms.
//
// The settings are set_config(…, true): they end with the transaction (the
// implicit one of a pgx batch, or the caller's), and a plan PostgreSQL
// caches for the statement (the generic plan after five executions) was
// made under them. TestQueuePlansWhenStatisticsLie makes the statistics lie
// both ways and checks every such statement's plans.

// IndexOrderScans makes the rest of the transaction read through index
// scans in an index's order: no sequential or bitmap scan, no sort
// (disabled paths, see above), no JIT. For SELECTs that order by the
// columns of the index they must probe.
const IndexOrderScans = `SELECT set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true),
  set_config('enable_sort', 'off', true), set_config('jit', 'off', true)`

// IndexScans makes the rest of the transaction read through indexes (no
// sequential scan: a disabled path, see above) without JIT. For the reads
// of the console's overview of tables that keep days of rows (the keys,
// the counts of deliveries and of traffic), whose statistics may say they
// hold none (after a crash) and which must never be read whole on every
// view (issue 43); an index scan and a bitmap scan of an index are theirs
// to choose.
const IndexScans = `SELECT set_config('enable_seqscan', 'off', true), set_config('jit', 'off', true)`

// TIDScans makes the rest of the transaction delete or update the rows an
// InitPlan selected by their ctid (a TID scan, the one path left without a
// disabled node), the InitPlan reading an index in its order: index scans,
// sequential and bitmap scans and sorts disabled, JIT off.
const TIDScans = `SELECT set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true),
  set_config('enable_indexscan', 'off', true), set_config('enable_sort', 'off', true), set_config('jit', 'off', true)`

// QueryUnder runs sql with args on db after settings (planner settings,
// see plans.go), in one round trip: a batch, whose implicit transaction (or
// db's, when db is one) the settings last.
func QueryUnder(ctx context.Context, db DB, settings, sql string, args ...any) (pgx.Rows, error) {
	var b pgx.Batch
	b.Queue(settings)
	b.Queue(sql, args...)
	br := db.SendBatch(ctx, &b)
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return nil, err
	}
	rows, err := br.Query() //nolint:rowserrcheck // the caller reads them, and checks their Err (batchRows)
	if err != nil {
		_ = br.Close()
		return nil, err
	}
	return &batchRows{Rows: rows, br: br}, nil
}

// batchRows are the rows of a batch's last statement: the batch is closed
// when they are read to the end or closed, and an error of its closing is
// theirs.
type batchRows struct {
	pgx.Rows
	br  pgx.BatchResults
	err error
}

func (r *batchRows) closeBatch() {
	r.Rows.Close()
	if r.br != nil {
		r.err, r.br = r.br.Close(), nil
	}
}

func (r *batchRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.closeBatch()
	return false
}

func (r *batchRows) Close() { r.closeBatch() }

func (r *batchRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.err
}
