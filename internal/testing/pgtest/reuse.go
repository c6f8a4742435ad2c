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

// EnvReuse names the environment variable that, set to 1, lets NewDB hand a
// database a finished test of the same process gave back, emptied, to the
// next test instead of copying the template again; `make test` and `make
// test-fast` set it (.ci/test.sh). Copying the template (CREATE DATABASE …
// TEMPLATE, about 8 MB) costs the throwaway server about a tenth of a
// second of CPU, and dropping the copy forces a checkpoint; emptying the few
// tables a test wrote costs a fraction of that. Never on Citus (each database is distributed
// afresh there). The databases left spare when a test process exits are not
// dropped: the throwaway server is deleted after the run.
const EnvReuse = "HOOKGATE_TEST_REUSE_DB"

// reuseDBs reports whether NewDB reuses databases (EnvReuse).
func reuseDBs() bool { return os.Getenv(EnvReuse) == "1" && !Citus() }

// spares are the databases of this process ready for another test.
var spares = &reuser{}

// spare is a database a finished test gave back, emptied, and the pool of
// that test when its connections were handed over with it (nil otherwise):
// open sessions whose state reset discarded. A new session costs the
// server more CPU than most tests' statements (TestHandedOverPoolIsClean).
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

// take returns a spare database and true, or false when there is none: the
// newest one given back whose pool holds up to conns connections, or else
// the newest one given back without a pool. One with a pool of another size
// is left for a test that asks for that size: copying the template costs
// the server less than opening a pool of Racers sessions.
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

// sparePrefix begins the names of the databases that test processes which
// have ended left for others (leave, adoptSpare; their tests use another
// prefix). They exist only on the server of one run (.ci/test.sh), copies
// of its one template.
const sparePrefix = "hgt_spare_"

// leave closes the pools of the spare databases and renames each to
// sparePrefix…, for the processes of the run still to come (adoptSpare):
// a database that cannot be renamed (a session lingers) stays as it is.
// The databases are not dropped: the throwaway server is deleted after the
// run.
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

// adoptSpare renames a database another test process of the run left
// (leave) to name and returns true, or returns false when there is none to
// take. Only with a template the processes share (EnvTemplate), whose copies
// they all are: then a database left is as a fresh copy of tpl is. Two
// processes may try the same one: the rename succeeds for one of them.
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
		// Another process took it first (or is taking it).
	}
	return false, nil
}

// giveBack takes back the database name of a test that has ended, with
// pool, the pool NewDB gave the test (nil: none). When the catalogs are
// what they were when the test got the database (state, from
// catalogState) once the tables the test made are dropped, the database is
// emptied (reset), kept for the next test, and giveBack returns true;
// otherwise (the test altered or dropped a table of the template, made a
// function, a schema, …), or when emptying fails, it returns false and the
// caller drops it. The pool is kept with the database when reset kept its
// sessions (resetConn); otherwise it is closed.
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

// catalogStateSQL sums up the catalog rows of the current database's own
// objects (OID 16384 and up: the template's and any a test made, not the
// built-in ones) that a test's DDL changes: how many, and the newest
// transaction that wrote one. It covers relations, columns, defaults,
// constraints, indexes, triggers, functions, types, enum values, schemas
// (not the temporary ones sessions make), extensions, rules, policies, event
// triggers, sequences, extended statistics, inheritance and dependencies,
// plus the database's own row, its settings (ALTER DATABASE … SET) and the
// schema versions of goose and River. Creating an object adds rows with a
// newer xmin; altering one writes a new row version (a newer xmin); dropping
// one removes rows. ANALYZE and VACUUM update pg_class in place (the xmin
// stays); the statistics they write are cleared by reset.
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
// that a test made (their pg_class row is newer than the newest catalog row
// the test found, $1): many tests make a table of their own next to
// hookgate's. Dropping them takes away every catalog row they brought
// (columns, types, constraints, indexes, identity sequences,
// dependencies), which the check that follows verifies; anything else a
// test made (a view, a function, a schema) fails that check.
const newTablesSQL = `SELECT coalesce(string_agg(oid::regclass::text, ', '), '') FROM pg_class
WHERE relnamespace = 'public'::regnamespace AND relkind IN ('r', 'p') AND xmin::text::bigint > $1`

