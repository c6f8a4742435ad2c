// Package pgtest gives tests a real PostgreSQL. [NewDB] gives each test a
// fresh, migrated database on the server that `make test` starts.
// [StartCluster] gives a test a private server that it may stop and start
// again to simulate an outage.
//
// Tests never mock the database. They run with `make test`, which starts a
// throwaway server and sets HOOKGATE_TEST_DATABASE_URL and HOOKGATE_PG_BINDIR.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/migrations"
)

// EnvURL names the environment variable that holds the URL of the test
// server's administrative database. `make test` sets it.
const EnvURL = "HOOKGATE_TEST_DATABASE_URL"

// setupTimeout bounds each database operation this package performs.
const setupTimeout = 2 * time.Minute

// URL returns the URL in HOOKGATE_TEST_DATABASE_URL. It fails the test when
// the variable is unset or empty, since the tests need a real PostgreSQL.
func URL(t testing.TB) string {
	t.Helper()
	u := os.Getenv(EnvURL)
	if u == "" {
		t.Fatal(EnvURL + " is not set: run the tests with `make test`")
	}
	return u
}

// EnvTemplate names the environment variable that names the migrated
// template database shared by the test processes of one run. The first
// process that needs it creates and migrates it under an advisory lock, and
// the others copy it. `make test` sets it. Its server is new for each run,
// so the template is never older than the code. When it is unset, or on
// Citus, each test process migrates a template of its own.
const EnvTemplate = "HOOKGATE_TEST_TEMPLATE"

// templateLock is the key of the advisory lock under which a shared
// template is looked for and created.
const templateLock = 0x686f6f6b67617465 // "hookgate"

// template is the migrated database of this test process that NewDB copies.
var template struct {
	mu   sync.Mutex
	name string // "" until created
	err  error  // sticky: once creating it failed, every NewDB fails the same way
}

// dbSeq numbers the databases this process creates.
var dbSeq atomic.Int64

// Option adjusts what NewDB gives.
type Option func(*options)

type options struct {
	conns int32 // the pool's MaxConns: defaultConns unless Conns says
	// twoPhaseOK reports that the test commits in two phases on Citus on
	// purpose.
	twoPhaseOK bool
}

// AllowTwoPhaseCommit lets a test on Citus commit in two phases. Without
// it, NewDB fails the test when Citus records a two-phase commit in its
// database. It serves a test that shows that a form hookgate does not use
// would commit so.
func AllowTwoPhaseCommit() Option { return func(o *options) { o.twoPhaseOK = true } }

// Conns makes the pool that NewDB returns hold up to n connections at
// once. pgxpool's default is 4, or the number of CPUs when more.
func Conns(n int32) Option { return func(o *options) { o.conns = n } }

// defaultConns is pgxpool's default MaxConns.
func defaultConns() int32 { return int32(max(4, runtime.NumCPU())) }

// NewDB gives this test a database of its own and returns a pool connected
// to it, and its DSN. The database is a copy of a template that is migrated
// to head once per test process. When the test ends, the pool is closed
// and the database dropped WITH (FORCE).
//
// With [EnvReuse] set, the database is instead emptied and handed to a
// later NewDB of the same process. That does not happen when the test
// changed the template's schema. The pool goes with it, its sessions
// cleaned, unless the test closed it or left a connection acquired. Either
// way, no test sees another's rows, tables, sequences, statistics or
// session state.
//
// It fails the test when HOOKGATE_TEST_DATABASE_URL is unset or the server
// cannot be reached. A package whose tests call it runs them through [M].
func NewDB(t testing.TB, opts ...Option) (*pgxpool.Pool, string) {
	t.Helper()
	o := options{conns: defaultConns()}
	for _, opt := range opts {
		opt(&o)
	}
	admin := URL(t)
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()

	tpl, err := migratedTemplate(ctx, admin)
	if err != nil {
		t.Fatalf("pgtest: prepare template database: %v", err)
	}

	reuse := reuseDBs()
	var sp spare
	spareDB := false
	if reuse {
		sp, spareDB = spares.take(o.conns)
	}
	name := sp.name
	if !spareDB {
		name = fmt.Sprintf("hgt_%d_%d_%s_%s", os.Getpid(), dbSeq.Add(1), randHex(3), sanitize(t.Name(), 24))
		if reuse {
			// A database that an ended test process of this run left.
			if spareDB, err = adoptSpare(ctx, admin, tpl, name, sparePrefix); err != nil {
				t.Fatalf("pgtest: %v", err)
			}
		}
		if !spareDB {
			if err := createDatabase(ctx, admin, name, tpl); err != nil {
				t.Fatalf("pgtest: %v", err)
			}
		}
	}
	kept := false // set when the test's database was emptied for reuse
	t.Cleanup(func() {
		if kept {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
		defer cancel()
		if err := dropDatabase(ctx, admin, name); err != nil {
			t.Errorf("pgtest: drop database %s: %v", name, err)
		}
	})

	dsn, err := withDatabase(admin, name)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	if Citus() {
		if err := distribute(ctx, t, admin, dsn, name); err != nil {
			t.Fatalf("pgtest: %v", err)
		}
	}
	pool := sp.pool // handed over with the database, its sessions cleaned
	if pool == nil {
		cfg, err := pgxpool.ParseConfig(dsn)
		if err != nil {
			t.Fatalf("pgtest: %v", err)
		}
		cfg.MaxConns = o.conns
		if pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
			t.Fatalf("pgtest: connect to %s: %v", name, err)
		}
	}
	if !reuse {
		t.Cleanup(pool.Close) // runs before the drop: cleanups run last-in first-out
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		t.Fatalf("pgtest: ping %s: %v", name, err)
	}
	if Citus() && !o.twoPhaseOK {
		watchTwoPhase(t, dsn)
	}
	if spareDB && sp.pool == nil {
		if err := endOtherSessions(ctx, pool); err != nil {
			pool.Close()
			t.Fatalf("pgtest: %s: %v", name, err)
		}
	}
	if reuse {
		// The catalogs as the test gets them. The database is reused only
		// if they match once the tables the test made are dropped.
		state, err := catalogState(ctx, pool)
		if err != nil {
			pool.Close()
			t.Fatalf("pgtest: %s: %v", name, err)
		}
		// Cleanups run last-in first-out, so this runs before the drop
		// above, and after the cleanups of what the test started.
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
			defer cancel()
			kept = spares.giveBack(ctx, admin, name, state, pool)
		})
	}
	return pool, dsn
}

