package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// EnvReuse names the environment variable that, set to 1, lets [NewDB]
// reuse databases. A finished test gives its database back, emptied, and
// the next test of the process gets it instead of a new copy of the
// template. `make test` and `make test-fast` set it. A copy costs the
// throwaway server about a tenth of a second of CPU, and dropping it forces
// a checkpoint. Emptying the few tables a test wrote costs a fraction of
// that. Citus never reuses databases, since each is distributed afresh.
// Spare databases are not dropped when a process exits, because the
// throwaway server is deleted after the run.
const EnvReuse = "HOOKGATE_TEST_REUSE_DB"

// reuseDBs reports whether NewDB reuses databases (EnvReuse).
func reuseDBs() bool { return os.Getenv(EnvReuse) == "1" && !Citus() }

// spares are the databases of this process ready for another test.
var spares = &reuser{}

// spare is a database that a finished test gave back, emptied. pool is
// that test's pool when its clean sessions were handed over too, or nil. A
// new session costs the server more CPU than most tests' statements.
type spare struct {
	name string
	pool *pgxpool.Pool
}

// reuser keeps databases that finished tests gave back, emptied, for the next
// NewDB of the process.
type reuser struct {
	mu     sync.Mutex
	spares []spare
}

// take returns a spare database and true, or false when there is none. It
// takes the newest one whose pool holds up to conns connections, or else
// the newest without a pool. One with a pool of another size waits for a
// test that asks for that size. Copying the template costs the server less
// than opening a pool of Racers sessions.
func (r *reuser) take(conns int32) (spare, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.spares) == 0 {
		return spare{}, false
	}
	i := -1
	for j := len(r.spares) - 1; j >= 0; j-- {
		if p := r.spares[j].pool; p != nil && p.Config().MaxConns == conns {
			i = j
			break
		}
		if i < 0 && r.spares[j].pool == nil {
			i = j
		}
	}
	if i < 0 {
		return spare{}, false
	}
	sp := r.spares[i]
	r.spares = append(r.spares[:i], r.spares[i+1:]...)
	return sp, true
}

// has reports whether name is spare (for tests).
func (r *reuser) has(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, sp := range r.spares {
		if sp.name == name {
			return true
		}
	}
	return false
}

// sparePrefix begins the names of the databases that ended test
// processes left for others. Tests use another prefix. They exist only on
// the server of one run, as copies of its one template.
const sparePrefix = "hgt_spare_"

// leave closes the pools of the spare databases and renames each with
// sparePrefix, for the later processes of the run. A database whose rename
// fails, because a session lingers, stays as it is.
func (r *reuser) leave(ctx context.Context, prefix string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, sp := range r.spares {
		if sp.pool != nil {
			sp.pool.Close()
		}
	}
	admin := os.Getenv(EnvURL)
	if admin != "" && os.Getenv(EnvTemplate) != "" {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		pool, err := admins.get(ctx, admin)
		for _, sp := range r.spares {
			if err != nil {
				break
			}
			// The pool's backends exit after their clients have gone.
			if _, err := pool.Exec(ctx, `SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity WHERE datname = $1`, sp.name); err != nil {
				continue
			}
			_ = adminExec(ctx, admin, "ALTER DATABASE "+ident(sp.name)+" RENAME TO "+ident(fmt.Sprintf("%s%d_%s", prefix, os.Getpid(), randHex(4))))
		}
	}
	r.spares = nil
}

// adoptSpare renames a database that another process of the run left to
// name, and returns true. It returns false when there is none. It works
// only with a template that the processes share, since a database left is
// then like a fresh copy of tpl. When two processes try the same one, the
// rename succeeds for one of them.
func adoptSpare(ctx context.Context, admin, tpl, name, prefix string) (bool, error) {
	if os.Getenv(EnvTemplate) != tpl {
		return false, nil
	}
	pool, err := admins.get(ctx, admin)
	if err != nil {
		return false, fmt.Errorf("connect: %w", err)
	}
	rows, err := pool.Query(ctx, `SELECT datname FROM pg_database WHERE starts_with(datname, $1) ORDER BY random() LIMIT 4`, prefix)
	if err != nil {
		return false, fmt.Errorf("look for spare databases: %w", err)
	}
	left, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return false, fmt.Errorf("look for spare databases: %w", err)
	}
	for _, old := range left {
		err := adminExec(ctx, admin, "ALTER DATABASE "+ident(old)+" RENAME TO "+ident(name))
		if err == nil {
			return true, nil
		}
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || (pgErr.Code != pgerrcode.InvalidCatalogName && pgErr.Code != pgerrcode.ObjectInUse) {
			return false, fmt.Errorf("take spare database %s: %w", old, err)
		}
		// Another process took it first, or is taking it.
	}
	return false, nil
}

