package pgtest

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Explain returns PostgreSQL's plan of sql, prepared with the parameter
// types types and executed with the literal arguments args, under
// plan_cache_mode mode (force_custom_plan or force_generic_plan). It runs on
// a connection taken out of pool and closed afterwards, so that the session
// setting and the prepared statement never reach the pool. It fails the
// test on any error.
func Explain(t testing.TB, pool *pgxpool.Pool, mode, sql, types, args string) string {
	t.Helper()
	return ExplainUnder(t, pool, "", mode, sql, types, args)
}

// ExplainUnder is [Explain] in a transaction that first runs settings (a
// statement of set_config(…, true) calls, or "") and is rolled back.
func ExplainUnder(t testing.TB, pool *pgxpool.Pool, settings, mode, sql, types, args string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	pc, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	conn := pc.Hijack()
	defer conn.Close(context.WithoutCancel(ctx))
	stmts := []string{"BEGIN"}
	if settings != "" {
		stmts = append(stmts, settings)
	}
	for _, stmt := range append(stmts,
		"SET LOCAL plan_cache_mode = "+mode,
		"PREPARE explained("+types+") AS "+sql,
	) {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	rows, err := conn.Query(ctx, "EXPLAIN EXECUTE explained("+args+")")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
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

// PlanTextDisabled reports whether plan, the text of EXPLAIN, has a path
// that the planner's settings disabled: before PostgreSQL 18 its cost
// starts at disable_cost (1e10); from 18 on EXPLAIN marks it.
func PlanTextDisabled(plan string) bool {
	if strings.Contains(plan, "Disabled: true") {
		return true
	}
	for rest := plan; ; {
		_, after, ok := strings.Cut(rest, "cost=")
		if !ok {
			return false
		}
		start, _, _ := strings.Cut(after, "..")
		if c, err := strconv.ParseFloat(start, 64); err == nil && c >= disableCost {
			return true
		}
		rest = after
	}
}

// PlanTextDisabledNodes returns how many paths the planner's settings
// disabled in plan, the text of EXPLAIN: from PostgreSQL 18 on, the nodes
// EXPLAIN marks; before it, the largest cost in plan over disable_cost (each
// disabled path adds disable_cost to its own cost and every cost above it).
// A statement whose intended plan has the fewest disabled paths keeps it
// whatever the statistics, as long as every other plan has more.
func PlanTextDisabledNodes(plan string) int {
	if n := strings.Count(plan, "Disabled: true"); n > 0 {
		return n
	}
	most := 0.0
	for rest := plan; ; {
		_, after, ok := strings.Cut(rest, "cost=")
		if !ok {
			return int(most / disableCost)
		}
		_, total, _ := strings.Cut(after, "..")
		total, _, _ = strings.Cut(total, " ")
		if c, err := strconv.ParseFloat(total, 64); err == nil {
			most = max(most, c)
		}
		rest = after
	}
}