// M wraps the testing.M of a package whose tests use NewDB. After the
// tests, it closes the pools of the process's spare databases and leaves
// the databases to the run's other test processes. It also closes its
// connections to the administrative database, so goleak finds no
// goroutine of theirs. Use it as goleak.VerifyTestMain(pgtest.M(m)).
func M(m interface{ Run() int }) interface{ Run() int } { return mainM{m} }

type mainM struct{ m interface{ Run() int } }

func (w mainM) Run() int {
	code := w.m.Run()
	spares.leave(context.Background(), sparePrefix)
	admins.close()
	return code
}

// migratedTemplate returns the name of this process's template database,
// creating and migrating it on the first call. The template accepts no
// connections once migrated, so copying it never finds it in use.
func migratedTemplate(ctx context.Context, admin string) (string, error) {
	template.mu.Lock()
	defer template.mu.Unlock()
	if template.name != "" || template.err != nil {
		return template.name, template.err
	}
	var name string
	var err error
	if shared := os.Getenv(EnvTemplate); shared != "" && !Citus() {
		name, err = sharedTemplate(ctx, admin, shared)
	} else {
		name, err = createTemplate(ctx, admin, fmt.Sprintf("hgtpl_%d_%s", os.Getpid(), randHex(4)))
	}
	if err != nil {
		template.err = err
		return "", err
	}
	template.name = name
	return name, nil
}

// sharedTemplate returns name once it is a migrated template, creating it
// unless another process has. It holds an advisory lock meanwhile, so one
// process creates it and the others wait. A database of that name that is
// not marked a template was left half made by a process that died. It is
// dropped and made again.
func sharedTemplate(ctx context.Context, admin, name string) (string, error) {
	pool, err := admins.get(ctx, admin)
	if err != nil {
		return "", fmt.Errorf("connect: %w", err)
	}
	c, err := pool.Acquire(ctx)
	if err != nil {
		return "", fmt.Errorf("connect: %w", err)
	}
	conn := c.Conn()
	defer func() {
		// The session goes back to the pool without the lock, or not at
		// all.
		if _, err := conn.Exec(context.Background(), "SELECT pg_advisory_unlock($1)", int64(templateLock)); err != nil {
			_ = conn.Close(context.Background())
		}
		c.Release()
	}()
	// adminExec runs the statements below on this session, since the pool
	// has no other.
	ctx = context.WithValue(ctx, heldAdminConn{}, conn)
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", int64(templateLock)); err != nil {
		return "", fmt.Errorf("lock the shared template: %w", err)
	}
	var exists, done bool
	err = conn.QueryRow(ctx, "SELECT true, datistemplate FROM pg_database WHERE datname = $1", name).Scan(&exists, &done)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("look for template %s: %w", name, err)
	}
	if done {
		return name, nil
	}
	if exists {
		if err := dropDatabase(ctx, admin, name); err != nil {
			return "", fmt.Errorf("drop half-made template %s: %w", name, err)
		}
	}
	return createTemplate(ctx, admin, name)
}

