package dedup

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/pgtest"
)

// store returns a Store on a fresh database, and its pool.
func store(t *testing.T) (*Store, *pgxpool.Pool) {
	t.Helper()
	pool, _ := pgtest.NewDB(t)
	return mustNew(t, pool, Config{InFlightWait: DefaultInFlightWait}), pool
}

// mustNew returns New(pool, cfg), failing t when cfg is invalid.
func mustNew(t testing.TB, pool *pgxpool.Pool, cfg Config) *Store {
	t.Helper()
	s, err := New(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
