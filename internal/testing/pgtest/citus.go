package pgtest

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/migrations"
)

// EnvCitus names the environment variable that says the tests run on
// Citus. `make test-citus` sets it. HOOKGATE_TEST_DATABASE_URL is then the
// URL of a Citus coordinator's administrative database, with the citus
// extension and the workers added. NewDB then creates each test's database
// on the coordinator and on every worker, and distributes hookgate's tables
// by sender.
const EnvCitus = "HOOKGATE_TEST_CITUS"

// Citus reports whether the tests run on Citus.
func Citus() bool { return os.Getenv(EnvCitus) != "" }

// SkipOnCitus skips the test, giving why, when the tests run on Citus. It
// serves what Citus documents as unsupported, and tests of PostgreSQL
// alone, such as a plan shape or a private server.
func SkipOnCitus(t testing.TB, why string) {
	t.Helper()
	if Citus() {
		t.Skip("not on Citus: " + why)
	}
}

// LockWaitersSQL is a query of the number of sessions of the current
// database that wait on a lock. On Citus it counts the waits on the
// workers, where a statement on a distributed table waits.
func LockWaitersSQL() string {
	if Citus() {
		return `SELECT count(*) FROM citus_lock_waits`
	}
	return `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`
}

// DeadlocksSQL returns the query of how many deadlocks PostgreSQL has
// detected in the test's database: on Citus, the coordinator's and the
// workers', where the rows of the distributed tables are locked.
func DeadlocksSQL() string {
	const here = `SELECT pg_stat_get_db_deadlocks(oid) FROM pg_database WHERE datname = current_database()`
	if Citus() {
		return `SELECT (` + here + `) + (SELECT coalesce(sum(result::bigint), 0)::bigint FROM run_command_on_workers($$` + here + `$$))`
	}
	return here
}

// testShardCount is the shard count of the tests' distributed tables. It
// is small, so a test's database is distributed quickly.
const testShardCount = 4

// nodeURL returns admin pointed at the database name of the node host:port.
func nodeURL(admin, host string, port int, name string) (string, error) {
	u, err := url.Parse(admin)
	if err != nil {
		return "", fmt.Errorf("parse %s: %w", EnvURL, err)
	}
	u.Host = net.JoinHostPort(host, strconv.Itoa(port))
	u.Path = "/" + name
	u.RawPath = ""
	return u.String(), nil
}

// citusWorkers returns the host and port of the workers registered on the
// coordinator's administrative database.
func citusWorkers(ctx context.Context, admin string) ([][2]string, error) {
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `SELECT nodename, nodeport::text FROM pg_dist_node
WHERE groupid <> 0 AND noderole = 'primary' AND isactive ORDER BY nodeid`)
	if err != nil {
		return nil, fmt.Errorf("list citus workers (is %s a Citus coordinator's database with the citus extension?): %w", EnvURL, err)
	}
	ws, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([2]string, error) {
		var w [2]string
		return w, r.Scan(&w[0], &w[1])
	})
	if err != nil {
		return nil, fmt.Errorf("list citus workers: %w", err)
	}
	if len(ws) == 0 {
		return nil, fmt.Errorf("no citus workers registered in %s (citus_add_node)", EnvURL)
	}
	return ws, nil
}

// CitusWorkerHosts returns the workers of the Citus cluster that the tests
// run on, each "host:port" as pg_dist_node names it. A gateway gets this
// list to send its ingest calls there. It fails t when the workers cannot
// be read.
func CitusWorkerHosts(t testing.TB) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	ws, err := citusWorkers(ctx, URL(t))
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	hosts := make([]string, len(ws))
	for i, w := range ws {
		hosts[i] = net.JoinHostPort(w[0], w[1])
	}
	return hosts
}