// giveBack takes back the database name of a test that has ended, with
// the pool that NewDB gave the test, if any. It drops the tables that the
// test made. When the catalogs then match state, it empties the database,
// keeps it for the next test and returns true. Otherwise it returns false,
// and the caller drops the database. That happens when the test altered a
// table of the template or made a function or schema, or when emptying
// fails. The pool stays with the database when reset kept its sessions.
func (r *reuser) giveBack(ctx context.Context, admin, name string, state catalog, pool *pgxpool.Pool) bool {
	kept, err := reset(ctx, admin, name, state, pool)
	if pool != nil && (!kept || err != nil) {
		pool.Close()
	}
	if err != nil {
		return false
	}
	sp := spare{name: name}
	if kept {
		sp.pool = pool
	}
	r.mu.Lock()
	r.spares = append(r.spares, sp)
	r.mu.Unlock()
	return true
}

// catalogStateSQL sums up the catalog rows of the database's own objects
// that a test's DDL changes: how many, and the newest transaction that wrote
// one. Own objects have an OID of 16384 and up. It covers every kind of
// object a test might make, the database's own row and settings, and the
// schema versions of goose and River. Creating or altering an object
// writes rows with a newer xmin, and dropping one removes rows. ANALYZE and
// VACUUM update pg_class in place, and reset clears their statistics.
const catalogStateSQL = `SELECT count(*), coalesce(max(x::text::bigint), 0) FROM (
  SELECT xmin AS x FROM pg_class WHERE oid >= 16384
  UNION ALL SELECT xmin FROM pg_attribute WHERE attrelid >= 16384
  UNION ALL SELECT xmin FROM pg_attrdef WHERE oid >= 16384
  UNION ALL SELECT xmin FROM pg_constraint WHERE oid >= 16384
  UNION ALL SELECT xmin FROM pg_index WHERE indexrelid >= 16384
  UNION ALL SELECT xmin FROM pg_trigger WHERE oid >= 16384
  UNION ALL SELECT xmin FROM pg_proc WHERE oid >= 16384
  UNION ALL SELECT xmin FROM pg_type WHERE oid >= 16384
  UNION ALL SELECT xmin FROM pg_enum WHERE oid >= 16384
  UNION ALL SELECT xmin FROM pg_namespace WHERE oid >= 16384 AND nspname !~ '^pg_(toast_)?temp_'
  UNION ALL SELECT xmin FROM pg_extension WHERE oid >= 16384
  UNION ALL SELECT xmin FROM pg_rewrite WHERE oid >= 16384
  UNION ALL SELECT xmin FROM pg_policy
  UNION ALL SELECT xmin FROM pg_event_trigger
  UNION ALL SELECT xmin FROM pg_sequence WHERE seqrelid >= 16384
  UNION ALL SELECT xmin FROM pg_statistic_ext
  UNION ALL SELECT xmin FROM pg_inherits
  UNION ALL SELECT xmin FROM pg_depend WHERE objid >= 16384 OR refobjid >= 16384
  UNION ALL SELECT xmin FROM pg_database WHERE datname = current_database()
  UNION ALL SELECT s.xmin FROM pg_db_role_setting s JOIN pg_database d ON d.oid = s.setdatabase WHERE d.datname = current_database()
  UNION ALL SELECT xmin FROM goose_db_version
  UNION ALL SELECT xmin FROM river_migration
) c`

// catalog is what catalogStateSQL sums up.
type catalog struct {
	rows   int64 // how many rows
	newest int64 // the newest xmin among them
}

// querier is what catalogState needs of a pool or a connection.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// catalogState returns the sum of catalogStateSQL for the database of q.
func catalogState(ctx context.Context, q querier) (catalog, error) {
	var c catalog
	if err := q.QueryRow(ctx, catalogStateSQL).Scan(&c.rows, &c.newest); err != nil {
		return c, fmt.Errorf("read the catalog state: %w", err)
	}
	return c, nil
}

