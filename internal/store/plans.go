package store

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Plans that no statistic can ruin. Some statements run per relay batch,
// per forward job or per retention batch. They read tables whose rows come
// and go by thousands a second: the outbox, River's jobs, the delivered
// forwards. Their statistics are often wrong. After a crash PostgreSQL
// resets its activity counters, and autovacuum does not ANALYZE for a long
// time. A plan chosen on such figures can read a whole table per row, or run
// a LIMIT subquery again for every outer row.
//
// So these statements are written, and sent with planner settings local to
// the transaction, so that the plan they need is the only one without a
// disabled node:
//
//   - A batch is selected in an InitPlan, `ctid = ANY(ARRAY(SELECT ctid …
//     ORDER BY <the index's columns> LIMIT n))`. It runs once, so its LIMIT
//     holds. A TID scan then deletes or updates the rows.
//   - Rows are found by key through a LATERAL subquery per input row, never
//     through `col = ANY($n)`. PostgreSQL 15 may apply that as a filter over
//     an index scan of the key's first column.
//   - Where several indexes take the same conditions, the statement orders
//     by the columns of the one it needs. One column is compared by a range,
//     so only that index gives the order without a sort.
//   - The settings disable every other path: sequential and bitmap scans,
//     sorts (incremental ones too), and index scans where a TID scan must
//     win. A disabled path stays possible, so the plan wanted is the one
//     with the fewest disabled nodes. JIT is off: the disabled paths' cost
//     would pass jit_above_cost, and compiling costs far more than the
//     statement.
//
// The settings are set_config(…, true): they end with the transaction, and
// a plan PostgreSQL caches for the statement was made under them. The tests
// make the statistics lie both ways and check every such statement's plans.

// IndexOrderScans makes the rest of the transaction read through index
// scans in an index's order: no sequential or bitmap scan, no sort, no JIT.
// It is for SELECTs that order by the columns of the index they probe.
// Incremental sorts are disabled too: an index that gives a prefix of the
// order (the sender's rows, by target) would serve it with one, reading
// every row of the prefix.
const IndexOrderScans = `SELECT set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true),
  set_config('enable_sort', 'off', true), set_config('enable_incremental_sort', 'off', true), set_config('jit', 'off', true)`

// IndexScans makes the rest of the transaction read through indexes, with
// no sequential scan and no JIT. It is for the console's overview, which
// reads tables that keep days of rows. Their statistics may say they hold
// none after a crash, and no view may read them whole.
const IndexScans = `SELECT set_config('enable_seqscan', 'off', true), set_config('jit', 'off', true)`

// GINScans makes the rest of the transaction read through bitmap scans
// only, with no sequential or index scan and no JIT. It is for a SELECT
// that a GIN index serves (River's on args), which only bitmap scans read:
// a plain index scan would read another index whole. It turns bitmap
// scans on, as a transaction may have turned them off.
const GINScans = `SELECT set_config('enable_seqscan', 'off', true), set_config('enable_indexscan', 'off', true),
  set_config('enable_indexonlyscan', 'off', true), set_config('enable_bitmapscan', 'on', true), set_config('jit', 'off', true)`

// TIDScans makes the rest of the transaction delete or update the rows an
// InitPlan selected, by their ctid. The InitPlan reads an index in its
// order. Index, sequential and bitmap scans and sorts (incremental ones
// too) are disabled, and JIT is off.
const TIDScans = `SELECT set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true),
  set_config('enable_indexscan', 'off', true), set_config('enable_sort', 'off', true),
  set_config('enable_incremental_sort', 'off', true), set_config('jit', 'off', true)`

// ResetScans undoes, for the rest of the transaction, what [IndexScans],
// [IndexOrderScans], [GINScans] and [TIDScans] set: each setting goes back to the
// value the session would RESET it to. A transaction sends it after the
// statement those settings were for, when others follow.
const ResetScans = `SELECT set_config(name, reset_val, true) FROM pg_settings
WHERE name IN ('enable_seqscan', 'enable_bitmapscan', 'enable_indexscan', 'enable_indexonlyscan', 'enable_sort', 'enable_incremental_sort', 'jit')`

// QueryUnder runs sql with args on db after the planner settings, in one
// round trip. The settings last for the batch's transaction, or db's when
// db is one.
func QueryUnder(ctx context.Context, db DB, settings, sql string, args ...any) (pgx.Rows, error) {
	return queryUnder(ctx, db, settings, "", sql, args...) //nolint:rowserrcheck // the caller reads them, and checks their Err (batchRows)
}

// QueryOnlyUnder is [QueryUnder] whose settings end with sql: [ResetScans]
// follows it in the batch, so that statements db runs after it in its
// transaction run without them.
func QueryOnlyUnder(ctx context.Context, db DB, settings, sql string, args ...any) (pgx.Rows, error) {
	return queryUnder(ctx, db, settings, ResetScans, sql, args...) //nolint:rowserrcheck // the caller reads them, and checks their Err (batchRows)
}

// ExecOnlyUnder runs sql with args on db after the planner settings, and
// then [ResetScans], in one round trip, and returns sql's command tag.
func ExecOnlyUnder(ctx context.Context, db Batcher, settings, sql string, args ...any) (pgconn.CommandTag, error) {
	var (
		b   pgx.Batch
		tag pgconn.CommandTag
	)
	b.Queue(settings)
	b.Queue(sql, args...).Exec(func(t pgconn.CommandTag) error { tag = t; return nil })
	b.Queue(ResetScans)
	err := db.SendBatch(ctx, &b).Close()
	return tag, err
}

// Batcher sends batches: a pool, a connection or a transaction.
type Batcher interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// queryUnder queues settings, sql and after (unless "") in one batch, and
// returns sql's rows.
func queryUnder(ctx context.Context, db Batcher, settings, after, sql string, args ...any) (pgx.Rows, error) {
	var b pgx.Batch
	b.Queue(settings)
	b.Queue(sql, args...)
	if after != "" {
		b.Queue(after)
	}
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

// batchRows are the rows of a batch's last statement. The batch closes when
// they are read to the end or closed, and its error is theirs.
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
