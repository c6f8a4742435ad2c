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
	u := withSetting(t, dsn, "pool_max_conns", "4")
	if err := run(context.Background(), []string{"migrate"}, envOf("DATABASE_URL", u), io.Discard, io.Discard); err != nil {
		t.Fatalf("migrate with %s: %v", u, err)
	}
}

// withSetting returns dsn with the URL parameter key set to value.
func withSetting(t *testing.T, dsn, key, value string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set(key, value)
	u.RawQuery = q.Encode()
	return u.String()
}
