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
	return New(pool, 0), pool
}
