package pgtest

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The SQL in these tests is what they examine: the state of a database
// (rows, sequences, statistics, catalogs) that reset must bring back.

// freshCopy copies this process's template into a new database that t's
// cleanup drops, and returns its name and a pool on it.
func freshCopy(t *testing.T) (string, *pgxpool.Pool) {
	t.Helper()
	ctx := t.Context()
	admin := URL(t)
	tpl, err := migratedTemplate(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	name := "hgt_reuse_" + randHex(4)
	if err := createDatabase(ctx, admin, name, tpl); err != nil {
		t.Fatal(err)
	}
	return name, own(t, name)
}

// own makes t's cleanup drop the database name, and returns a pool on it,
// closed before the drop.
func own(t *testing.T, name string) *pgxpool.Pool {
	t.Helper()
	admin := URL(t)
	t.Cleanup(func() {
		if err := dropDatabase(context.Background(), admin, name); err != nil {
			t.Errorf("drop %s: %v", name, err)
		}
	})
	dsn, err := withDatabase(admin, name)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close) // before the drop
	return pool
}

// dataTables lists the tables reset empties.
func dataTables(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, err := pool.Query(t.Context(), `SELECT relname FROM pg_class
WHERE relnamespace = 'public'::regnamespace AND relkind IN ('r', 'p')
  AND relname NOT IN ('goose_db_version', 'river_migration') ORDER BY relname`)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(names) < 10 {
		t.Fatalf("found %d tables of hookgate and River: %v", len(names), names)
	}
	return names
}

// describe returns what a test could see of a database's state besides its
// schema: the activity counters, each relation's size and planner counts,
// each sequence's last value, the column statistics, and each table's rows.
func describe(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	ctx := t.Context()
	var b strings.Builder
	for _, q := range []string{
		// First: the queries below count as scans.
		`SELECT coalesce(sum(seq_scan + coalesce(idx_scan, 0) + n_tup_ins + n_tup_upd + n_tup_del + n_live_tup + n_dead_tup + n_mod_since_analyze), 0)::text FROM pg_stat_user_tables`,
		`SELECT string_agg(format('%s pages %s tuples %s visible %s size %s', relname, relpages, reltuples, relallvisible, pg_relation_size(oid)), E'\n' ORDER BY relname)
FROM pg_class WHERE relnamespace = 'public'::regnamespace`,
		`SELECT string_agg(format('%s last %s', relname, pg_sequence_last_value(oid)), E'\n' ORDER BY relname)
FROM pg_class WHERE relnamespace = 'public'::regnamespace AND relkind = 'S'`,
		`SELECT count(*)::text FROM pg_statistic WHERE starelid IN (SELECT oid FROM pg_class WHERE relnamespace = 'public'::regnamespace)`,
	} {
		var s string
		if err := pool.QueryRow(ctx, q).Scan(&s); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		b.WriteString(s + "\n")
	}
	for _, table := range dataTables(t, pool) {
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{table}.Sanitize()).Scan(&n); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s rows %d\n", table, n)
	}
	return b.String()
}

// TestFreshDatabaseTablesAreEmpty: the migrations seed no table reset
// empties (reset takes an empty table for a fresh one), and do write the
// schema version tables it leaves alone.
func TestFreshDatabaseTablesAreEmpty(t *testing.T) {
	SkipOnCitus(t, "databases are not reused on Citus")
	t.Parallel()
	_, pool := freshCopy(t)
	d := describe(t, pool)
	for _, line := range strings.Split(strings.TrimSpace(d), "\n") {
		if strings.Contains(line, " rows ") && !strings.HasSuffix(line, " rows 0") {
			t.Errorf("a fresh copy of the template holds rows: %s", line)
		}
	}
	for _, table := range []string{"goose_db_version", "river_migration"} {
		var n int
		if err := pool.QueryRow(t.Context(), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			t.Errorf("%s is empty in a fresh copy", table)
		}
	}
}

