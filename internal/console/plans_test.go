package console_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/console"
	"github.com/hookgate/hookgate/internal/forward"
	"github.com/hookgate/hookgate/internal/queue"
	"github.com/hookgate/hookgate/internal/store"
	"github.com/hookgate/hookgate/internal/testing/pgtest"
	"github.com/hookgate/hookgate/internal/testing/queuetest"
	"github.com/hookgate/hookgate/internal/testing/storetest"
)

// The plans of what /metrics and the console's overview read (issue 43):
// every scrape of every process, and every view of the overview, runs
// them, so their cost must not grow with the history the tables keep
// (River keeps finished jobs for the longest retention, 7 days; keys and
// the fast path's delivered forwards likewise). The statements are not
// listed here: the test records whatever the overview and the backlog
// collector send (pgtest.Recorder) and examines the plan of each.

// historyRows is how many finished forward jobs each sender has in the
// fixtures (and delivered first attempts, and keys older than a day);
// the statements read at most historyRows / 8 rows of a table.
const historyRows = 20000

// plansYAML: two senders with the same three targets.
const plansYAML = `
senders:
  - name: acme
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    forward:
      - { name: t0, url: "http://127.0.0.1:9/acme/t0" }
      - { name: t1, url: "http://127.0.0.1:9/acme/t1" }
      - { name: t2, url: "http://127.0.0.1:9/acme/t2" }
  - name: beta
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    forward:
      - { name: t0, url: "http://127.0.0.1:9/beta/t0" }
      - { name: t1, url: "http://127.0.0.1:9/beta/t1" }
      - { name: t2, url: "http://127.0.0.1:9/beta/t2" }
`

// plansSeedSQL puts one row in each table the overview and the metric
// read, of a sender the configuration does not name: what ANALYZE sees
// when the statistics are to lie (the tables grow after it).
var plansSeedSQL = []string{
	`INSERT INTO river_job (kind, args, queue, state, attempt, max_attempts, attempted_at, finalized_at)
VALUES ('` + queue.ForwardKind + `', '{"sender": "seed", "target": "t0", "event_id": "x", "delivery_id": "seed"}', '` + queue.ForwardQueue + `', 'completed', 1, 5, now(), now())`,
	`INSERT INTO forward_delivered (sender, event_id, target, delivery_id, created_at, attempted_at, delivered_at, status, max_attempts)
VALUES ('seed', 'x', 't0', 'seed', now(), now(), now(), 200, 5)`,
	`INSERT INTO processed_messages (sender, delivery_id, request_sha256, event_id, response_status, response_content_type, response_body, created_at, expires_at)
VALUES ('seed', 'seed', '\x00', gen_random_uuid(), 202, 'application/json', '{}', now(), now() + interval '7 days')`,
	`INSERT INTO traffic_minutes (sender, target, kind, minute, n, sum_ms) VALUES ('seed', '', 'accepted', date_trunc('minute', now()), 1, 0)`,
	`INSERT INTO traffic_hours (sender, target, kind, hour, n, sum_ms) VALUES ('seed', '', 'accepted', date_trunc('hour', now()), 1, 0)`,
}

