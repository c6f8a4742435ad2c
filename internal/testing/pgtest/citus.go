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

// EnvCitus names the environment variable that, when set (`make
// test-citus` sets it), makes HOOKGATE_TEST_DATABASE_URL the URL of a Citus
// coordinator's administrative database (a URL, with the citus extension
// and the workers added there): NewDB then creates each test's database on
// the coordinator and on every worker, and distributes hookgate's tables by
// sender (migrations.CitusDDL).
const EnvCitus = "HOOKGATE_TEST_CITUS"

// Citus reports whether the tests run on Citus (EnvCitus).
func Citus() bool { return os.Getenv(EnvCitus) != "" }

// SkipOnCitus skips the test when the tests run on Citus, giving why: for
// what Citus documents as unsupported, or a test of PostgreSQL alone (a plan
// shape, a private server).
func SkipOnCitus(t testing.TB, why string) {
	t.Helper()
	if Citus() {
		t.Skip("not on Citus: " + why)
	}
}

// LockWaitersSQL is a query of the number of sessions of the current
// database that wait on a lock: on Citus, of the waits on the workers
// (citus_lock_waits), where a statement on a distributed table waits.
func LockWaitersSQL() string {
	if Citus() {
		return `SELECT count(*) FROM citus_lock_waits`
	}
	return `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`
}

// testShardCount is the shard count of the tests' distributed tables: few,
// so that a test's database is distributed quickly.
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

// citusWorkers returns the workers (host, port) registered on the
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

// CitusWorkerHosts returns the workers of the Citus cluster the tests run
// on, each "host:port" as pg_dist_node names it: the list a gateway is
// given to send its ingest calls there (dedup.RoutesConfig.Workers,
// --citus-worker-hosts). It fails t when the workers cannot be read.
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

// distribute makes the database name (created on the coordinator from the
// migrated template) a Citus database: the same database with the citus
// extension on every worker, the workers added, the tables distributed. It
// registers the drop of the workers' databases with t.
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
	// template: Citus records its database as a distributed object, which
	// a copy would carry to workers that do not have the template.
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
	// The setting docs/distributed.md asks for: SET LOCAL lock_timeout
	// (the in-flight wait) reaches the workers only with it.
	stmts = append(stmts, "ALTER DATABASE "+ident(name)+" SET citus.propagate_set_commands = 'local'",
		"SET citus.shard_count = "+strconv.Itoa(testShardCount), migrations.CitusDDL)
	// Citus fails one of two node additions that run at once on a worker
	// ("tuple concurrently updated"): one test database adds its nodes at
	// a time, across the test processes, under an advisory lock of the
	// administrative database.
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
// row stays there until Citus's recovery of prepared transactions deletes
// it (citus.recover_2pc_interval: a minute by default), so a read this
// often, and one at the end of the test, sees every two-phase commit.
const twoPhaseEvery = 200 * time.Millisecond

// twoPhaseSQL reads the gids of the two-phase commits Citus recorded on
// the coordinator and on each worker (a transaction a gateway sends
// straight to a worker, dedup.Routes, is coordinated there), a worker's
// prefixed with its address.
const twoPhaseSQL = `SELECT gid FROM pg_dist_transaction
UNION ALL
SELECT r.nodename || ':' || r.nodeport || ' ' || g
FROM run_command_on_workers($$SELECT coalesce(string_agg(gid, ' '), '') FROM pg_dist_transaction$$) r,
  unnest(string_to_array(r.result, ' ')) g
WHERE r.success AND g <> ''`

// watchTwoPhase fails t when Citus records a two-phase commit in the
// database dsn while the test runs: every transaction hookgate sends
// commits on one worker (docs/distributed.md), ingest, forwarding,
// recording, retention and the console's writes alike. It reads
// pg_dist_transaction (Citus's record of the transactions it committed in
// two phases) every twoPhaseEvery on a connection of its own, and once
// more when the test ends, before the database is dropped.
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
	// Distributing the tables committed in two phases: those are recovered
	// (their rows deleted) first, and any left are not the test's.
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
	// A set-up of the test's own that commits in two phases
	// (TwoPhaseFixture) runs while no read does, and its rows join before.
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
	// A read that fails (the coordinator restarting, in a test that
	// restarts it) is not a finding; the next one, or the last, reads.
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
		// The last read, on a connection of its own: the test's own may
		// have been ended (a test that restarts the coordinator).
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

// twoPhaseWatch is a test database's watchTwoPhase: exempt runs a set-up
// that commits in two phases without the watch counting it.
type twoPhaseWatch struct {
	mu     sync.RWMutex // held by exempt, read-held by each read
	exempt func(fn func())
}

// watches holds the watch of each test database by its name.
var watches sync.Map // string -> *twoPhaseWatch

// TwoPhaseFixture runs fn, a test's own set-up on pool's database that
// Citus commits in two phases (an ANALYZE of a distributed table, which
// Citus runs on every shard), so that watchTwoPhase does not count it: the
// watch reads nothing while fn runs, and takes what pg_dist_transaction
// holds after it as the set-up's. Elsewhere (PostgreSQL, a database that
// NewDB did not make) it runs fn.
func TwoPhaseFixture(pool *pgxpool.Pool, fn func()) {
	w, ok := watches.Load(pool.Config().ConnConfig.Database)
	if !ok {
		fn()
		return
	}
	w.(*twoPhaseWatch).exempt(fn)
}

// Analyze runs ANALYZE of tables on pool's database, failing t on error:
// on Citus, under TwoPhaseFixture (Citus analyzes every shard, committed
// in two phases).
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
