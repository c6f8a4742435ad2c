package main

import (
	"net/http"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

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