// newTablesSQL lists, as one DROP TABLE list, the tables of schema public
// that a test made. Their pg_class row is newer than the newest catalog row
// that the test found, $1. Many tests make a table of their own. Dropping
// it takes away every catalog row it brought, as the next check verifies.
// Anything else a test made, such as a view, fails that check.
const newTablesSQL = `SELECT coalesce(string_agg(oid::regclass::text, ', '), '') FROM pg_class
WHERE relnamespace = 'public'::regnamespace AND relkind IN ('r', 'p') AND xmin::text::bigint > $1`

// dirtyTablesSQL lists, as one TRUNCATE list, the tables in schema public
// that differ from a fresh copy of the template. Such a table has pages,
// statistics from ANALYZE or VACUUM, or a sequence that handed out a value.
// goose's and River's schema version tables are left alone, since the
// catalog state covers them. The migrations seed no other table, so a
// fresh copy holds empty tables.
const dirtyTablesSQL = `SELECT coalesce(string_agg(c.oid::regclass::text, ', '), '') FROM pg_class c
WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p')
  AND c.relname NOT IN ('goose_db_version', 'river_migration')
  AND (pg_relation_size(c.oid) > 0 OR c.reltuples >= 0 OR EXISTS (
    SELECT 1 FROM pg_depend d JOIN pg_class s ON s.oid = d.objid
    WHERE d.classid = 'pg_class'::regclass AND d.refclassid = 'pg_class'::regclass
      AND d.refobjid = c.oid AND d.deptype IN ('a', 'i')
      -- CASE: the planner may call the function before another condition
      -- has left out what is not a sequence
      AND CASE WHEN s.relkind = 'S' THEN pg_sequence_last_value(s.oid) END IS NOT NULL))`

