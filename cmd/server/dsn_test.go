package main

import (
	"context"
	"io"
	"net/url"
	"testing"

	"github.com/hookgate/hookgate/internal/testing/pgtest"
)

// A DATABASE_URL with pgxpool settings (pool_max_conns=…) works for
// migrations as for the pool: PostgreSQL would refuse them as run-time
// parameters if they reached it.
func TestMigrateAcceptsPoolSettingsInURL(t *testing.T) {
	t.Parallel()
	_, dsn := pgtest.NewDB(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("pool_max_conns", "4")
	u.RawQuery = q.Encode()
	if err := run(context.Background(), []string{"migrate"}, envOf("DATABASE_URL", u.String()), io.Discard, io.Discard); err != nil {
		t.Fatalf("migrate with %s: %v", u, err)
	}
}
