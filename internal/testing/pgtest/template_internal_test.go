package pgtest

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestSharedTemplateIsMadeOnce: processes that share a template (EnvTemplate)
// all get the same migrated template, made by one of them; a database of
// that name left half made (not marked a template) is made again.
func TestSharedTemplateIsMadeOnce(t *testing.T) {
	SkipOnCitus(t, "make test-citus gives each process a template of its own")
	t.Parallel()
	admin := URL(t)
	ctx := t.Context()
	name := "hgtpl_test_" + randHex(4)
	t.Cleanup(func() {
		ctx := context.Background()
		if err := adminExec(ctx, admin, "ALTER DATABASE "+ident(name)+" IS_TEMPLATE false"); err != nil {
			t.Errorf("unmark %s: %v", name, err)
		}
		if err := dropDatabase(ctx, admin, name); err != nil {
			t.Errorf("drop %s: %v", name, err)
		}
	})
	// A process died while making it: the database exists, unmigrated.
	if err := adminExec(ctx, admin, "CREATE DATABASE "+ident(name)); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	got := make([]string, 3)
	for i := range got {
		wg.Go(func() {
			var err error
			if got[i], err = sharedTemplate(ctx, admin, name); err != nil {
				t.Errorf("sharedTemplate: %v", err)
			}
		})
	}
	wg.Wait()
	for i, g := range got {
		if g != name {
			t.Errorf("caller %d got template %q, want %q", i, g, name)
		}
	}
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var isTemplate, allowConn bool
	if err := conn.QueryRow(ctx, "SELECT datistemplate, datallowconn FROM pg_database WHERE datname = $1", name).Scan(&isTemplate, &allowConn); err != nil {
		t.Fatal(err)
	}
	if !isTemplate || allowConn {
		t.Fatalf("%s: datistemplate %v, datallowconn %v; want a sealed template", name, isTemplate, allowConn)
	}
	// It was migrated: a copy has the tables.
	copyName := "hgt_copy_" + randHex(4)
	if err := createDatabase(ctx, admin, copyName, name); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := dropDatabase(context.Background(), admin, copyName); err != nil {
			t.Errorf("drop %s: %v", copyName, err)
		}
	}()
	dsn, err := withDatabase(admin, copyName)
	if err != nil {
		t.Fatal(err)
	}
	c2, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close(context.Background())
	var table *string
	if err := c2.QueryRow(ctx, "SELECT to_regclass('processed_messages')::text").Scan(&table); err != nil {
		t.Fatal(err)
	}
	if table == nil {
		t.Error("a copy of the shared template has no processed_messages table: it was not migrated")
	}
}
