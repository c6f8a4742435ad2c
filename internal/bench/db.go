package main

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookgate/hookgate/internal/dedup"
	"github.com/hookgate/hookgate/internal/ingestsql"
)

// The SQL the gateway runs per delivery, taken from the texts that
// internal/dedup, internal/events and internal/forward send (package
// ingestsql holds them for all of them and for this benchmark). Every outcome is one
// pipeline: BEGIN, the lock timeout, the claim (ON CONFLICT DO NOTHING on the
// key), the event insert and, for a sender with targets, the outbox insert
// (both guarded by the claim), the read of the row that holds each key
// (whose event ID tells who claimed it), Sync, COMMIT, Sync. A replay runs the same
// statements. (internal/dedup's DELETE of an expired key runs only after a
// conflict whose stored row has expired, which the benchmark never causes.)
var (
	lockTimeoutSQL = ingestsql.LockTimeout(dedup.DefaultInFlightWait)
	claimSQL       = ingestsql.Claim
	insertEventSQL = ingestsql.EventInsert
	storedSQL      = ingestsql.Stored
)

// The statements a first delivery and a replay run, and the transaction
// control statements around them.
var (
	firstSQL  = []string{claimSQL, insertEventSQL, storedSQL}
	replaySQL = firstSQL
	// txSQL are seen too: the transaction's control statements, and the
	// lock timeouts of the single path and of batches.
	txSQL = []string{"BEGIN", "COMMIT", "commit", lockTimeoutSQL, ingestsql.LockTimeout(ingestsql.BatchLockWait), ingestsql.GenericPlans}
)

// benchDB is the benchmark's own connection to the database under test.
type benchDB struct {
	mu   sync.Mutex
	conn *pgx.Conn
	url  string
}

// benchAppName is the application_name of the benchmark's own connections,
// which the SQL check leaves out.
const benchAppName = "hookgate-bench"

// connect opens a connection named benchAppName.
func connect(ctx context.Context, url string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.RuntimeParams["application_name"] = benchAppName
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	return pgx.ConnectConfig(cctx, cfg)
}

func openDB(ctx context.Context, url string) (*benchDB, error) {
	conn, err := connect(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("connect to HOOKGATE_BENCH_DATABASE_URL: %w", err)
	}
	return &benchDB{conn: conn, url: url}, nil
}

func (db *benchDB) close() { _ = db.conn.Close(context.Background()) }

// checkpoint flushes dirty pages so that each phase starts from the same
// state instead of paying for the previous phase's checkpoint. A failure (no
// privilege) is reported and ignored.
func (db *benchDB) checkpoint(ctx context.Context) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	if _, err := db.conn.Exec(ctx, "CHECKPOINT"); err != nil {
		fmt.Printf("  (CHECKPOINT before the phase failed: %v)\n", err)
	}
	return nil
}

// socketURL returns the URL of the same database over PostgreSQL's (first)
// Unix socket directory.
func (db *benchDB) socketURL(ctx context.Context) (string, error) {
	db.mu.Lock()
	defer db.mu.Unlock()
	var dirs, port string
	err := db.conn.QueryRow(ctx, "SELECT current_setting('unix_socket_directories'), current_setting('port')").Scan(&dirs, &port)
	if err != nil {
		return "", fmt.Errorf("find the Unix socket: %w", err)
	}
	dir, _, _ := strings.Cut(dirs, ",")
	dir = strings.TrimSpace(dir)
	if dir == "" {
		return "", errors.New("PostgreSQL listens on no Unix socket")
	}
	cfg := db.conn.Config()
	u := url.URL{Scheme: "postgres", User: url.User(cfg.User), Path: "/" + cfg.Database}
	u.RawQuery = url.Values{"host": {dir}, "port": {port}, "sslmode": {"disable"}}.Encode()
	return u.String(), nil
}