// plansFillSQL fills the tables, for the senders acme and beta ($1), with
// historyRows ($2, where a statement takes it) forwards each: jobs g of the targets t(g % 3),
// delivered (completed) and every 100th failed (discarded), every 1,000th
// then redelivered and delivered (a newer job: the failure no longer
// counts); 120 unfinished jobs u, six kinds of 20 by u % 6, so that each
// target has two (fixtureCounts); otherFailed failed jobs of a sender
// the configuration does not name, which no count of acme's or beta's may
// visit; acmeFailed more failed jobs of acme, over the last 7 days, which
// its counts may not visit one by one either; 7 outbox rows of acme's t0;
// the fast path's delivered first attempts; 48 hours of traffic counts.
var plansFillSQL = []string{
	`INSERT INTO river_job (kind, args, queue, state, attempt, max_attempts, scheduled_at, attempted_at, finalized_at, errors)
SELECT '` + queue.ForwardKind + `', jsonb_build_object('sender', s, 'target', 't' || (g % 3), 'event_id', 'e' || g, 'delivery_id', 'h' || g), '` + queue.ForwardQueue + `',
  x.state, x.attempt, 5, at, at, at, CASE WHEN x.state = 'discarded' THEN ARRAY['{"at": "2026-01-01T00:00:00Z", "attempt": 5, "error": "target answered 503"}'::jsonb] END
FROM unnest($1::text[]) s, generate_series(1, $2::int) g,
  LATERAL (SELECT now() - interval '7 days' + g * interval '20 seconds' AS at,
    (CASE WHEN g % 100 = 0 THEN 'discarded' ELSE 'completed' END)::river_job_state AS state, CASE WHEN g % 100 = 0 THEN 5 ELSE 1 END AS attempt) x
ORDER BY g, s`,
	`INSERT INTO river_job (kind, args, queue, state, attempt, max_attempts, scheduled_at, attempted_at, finalized_at)
SELECT '` + queue.ForwardKind + `', jsonb_build_object('sender', s, 'target', 't' || (g % 3), 'event_id', 'e' || g, 'delivery_id', 'h' || g), '` + queue.ForwardQueue + `',
  'completed', 1, 5, now(), now(), now()
FROM unnest($1::text[]) s, generate_series(1000, $2::int, 1000) g`,
	`INSERT INTO river_job (kind, args, queue, state, attempt, max_attempts, scheduled_at, attempted_at, errors, attempted_by)
SELECT '` + queue.ForwardKind + `', jsonb_build_object('sender', s, 'target', 't' || (u % 3), 'event_id', 'u' || u, 'delivery_id', 'u' || u), '` + queue.ForwardQueue + `',
  x.state, x.attempt, 5, CASE WHEN x.state IN ('scheduled', 'retryable') THEN now() + interval '1 hour' ELSE now() END,
  CASE WHEN x.attempt > 0 THEN now() END,
  CASE WHEN u % 6 IN (2, 3) THEN ARRAY['{"at": "2026-01-01T00:00:00Z", "attempt": 1, "error": "target answered 503"}'::jsonb] END,
  CASE WHEN x.state = 'running' THEN ARRAY['hookgate:plans'] END
FROM unnest($1::text[]) s, generate_series(1, 120) u,
  LATERAL (SELECT (ARRAY['available', 'scheduled', 'retryable', 'available', 'running', 'pending'])[u % 6 + 1]::river_job_state AS state,
    CASE WHEN u % 6 IN (2, 3, 4) THEN 1 ELSE 0 END AS attempt) x`,
	`INSERT INTO river_job (kind, args, queue, state, attempt, max_attempts, scheduled_at, attempted_at, finalized_at, errors)
SELECT '` + queue.ForwardKind + `', jsonb_build_object('sender', 'other', 'target', 't' || (g % 3), 'event_id', 'o' || g, 'delivery_id', 'o' || g), '` + queue.ForwardQueue + `',
  'discarded', 5, 5, now(), now(), now(), ARRAY['{"at": "2026-01-01T00:00:00Z", "attempt": 5, "error": "target answered 503"}'::jsonb]
FROM generate_series(1, ` + strconv.Itoa(otherFailed) + `) g`,
	`INSERT INTO river_job (kind, args, queue, state, attempt, max_attempts, scheduled_at, attempted_at, finalized_at, errors)
SELECT '` + queue.ForwardKind + `', jsonb_build_object('sender', 'acme', 'target', 't' || (g % 3), 'event_id', 'x' || g, 'delivery_id', 'x' || g), '` + queue.ForwardQueue + `',
  'discarded', 5, 5, at, at, at, ARRAY['{"at": "2026-01-01T00:00:00Z", "attempt": 5, "error": "target answered 503"}'::jsonb]
FROM generate_series(1, ` + strconv.Itoa(acmeFailed) + `) g, LATERAL (SELECT now() - g * interval '1 minute' AS at) x`,
	`INSERT INTO forward_outbox (sender, event_id, target, delivery_id, created_at)
SELECT 'acme', gen_random_uuid(), 't0', 'o' || g, now() FROM generate_series(1, 7) g`,
	`INSERT INTO forward_delivered (sender, event_id, target, delivery_id, created_at, attempted_at, delivered_at, status, max_attempts)
SELECT s, 'f' || g, 't' || (g % 3), 'f' || g, at, at, at, 204, 5
FROM unnest($1::text[]) s, generate_series(1, $2::int) g, LATERAL (SELECT now() - interval '7 days' + g * interval '20 seconds' AS at) x`,
	`INSERT INTO traffic_minutes (sender, target, kind, minute, n, sum_ms)
SELECT s, t.target, t.kind, date_trunc('minute', now()) - m * interval '1 minute', 10, 100
FROM unnest($1::text[]) s, (VALUES ('', 'accepted'), ('t0', 'delivered'), ('t1', 'delivered'), ('t2', 'failed')) t(target, kind),
  generate_series(0, 48 * 60 - 1) m`,
	`INSERT INTO traffic_hours (sender, target, kind, hour, n, sum_ms)
SELECT s, t.target, t.kind, date_trunc('hour', now()) - h * interval '1 hour', 600, 6000
FROM unnest($1::text[]) s, (VALUES ('', 'accepted'), ('t0', 'delivered'), ('t1', 'delivered'), ('t2', 'failed')) t(target, kind),
  generate_series(0, 47) h`,
}

