package migrations

import (
	"io/fs"
	"os"
	"regexp"
	"strings"
	"testing"
)

// createdTable finds the tables a migration creates.
var createdTable = regexp.MustCompile(`(?i)\bCREATE\s+(?:UNLOGGED\s+)?TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?([a-z_][a-z0-9_]*)`)

// TestCitusDDLNamesEveryTable: every table a migration creates is either
// distributed by migrations/citus/distribute.sql or named there as a local
// table of the coordinator with its reason (`-- local: <table>: <why>`),
// and docs/distributed.md names it: a table added without deciding where it
// lives on Citus fails here, on PostgreSQL, without a Citus cluster.
func TestCitusDDLNamesEveryTable(t *testing.T) {
	docs, err := os.ReadFile("../docs/distributed.md")
	if err != nil {
		t.Fatal(err)
	}
	names, err := fs.Glob(FS(), "*.sql")
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, name := range names {
		b, err := fs.ReadFile(FS(), name)
		if err != nil {
			t.Fatal(err)
		}
		up, _, _ := strings.Cut(string(b), "-- +goose Down")
		for _, m := range createdTable.FindAllStringSubmatch(up, -1) {
			table := m[1]
			seen++
			distributed := regexp.MustCompile(`(?m)^SELECT create_distributed_table\('` + table + `',`).MatchString(CitusDDL)
			local := regexp.MustCompile(`(?m)^-- local: ` + table + `: \S`).MatchString(CitusDDL)
			if distributed == local {
				t.Errorf("%s creates %s: migrations/citus/distribute.sql must distribute it (create_distributed_table) or name it as local with its reason (-- local: %s: why), once", name, table, table)
			}
			if !strings.Contains(string(docs), "`"+table+"`") {
				t.Errorf("%s creates %s: docs/distributed.md does not name it (`%s`)", name, table, table)
			}
		}
	}
	if seen < 7 {
		t.Fatalf("found %d tables in the migrations: the pattern misses CREATE TABLE statements", seen)
	}
}
