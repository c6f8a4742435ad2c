// Command hookgate is an HTTP gateway that applies idempotency keys to webhook
// deliveries.
//
//	hookgate [serve]   apply pending migrations, then serve
//	hookgate migrate   apply pending migrations and exit
//	hookgate api deliveries|delivery|event|redeliver|failed|forwards|pause|resume|senders|targets|reload
//	                   operate a running hookgate through its HTTP API
//	hookgate redeliver --sender S --target T --state failed --since 2h
//	                   forward a target's failed (or delivered) forwards
//	                   again, straight through the database
//	hookgate rules test --config hookgate.yaml --sender S --target T [FILE]
//	                   run a target's filter and transform on a body
//	hookgate config check [--config hookgate.yaml]
//	                   load the configuration as serve would, or say why not
//	hookgate sink      a forward target for trying hookgate out: prints each
//	                   forward and checks its signature (make run starts it)
//	hookgate version   print the version
//	hookgate help [CMD]
//	                   list the commands, or show one command's flags
//
// Settings come from flags or the environment, and each flag has its
// variable. `hookgate help CMD` (or `hookgate CMD --help`) prints a
// command's flags, one a line, and docs/configuration.md documents them.
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"
	// The IANA time zone database, for TZ=… on a system without one, such
	// as the FROM scratch container image.
	_ "time/tzdata"

	"github.com/google/uuid"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/handler"
	"github.com/hookgate/hookgate/internal/pgarray"
	"github.com/hookgate/hookgate/migrations"
)

// version is set at build time with -ldflags "-X main.version=…". When it
// is empty, the build info's module version or VCS revision is used.
var version = ""

func main() {
	// Event IDs take their random bits from a buffer refilled in blocks,
	// not from one getrandom call each.
	uuid.EnableRandPool()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		stop() // a second signal ends the process at once
	}()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		var ee *exitError
		if errors.As(err, &ee) {
			if ee.err != nil {
				fmt.Fprintln(os.Stderr, "hookgate:", ee.err)
			}
			os.Exit(ee.code)
		}
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "hookgate:", err)
		}
		os.Exit(1)
	}
}

// run is the whole program. args are a subcommand and its flags, and getenv
// reads the environment. run returns when the command is done, or for
// serve, once ctx is cancelled and the server has shut down.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cmd := "serve"
	if len(args) > 0 && isHelpFlag(args[0]) {
		printCommands(stdout)
		return nil
	}
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "help":
		return helpCommand(args, func(args []string) error { return run(ctx, args, getenv, stdout, stderr) }, stdout)
	case "version":
		fmt.Fprintln(stdout, "hookgate", buildVersion())
		return nil
	case "api":
		return apiCommand(ctx, args, getenv, stdout, stderr)
	case "config":
		return configCommand(args, getenv, stdout)
	case "sink":
		return runSink(ctx, args, getenv, stdout, stderr)
	case "redeliver":
		return databaseHint(redeliver(ctx, args, getenv, stdout, stderr))
	case "rules":
		return rulesCommand(args, getenv, os.Stdin, stdout, stderr)
	case "serve", "migrate":
	default:
		return &exitError{2, fmt.Errorf("unknown command %q: use %s (hookgate help lists them)", cmd, commandNames())}
	}
	s, err := parseSettings(cmd, args, getenv, stdout)
	if errors.Is(err, errHelpShown) {
		return nil
	}
	if err != nil {
		return err
	}
	log := newLogger(s.logFormat, stderr)
	if s.databaseURL == "" {
		return errors.New("DATABASE_URL is not set: give the PostgreSQL URL in DATABASE_URL or --database-url (make run starts a local database and sets it)")
	}
	if cmd == "migrate" {
		// Through serve's pool: its connect timeout and session settings.
		db, err := openDatabase(ctx, s.databaseURL)
		if err != nil {
			return err
		}
		defer db.close()
		n, err := migrations.UpDB(ctx, db.sql)
		if err != nil {
			return databaseHint(err)
		}
		log.Info("migrations applied", "count", n)
		return nil
	}
	return databaseHint(serve(ctx, s, log))
}

