package brokertest

import (
	"fmt"
	"net/url"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// StartPgBouncer starts a PgBouncer in session mode on a free port of
// 127.0.0.1, in front of the PostgreSQL of dsn, and returns dsn through it:
// the same database and user, whose connections PgBouncer opens without a
// password (dsn's server must trust them, as the tests' servers do).
// settings are more lines of its [pgbouncer] section, such as
// "ignore_startup_parameters = …". Its pool holds 100 server connections:
// in session mode each of hookgate's connections takes one for good, and
// a process's pool holds up to 32. It is killed when the test ends. As
// root it runs as the user postgres: PgBouncer refuses to run as root.
func StartPgBouncer(t testing.TB, dsn string, settings ...string) string {
	t.Helper()
	bin := binary(t, "pgbouncer", "pgbouncer", "/usr/sbin/pgbouncer", "/usr/bin/pgbouncer")
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("brokertest: pgbouncer: %v", err)
	}
	db, name := strings.TrimPrefix(u.Path, "/"), u.User.Username()
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		pg, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("brokertest: pgbouncer runs as the user postgres when the tests run as root: %v", err)
		}
		uid, _ := strconv.Atoi(pg.Uid)
		gid, _ := strconv.Atoi(pg.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	// Not t.TempDir(): its parent is the test's own directory, which
	// only its owner may enter, and PgBouncer may run as another user.
	dir, err := os.MkdirTemp("", "pgbouncer-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	users := filepath.Join(dir, "users.txt")
	ini := fmt.Sprintf(`[databases]
%s = host=%s port=%s dbname=%s user=%s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = session
default_pool_size = 100
max_client_conn = 400
%s
`, db, u.Hostname(), u.Port(), db, name, port, users, strings.Join(settings, "\n"))
	for path, text := range map[string]string{users: fmt.Sprintf("%q \"\"\n", name), filepath.Join(dir, "pgbouncer.ini"): ini} {
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil { //nolint:gosec // PgBouncer may run as another user; nothing secret
			t.Fatal(err)
		}
	}
	logFile := filepath.Join(dir, "pgbouncer.log")
	p := startAs(t, cred, logFile, nil, bin, filepath.Join(dir, "pgbouncer.ini"))
	t.Cleanup(p.kill)
	waitPort(t, port, 30*time.Second, p.exited, logFile)
	through := *u
	through.Host = "127.0.0.1:" + strconv.Itoa(port)
	return through.String()
}
