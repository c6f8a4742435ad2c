package queue

import (
	"context"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// riverTrace records the statements River's driver sends through a pool
// (as pgx's tracer): the last SQL and arguments of each of River's named
// statements (sqlc's "-- name: X" first line).
type riverTrace struct {
	mu   sync.Mutex
	last map[string]tracedStatement
}

// tracedStatement is a statement River sent, with its arguments.
type tracedStatement struct {
	sql  string
	args []any
}

// sqlcName finds the name of one of River's statements.
var sqlcName = regexp.MustCompile(`^-- name: (\w+)`)

func (r *riverTrace) record(sql string, args []any) {
	m := sqlcName.FindStringSubmatch(sql)
	if m == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.last == nil {
		r.last = map[string]tracedStatement{}
	}
	r.last[m[1]] = tracedStatement{sql: sql, args: slices.Clone(args)}
}

// statements returns the statements recorded so far, by name.
func (r *riverTrace) statements() map[string]tracedStatement {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]tracedStatement, len(r.last))
	for k, v := range r.last {
		out[k] = v
	}
	return out
}

func (r *riverTrace) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.record(d.SQL, d.Args)
	return ctx
}

func (*riverTrace) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (*riverTrace) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (r *riverTrace) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	r.record(d.SQL, d.Args)
}

func (*riverTrace) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// riverJobStatements are the statements River runs on river_job in a
// working process's steady state, each with the bound of its plans:
// perJob, a statement run per job or per batch of jobs (the insert, the
// fetch, the completer's writes), must visit about as many rows as it
// handles (its batch: the largest array among its arguments, or its
// limit), whatever the statistics say; the others, River's maintenance,
// run by the elected leader every few seconds (the scheduler) or every
// 30 s (the cleaner, the rescuer), may read the table once (the cleaner
// and the rescuer do when no job qualifies, on true statistics too), never
// once per job. The scheduler's (JobSchedule) is the one River's plan that
// lying statistics ruin (a nested loop over the due jobs per due job):
// hookgate makes its forwards available itself (scheduleSQL) so that the
// scheduler never holds them, cancels it when it stalls, and analyzes the
// table then and after a reset of the statistics; its plan is checked
// after hookgate's ANALYZE.
var riverJobStatements = map[string]bool{
	"JobInsertFastMany":        true,
	"JobGetAvailable":          true,
	"JobSetStateIfRunningMany": true,
	"JobSchedule":              false,
	"JobDeleteBefore":          false,
	"JobGetStuck":              false,
}

// riverOtherStatements are the statements River runs in steady state on
// its other tables (the leader, the queues: a row or a few each).
var riverOtherStatements = []string{
	"LeaderAttemptElect", "LeaderAttemptReelect", "LeaderDeleteExpired", "LeaderResign", "LeaderGetElectedLeader",
	"QueueCreateOrSetUpdatedAt", "QueueDeleteExpired", "QueueList", "QueueGet",
	"PGGetProductAndVersion", "PGNotifyMany", "PGAdvisoryXactLock",
	"PeriodicJobGetAll", "PeriodicJobKeepAliveAndReap", "PeriodicJobUpsertMany",
}

// TestRiverPlansWhenStatisticsLie extends TestQueuePlansWhenStatisticsLie
// to River's own statements: a River client works forwards (inserted
// through River, fetched, snoozed, completed; its scheduler, cleaner and
// rescuer run once at start) on a table whose statistics lie (lyingStats,
// both ways), and every statement River sent on river_job is explained
// with its last arguments, in both plan cache modes: River's statements
// per job visit about the rows they handle; its maintenance's read the
// table at most once; River's scheduler, given due forwards, does so once
// hookgate has analyzed the table (on the lying statistics it runs a
// nested loop per due job, logged). A statement River starts to run on
// river_job in steady state that this test does not know fails it, as
// does a change of the text hookgate finds River's scheduler by.
func TestRiverPlansWhenStatisticsLie(t *testing.T) {
	testkit.Slow(t, "a River client on lying statistics, its maintenance included")
	t.Parallel()
	eachLie(t, testRiverPlans)
}