// postmasterPID returns the PID of the PostgreSQL server's postmaster when it
// runs on this machine, else 0.
func (db *benchDB) postmasterPID(ctx context.Context) int {
	db.mu.Lock()
	defer db.mu.Unlock()
	var backend int
	if err := db.conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&backend); err != nil {
		return 0
	}
	st, ok := readProcStat(backend)
	if !ok {
		return 0
	}
	return st.ppid
}

// printMachine prints what the numbers depend on.
func printMachine(ctx context.Context, out io.Writer, db *benchDB, pgbenchBin string) {
	db.mu.Lock()
	defer db.mu.Unlock()
	fmt.Fprintf(out, "machine: %d CPUs, GOMAXPROCS %d (load generator), %s\n", runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version())
	var version string
	_ = db.conn.QueryRow(ctx, "SELECT current_setting('server_version')").Scan(&version)
	var settings []string
	for _, name := range []string{"fsync", "synchronous_commit", "full_page_writes", "wal_sync_method", "shared_buffers", "max_wal_size", "max_connections"} {
		var v string
		if err := db.conn.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&v); err == nil {
			settings = append(settings, name+"="+v)
		}
	}
	fmt.Fprintf(out, "postgres %s: %s\n", version, strings.Join(settings, " "))
	if pgbenchBin != "" {
		v, _ := exec.CommandContext(ctx, pgbenchBin, "--version").Output()
		fmt.Fprintf(out, "pgbench: %s (%s)\n", strings.TrimSpace(string(v)), pgbenchBin)
	}
}

// fixture holds the parameter values for pgbench, taken from a delivery the
// gateway stored, so that pgbench writes rows of the same size and shape.
type fixture struct {
	headersJSON   string // webhook_events.headers as text
	bodyHex       string // \x… bytea text of the request body
	eventType     string // webhook_events.event_type
	sha256Hex     string // \x… of processed_messages.request_sha256
	respBodyHex   string
	respType      string
	respStatus    int
	retention     time.Duration
	replayBase    int64
	replayKeys    int
	receivedAtTxt string
	expiresAtTxt  string
}

// fixture reads one delivery of sender "bench" the gateway stored.
func (db *benchDB) fixture(ctx context.Context) (*fixture, error) {
	db.mu.Lock()
	defer db.mu.Unlock()
	var (
		f                   fixture
		body, sum, respBody []byte
		received, expires   time.Time
		status              int16
	)
	err := db.conn.QueryRow(ctx, `SELECT e.headers::text, e.body, e.event_type, p.request_sha256, p.response_body, p.response_content_type, p.response_status, p.created_at, p.expires_at
FROM webhook_events e JOIN processed_messages p USING (sender, delivery_id)
WHERE e.sender = 'bench' AND e.delivery_id LIKE 'fd-%' LIMIT 1`).
		Scan(&f.headersJSON, &body, &f.eventType, &sum, &respBody, &f.respType, &status, &received, &expires)
	if err != nil {
		return nil, fmt.Errorf("read a stored delivery for pgbench's parameters (did the gateway store any?): %w", err)
	}
	f.bodyHex = `\x` + hex.EncodeToString(body)
	f.sha256Hex = `\x` + hex.EncodeToString(sum)
	f.respBodyHex = `\x` + hex.EncodeToString(respBody)
	f.respStatus = int(status)
	f.retention = expires.Sub(received)
	now := time.Now().UTC()
	f.receivedAtTxt = now.Format(time.RFC3339Nano)
	f.expiresAtTxt = now.Add(f.retention).Format(time.RFC3339Nano)
	return &f, nil
}

// sqlWatcher samples the statements the gateway's connections are running
// (pg_stat_activity.query of active client backends) on a connection of its
// own: back to back during the first tight period (the warm-up, not
// measured) until every expected statement was seen, then every 200 ms.
type sqlWatcher struct {
	cancel context.CancelFunc
	done   chan struct{}
	seen   map[string]int
}