// freshAndDirty makes two copies of the template: it returns what describe
// sees of the first (a fresh copy, to compare with), and the name, a pool
// and the catalog state of the second, for the test to dirty and give back.
func freshAndDirty(t *testing.T) (want, name string, pool *pgxpool.Pool, state catalog) {
	t.Helper()
	_, fresh := freshCopy(t)
	want = describe(t, fresh)
	name, pool = freshCopy(t)
	state, err := catalogState(t.Context(), pool)
	if err != nil {
		t.Fatal(err)
	}
	return want, name, pool, state
}

// TestReusedDatabaseIsLikeAFreshOne: a database a test wrote rows to
// (sequences advanced, a table analyzed, another vacuumed), made a table in
// and left a
// session open on (holding an advisory lock) is, once given back, like a
// fresh copy of the template in everything describe sees; the leftover
// session is ended.
func TestReusedDatabaseIsLikeAFreshOne(t *testing.T) {
	SkipOnCitus(t, "databases are not reused on Citus")
	t.Parallel()
	ctx := t.Context()
	want, name, pool, state := freshAndDirty(t)
	for _, q := range []string{
		`INSERT INTO processed_messages SELECT 's', g::text, '', gen_random_uuid(), 200, '', '', now(), now() FROM generate_series(1, 500) g`,
		`ANALYZE processed_messages`,
		`INSERT INTO river_job (kind, args, max_attempts) VALUES ('k', '{}', 1), ('k', '{}', 1)`,
		`DELETE FROM river_job`,
		`VACUUM river_job`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	// A table of the test's own, with an identity, a constraint and an
	// index: dropped.
	if _, err := pool.Exec(ctx, `CREATE TABLE runs (n bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, v text CONSTRAINT runs_v_key UNIQUE);
CREATE INDEX runs_v ON runs (lower(v)); INSERT INTO runs (v) VALUES ('a')`); err != nil {
		t.Fatal(err)
	}
	// A sequence advanced by an insert that failed before writing a row.
	if _, err := pool.Exec(ctx, `INSERT INTO river_job (kind, args, max_attempts) VALUES (NULL, '{}', 1)`); err == nil {
		t.Fatal("inserting a job without a kind succeeded")
	}
	leftover, err := pgx.Connect(ctx, pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	defer leftover.Close(context.Background())
	if _, err := leftover.Exec(ctx, "SELECT pg_advisory_lock(42)"); err != nil {
		t.Fatal(err)
	}
	pool.Close()

	r := &reuser{}
	if !r.giveBack(ctx, URL(t), name, state, nil) || !r.has(name) {
		t.Fatal("the database was not kept for reuse")
	}
	if err := leftover.Ping(ctx); err == nil {
		t.Error("the session the test left open still works")
	}
	dsn, err := withDatabase(URL(t), name)
	if err != nil {
		t.Fatal(err)
	}
	again, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if got := describe(t, again); got != want {
		t.Errorf("a reused database differs from a fresh copy:\n--- reused\n%s--- fresh\n%s", got, want)
	}
	var locked bool
	if err := again.QueryRow(ctx, "SELECT pg_try_advisory_lock(42)").Scan(&locked); err != nil {
		t.Fatal(err)
	}
	if !locked {
		t.Error("the advisory lock of the ended session is still held")
	}
}

// TestDatabaseWithChangedSchemaIsDropped: a database whose schema a test
// changed other than by making tables (even when it changed it back) is
// dropped, not reused.
func TestDatabaseWithChangedSchemaIsDropped(t *testing.T) {
	SkipOnCitus(t, "databases are not reused on Citus")
	t.Parallel()
	for _, tc := range []struct{ name, ddl string }{
		{"view", `CREATE VIEW scratch AS SELECT 1 AS v`},
		{"table and view", `CREATE TABLE scratch (v int); CREATE VIEW scratch_v AS SELECT v FROM scratch`},
		{"index on a table of the template", `CREATE INDEX i ON processed_messages (created_at)`},
		{"constraint added and dropped", `ALTER TABLE webhook_events ADD CONSTRAINT c CHECK (sender <> ''); ALTER TABLE webhook_events DROP CONSTRAINT c`},
		{"function", `CREATE FUNCTION f() RETURNS int LANGUAGE sql AS 'SELECT 1'`},
		{"column default", `ALTER TABLE target_breakers ALTER COLUMN sender SET DEFAULT 'x'`},
		{"goose version", `DELETE FROM goose_db_version WHERE version_id = (SELECT max(version_id) FROM goose_db_version)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			name, pool := freshCopy(t)
			state, err := catalogState(ctx, pool)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := pool.Exec(ctx, tc.ddl); err != nil {
				t.Fatal(err)
			}
			r := &reuser{}
			if r.giveBack(ctx, URL(t), name, state, pool) || r.has(name) {
				t.Fatal("the database was kept for reuse")
			}
			if err := dropDatabase(ctx, URL(t), name); err != nil {
				t.Fatal(err)
			}
			conn, err := pgx.Connect(ctx, URL(t))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(context.Background())
			var exists bool
			if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
				t.Fatal(err)
			}
			if exists {
				t.Error("the database still exists")
			}
		})
	}
}

// TestHandedOverPoolIsClean: the pool of a test that ended goes to the next
// test with the database, its sessions still open (no new session is
// started) but with nothing the test left in them: settings, LISTEN and the
// notifications pgx buffered, advisory locks, temporary tables, prepared
// statements (pgx's cache of them included: its queries still work),
// activity counts not yet flushed; and the database is like a fresh copy.
// A session outside the pool is ended. Without the hand-over, each pool
// opens new sessions; without cleanSession, the state shows.
func TestHandedOverPoolIsClean(t *testing.T) {
	SkipOnCitus(t, "databases are not reused on Citus")
	t.Parallel()
	ctx := t.Context()
	want, name, pool, state := freshAndDirty(t)
	const cached = `SELECT count(*) FROM processed_messages WHERE sender = $1`
	// Two sessions of the pool, dirtied alike.
	var conns []*pgxpool.Conn
	var pids []uint32
	for i := range 2 {
		c, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		pids = append(pids, c.Conn().PgConn().PID())
		for _, q := range []string{
			`SET statement_timeout = '1234s'`,
			`SET application_name = 'dirty'`,
			`LISTEN news`,
			`NOTIFY news`,
			fmt.Sprintf(`SELECT pg_advisory_lock(%d)`, 42+i),
			`CREATE TEMP TABLE scratch (v int)`,
			`PREPARE mine AS SELECT 1`,
			fmt.Sprintf(`INSERT INTO processed_messages SELECT 's%d', g::text, '', gen_random_uuid(), 200, '', '', now(), now() FROM generate_series(1, 50) g`, i),
		} {
			if _, err := c.Exec(ctx, q); err != nil {
				c.Release()
				t.Fatalf("%s: %v", q, err)
			}
		}
		var n int
		if err := c.QueryRow(ctx, cached, "s").Scan(&n); err != nil { // prepared by pgx, and cached
			c.Release()
			t.Fatal(err)
		}
	}
	for _, c := range conns {
		c.Release()
	}
	outside, err := pgx.Connect(ctx, pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	defer outside.Close(context.Background())

	r := &reuser{}
	if !r.giveBack(ctx, URL(t), name, state, pool) {
		t.Fatal("the database was not kept for reuse")
	}
	sp, ok := r.take(pool.Config().MaxConns)
	if !ok || sp.name != name || sp.pool != pool {
		t.Fatalf("took %+v, %v; want %s with the test's pool", sp, ok, name)
	}
	if err := outside.Ping(ctx); err == nil {
		t.Error("the session outside the pool still works")
	}
	idle := pool.AcquireAllIdle(ctx)
	var got []uint32
	for _, c := range idle {
		got = append(got, c.Conn().PgConn().PID())
	}
	if fmt.Sprint(sortedPIDs(got)) != fmt.Sprint(sortedPIDs(pids)) {
		t.Errorf("the pool's sessions are %v, want the test's %v, still open", got, pids)
	}
	for _, c := range idle {
		c.Release()
	}
	if got := describe(t, pool); got != want {
		t.Errorf("a database handed over differs from a fresh copy:\n--- reused\n%s--- fresh\n%s", got, want)
	}
	for range idle {
		c, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Release()
		pid := c.Conn().PgConn().PID()
		var timeout, app string
		var channels, locks, temps, prepared int
		err = c.QueryRow(ctx, `SELECT current_setting('statement_timeout'), current_setting('application_name'),
  (SELECT count(*) FROM pg_listening_channels()),
  (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()),
  (SELECT count(*) FROM pg_class WHERE relnamespace = pg_my_temp_schema()),
  (SELECT count(*) FROM pg_prepared_statements WHERE name = 'mine')`).Scan(&timeout, &app, &channels, &locks, &temps, &prepared)
		if err != nil {
			t.Fatal(err)
		}
		if timeout != "0" || app == "dirty" || channels != 0 || locks != 0 || temps != 0 || prepared != 0 {
			t.Errorf("session %d: statement_timeout %s, application_name %q, %d channels listened to, %d advisory locks, %d temporary relations, %d statements named mine: want a clean session",
				pid, timeout, app, channels, locks, temps, prepared)
		}
		var n int
		if err := c.QueryRow(ctx, cached, "s").Scan(&n); err != nil || n != 0 {
			t.Errorf("session %d: pgx's cached statement: %d rows, %v; want 0, no error", pid, n, err)
		}
		wait, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		if n, err := c.Conn().WaitForNotification(wait); err == nil {
			t.Errorf("session %d: a notification of the test before: %+v", pid, n)
		}
		cancel()
	}
}

func sortedPIDs(p []uint32) []uint32 {
	s := slices.Clone(p)
	slices.Sort(s)
	return s
}

// TestSpareIsLeftToLaterProcesses: when a test process ends (M), its spare
// databases are renamed for the processes still to come, which take them
// (adoptSpare) instead of copying the template: once each, even when two
// processes try at once, and the database taken is like a fresh copy.
func TestSpareIsLeftToLaterProcesses(t *testing.T) {
	SkipOnCitus(t, "databases are not reused on Citus")
	t.Parallel()
	ctx := t.Context()
	admin := URL(t)
	tpl, err := migratedTemplate(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv(EnvTemplate) != tpl {
		t.Skip("the test processes share no template (" + EnvTemplate + " is unset): spares are not left")
	}
	prefix := "hgt_sparetest_" + randHex(3) + "_" // this test's own, so that no other process takes them
	_, fresh := freshCopy(t)
	want := describe(t, fresh)

	r := &reuser{}
	for range 2 {
		name, pool := freshCopy(t)
		state, err := catalogState(ctx, pool)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `INSERT INTO processed_messages SELECT 's', g::text, '', gen_random_uuid(), 200, '', '', now(), now() FROM generate_series(1, 50) g`); err != nil {
			t.Fatal(err)
		}
		if !r.giveBack(ctx, admin, name, state, pool) {
			t.Fatal("the database was not kept for reuse")
		}
	}
	r.leave(ctx, prefix)
	if len(r.spares) != 0 {
		t.Fatalf("%d spares kept after leave", len(r.spares))
	}

	// Three processes take at once: two get one each, the third none.
	names := []string{"hgt_adopt_" + randHex(4), "hgt_adopt_" + randHex(4), "hgt_adopt_" + randHex(4)}
	took := make([]bool, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() { took[i], errs[i] = adoptSpare(ctx, admin, tpl, name, prefix) })
	}
	wg.Wait()
	adopted := 0
	for i, name := range names {
		if errs[i] != nil {
			t.Fatalf("adopt as %s: %v", name, errs[i])
		}
		if !took[i] {
			continue
		}
		adopted++
		if got := describe(t, own(t, name)); got != want {
			t.Errorf("a database taken over differs from a fresh copy:\n--- taken\n%s--- fresh\n%s", got, want)
		}
	}
	if adopted != 2 {
		t.Errorf("%d databases taken over, want the 2 left", adopted)
	}
}
