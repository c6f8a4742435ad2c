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

// Plan tests examine what PostgreSQL does with hookgate's statements: a
// Recorder, as a pool's tracer, collects every statement a page or a scrape
// sends, with its arguments and its planner settings, and ExplainAnalyze
// runs each under EXPLAIN (ANALYZE, FORMAT JSON).

// Statement is a statement a Recorder saw: its SQL, its arguments, and the
// planner settings it ran under (a `SELECT set_config(…)` sent before it in
// the same batch, whose implicit transaction they last; "" for none).
type Statement struct {
	SQL, Settings string
	Args          []any
}

// Recorder records the statements sent on the connections it traces (set
// it as pgx.ConnConfig.Tracer of a pool's connections): each statement
// once, with the arguments and the settings it was first sent with,
// leaving out transaction control (BEGIN, COMMIT, ROLLBACK) and planner
// settings, which it keeps as the settings of the statements that follow
// them in their batch. It is safe for concurrent use.
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

// isSettings reports whether sql is a statement of planner settings (as
// store.IndexOrderScans and its like are).
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

// TraceQueryStart records a statement sent on its own (pgx.QueryTracer).
func (r *Recorder) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if !isSettings(data.SQL) {
		r.add(data.SQL, "", data.Args)
	}
	return ctx
}

// TraceQueryEnd implements pgx.QueryTracer.
func (r *Recorder) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TraceBatchStart records the statements of a batch (pgx.BatchTracer),
// each under the settings queued before it.
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

// PlanConn returns a connection of pool's of its own (closed when the test
// ends), with a statement timeout, so that a plan that walks the tables
// fails the test instead of running for minutes.
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

// PlanNode is a node of EXPLAIN (ANALYZE, FORMAT JSON)'s plan.
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
	Plans            []PlanNode `json:"Plans"`
}

// Explained is EXPLAIN (ANALYZE, FORMAT JSON)'s output for one statement.
type Explained struct {
	Plan PlanNode        `json:"Plan"`
	JIT  json.RawMessage `json:"JIT"`
	Time float64         `json:"Execution Time"`
	Text string          `json:"-"` // the whole output, for messages
}

// JITCompiled reports whether PostgreSQL compiled the statement with JIT.
func (e Explained) JITCompiled() bool { return len(e.JIT) > 0 && string(e.JIT) != "null" }

// ExplainAnalyze EXPLAIN ANALYZEs sql with args on conn, as PostgreSQL
// plans it under plan_cache_mode mode (force_custom_plan: the plan for the
// arguments; force_generic_plan: the one PostgreSQL may switch to after
// five executions of a prepared statement, which does not see them), in a
// transaction that first runs settings (the planner settings the
// statement is sent with; "" for none) and is rolled back, so that a
// statement that writes leaves nothing. The arguments reach the prepared
// statement as parameters, each cast to its parameter's type through text (a nil one is NULL).
// It fails the test on any error.
func ExplainAnalyze(t testing.TB, conn *pgx.Conn, settings, mode, sql string, args ...any) Explained {
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
	// Deallocated after the rollback (defers run last first).
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
	explain := `EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE hgexplained`
	if len(params) > 0 {
		explain += `(` + strings.Join(params, ", ") + `)`
	}
	if err := tx.QueryRow(ctx, explain).Scan(&out); err != nil {
		t.Fatalf("%s: EXPLAIN ANALYZE %s: %v", mode, sql, err)
	}
	var ex []Explained
	if err := json.Unmarshal([]byte(out), &ex); err != nil || len(ex) != 1 {
		t.Fatalf("decode EXPLAIN's JSON: %v\n%s", err, out)
	}
	ex[0].Text = out
	return ex[0]
}

// PlanCacheModes are the plan cache modes plan tests explain in: the plan
// for the arguments, and the generic plan PostgreSQL switches to after
// five executions of a prepared statement (pgx prepares every statement).
var PlanCacheModes = []string{"force_custom_plan", "force_generic_plan"}

// PlanVariants runs test in two parallel subtests, named yes and no, with
// true and false: the two sets of statistics a plan test checks its
// statements on. It skips on Citus, whose EXPLAIN shows the coordinator's
// plan, not the shard's.
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

// Visited is how many rows a scan node read: the rows it returned and
// those its filters removed, in all its loops.
func (n PlanNode) Visited() float64 {
	return (n.Rows + n.RemovedByFilter + n.RemovedByRecheck) * n.Loops
}

// Shape is the plan's tree in one line: each node's type, relation and
// index, and for a scan the rows it visited per loop × its loops, its
// children in brackets.
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

// probeNodes are the scans a node run many times (the inner side of a
// nested loop, a correlated subplan) may be: a probe of an index, or of a
// row by its ctid.
var probeNodes = map[string]bool{"Index Scan": true, "Index Only Scan": true, "Tid Scan": true}

// PlanLimits say what a plan may do (PlanProblems).
type PlanLimits struct {
	// MaxVisited is the most rows a scan of a table may visit in all its
	// loops (rows returned + rows removed by its filters, × its loops);
	// negative for no limit.
	MaxVisited func(table string) float64
	// Indexed reports whether a table must be read through an index: no
	// sequential scan of it (nil: none must).
	Indexed func(table string) bool
}

// PlanProblems returns what is wrong with ex under limits: JIT compilation
// (a forced plan's disabled paths cost 1e10, past jit_above_cost: 50–85 ms
// per execution instead of 1–2); a sequential scan of a table that must be
// read through an index; a scan that visits more rows than its table's
// limit; a scan run more than once (a nested loop's inner side, a subplan)
// that is not a probe (of an index, or by ctid) visiting at most 2 rows per
// loop.
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
		if n.Loops > 1 && (!probeNodes[n.NodeType] || perLoop > 2) {
			problems = append(problems, fmt.Sprintf("%s runs %.0f times, visiting %.0f rows each: not a key probe", name, n.Loops, perLoop))
		}
	})
	return problems
}