// reset makes the database name like a fresh copy of the template, or
// fails. It keeps the sessions of pool, cleaned, when it can, and reports
// whether it did. It ends every other session, and their state goes with
// them. It drops the tables that the test made and checks the catalogs
// against state. It truncates every table that is not fresh, and resets
// their sequences. It deletes ANALYZE's column statistics, because plan
// tests examine the plans of a fresh database. It also resets the
// database's activity counters. It needs a superuser and PostgreSQL 15 or
// later. On an older server every reset fails, and databases are dropped.
func reset(ctx context.Context, admin, name string, state catalog, pool *pgxpool.Pool) (keptPool bool, err error) {
	conn, pids, release, err := resetConn(ctx, admin, name, pool)
	if err != nil {
		return false, err
	}
	defer release()
	if err := endOtherSessions(ctx, conn, pids...); err != nil {
		return false, err
	}
	var others int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid() AND pid <> ALL($1::int[])`, pids).Scan(&others); err != nil {
		return false, err
	}
	if others > 0 {
		return false, fmt.Errorf("%d sessions still connected to %s", others, name)
	}
	var made string
	if err := conn.QueryRow(ctx, newTablesSQL, state.newest).Scan(&made); err != nil {
		return false, err
	}
	if made != "" {
		// Not CASCADE: an object of the template that depends on one of
		// them makes the drop fail, and the database is not reused.
		if _, err := conn.Exec(ctx, "DROP TABLE IF EXISTS "+made); err != nil {
			return false, err
		}
	}
	now, err := catalogState(ctx, conn)
	if err != nil {
		return false, err
	}
	if now != state {
		return false, fmt.Errorf("the catalogs of %s changed during the test (%v, was %v)", name, now, state)
	}
	var dirty string
	if err := conn.QueryRow(ctx, dirtyTablesSQL).Scan(&dirty); err != nil {
		return false, err
	}
	if dirty != "" {
		// TRUNCATE leaves its tables' indexes with the planner counts of a
		// relation never built. A fresh copy has the counts that CREATE
		// INDEX gave, and the planner estimates a partial index's rows
		// from them. So they are put back.
		if _, err := conn.Exec(ctx, "TRUNCATE "+dirty+" RESTART IDENTITY"); err != nil {
			return false, err
		}
		if _, err := conn.Exec(ctx, `UPDATE pg_class i SET relpages = pg_relation_size(i.oid) / current_setting('block_size')::int, reltuples = 0
FROM pg_index x WHERE x.indexrelid = i.oid AND x.indrelid = ANY(('{' || $1 || '}')::regclass[])`, dirty); err != nil {
			return false, err
		}
	}
	// This session's counts reach the shared statistics after a forced
	// flush. cleanSession flushed the pool's other sessions. Then the
	// database's counters are reset, since a fresh copy has none.
	if _, err := conn.Exec(ctx, "SELECT pg_stat_force_next_flush()"); err != nil {
		return false, err
	}
	_, err = conn.Exec(ctx, `DELETE FROM pg_statistic WHERE starelid IN (SELECT oid FROM pg_class WHERE relnamespace = 'public'::regnamespace);
SELECT pg_stat_reset()`)
	return len(pids) > 0, err
}

// endOtherSessions ends every session of the current database except the
// caller's and the backend PIDs in keep. It waits until each has exited.
// NewDB calls it on a reused database whose pool was not handed over,
// because the backend of reset's session may not have exited yet.
func endOtherSessions(ctx context.Context, conn interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}, keep ...int32) error {
	if keep == nil {
		keep = []int32{}
	}
	_, err := conn.Exec(ctx, `SELECT pg_terminate_backend(pid, 60000) FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid() AND pid <> ALL($1::int[])`, keep)
	return err
}

// resetConn returns a connection to the database name for reset, the
// backend PIDs of the sessions to keep, and the function that gives the
// connection back. It hands the pool over when the test left none of its
// connections acquired, waiting up to releaseWait. It then cleans every
// idle connection, closes those that fail, and returns the first.
// Otherwise it returns a new connection, closed on release.
func resetConn(ctx context.Context, admin, name string, pool *pgxpool.Pool) (*pgx.Conn, []int32, func(), error) {
	if pool != nil && !released(pool, releaseWait) {
		pool = nil // still in use: not handed over
	}
	if pool != nil {
		idle := pool.AcquireAllIdle(ctx)
		release := func() {
			for _, c := range idle {
				c.Release()
			}
		}
		if st := pool.Stat(); st.TotalConns() == int32(len(idle)) {
			var live []*pgxpool.Conn
			var pids []int32
			for _, c := range idle {
				if err := cleanSession(ctx, c.Conn()); err != nil {
					_ = c.Conn().Close(ctx) // a closed connection is destroyed on release
					c.Release()
					continue
				}
				live = append(live, c)
				pids = append(pids, int32(c.Conn().PgConn().PID()))
			}
			idle = live
			if len(live) > 0 {
				return live[0].Conn(), pids, release, nil
			}
		}
		release()
	}
	dsn, err := withDatabase(admin, name)
	if err != nil {
		return nil, nil, nil, err
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, nil, nil, err
	}
	return conn, []int32{}, func() { conn.Close(context.Background()) }, nil
}

// releaseWait is how long resetConn waits for the connections of a test's
// pool to come back. River's client gives one back tens of milliseconds
// after its Stop returns.
const releaseWait = 500 * time.Millisecond

// released reports whether pool has no connection acquired or being made.
// It waits up to wait for that.
func released(pool *pgxpool.Pool, wait time.Duration) bool {
	deadline := time.Now().Add(wait)
	for {
		st := pool.Stat()
		if st.AcquiredConns() == 0 && st.ConstructingConns() == 0 {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// cleanSession discards the state that a test left in a session of its
// pool, so the next test gets it like a new session. It runs DISCARD ALL,
// and clears pgx's statement caches and buffered notifications. It also
// flushes the session's pending activity counts now, before reset resets
// the database's, rather than in the next test.
func cleanSession(ctx context.Context, conn *pgx.Conn) error {
	if st := conn.PgConn().TxStatus(); st != 'I' {
		return fmt.Errorf("session %d is in a transaction (%c)", conn.PgConn().PID(), st)
	}
	if _, err := conn.Exec(ctx, "DISCARD ALL"); err != nil {
		return err
	}
	if err := conn.DeallocateAll(ctx); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, "SELECT pg_stat_force_next_flush()"); err != nil {
		return err
	}
	// This comes last. pgx buffers a notification that arrived before
	// DISCARD ALL's UNLISTEN while it reads the answers above. A done
	// context makes WaitForNotification return the buffered ones, then fail
	// without reading.
	done, cancel := context.WithCancel(ctx)
	cancel()
	for {
		if _, err := conn.WaitForNotification(done); err != nil {
			return nil
		}
	}
}