// netHTTPMaxHeaderBytes returns the [http.Server].MaxHeaderBytes that
// bounds a request's line and headers at n bytes. net/http reads up to
// MaxHeaderBytes + 4096 bytes before answering 431.
func netHTTPMaxHeaderBytes(n int) int {
	const slack = 4096 // net/http's bufio allowance over MaxHeaderBytes
	return max(n-slack, 1)
}

// serveMetrics serves metrics at /metrics on addr until ctx is done. Any
// other path there is 404.
func serveMetrics(ctx context.Context, g *errgroup.Group, addr string, metrics http.Handler, log *slog.Logger) error {
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("metrics listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metrics)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute, WriteTimeout: time.Minute}
	log.Info("metrics listening", "addr", ln.Addr().String())
	g.Go(func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("metrics: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		<-ctx.Done()
		return srv.Close()
	})
	return nil
}

// servePprof serves net/http/pprof on addr until ctx is done.
func servePprof(ctx context.Context, g *errgroup.Group, addr string, log *slog.Logger) error {
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("pprof listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	log.Info("profiler listening", "addr", ln.Addr().String())
	g.Go(func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("pprof: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		<-ctx.Done()
		return srv.Close()
	})
	return nil
}

// defaultMaxConnIdleTime is how long a pooled connection may stay idle
// before it is closed, unless the URL sets pool_max_conn_idle_time. pgx's
// own default is 30 minutes.
const defaultMaxConnIdleTime = time.Minute

// checkExampleSecrets refuses a configuration that uses a secret of
// hookgate.example.yaml: anyone can read it and sign requests. With
// HOOKGATE_ALLOW_EXAMPLE_SECRETS=1, as make run sets, it logs a warning
// instead.
func checkExampleSecrets(cfg *config.Config, s *settings, log *slog.Logger) error {
	fields := cfg.ExampleSecrets()
	if len(fields) == 0 {
		return nil
	}
	if !s.allowExampleSecrets {
		return fmt.Errorf("%s: %s use the secret published in hookgate.example.yaml, which anyone can read and sign requests with; "+
			"set secrets of your own (e.g. secret: ${GITHUB_WEBHOOK_SECRET}), or set %s=1 to start anyway for a local trial (make run does)",
			s.configPath, strings.Join(fields, ", "), config.ExampleSecretsEnv)
	}
	log.Warn("INSECURE: the configuration uses a secret published in hookgate.example.yaml; anyone can sign requests for these senders. Use it for a local trial only.",
		"fields", fields, "config", s.configPath)
	return nil
}

// defaultConnectTimeout bounds each connection attempt to a host, unless
// the URL sets connect_timeout or the environment PGCONNECT_TIMEOUT.
// pgx's own default is none: a host that takes the TCP connection and
// never answers (a frozen server, a proxy whose backend is gone) held
// hookgate's start, and every new connection, for as long as it lasted.
// With several hosts in the URL, each gets its own.
const defaultConnectTimeout = 5 * time.Second

// idleInTransactionTimeout is the session setting that ends a transaction
// left idle, after idleInTransactionMillis.
const (
	idleInTransactionTimeout = "idle_in_transaction_session_timeout"
	idleInTransactionMillis  = 30000
)

// newPool connects to PostgreSQL. Unless the URL sets pool_max_conns, the
// pool holds up to 32 connections: commits wait on WAL flushes, and more
// concurrent transactions share each flush.
func newPool(ctx context.Context, url string) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse DATABASE_URL: %w", err)
	}
	if !strings.Contains(url, "pool_max_conns") {
		pc.MaxConns = 32
	}
	// Idle connections are closed after a minute, so that a pool shrinks
	// after a burst. PostgreSQL's max_connections is then shared by what
	// the processes use, not by what they once used.
	if !strings.Contains(url, "pool_max_conn_idle_time") {
		pc.MaxConnIdleTime = defaultMaxConnIdleTime
	}
	if pc.ConnConfig.ConnectTimeout == 0 && !strings.Contains(url, "connect_timeout") && os.Getenv("PGCONNECT_TIMEOUT") == "" {
		pc.ConnConfig.ConnectTimeout = defaultConnectTimeout
	}
	// A gateway can vanish mid-transaction, behind a network partition or
	// in a frozen VM. Its transaction must not hold claimed keys or outbox
	// rows until TCP keepalive notices: every retry would get 409.
	// Through PgBouncer, the setting must be ignored there, and
	// PgBouncer's idle_transaction_timeout does the same (databaseHint).
	if _, ok := pc.ConnConfig.RuntimeParams[idleInTransactionTimeout]; !ok {
		pc.ConnConfig.RuntimeParams[idleInTransactionTimeout] = strconv.Itoa(idleInTransactionMillis)
	}
	// A default_query_exec_mode in the URL that prepares nothing (exec,
	// simple_protocol) names each parameter's type from its Go type
	// alone: the array types that the fast path's recording and the
	// store's reads send must be known (pgarray.Register).
	pc.AfterConnect = func(_ context.Context, c *pgx.Conn) error {
		pgarray.Register(c.TypeMap())
		return nil
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("connect to database: %w", err)
	}
	return pool, nil
}