// otherFailed is how many failed forwards another sender has in the
// fixtures: more than plansMaxVisited, so that a count of one sender's
// forwards that reads every sender's failed ones (River's index on job
// state) fails the test.
const otherFailed = plansMaxVisited * 2

// acmeFailed is how many more failed forwards acme has in the fixtures (a
// minute apart, a week's worth): four times plansMaxVisited, so that a
// count that reads a sender's failed forwards one by one fails the test
// (the counts before migration 23: about 10 µs each, 100 ms for 10,000).
const acmeFailed = plansMaxVisited * 4

// fixtureCounts are the overview's counts of each target of each sender
// in the fixtures: pending (waiting without a failed attempt, and the
// outbox), running, retrying, failed.
func fixtureCounts(sender, target string) [4]int {
	var c [4]int
	switch target {
	case "t0": // u % 6 = 0 (available) and 3 (available after a failed attempt)
		c[0], c[2] = 20, 20
		if sender == "acme" {
			c[0] += 7 // the outbox
		}
	case "t1": // 1 (scheduled) and 4 (running)
		c[0], c[1] = 20, 20
	case "t2": // 2 (retryable) and 5 (pending)
		c[0], c[2] = 20, 20
	}
	for g := 100; g <= historyRows; g += 100 {
		if "t"+strconv.Itoa(g%3) == target && g%1000 != 0 {
			c[3]++
		}
	}
	if sender == "acme" {
		for g := 1; g <= acmeFailed; g++ {
			if "t"+strconv.Itoa(g%3) == target {
				c[3]++
			}
		}
	}
	return c
}

// fixtureBacklog is hookgate_forward_backlog of the fixtures, by state.
var fixtureBacklog = map[string]float64{"outbox": 7, "available": 80, "scheduled": 40, "retryable": 40, "running": 40, "pending": 40}

// fakedRows is how many rows the planner is told each history table
// holds when the statistics are faked: 10 million finished jobs.
const fakedRows = 10_000_000

// plansScanTables are the tables whose rows come with traffic and history
// (kept for days): no statement of the overview or the metric may read
// one with a sequential scan, or visit more than plansMaxVisited of its
// rows. The others (target_breakers, a row per target; the console's
// session revocations and sign-out) hold what the configuration and the
// operators make.
var plansScanTables = map[string]bool{
	"river_job": true, "forward_delivered": true, "forward_outbox": true, "processed_messages": true, "webhook_events": true,
	"delivery_hour_counts": true, "traffic_minutes": true, "traffic_hours": true, "forward_failed_counts": true,
}

// plansMaxVisited bounds the rows a statement's scan of one of
// plansScanTables visits: about what the overview shows (the unfinished
// and failed forwards of both senders, a day of deliveries, an hour of
// traffic minutes), an eighth of one sender's history.
const plansMaxVisited = historyRows / 8

// TestOverviewAndMetricsPlans: with the statistics of 10 million finished
// jobs (faked: the planner is told the tables hold that many rows, with
// the distribution of the fixtures' history), and with statistics that
// say the tables hold one row while they hold the history, every
// statement the console's overview and hookgate_forward_backlog's
// collector send reads the tables through indexes, in the plan for its
// arguments and in the generic plan alike: no sequential scan of a table
// that keeps history, no scan that visits more than about what the page
// shows (a sender's counts do not read the failed forwards of a sender the
// page does not show, otherFailed, nor its own one by one, acmeFailed:
// they read its kept counts), no scan run once per row of another
// unless it is an index probe, no JIT. The overview's counts and the metric's are those of the
// fixtures. The plans' times are logged, not checked (the machine is
// shared); docs/console.md gives the figures of 10 million real jobs.
func TestOverviewAndMetricsPlans(t *testing.T) {
	t.Parallel()
	pgtest.PlanVariants(t, "10 million finished jobs", "grown after ANALYZE", testOverviewAndMetricsPlans)
}