// distribute makes the database name a Citus database. It creates the
// same database with the citus extension on every worker, adds the workers
// and distributes the tables. It registers the drop of the workers'
// databases with t.
func distribute(ctx context.Context, t testing.TB, admin, dsn, name string) error {
	workers, err := citusWorkers(ctx, admin)
	if err != nil {
		return err
	}
	coord, err := url.Parse(admin)
	if err != nil {
		return fmt.Errorf("parse %s: %w", EnvURL, err)
	}
	var stmts []string
	host, port := coord.Hostname(), coord.Port()
	if port == "" {
		port = "5432"
	}
	// The extension is created in each test's database, not in the
	// template. Citus records its database as a distributed object, and a
	// copy would carry that to workers that do not have the template.
	stmts = append(stmts, "CREATE EXTENSION citus",
		fmt.Sprintf("SELECT citus_set_coordinator_host(%s, %s)", quote(host), port))
	for _, w := range workers {
		p, _ := strconv.Atoi(w[1])
		wadmin, err := nodeURL(admin, w[0], p, adminDB(coord))
		if err != nil {
			return err
		}
		wdsn, err := nodeURL(admin, w[0], p, name)
		if err != nil {
			return err
		}
		if err := adminExec(ctx, wadmin, "CREATE DATABASE "+ident(name)); err != nil {
			return fmt.Errorf("create database %s on worker %s:%d: %w", name, w[0], p, err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
			defer cancel()
			if err := dropDatabase(ctx, wadmin, name); err != nil {
				t.Errorf("pgtest: drop database %s on worker %s:%d: %v", name, w[0], p, err)
			}
		})
		if err := adminExec(ctx, wdsn, "CREATE EXTENSION citus"); err != nil {
			return fmt.Errorf("create extension citus on worker %s:%d: %w", w[0], p, err)
		}
		stmts = append(stmts, fmt.Sprintf("SELECT citus_add_node(%s, %d)", quote(w[0]), p))
	}
	// docs/distributed.md asks for this setting. Without it, SET LOCAL
	// lock_timeout does not reach the workers.
	stmts = append(stmts, "ALTER DATABASE "+ident(name)+" SET citus.propagate_set_commands = 'local'",
		"SET citus.shard_count = "+strconv.Itoa(testShardCount), migrations.CitusDDL)
	// Citus fails one of two node additions that run at once on a worker.
	// So one test database at a time adds its nodes, across the test
	// processes, under an advisory lock.
	lock, err := pgx.Connect(ctx, admin)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer lock.Close(context.Background())
	if _, err := lock.Exec(ctx, "SELECT pg_advisory_lock(hashtext('hookgate pgtest citus'))"); err != nil {
		return fmt.Errorf("lock the set-up of citus test databases: %w", err)
	}
	if err := adminExec(ctx, dsn, stmts...); err != nil {
		return fmt.Errorf("distribute %s: %w", name, err)
	}
	return nil
}

// adminDB is the database name of the administrative URL u.
func adminDB(u *url.URL) string {
	if n := u.Path; len(n) > 1 {
		return n[1:]
	}
	return "postgres"
}

// quote quotes s as an SQL string literal.
func quote(s string) string {
	return "'" + escape(s) + "'"
}

func escape(s string) string {
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '\'' {
			out = append(out, '\'')
		}
		out = append(out, s[i])
	}
	return string(out)
}

// twoPhaseEvery is how often watchTwoPhase reads pg_dist_transaction. A
// row stays there until Citus's recovery deletes it, a minute later by
// default. So reading this often, and once at the end, sees every
// two-phase commit.
const twoPhaseEvery = 200 * time.Millisecond

// twoPhaseSQL reads the gids of the two-phase commits that Citus recorded
// on the coordinator and on each worker. A transaction that a gateway sends
// straight to a worker is coordinated there. A worker's gids are prefixed
// with its address.
const twoPhaseSQL = `SELECT gid FROM pg_dist_transaction
UNION ALL
SELECT r.nodename || ':' || r.nodeport || ' ' || g
FROM run_command_on_workers($$SELECT coalesce(string_agg(gid, ' '), '') FROM pg_dist_transaction$$) r,
  unnest(string_to_array(r.result, ' ')) g
WHERE r.success AND g <> ''`

