package main

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// benchDB is the benchmark's own connection to the database under test.
type benchDB struct{ conn *pgx.Conn }

func openDB(ctx context.Context, url string) (*benchDB, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("HOOKGATE_BENCH_DATABASE_URL: %w", err)
	}
	cfg.RuntimeParams["application_name"] = "hookgate-bench"
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to HOOKGATE_BENCH_DATABASE_URL: %w", err)
	}
	return &benchDB{conn: conn}, nil
}

func (db *benchDB) close() { _ = db.conn.Close(context.Background()) }

// checkpoint flushes dirty pages, so that a phase does not pay for the
// previous one's checkpoint. A failure (no privilege) is reported only.
func (db *benchDB) checkpoint(ctx context.Context, out io.Writer) {
	if _, err := db.conn.Exec(ctx, "CHECKPOINT"); err != nil && ctx.Err() == nil {
		fmt.Fprintf(out, "  (CHECKPOINT before the phase failed: %v)\n", err)
	}
}

// postmasterPID returns the PID of the PostgreSQL server when it runs on
// this machine (our backend's parent), else 0.
func (db *benchDB) postmasterPID(ctx context.Context) int {
	var backend int
	if err := db.conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&backend); err == nil {
		if p, err := procFS.Proc(backend); err == nil {
			if st, err := p.Stat(); err == nil {
				return st.PPID
			}
		}
	}
	return 0
}

// printMachine prints what the figures depend on.
func (db *benchDB) printMachine(ctx context.Context, out io.Writer, pgbench string) {
	fmt.Fprintf(out, "machine: %d CPUs, GOMAXPROCS %d (load generator), %s\n", runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version())
	var settings string
	_ = db.conn.QueryRow(ctx, `SELECT string_agg(name || '=' || current_setting(name), ' ' ORDER BY n) FROM unnest(ARRAY['server_version', 'fsync',
  'synchronous_commit', 'full_page_writes', 'wal_sync_method', 'shared_buffers', 'max_wal_size', 'max_connections']) WITH ORDINALITY AS s(name, n)`).Scan(&settings)
	fmt.Fprintf(out, "postgres: %s\n", settings)
	if pgbench != "" {
		v, _ := exec.CommandContext(ctx, pgbench, "--version").Output()
		fmt.Fprintf(out, "pgbench: %s (%s)\n", strings.TrimSpace(string(v)), pgbench)
	}
}

// dropQueued deletes the outbox rows a --role api phase left (nothing
// works them) and vacuums, as autovacuum would within its naptime, so that
// the next phase's relay does not walk their dead index entries.
func (db *benchDB) dropQueued(ctx context.Context, tag string) (int64, error) {
	tg, err := db.conn.Exec(ctx, `DELETE FROM forward_outbox WHERE sender = 'bench' AND starts_with(delivery_id, $1)`, tag+"-")
	for _, sql := range []string{`VACUUM forward_outbox`, `VACUUM ANALYZE river_job`} {
		if err == nil {
			_, err = db.conn.Exec(ctx, sql)
		}
	}
	if err != nil {
		return 0, fmt.Errorf("delete the phase's outbox rows: %w", err)
	}
	return tg.RowsAffected(), nil
}
