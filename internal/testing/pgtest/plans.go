package pgtest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Plan tests examine what PostgreSQL does with hookgate's statements. A
// [Recorder], as a pool's tracer, collects every statement that a page or a
// scrape sends, with its arguments and planner settings. [ExplainAnalyze]
// runs each under EXPLAIN ANALYZE.

// Statement is a statement that a Recorder saw: its SQL, its arguments and
// the planner settings it ran under. The settings are a `SELECT
// set_config(…)` sent before it in the same batch, or "".
type Statement struct {
	SQL, Settings string
	Args          []any
}

// Recorder records the statements sent on the connections it traces. Set
// it as pgx.ConnConfig.Tracer of a pool's connections. It records each
// statement once, with the arguments and settings it was first sent with.
// It leaves out transaction control and planner settings. It keeps the
// settings as those of the statements that follow in their batch. It is
// safe for concurrent use.
type Recorder struct {
	mu   sync.Mutex
	seen map[string]bool
	list []Statement
}

// Statements returns the statements recorded since the last Reset, in the
// order they were first sent.
func (r *Recorder) Statements() []Statement {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Statement(nil), r.list...)
}

// Reset forgets the statements recorded so far.
func (r *Recorder) Reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen, r.list = nil, nil
}

// isSettings reports whether sql is a statement of planner settings, like
// store.IndexOrderScans.
func isSettings(sql string) bool {
	return strings.HasPrefix(strings.TrimSpace(sql), "SELECT set_config(")
}

func (r *Recorder) add(sql, settings string, args []any) {
	switch strings.ToLower(strings.TrimSpace(sql)) {
	case "begin", "commit", "rollback":
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen[sql] {
		return
	}
	if r.seen == nil {
		r.seen = map[string]bool{}
	}
	r.seen[sql] = true
	r.list = append(r.list, Statement{SQL: sql, Settings: settings, Args: args})
}

// TraceQueryStart records a statement sent on its own.
func (r *Recorder) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if !isSettings(data.SQL) {
		r.add(data.SQL, "", data.Args)
	}
	return ctx
}

// TraceQueryEnd implements pgx.QueryTracer.
func (r *Recorder) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TraceBatchStart records the statements of a batch, each under the
// settings queued before it.
func (r *Recorder) TraceBatchStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	settings := ""
	for _, q := range data.Batch.QueuedQueries {
		if isSettings(q.SQL) {
			settings = q.SQL
			continue
		}
		r.add(q.SQL, settings, q.Arguments)
	}
	return ctx
}

// TraceBatchQuery implements pgx.BatchTracer.
func (r *Recorder) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

// TraceBatchEnd implements pgx.BatchTracer.
func (r *Recorder) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// PlanConn returns a connection of pool's of its own, closed when the test
// ends. It has a statement timeout, so a plan that walks the tables fails
// the test instead of running for minutes.
func PlanConn(t testing.TB, pool *pgxpool.Pool) *pgx.Conn {
	t.Helper()
	pc, err := pool.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	conn := pc.Hijack()
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	if _, err := conn.Exec(t.Context(), `SET statement_timeout = '20s'`); err != nil {
		t.Fatal(err)
	}
	return conn
}

// PlanNode is a node of the plan of EXPLAIN ANALYZE in JSON.
type PlanNode struct {
	NodeType         string     `json:"Node Type"`
	Relation         string     `json:"Relation Name"`
	Alias            string     `json:"Alias"`
	Index            string     `json:"Index Name"`
	IndexCond        string     `json:"Index Cond"`
	Filter           string     `json:"Filter"`
	Rows             float64    `json:"Actual Rows"`
	Loops            float64    `json:"Actual Loops"`
	RemovedByFilter  float64    `json:"Rows Removed by Filter"`
	RemovedByRecheck float64    `json:"Rows Removed by Index Recheck"`
	TotalCost        float64    `json:"Total Cost"`
	SharedHit        float64    `json:"Shared Hit Blocks"`
	SharedRead       float64    `json:"Shared Read Blocks"`
	DisabledNode     bool       `json:"Disabled"` // PostgreSQL 18 on
	Plans            []PlanNode `json:"Plans"`
}

// disableCost is what PostgreSQL before 18 adds to the cost of a path
// that a setting disables (enable_seqscan = off, …).
const disableCost = 1.0e10

// Disabled reports whether n or a node below it is a path that the
// planner's settings disabled: one PostgreSQL chose only because every
// plan left had one. Before PostgreSQL 18 such a node costs at least
// disable_cost; from 18 on EXPLAIN marks it.
func (n PlanNode) Disabled() bool {
	disabled := n.TotalCost >= disableCost
	n.Walk(func(c PlanNode) { disabled = disabled || c.DisabledNode })
	return disabled
}

// DisabledNodes returns how many paths the planner's settings disabled in
// the plan n heads: from PostgreSQL 18 on, the nodes marked; before it,
// n's total cost over disable_cost, as each disabled path adds
// disable_cost to its own cost and every cost above it. (An InitPlan's
// cost is its parent's.)
func (n PlanNode) DisabledNodes() int {
	marked := 0
	n.Walk(func(c PlanNode) {
		if c.DisabledNode {
			marked++
		}
	})
	if marked > 0 {
		return marked
	}
	return int(n.TotalCost / disableCost)
}