// createTemplate creates the database name, migrates it and marks it a
// template that accepts no connections. The mark comes last, so a database
// marked a template is complete.
func createTemplate(ctx context.Context, admin, name string) (string, error) {
	if err := adminExec(ctx, admin, "CREATE DATABASE "+ident(name)); err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	dsn, err := withDatabase(admin, name)
	if err != nil {
		return "", err
	}
	if _, err := migrations.Up(ctx, dsn); err != nil {
		return "", fmt.Errorf("migrate %s: %w", name, err)
	}
	// Refuse new connections, then end any that linger. CREATE DATABASE
	// … TEMPLATE fails while anyone is connected to the template.
	err = adminExec(ctx, admin,
		"ALTER DATABASE "+ident(name)+" WITH ALLOW_CONNECTIONS false IS_TEMPLATE true",
		"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '"+name+"'")
	if err != nil {
		return "", fmt.Errorf("seal template %s: %w", name, err)
	}
	return name, nil
}

// dropDatabase drops name WITH (FORCE), and tries again for a while when
// it is still in use. On Citus, its maintenance daemon may connect again
// between FORCE's termination and the drop.
func dropDatabase(ctx context.Context, admin, name string) error {
	for {
		err := adminExec(ctx, admin, "DROP DATABASE IF EXISTS "+ident(name)+" WITH (FORCE)")
		var pgErr *pgconn.PgError
		if err == nil || !errors.As(err, &pgErr) || pgErr.Code != "55006" { // object_in_use
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// createDatabase copies tpl into a new database name, retrying for a while
// when the template is briefly in use.
func createDatabase(ctx context.Context, admin, name, tpl string) error {
	sql := "CREATE DATABASE " + ident(name) + " TEMPLATE " + ident(tpl)
	for {
		err := adminExec(ctx, admin, sql)
		var pgErr *pgconn.PgError
		if err == nil || !errors.As(err, &pgErr) || pgErr.Code != pgerrcode.ObjectInUse {
			if err != nil {
				return fmt.Errorf("create database %s from %s: %w", name, tpl, err)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("create database %s from %s: %w", name, tpl, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// admins holds this process's connection to the test server's
// administrative database, which every NewDB needs to copy or drop a
// database. A new session costs the server more than the statements it
// runs there. So one session serves the whole process, one statement at a
// time. M closes it.
var admins adminPool

// heldAdminConn is the context key under which a caller that holds admins'
// session passes it to adminExec.
type heldAdminConn struct{}

type adminPool struct {
	mu   sync.Mutex
	pool *pgxpool.Pool
}

// get returns the pool on dsn, opening it on first use.
func (a *adminPool) get(ctx context.Context, dsn string) (*pgxpool.Pool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.pool != nil {
		return a.pool, nil
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = 1
	if a.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return nil, err
	}
	return a.pool, nil
}

// close closes the pool. A later get opens another.
func (a *adminPool) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.pool != nil {
		a.pool.Close()
		a.pool = nil
	}
}

// adminExec runs the statements in order on one connection to admin,
// outside a transaction, since CREATE and DROP DATABASE refuse one. For
// the test server's administrative database, it uses admins' session, or
// the one that ctx holds. Otherwise it uses a short-lived connection, so no
// pool outlives the call.
func adminExec(ctx context.Context, admin string, statements ...string) error {
	var conn *pgx.Conn
	held, holds := ctx.Value(heldAdminConn{}).(*pgx.Conn)
	switch {
	case admin != os.Getenv(EnvURL):
		c, err := pgx.Connect(ctx, admin)
		if err != nil {
			return fmt.Errorf("connect: %w", err)
		}
		defer c.Close(context.Background())
		conn = c
	case holds:
		conn = held
	default:
		pool, err := admins.get(ctx, admin)
		if err != nil {
			return fmt.Errorf("connect: %w", err)
		}
		c, err := pool.Acquire(ctx)
		if err != nil {
			return fmt.Errorf("connect: %w", err)
		}
		defer c.Release()
		conn = c.Conn()
	}
	for _, s := range statements {
		if _, err := conn.Exec(ctx, s); err != nil {
			return err
		}
	}
	return nil
}

// withDatabase returns dsn, a URL or a keyword/value string, pointing at
// database name instead.
func withDatabase(dsn, name string) (string, error) {
	if !strings.Contains(dsn, "://") {
		return dsn + " dbname=" + name, nil
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return "", fmt.Errorf("parse %s: %w", EnvURL, err)
	}
	u.Path = "/" + name
	u.RawPath = ""
	return u.String(), nil
}

// ident quotes a database name as an SQL identifier.
func ident(name string) string { return pgx.Identifier{name}.Sanitize() }

// sanitize returns s lower-cased, with runs of characters other than
// [a-z0-9] turned into one '_', cut to at most n bytes. It gives a readable
// hint of the test in a database name.
func sanitize(s string, n int) string {
	var b strings.Builder
	under := false
	for _, r := range strings.ToLower(s) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
			under = false
		} else if !under {
			b.WriteByte('_')
			under = true
		}
		if b.Len() >= n {
			break
		}
	}
	return strings.Trim(b.String(), "_")
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b)
}