func testRiverPlans(t *testing.T, grown bool) {
	pool := lyingStats(t, grown)
	ctx := t.Context()
	trace := runTracedRiver(t, pool)
	conn := planConn(t, pool)

	got := trace.statements()
	if s, ok := got["JobSchedule"]; !ok || !strings.HasPrefix(s.sql, riverScheduleStatement) {
		t.Errorf("River's scheduler statement does not start with %q (how hookgate finds it): %.60q", riverScheduleStatement, s.sql)
	}
	for name, s := range got {
		perJob, known := riverJobStatements[name]
		switch {
		case !strings.Contains(s.sql, "river_job"):
			if !slices.Contains(riverOtherStatements, name) {
				t.Errorf("River runs %s, on none of the tables this test knows:\n%s", name, s.sql)
			}
			continue
		case !known:
			t.Errorf("River runs %s on river_job, which this test does not check (riverJobStatements):\n%s", name, s.sql)
			continue
		case name == "JobSchedule":
			continue // below
		}
		bound := planRows
		if perJob {
			bound = batchOf(s.args)
		}
		checkPlans(t, conn, bound, "", s.sql, s.args...)
	}

	// River's scheduler, with 200 forwards due, once hookgate has analyzed
	// the table.
	sched := got["JobSchedule"]
	if _, err := pool.Exec(ctx, `INSERT INTO river_job (state, attempt, max_attempts, created_at, scheduled_at, args, kind, queue, unique_key, unique_states)
SELECT 'scheduled', 0, 5, now(), now() - interval '1 s',
  jsonb_build_object('sender', 'acme', 'target', 't', 'event_id', gen_random_uuid()::text, 'delivery_id', 'due' || g),
  '`+ForwardKind+`', $1, sha256(('due' || g)::bytea), B'11110001'
FROM generate_series(1, 200) g`, planQueue); err != nil {
		t.Fatal(err)
	}
	// (Its plan on the lying statistics is not run here: it is the
	// quadratic one, 1.3 s for these 200 jobs alone and past the explain's
	// 20 s timeout on a loaded machine; docs/forwarding-queue.md has the figures.)
	if ok, err := NewJobs(pool).AnalyzeJobsOnce(ctx); err != nil || !ok {
		t.Fatalf("AnalyzeJobsOnce = %v, %v", ok, err)
	}
	checkPlans(t, conn, planRows, "", sched.sql, sched.args...)
}

// runTracedRiver runs a River client working forwards on pool's database
// (through a pool of its own, traced) until it has sent each of
// riverJobStatements at least once, and stops it (hookgate's scheduling of
// the forwards off: River's statements alone): forwards inserted
// through River, the fixtures' available ones fetched, snoozed and
// completed (loadWorker), River's maintenance run once at start. It
// returns what River sent.
func runTracedRiver(t *testing.T, pool *pgxpool.Pool) *riverTrace {
	t.Helper()
	ctx := t.Context()
	trace := &riverTrace{}
	pc := pool.Config().Copy()
	pc.ConnConfig.Tracer = trace
	pc.MaxConns = 10
	tpool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		t.Fatal(err)
	}
	defer tpool.Close()
	// River alone: hookgate's scheduling would analyze the table (its
	// statistics were reset), and its statements are
	// TestQueuePlansWhenStatisticsLie's.
	r, _ := riverAlone(t, tpool, &loadWorker{}, 10)
	defer startRiver(t, r)()
	var forwards []NewForward
	for i := range 20 {
		forwards = append(forwards, NewForward{Sender: "acme", Target: "t", EventID: uuid.New(), DeliveryID: "traced-" + string(rune('a'+i))})
	}
	if err := pgx.BeginFunc(ctx, tpool, func(tx pgx.Tx) error {
		_, err := r.Enqueue(ctx, tx, forwards)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(waitFor)
	for {
		got := trace.statements()
		var missing []string
		for name := range riverJobStatements {
			if _, ok := got[name]; !ok {
				missing = append(missing, name)
			}
		}
		if len(missing) == 0 {
			return trace
		}
		if time.Now().After(deadline) {
			t.Fatalf("River did not run %v within %s", missing, waitFor)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// batchOf returns the batch of one of River's statements run per job: the
// longest array among args, or the largest integer (a limit), at least 1.
func batchOf(args []any) int {
	n := 1
	for _, a := range args {
		switch v := a.(type) {
		case int:
			n = max(n, v)
		case int32:
			n = max(n, int(v))
		case int64:
			n = max(n, int(v))
		default:
			if l := lenOf(v); l > n {
				n = l
			}
		}
	}
	return n
}

// lenOf returns the length of v when it is an array of values (a slice,
// not of bytes), 0 otherwise.
func lenOf(v any) int {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Slice || rv.Type().Elem().Kind() == reflect.Uint8 {
		return 0
	}
	return rv.Len()
}
