package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// pgStatTop is how many statements -pgstat lists per phase.
const pgStatTop = 12

// pgStat starts watching PostgreSQL for -pgstat: it resets
// pg_stat_statements and samples the backends' wait events every 10 ms on
// a connection of its own. The function it returns stops the sampling and
// prints, per accepted delivery, the statements that took the most time
// and where the backends spent theirs. Without -pgstat it does nothing.
func (b *bench) pgStat(ctx context.Context) func(accepted int) {
	if !b.pgstat {
		return func(int) {}
	}
	fail := func(err error) func(int) {
		return func(int) {
			fmt.Fprintf(b.out, "  pgstat: %v (run through make bench, which loads pg_stat_statements)\n", err)
		}
	}
	conn, err := pgx.Connect(ctx, b.dbURL)
	if err != nil {
		return fail(err)
	}
	if _, err := conn.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
		_ = conn.Close(ctx)
		return fail(err)
	}
	if _, err := conn.Exec(ctx, `SELECT pg_stat_statements_reset()`); err != nil {
		_ = conn.Close(ctx)
		return fail(err)
	}
	stop, done := make(chan struct{}), make(chan map[string]int)
	go func() {
		counts := map[string]int{}
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				done <- counts
				return
			case <-t.C:
			}
			rows, err := conn.Query(ctx, `SELECT CASE WHEN state = 'active' AND wait_event IS NULL THEN 'CPU'
  WHEN state = 'active' THEN wait_event_type || ':' || wait_event
  ELSE coalesce(state, '?') || coalesce(' (' || wait_event_type || ':' || wait_event || ')', '') END
FROM pg_stat_activity WHERE datname = current_database() AND backend_type = 'client backend' AND pid <> pg_backend_pid()`)
			if err != nil {
				continue
			}
			for rows.Next() {
				var k string
				if rows.Scan(&k) == nil {
					counts[k]++
				}
			}
			rows.Close()
			if rows.Err() != nil {
				counts["(a sample failed)"]++
			}
		}
	}()
	return func(accepted int) {
		close(stop)
		counts := <-done
		defer func() { _ = conn.Close(context.Background()) }()
		n := float64(max(accepted, 1))
		rows, err := conn.Query(ctx, `SELECT calls, total_exec_time, sum(total_exec_time) OVER (), left(regexp_replace(query, '\s+', ' ', 'g'), 110)
FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND query NOT LIKE '%pg_stat_activity%' AND query NOT LIKE '%pg_stat_statements%'
ORDER BY total_exec_time DESC LIMIT $1`, pgStatTop)
		if err != nil {
			fail(err)(accepted)
			return
		}
		fmt.Fprintf(b.out, "  pgstat: statements by execution time (calls and µs per accepted delivery; nested statements counted too):\n")
		for rows.Next() {
			var (
				calls      int64
				total, all float64
				query      string
			)
			if err := rows.Scan(&calls, &total, &all, &query); err != nil {
				fmt.Fprintf(b.out, "    %v\n", err)
				break
			}
			fmt.Fprintf(b.out, "    %5.2f calls %6.1f µs %5.1f%%  %s\n", float64(calls)/n, total*1000/n, 100*total/max(all, 1e-9), query)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			fmt.Fprintf(b.out, "    %v\n", err)
		}
		total := 0
		for _, c := range counts {
			total += c
		}
		var parts []string
		for _, k := range slices.SortedFunc(maps.Keys(counts), func(a, b string) int { return counts[b] - counts[a] }) {
			if len(parts) == 10 {
				break
			}
			parts = append(parts, fmt.Sprintf("%s %.1f%%", k, 100*float64(counts[k])/float64(max(total, 1))))
		}
		fmt.Fprintf(b.out, "  pgstat: the hookgate backends' states, sampled every 10 ms (%d samples): %s\n", total, strings.Join(parts, ", "))
	}
}
