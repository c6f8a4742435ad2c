package main

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/testing/pgtest"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// TestServeInASchemaOfItsOwn: a database shared with another application,
// and hookgate given a schema of its own by the URL's search_path, as
// operations.md says. Its migrations create every table there and none in
// public, beside the other application's; a burst of concurrent
// deliveries is stored once each, every retry is answered from it, and
// every forward reaches the target.
func TestServeInASchemaOfItsOwn(t *testing.T) {
	t.Parallel()
	db := emptyDB(t)
	adminExec(t, db, `CREATE SCHEMA hookgate; CREATE TABLE public.other_app (id int)`)
	dsn := withParam(db, "search_path=hookgate")
	tg := testkit.NewTarget(t, testkit.Always(http.StatusOK))
	s := startRunWith(t, dsn, senderConfig+"    forward:\n      - { name: ok, url: "+tg.URL+" }\n")
	pool, err := pgxpool.New(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()

	burstStoredAndForwarded(t, s.base, pool, tg, "schema-", 200)

	tables := map[string][]string{}
	rows, err := pool.Query(t.Context(), `SELECT table_schema, table_name FROM information_schema.tables
WHERE table_schema IN ('public', 'hookgate') AND table_type = 'BASE TABLE' ORDER BY 1, 2`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var schema, name string
		if err := rows.Scan(&schema, &name); err != nil {
			t.Fatal(err)
		}
		tables[schema] = append(tables[schema], name)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(tables["public"], ","); got != "other_app" {
		t.Errorf("tables in public: %s, want the other application's alone", got)
	}
	for _, want := range []string{"processed_messages", "webhook_events", "river_job", "goose_db_version"} {
		if !strings.Contains(","+strings.Join(tables["hookgate"], ",")+",", ","+want+",") {
			t.Errorf("no table %s in schema hookgate (it has %v)", want, tables["hookgate"])
		}
	}
}

// TestMigrationsNeedARoleThatMayCreate: on PostgreSQL 15 and later, a role
// that does not own the database may not create tables in public. migrate
// and serve then stop at once, before goose tries (and tries again for
// seconds), with an error that names the role and the schema and says
// what to do; with a schema the role owns, named by the URL's
// search_path, both work.
func TestMigrationsNeedARoleThatMayCreate(t *testing.T) {
	t.Parallel()
	role := "hgt_app_" + randHex(4)
	admin := pgtest.URL(t)
	adminExec(t, admin, "CREATE ROLE "+role+" LOGIN")
	t.Cleanup(func() { adminExec(t, admin, "DROP ROLE IF EXISTS "+role) }) // after the database's drop, registered below
	db := emptyDB(t)
	adminExec(t, db, "REVOKE CREATE ON SCHEMA public FROM PUBLIC") // PostgreSQL 15's default, also on an older server
	u, err := url.Parse(db)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	asRole := u.String()

	for _, args := range [][]string{{"migrate"}, {"serve", "--addr", "127.0.0.1:0", "--config", writeConfig(t, senderConfig)}} {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		err := run(ctx, args, envOf("DATABASE_URL", asRole), io.Discard, newLogSink())
		cancel()
		for _, want := range []string{"the role " + role + " may not create tables in schema public", "ALTER DATABASE … OWNER TO", "search_path=hookgate"} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("%s as a role that may not create in public: %v; want an error with %q", args[0], err, want)
			}
		}
	}

	adminExec(t, db, "CREATE SCHEMA hookgate AUTHORIZATION "+role)
	if err := run(t.Context(), []string{"migrate"}, envOf("DATABASE_URL", withParam(asRole, "search_path=hookgate")), io.Discard, newLogSink()); err != nil {
		t.Fatalf("migrate into the role's own schema: %v", err)
	}
	s := startRun(t, withParam(asRole, "search_path=hookgate"))
	r, err := deliver(t.Context(), newClient(t), s.base, "own-1", bodyFor("own-1"))
	if err != nil || r.status != http.StatusAccepted {
		t.Fatalf("a delivery with the role's own schema: %v %v, want 202", r, err)
	}
}