// databaseHint adds to err what to change when the database refused
// hookgate for a reason its operator sets up. A pooler refused a startup
// parameter: PgBouncer refuses one it does not know unless its
// ignore_startup_parameters lists it, be it hookgate's own session
// setting (newPool) or a setting of DATABASE_URL such as search_path. Or
// the role may not create the migrations' tables in its schema.
func databaseHint(err error) error {
	var pe *pgconn.PgError
	if errors.Is(err, migrations.ErrCannotCreate) ||
		errors.As(err, &pe) && pe.Code == pgerrcode.InsufficientPrivilege && strings.HasPrefix(pe.Message, "permission denied for schema ") {
		return fmt.Errorf("%w (make the role of DATABASE_URL the database's owner (ALTER DATABASE … OWNER TO …), or give "+
			"it a schema of its own (CREATE SCHEMA hookgate AUTHORIZATION …, and search_path=hookgate in DATABASE_URL). "+
			"PostgreSQL 15 and later let only the database's owner create in public; see docs/operations.md, "+
			"\"A schema of its own\")", err)
	}
	if pe == nil || pe.Code != pgerrcode.ProtocolViolation {
		return err
	}
	_, param, ok := strings.Cut(pe.Message, "unsupported startup parameter: ")
	switch {
	case !ok:
		return err
	case param == idleInTransactionTimeout:
		return fmt.Errorf("%w (a pooler such as PgBouncer between hookgate and PostgreSQL refuses the session setting "+
			"%s that hookgate sends at connect: list it in PgBouncer's ignore_startup_parameters, and set PgBouncer's "+
			"idle_transaction_timeout = %d in its place; see docs/operations.md, \"Through PgBouncer\")",
			err, idleInTransactionTimeout, idleInTransactionMillis/1000)
	default:
		return fmt.Errorf("%w (a pooler such as PgBouncer between hookgate and PostgreSQL refuses the setting %s "+
			"of DATABASE_URL: take it out, and make it the role's default instead (ALTER ROLE … SET %s = …); "+
			"see docs/operations.md, \"Through PgBouncer\")", err, param, param)
	}
}

func newLogger(format string, w io.Writer) *slog.Logger {
	if format == "text" {
		return slog.New(slog.NewTextHandler(w, nil))
	}
	return slog.New(slog.NewJSONHandler(w, nil))
}

func buildVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			return bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				return s.Value
			}
		}
	}
	return "devel"
}

// readiness returns the check of /readyz. The database must answer and
// take writes, every migration of this build must be applied, and River's
// schema must be at the version this build's River expects. A database
// migrated by another build, or changed by hand, is not ready; nor is a
// standby, or a database whose sessions are read-only, where every
// delivery would be answered 503.
func readiness(pool *pgxpool.Pool, sqlDB *sql.DB) handler.ReadyFunc {
	return func(ctx context.Context) error {
		var readOnly string
		if err := pool.QueryRow(ctx, "SHOW transaction_read_only").Scan(&readOnly); err != nil {
			return fmt.Errorf("ping database: %w", err)
		}
		if readOnly == "on" {
			return errors.New("the database is read-only (a standby, or default_transaction_read_only = on): no delivery can be stored")
		}
		pending, err := migrations.Pending(ctx, sqlDB)
		if err != nil {
			return err
		}
		if pending {
			return errors.New("migrations are not at head")
		}
		return migrations.CheckRiverSchema(ctx, sqlDB)
	}
}
