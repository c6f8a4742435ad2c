package dedup

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/pgtest"
)

// store returns a Store on a fresh database, and its pool.
func store(t *testing.T) (*Store, *pgxpool.Pool) {
	t.Helper()
	pool, _ := pgtest.NewDB(t)
	return New(pool, 0), pool
}

// explain returns the plan of sql, prepared with parameter types and
// executed with args, under plan_cache_mode mode.
func explain(t *testing.T, pool *pgxpool.Pool, mode, sql, types, args string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	pc, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A connection of its own, closed afterwards: the session settings and
	// the prepared statement never reach the pool.
	conn := pc.Hijack()
	defer conn.Close(context.WithoutCancel(ctx))
	for _, stmt := range []string{
		"SET plan_cache_mode = " + mode,
		"PREPARE explained(" + types + ") AS " + sql,
	} {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	rows, err := conn.Query(ctx, "EXPLAIN EXECUTE explained("+args+")")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		b.WriteString(line + "\n")
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}