func testOverviewAndMetricsPlans(t *testing.T, faked bool) {
	pool, dsn := pgtest.NewDB(t)
	ctx := t.Context()
	fillPlanFixtures(t, pool, faked)

	// The overview and the collector on a pool whose statements are
	// recorded.
	rec := &pgtest.Recorder{}
	pc, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	pc.ConnConfig.Tracer = rec
	traced, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(traced.Close)
	cfg, err := config.Parse([]byte(plansYAML), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	cons, err := console.New(console.Config{Senders: cfg, Queries: store.New(traced), Forwards: queue.NewJobs(traced), Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		AdminToken: token, SessionTTL: console.DefaultSessionTTL})
	if err != nil {
		t.Fatal(err)
	}
	r := chi.NewRouter()
	r.Mount(console.Prefix, cons)
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	e := &env{t: t, url: srv.URL}
	c := e.client()
	e.signIn(c) // and views the overview once
	if err := storetest.ForgetHourCounts(ctx, pool, ""); err != nil {
		t.Fatal(err)
	}
	rec.Reset()
	// The first view counts the day's closed hours of deliveries again and
	// keeps them; the second reads them.
	for range 2 {
		p := e.do(c, http.MethodGet, "/console/", nil, nil)
		if p.status != http.StatusOK {
			t.Fatalf("overview: %d %.500s", p.status, p.body)
		}
		checkOverviewCounts(t, p.body)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(forward.NewBacklogCollector(queue.NewJobs(traced), func() []string { return []string{"acme", "beta"} }))
	checkBacklog(t, reg)
	// Every process flushes its traffic counts about once a second, and
	// forgets the minutes and hours past the retention.
	now := time.Now()
	if err := store.New(traced).AddTraffic(ctx, []store.TrafficDelta{
		{Sender: "acme", Kind: store.TrafficAccepted, Minute: now, N: 3},
		{Sender: "acme", Target: "t0", Kind: store.TrafficDelivered, Minute: now, N: 2, SumMS: 4, Hist: make([]int64, store.LatencyBuckets)},
	}, now); err != nil {
		t.Fatal(err)
	}

	explainConn := pgtest.PlanConn(t, pool)
	statements := rec.Statements()
	if len(statements) < 8 {
		t.Fatalf("recorded %d statements of the overview and the metric, want the deliveries', the traffic's, the breakers', the forwards' and the backlog's: %v", len(statements), statements)
	}
	for _, s := range statements {
		for _, mode := range pgtest.PlanCacheModes {
			ex := pgtest.ExplainAnalyze(t, explainConn, s.Settings, mode, s.SQL, s.Args...)
			if p := pgtest.PlanProblems(ex, overviewLimits); len(p) > 0 {
				t.Errorf("%s\n%s: %s\n%s", s.SQL, mode, strings.Join(p, "; "), ex.Text)
			}
			t.Logf("%.60q %s (%.2f ms): %s", s.SQL, mode, ex.Time, ex.Plan.Shape())
		}
	}
}

// fillPlanFixtures fills the tables of pool's database (plansFillSQL) and
// makes their statistics lie: faked, ANALYZE sees the rows and the planner
// is then told each table of history holds fakedRows (its indexes as
// many); otherwise ANALYZE sees one row a table (plansSeedSQL) before the
// rows arrive. Either way the activity counters are then reset (as a
// crash resets them), so that autovacuum does not ANALYZE while the test
// runs.
func fillPlanFixtures(t *testing.T, pool *pgxpool.Pool, faked bool) {
	t.Helper()
	ctx := t.Context()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	const analyze = `ANALYZE river_job, forward_delivered, forward_outbox, processed_messages, traffic_minutes, traffic_hours`
	if !faked {
		for _, s := range plansSeedSQL {
			exec(s)
		}
		exec(analyze)
	}
	senders := []string{"acme", "beta"}
	for _, s := range plansFillSQL {
		if strings.Contains(s, "$2") {
			exec(s, senders, historyRows)
		} else if strings.Contains(s, "$1") {
			exec(s, senders)
		} else {
			exec(s)
		}
	}
	// The failures the redeliveries followed are marked superseded (as a
	// redelivery marks them), and the failures folded into their counts
	// (as the working processes fold them every second).
	if err := queuetest.New(conn).MarkSuperseded(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, err := queue.NewJobs(conn).FoldFailedForwards(ctx, 100_000, time.Time{}); err != nil {
		t.Fatal(err)
	}
	q := store.New(conn)
	for _, sender := range senders {
		// Keys older than a day, and a day's.
		for _, g := range []storetest.Generated{
			{Sender: sender, Prefix: "old", N: historyRows, Newest: time.Now().Add(-26 * time.Hour), Step: 10 * time.Second},
			{Sender: sender, Prefix: "new", N: 300, Newest: time.Now().Add(-2 * time.Minute), Step: 4 * time.Minute},
		} {
			g.ExpiresAt, g.Status, g.Keys = time.Now().Add(7*24*time.Hour), http.StatusAccepted, true
			if _, err := storetest.InsertGenerated(ctx, q.DB(), g); err != nil {
				t.Fatal(err)
			}
		}
	}
	if faked {
		exec(analyze)
		// The planner takes a table's rows as reltuples / relpages × its
		// pages now: with relpages as ANALYZE left it, reltuples is the
		// count it plans with.
		exec(`UPDATE pg_class c SET reltuples = $1 * c.reltuples / t.reltuples
FROM pg_class t LEFT JOIN pg_index i ON i.indrelid = t.oid
WHERE t.relname = ANY($2::text[]) AND t.relnamespace = 'public'::regnamespace AND c.oid IN (t.oid, i.indexrelid) AND t.reltuples > 0`,
			fakedRows, []string{"river_job", "forward_delivered", "processed_messages"})
	}
	exec(`SELECT pg_stat_force_next_flush()`)
	exec(`SELECT 1`)
	exec(`SELECT pg_stat_reset()`)
}

// overviewLimits are what a plan of the overview or the metric may do
// (TestOverviewAndMetricsPlans): no sequential scan of plansScanTables,
// nor a scan of one that visits more than plansMaxVisited rows.
var overviewLimits = pgtest.PlanLimits{
	MaxVisited: func(table string) float64 {
		if plansScanTables[table] {
			return plansMaxVisited
		}
		return -1
	},
	Indexed: func(table string) bool { return plansScanTables[table] },
}

// targetRow is a target's row of the overview: name, pending, running,
// retrying, failed.
var targetRow = regexp.MustCompile(`(?s)<span class="name">([^<]+)</span>.*?<td class="num">(\d+)</td><td class="num">(\d+)</td><td class="num">(\d+)</td>\s*<td class="num"><a [^>]*>(\d+)</a>`)

// checkOverviewCounts checks the target counts of the overview page body
// against the fixtures'.
func checkOverviewCounts(t *testing.T, body string) {
	t.Helper()
	sections := strings.Split(body, `<section class="sender" id=`)
	if len(sections) != 3 {
		t.Fatalf("the overview shows %d senders, want acme and beta", len(sections)-1)
	}
	for i, sender := range []string{"acme", "beta"} {
		rows := targetRow.FindAllStringSubmatch(sections[i+1], -1)
		if len(rows) != 3 {
			t.Fatalf("%s: %d target rows, want 3", sender, len(rows))
		}
		for _, m := range rows {
			var got [4]int
			for j := range got {
				got[j], _ = strconv.Atoi(m[j+2])
			}
			if want := fixtureCounts(sender, m[1]); got != want {
				t.Errorf("%s/%s: pending, running, retrying, failed %v, want %v", sender, m[1], got, want)
			}
		}
	}
}

// checkBacklog checks hookgate_forward_backlog on reg against the
// fixtures'.
func checkBacklog(t *testing.T, reg *prometheus.Registry) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case "hookgate_forward_backlog":
				got[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
			case "hookgate_forward_backlog_up":
				got["up"] = m.GetGauge().GetValue()
			}
		}
	}
	want := map[string]float64{"up": 1}
	for s, n := range fixtureBacklog {
		want[s] = n
	}
	for s, n := range want {
		if got[s] != n {
			t.Errorf("hookgate_forward_backlog{state=%q} = %v, want %v (all: %v)", s, got[s], n, got)
		}
	}
}
