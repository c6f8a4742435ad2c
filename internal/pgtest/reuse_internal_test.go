package pgtest

import (
	"context"
	"fmt"
	"strings"
	"testing"

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
	t.Cleanup(func() {
		if err := dropDatabase(context.Background(), admin, name); err != nil {
			t.Errorf("drop %s: %v", name, err)
		}
	})
	dsn, err := withDatabase(admin, name)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close) // before the drop
	return name, pool
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
	_, fresh := freshCopy(t)
	want := describe(t, fresh)

	name, pool := freshCopy(t)
	state, err := catalogState(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
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