func watchSQL(ctx context.Context, url string, tight time.Duration, expected ...string) *sqlWatcher {
	ctx, cancel := context.WithCancel(ctx)
	w := &sqlWatcher{cancel: cancel, done: make(chan struct{}), seen: map[string]int{}}
	go func() {
		defer close(w.done)
		conn, err := connect(ctx, url)
		if err != nil {
			return
		}
		defer conn.Close(context.Background())
		tightEnd := time.Now().Add(tight)
		for {
			rows, err := conn.Query(ctx, `SELECT query FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'
  AND state = 'active' AND application_name NOT IN ($1, 'pgbench')`, benchAppName)
			if err == nil {
				for rows.Next() {
					var q string
					if rows.Scan(&q) == nil {
						w.seen[q]++
					}
				}
				rows.Close()
				_ = rows.Err() // a failed sample keeps what it read; the next one samples again
			}
			wait := 200 * time.Millisecond
			if time.Now().Before(tightEnd) && !w.sawAll(expected) {
				wait = 0
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
	}()
	return w
}

func (w *sqlWatcher) sawAll(expected []string) bool {
	for _, e := range expected {
		if w.seen[e] == 0 {
			return false
		}
	}
	return true
}

// stop ends sampling and returns the statements seen, most frequent first.
func (w *sqlWatcher) stop() []string {
	w.cancel()
	<-w.done
	qs := make([]string, 0, len(w.seen))
	for q := range w.seen {
		qs = append(qs, q)
	}
	slices.SortFunc(qs, func(a, b string) int { return w.seen[b] - w.seen[a] })
	return qs
}

// checkSQL compares the statements seen with those expected: it returns the
// expected ones never seen, the seen ones not expected (with counts), and
// whether one of those unexpected ones is frequent (3 samples and 0.5% of
// them or more; a background job's query shows up once or twice): then the
// gateway runs per delivery SQL the benchmark's pgbench scripts do not.
func checkSQL(seen []string, counts map[string]int, expected, allowed []string) (missing, unexpected []string, frequent bool) {
	total := 0
	for _, n := range counts {
		total += n
	}
	for _, e := range expected {
		if !slices.Contains(seen, e) {
			missing = append(missing, e)
		}
	}
	for _, q := range seen {
		if strings.HasPrefix(q, "-- name: ") || strings.HasPrefix(q, "DELETE FROM forward_outbox") {
			continue // River's own queries and the outbox relay, not the ingest path
		}
		if !slices.Contains(expected, q) && !slices.Contains(allowed, q) {
			unexpected = append(unexpected, fmt.Sprintf("%q (%d of %d samples)", oneLine(q), counts[q], total))
			if counts[q] >= 3 && counts[q]*200 >= total {
				frequent = true
			}
		}
	}
	return missing, unexpected, frequent
}

// oneLine returns s on one line, cut after 160 characters.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > 160 {
		s = string(r[:160]) + "…"
	}
	return s
}

// printSQLCheck stops w and prints how the statements it saw compare with
// expected (allowed may be seen too); it returns false when an expected one
// was never seen or another one was frequent.
func printSQLCheck(out io.Writer, w *sqlWatcher, expected, allowed []string) (ok bool) {
	seen := w.stop()
	if len(seen) == 0 {
		fmt.Fprintln(out, "  SQL check: no statements sampled from pg_stat_activity")
		return true
	}
	missing, unexpected, frequent := checkSQL(seen, w.seen, expected, allowed)
	if len(missing) == 0 {
		fmt.Fprintf(out, "  SQL check: the gateway's connections ran the %d statements pgbench runs (pg_stat_activity)\n", len(expected))
	}
	for _, m := range missing {
		fmt.Fprintf(out, "  SQL check: never seen from the gateway: %q\n", oneLine(m))
	}
	for _, u := range unexpected {
		fmt.Fprintf(out, "  SQL check: other statement seen: %s\n", u)
	}
	if frequent {
		fmt.Fprintln(out, "  SQL check: the gateway runs statements pgbench does not: update the copies in internal/bench/db.go")
	}
	return len(missing) == 0 && !frequent
}