// Explained is the JSON output of EXPLAIN ANALYZE for one statement.
type Explained struct {
	Plan PlanNode        `json:"Plan"`
	JIT  json.RawMessage `json:"JIT"`
	Time float64         `json:"Execution Time"`
	Text string          `json:"-"` // the whole output, for messages
}

// JITCompiled reports whether PostgreSQL compiled the statement with JIT.
func (e Explained) JITCompiled() bool { return len(e.JIT) > 0 && string(e.JIT) != "null" }

// ExplainAnalyze runs EXPLAIN ANALYZE of sql with args on conn, under the
// plan_cache_mode mode. force_custom_plan gives the plan for the
// arguments. force_generic_plan gives the plan that PostgreSQL may switch
// to after five executions of a prepared statement. It runs in a
// transaction that first runs settings and is rolled back, so a statement
// that writes leaves nothing. Each argument reaches the prepared statement
// cast through text to its parameter's type. It fails the test on any
// error.
func ExplainAnalyze(t testing.TB, conn *pgx.Conn, settings, mode, sql string, args ...any) Explained {
	t.Helper()
	return explain(t, conn, "ANALYZE, BUFFERS, ", settings, mode, sql, args...)
}

// ExplainPlan is [ExplainAnalyze] without running the statement: the plan
// and its costs, for a plan whose run would take long (one without the
// index it should read).
func ExplainPlan(t testing.TB, conn *pgx.Conn, settings, mode, sql string, args ...any) Explained {
	t.Helper()
	return explain(t, conn, "", settings, mode, sql, args...)
}

// explain runs EXPLAIN with options (each followed by ", ") and FORMAT
// JSON, as ExplainAnalyze describes.
func explain(t testing.TB, conn *pgx.Conn, options, settings, mode, sql string, args ...any) Explained {
	t.Helper()
	ctx := t.Context()
	sd, err := conn.PgConn().Prepare(ctx, "", sql, nil)
	if err != nil {
		t.Fatalf("describe %s: %v", sql, err)
	}
	var types []string
	if err := conn.QueryRow(ctx, `SELECT coalesce(array_agg(format_type(o, NULL) ORDER BY i), '{}') FROM unnest($1::oid[]) WITH ORDINALITY AS u(o, i)`,
		sd.ParamOIDs).Scan(&types); err != nil {
		t.Fatal(err)
	}
	if len(types) != len(args) {
		t.Fatalf("%d arguments for %d parameters of %s", len(args), len(types), sql)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Deferred calls run last first, so this deallocates after the
	// rollback.
	defer func() { _, _ = conn.Exec(context.WithoutCancel(ctx), `DEALLOCATE hgexplained`) }()
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if settings != "" {
		if _, err := tx.Exec(ctx, settings); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tx.Exec(ctx, `SET LOCAL plan_cache_mode = `+mode); err != nil {
		t.Fatal(err)
	}
	params := make([]string, len(args))
	for i, a := range args {
		name := fmt.Sprintf("hgexplained.p%d", i+1)
		var null bool
		if err := tx.QueryRow(ctx, `SELECT $1::`+types[i]+` IS NULL, set_config($2, coalesce($1::`+types[i]+`::text, ''), true)`, a, name).Scan(&null, nil); err != nil {
			t.Fatalf("argument $%d: %v", i+1, err)
		}
		params[i] = fmt.Sprintf("current_setting('%s')::%s", name, types[i])
		if null {
			params[i] = "NULL::" + types[i]
		}
	}
	if _, err := tx.Exec(ctx, `PREPARE hgexplained(`+strings.Join(types, ", ")+`) AS `+sql); err != nil {
		t.Fatal(err)
	}
	var out string
	explain := `EXPLAIN (` + options + `FORMAT JSON) EXECUTE hgexplained`
	if len(params) > 0 {
		explain += `(` + strings.Join(params, ", ") + `)`
	}
	if err := tx.QueryRow(ctx, explain).Scan(&out); err != nil {
		t.Fatalf("%s: EXPLAIN (%s) %s: %v", mode, options, sql, err)
	}
	var ex []Explained
	if err := json.Unmarshal([]byte(out), &ex); err != nil || len(ex) != 1 {
		t.Fatalf("decode EXPLAIN's JSON: %v\n%s", err, out)
	}
	ex[0].Text = out
	return ex[0]
}

// PlanCacheModes are the plan cache modes that plan tests explain in: the
// plan for the arguments, and the generic plan. pgx prepares every
// statement, so PostgreSQL may switch to the generic plan after five runs.
var PlanCacheModes = []string{"force_custom_plan", "force_generic_plan"}

// PlanVariants runs test in two parallel subtests, named yes and no, with
// true and false. They are the two sets of statistics that a plan test
// checks its statements on. It skips on Citus, whose EXPLAIN shows the
// coordinator's plan, not the shard's.
func PlanVariants(t *testing.T, yes, no string, test func(t *testing.T, v bool)) {
	t.Helper()
	if Citus() {
		t.Skip("EXPLAIN on Citus shows the coordinator's plan, not the shard's")
	}
	for _, v := range []bool{true, false} {
		name := map[bool]string{true: yes, false: no}[v]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			test(t, v)
		})
	}
}