// watchTwoPhase fails t when Citus records a two-phase commit in the
// database dsn while the test runs. Every transaction that hookgate sends
// commits on one worker. It reads pg_dist_transaction every twoPhaseEvery
// on a connection of its own. It reads once more when the test ends,
// before the database is dropped.
func watchTwoPhase(t testing.TB, dsn string) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		cancel()
		t.Fatalf("pgtest: connect to watch two-phase commits: %v", err)
	}
	// Distributing the tables committed in two phases. Those rows are
	// recovered first, so any left are not the test's.
	before := map[string]bool{}
	if _, err := conn.Exec(ctx, `SELECT recover_prepared_transactions()`); err != nil {
		cancel()
		t.Fatalf("pgtest: recover the set-up's prepared transactions: %v", err)
	}
	rows, err := conn.Query(ctx, twoPhaseSQL)
	if err == nil {
		var gids []string
		if gids, err = pgx.CollectRows(rows, pgx.RowTo[string]); err == nil {
			for _, g := range gids {
				before[g] = true
			}
		}
	}
	if err != nil {
		cancel()
		t.Fatalf("pgtest: read pg_dist_transaction: %v", err)
	}
	var (
		mu   sync.Mutex
		seen = map[string]bool{} // the gids of the rows seen
		done = make(chan struct{})
		w    = &twoPhaseWatch{}
	)
	watches.Store(cfg.Database, w)
	// A set-up of the test's own that commits in two phases runs while no
	// read does, and its rows join before.
	w.exempt = func(fn func()) {
		w.mu.Lock()
		defer w.mu.Unlock()
		fn()
		rctx, rcancel := context.WithTimeout(context.Background(), setupTimeout)
		defer rcancel()
		c, err := pgx.Connect(rctx, dsn)
		if err != nil {
			t.Fatalf("pgtest: %v", err)
		}
		defer c.Close(rctx)
		rows, err := c.Query(rctx, twoPhaseSQL)
		if err != nil {
			t.Fatalf("pgtest: read pg_dist_transaction: %v", err)
		}
		gids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatalf("pgtest: read pg_dist_transaction: %v", err)
		}
		mu.Lock()
		for _, g := range gids {
			before[g] = true
		}
		mu.Unlock()
	}
	// A read that fails, as while a test restarts the coordinator, is not
	// a finding. The next read, or the last, covers it.
	read := func(ctx context.Context, conn *pgx.Conn) {
		w.mu.RLock()
		defer w.mu.RUnlock()
		rows, err := conn.Query(ctx, twoPhaseSQL)
		if err != nil {
			return
		}
		gids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return
		}
		mu.Lock()
		for _, g := range gids {
			if !before[g] {
				seen[g] = true
			}
		}
		mu.Unlock()
	}
	go func() {
		defer close(done)
		tick := time.NewTicker(twoPhaseEvery)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				if conn.IsClosed() {
					if c, err := pgx.Connect(ctx, dsn); err == nil {
						_ = conn.Close(ctx)
						conn = c
					}
				}
				read(ctx, conn)
			}
		}
	}()
	t.Cleanup(func() {
		watches.Delete(cfg.Database)
		cancel()
		<-done
		rctx, rcancel := context.WithTimeout(context.Background(), setupTimeout)
		defer rcancel()
		_ = conn.Close(rctx)
		// The last read uses a connection of its own, since a test that
		// restarts the coordinator ends the test's connections.
		if c, err := pgx.Connect(rctx, dsn); err == nil {
			read(rctx, c)
			_ = c.Close(rctx)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(seen) > 0 {
			gids := make([]string, 0, len(seen))
			for g := range seen {
				gids = append(gids, g)
			}
			t.Errorf("pgtest: Citus committed %d transactions of this test in two phases (pg_dist_transaction: %s); every transaction hookgate sends must commit on one worker (docs/distributed.md)",
				len(gids), strings.Join(gids[:min(len(gids), 5)], ", "))
		}
	})
}

// twoPhaseWatch is a test database's watchTwoPhase. exempt runs a set-up
// that commits in two phases without the watch counting it.
type twoPhaseWatch struct {
	mu     sync.RWMutex // held by exempt, read-held by each read
	exempt func(fn func())
}

// watches holds the watch of each test database by its name.
var watches sync.Map // string -> *twoPhaseWatch

// TwoPhaseFixture runs fn, a test's own set-up that Citus commits in two
// phases, so that the watch does not count it. An ANALYZE of a distributed
// table is such a set-up, since Citus runs it on every shard. The watch
// reads nothing while fn runs, and counts what it finds after as fn's. On
// plain PostgreSQL, or a database that NewDB did not make, it just runs fn.
func TwoPhaseFixture(pool *pgxpool.Pool, fn func()) {
	w, ok := watches.Load(pool.Config().ConnConfig.Database)
	if !ok {
		fn()
		return
	}
	w.(*twoPhaseWatch).exempt(fn)
}

// Analyze runs ANALYZE of tables on pool's database, and fails t on error.
// On Citus it runs under [TwoPhaseFixture], since Citus analyzes every
// shard and commits in two phases.
func Analyze(t testing.TB, pool *pgxpool.Pool, tables ...string) {
	t.Helper()
	var err error
	TwoPhaseFixture(pool, func() {
		for _, table := range tables {
			if _, err = pool.Exec(context.Background(), "ANALYZE "+pgx.Identifier{table}.Sanitize()); err != nil {
				return
			}
		}
	})
	if err != nil {
		t.Fatalf("pgtest: analyze %v: %v", tables, err)
	}
}