// dirtyTablesSQL lists, as one TRUNCATE list, the tables of hookgate and
// River (schema public) that are not as a fresh copy of the template has
// them: with pages (rows, dead or alive), with statistics counted by ANALYZE
// or VACUUM (reltuples is -1 until then), or with an identity or serial
// sequence that has handed out a value. goose's and River's schema version
// tables are left alone (the catalog state covers them). The migrations
// seed no other table (TestFreshDatabaseTablesAreEmpty), so an empty table
// is what a fresh copy holds.
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

// reset makes the database name as a fresh copy of the template, or fails
// when it cannot, on a connection of pool if it can (resetConn). It keeps
// the sessions of pool, cleaned (cleanSession), when it can, and reports
// whether it did (keptPool); it ends every other session still connected
// (a closed pool's backends may not have exited yet; a test may have left
// a connection open), and their state (settings, advisory locks, prepared
// statements, LISTEN) goes with them. It drops the tables the test made,
// checks that the catalogs are then as they were (state), truncates every
// table that is not as fresh (RESTART IDENTITY resets their sequences),
// deletes the column statistics of ANALYZE (plan tests examine the plans
// of a fresh database) and resets the database's activity counters. It
// needs a superuser, as the throwaway server's user is, and PostgreSQL 15
// or later (on an older server every reset fails, and each database is
// dropped as without EnvReuse).
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
		// relation never built (relpages 0, reltuples -1), where a fresh
		// copy has those CREATE INDEX gave on the empty table (its pages,
		// 0 tuples): the planner estimates a partial index's rows from
		// them. They are put back (TestReusedDatabaseIsLikeAFreshOne).
		if _, err := conn.Exec(ctx, "TRUNCATE "+dirty+" RESTART IDENTITY"); err != nil {
			return false, err
		}
		if _, err := conn.Exec(ctx, `UPDATE pg_class i SET relpages = pg_relation_size(i.oid) / current_setting('block_size')::int, reltuples = 0
FROM pg_index x WHERE x.indexrelid = i.oid AND x.indrelid = ANY(('{' || $1 || '}')::regclass[])`, dirty); err != nil {
			return false, err
		}
	}
	// The counts of this session (the truncations) reach the shared
	// statistics when its transaction ends, after a forced flush (those of
	// the pool's other sessions were flushed by cleanSession); then the
	// database's counters are reset, as a fresh copy has none.
	if _, err := conn.Exec(ctx, "SELECT pg_stat_force_next_flush()"); err != nil {
		return false, err
	}
	_, err = conn.Exec(ctx, `DELETE FROM pg_statistic WHERE starelid IN (SELECT oid FROM pg_class WHERE relnamespace = 'public'::regnamespace);
SELECT pg_stat_reset()`)
	return len(pids) > 0, err
}

// endOtherSessions ends every session of the current database but the
// caller's and those of keep (backend PIDs), and waits until each has
// exited (pg_terminate_backend with a timeout; one that exits meanwhile
// makes it return false with a warning). NewDB calls it on a reused
// database whose pool was not handed over before the test gets it: the
// session reset ran on has closed, but its backend may not have exited yet.
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
// backend PIDs of the sessions to keep (the pool's, handed over with the
// database to the next test; none otherwise), and the function that gives
// the connection back. It hands the pool over when the test left none of
// its connections acquired (waiting up to releaseWait for the last ones to
// come back: released): it takes every idle one and cleans it
// (cleanSession; one that fails is closed), and the first is the one
// returned. Otherwise (no pool, a closed one, one still in use, none left
// open) it returns a new connection, closed on release.
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
// pool to come back: River's client gives one back tens of milliseconds
// after its Stop has returned.
const releaseWait = 500 * time.Millisecond

// released reports whether pool has no connection acquired or being made,
// waiting up to wait for that.
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

// cleanSession discards the state a test left in a session of its pool, so
// that the next test gets it as a new session (TestHandedOverPoolIsClean):
// DISCARD ALL (settings, SET ROLE, prepared statements and portals, temporary
// tables, LISTEN, advisory locks, cached plans and sequence values), pgx's
// statement and description caches and the notifications it buffered, and
// the session's pending activity counts, flushed now (before reset resets
// the database's) rather than in the next test.
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
	// Last: pgx buffers a notification that reached the socket before the
	// UNLISTEN of DISCARD ALL when it reads the answers to the statements
	// above. A done context makes WaitForNotification return the buffered
	// ones, then fail without reading.
	done, cancel := context.WithCancel(ctx)
	cancel()
	for {
		if _, err := conn.WaitForNotification(done); err != nil {
			return nil
		}
	}
}