// ScanNodes are the node types that read a table.
var ScanNodes = map[string]bool{
	"Seq Scan": true, "Index Scan": true, "Index Only Scan": true, "Bitmap Heap Scan": true,
	"Tid Scan": true, "Tid Range Scan": true, "Sample Scan": true,
}

// Walk calls f on n and on every node below it.
func (n PlanNode) Walk(f func(PlanNode)) {
	f(n)
	for _, c := range n.Plans {
		c.Walk(f)
	}
}

// Visited is how many rows a scan node read in all its loops, counting
// those its filters removed.
func (n PlanNode) Visited() float64 {
	return (n.Rows + n.RemovedByFilter + n.RemovedByRecheck) * n.Loops
}

// Shape is the plan's tree in one line. It shows each node's type,
// relation and index, and for a scan the rows per loop × its loops. Each
// node's children are in brackets.
func (n PlanNode) Shape() string {
	s := n.NodeType
	if n.Relation != "" {
		s += " " + n.Relation
	}
	if n.Index != "" {
		s += " using " + n.Index
	}
	if ScanNodes[n.NodeType] {
		s += fmt.Sprintf(" (%.0f×%.0f)", n.Rows+n.RemovedByFilter+n.RemovedByRecheck, n.Loops)
	}
	if len(n.Plans) > 0 {
		var c []string
		for _, p := range n.Plans {
			c = append(c, p.Shape())
		}
		s += " [" + strings.Join(c, ", ") + "]"
	}
	return s
}

// probeNodes are the scans allowed in a node that runs many times, such
// as a nested loop's inner side. Each is a probe of an index, or of a row
// by its ctid.
var probeNodes = map[string]bool{"Index Scan": true, "Index Only Scan": true, "Tid Scan": true}

// PlanLimits say what a plan may do; see [PlanProblems].
type PlanLimits struct {
	// MaxVisited is the most rows that a scan of a table may visit in all
	// its loops. A negative value sets no limit.
	MaxVisited func(table string) float64
	// Indexed reports whether a table must be read through an index,
	// without a sequential scan.
	Indexed func(table string) bool
	// PagesPerRow, when positive, is the most pages that an index scan
	// may touch per row it visits, plus 10 per loop. Rows counts only
	// what the index conditions matched: an index condition on a column
	// after one that has none is checked on every entry of the range
	// (sender = $1 AND delivery_id = $2 on an index of sender, created_at,
	// delivery_id reads all the sender's entries), and only the pages
	// touched show it.
	PagesPerRow float64
}

// PlanProblems returns what is wrong with ex under limits:
//
//   - JIT compilation. A forced plan's disabled paths cost past
//     jit_above_cost, and JIT then costs tens of milliseconds.
//   - A sequential scan of a table that must be read through an index.
//   - A scan that visits more rows than its table's limit.
//   - A scan that runs more than once but is not a probe visiting at most
//     2 rows per loop.
//   - An index scan that touches more pages than PagesPerRow allows.
func PlanProblems(ex Explained, limits PlanLimits) []string {
	var problems []string
	if ex.JITCompiled() {
		problems = append(problems, "the statement is compiled by JIT")
	}
	ex.Plan.Walk(func(n PlanNode) {
		if !ScanNodes[n.NodeType] {
			return
		}
		perLoop := n.Rows + n.RemovedByFilter + n.RemovedByRecheck
		name := fmt.Sprintf("%s on %s (%s)", n.NodeType, n.Relation, n.Alias)
		if n.Index != "" {
			name += " using " + n.Index
		}
		if n.NodeType == "Seq Scan" && limits.Indexed != nil && limits.Indexed(n.Relation) {
			problems = append(problems, name+": read without an index")
		}
		if limit := limits.MaxVisited(n.Relation); limit >= 0 && n.Visited() > limit {
			problems = append(problems, fmt.Sprintf("%s visits %.0f rows (%.0f × %.0f loops), more than %.0f", name, n.Visited(), perLoop, n.Loops, limit))
		}
		if pages := n.SharedHit + n.SharedRead; limits.PagesPerRow > 0 && (n.NodeType == "Index Scan" || n.NodeType == "Index Only Scan") &&
			pages > limits.PagesPerRow*n.Visited()+10*n.Loops {
			problems = append(problems, fmt.Sprintf("%s touches %.0f pages for %.0f rows (%.0f loops), more than %.0f per row and 10 per loop", name, pages, n.Visited(), n.Loops, limits.PagesPerRow))
		}
		if n.Loops > 1 && (!probeNodes[n.NodeType] || perLoop > 2) {
			problems = append(problems, fmt.Sprintf("%s runs %.0f times, visiting %.0f rows each: not a key probe", name, n.Loops, perLoop))
		}
	})
	return problems
}
