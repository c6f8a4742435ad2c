package queue

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/riverqueue/river/rivertype"

	"github.com/hookgate/hookgate/internal/testing/pgtest"
)

// riverJobColumns are the columns of River's river_job that hookgate's own
// SQL reads or writes (this package's statements, the fixtures of
// queuetest), with the types that SQL assumes (information_schema's
// udt_name: an array's is its element's with a leading underscore).
var riverJobColumns = map[string]string{
	"id":           "int8",
	"args":         "jsonb",
	"attempt":      "int2",
	"attempted_at": "timestamptz",
	"attempted_by": "_text",
	"created_at":   "timestamptz",
	"errors":       "_jsonb",
	"finalized_at": "timestamptz",
	"kind":         "text",
	"max_attempts": "int2",
	"metadata":     "jsonb",
	"priority":     "int2",
	"queue":        "text",
	"state":        "river_job_state",
	"scheduled_at": "timestamptz",
	"tags":         "_varchar",
}

// TestRiverSchema: River's schema, after hookgate's migrations (River's
// own among them), is the one hookgate's SQL on River's table was written
// for: river_job has the columns it names, with the types it casts to and
// compares with; River's state type has exactly the states River's Go API
// knows (and jobStates maps); the fast path's INSERT INTO river_job
// (recordFirstSQL) lists every column that has no default and may not be
// NULL; River's job sequence exists and gives forward_delivered its IDs;
// and the indexes the reads count on are there. A River upgrade that
// changes any of it fails here, naming what changed, rather than in a
// statement in production.
func TestRiverSchema(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDB(t)
	ctx := t.Context()

	type column struct {
		udt, nullable string
		hasDefault    bool
	}
	rows, err := pool.Query(ctx, `SELECT column_name, udt_name, is_nullable, column_default IS NOT NULL
FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = 'river_job'`)
	if err != nil {
		t.Fatal(err)
	}
	cols := map[string]column{}
	for rows.Next() {
		var name string
		var c column
		if err := rows.Scan(&name, &c.udt, &c.nullable, &c.hasDefault); err != nil {
			t.Fatal(err)
		}
		cols[name] = c
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(cols) == 0 {
		t.Fatal("no table river_job in the current schema: River's migrations did not run, or River renamed its table")
	}
	for name, udt := range riverJobColumns {
		c, ok := cols[name]
		switch {
		case !ok:
			t.Errorf("river_job has no column %s (hookgate's SQL names it, as %s)", name, udt)
		case c.udt != udt:
			t.Errorf("river_job.%s is of type %s, hookgate's SQL expects %s", name, c.udt, udt)
		}
	}

	// The fast path's insert gives every column River requires.
	m := regexp.MustCompile(`INSERT INTO river_job \(([^)]*)\)`).FindStringSubmatch(recordFirstSQL)
	if m == nil {
		t.Fatalf("recordFirstSQL has no INSERT INTO river_job (…):\n%s", recordFirstSQL)
	}
	inserted := strings.Split(strings.ReplaceAll(m[1], " ", ""), ",")
	for _, name := range inserted {
		if _, ok := riverJobColumns[name]; !ok {
			t.Errorf("recordFirstSQL inserts river_job.%s, which riverJobColumns (this test's list) lacks", name)
		}
	}
	for name, c := range cols {
		if c.nullable == "NO" && !c.hasDefault && !slices.Contains(inserted, name) {
			t.Errorf("river_job.%s is NOT NULL without a default, and recordFirstSQL does not insert it", name)
		}
	}

	// River's states: the enum's labels are the states River's API knows.
	var labels []string
	if err := pool.QueryRow(ctx, `SELECT coalesce(array_agg(e.enumlabel::text ORDER BY e.enumlabel), '{}')
FROM pg_enum e JOIN pg_type ty ON ty.oid = e.enumtypid WHERE ty.typname = 'river_job_state'`).Scan(&labels); err != nil {
		t.Fatal(err)
	}
	var known []string
	for _, s := range rivertype.JobStates() {
		known = append(known, string(s))
	}
	slices.Sort(known)
	if !slices.Equal(labels, known) {
		t.Errorf("type river_job_state has the states %v, River's API (rivertype.JobStates) %v", labels, known)
	}

	// River's sequence numbers forward_delivered's rows too, so that IDs
	// order forwards across both tables (migration 14).
	var jobDefault, deliveredDefault string
	if err := pool.QueryRow(ctx, `SELECT
  (SELECT column_default FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = 'river_job' AND column_name = 'id'),
  (SELECT column_default FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = 'forward_delivered' AND column_name = 'id')`).Scan(&jobDefault, &deliveredDefault); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(jobDefault, "river_job_id_seq") || !strings.Contains(deliveredDefault, "river_job_id_seq") {
		t.Errorf("river_job.id's default is %q and forward_delivered.id's %q: both should take river_job_id_seq", jobDefault, deliveredDefault)
	}

	// The indexes the reads are planned with (reads.go; plans_test.go), and
	// River's fetching index, which the scheduling of due forwards and the
	// breaker's wake read in its order (schedule.go, jobs.go).
	for _, index := range []string{"river_job_args_index", "river_job_hookgate_forward_idx", "river_job_hookgate_forward_unfinished_idx",
		"river_job_hookgate_forward_failed_idx", "river_job_hookgate_forward_uncounted_idx", "river_job_hookgate_forward_state_idx",
		"river_job_hookgate_forward_failed_at_idx", "river_job_prioritized_fetching_index"} {
		var ok bool
		if err := pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, index).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		if !ok {
			t.Errorf("no index %s on river_job", index)
		}
	}
	var fetching string
	if err := pool.QueryRow(ctx, `SELECT pg_get_indexdef('river_job_prioritized_fetching_index'::regclass)`).Scan(&fetching); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(fetching, "(state, queue, priority, scheduled_at, id)") {
		t.Errorf("River's fetching index is %s, hookgate's statements order by (state, queue, priority, scheduled_at, id)", fetching)
	}
	// River's test of a job's state against its unique states
	// (staysUnique), and its unique index, which it defines.
	var bitmask bool
	if err := pool.QueryRow(ctx, `SELECT river_job_state_in_bitmask(B'10000000', 'scheduled') AND NOT river_job_state_in_bitmask(B'10000000', 'available')`).Scan(&bitmask); err != nil || !bitmask {
		t.Errorf("river_job_state_in_bitmask does not read a job's unique states as staysUnique expects: %v, %v", bitmask, err)
	}
}
