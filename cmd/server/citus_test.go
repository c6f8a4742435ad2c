package main

import (
	"context"
	"net/url"
	"os/exec"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/testing/pgtest"
)

// The gateway's contacts with the hosts that pg_dist_node names, on plain
// PostgreSQL: the test database gets a fake Citus catalog
// (pgtest.FakeCitus: processed_messages distributed, ingest_deliveries
// delegated, shards on the nodes given) whose only node is a password trap
// (pgtest.PasswordTrap: a listener on 127.0.0.1 that speaks TLS and asks
// for the password in clear), and DATABASE_URL carries a password, which
// the test server (trusting local connections) never asks for.

// TestServeContactsNoUnverifiedWorker: the real binary, started on a
// coordinator whose pg_dist_node names a host (a trap), with sslmode
// prefer or disable and no --citus-worker-hosts, starts, says in one line
// that the ingest calls go through the coordinator and how to send them
// to the workers, and never connects to that host. (Before, its start-up
// sent the host DATABASE_URL's password: over TLS that checked nothing
// under prefer, in clear under disable.) Listed in --citus-worker-hosts,
// the host is contacted (the routes are tried there, and the trap refuses
// them). The log never shows the password.
func TestServeContactsNoUnverifiedWorker(t *testing.T) {
	pgtest.SkipOnCitus(t, "a fake Citus catalog on PostgreSQL")
	t.Parallel()
	trap := pgtest.NewPasswordTrap(t, pgtest.NewTestCA(t).Cert(t, "127.0.0.1"))
	pool, dsn := pgtest.NewDB(t)
	pgtest.FakeCitus(t, pool, trap.Addr)
	const secret = "serve-secret-8d0f3a"
	for _, mode := range []string{"prefer", "disable"} {
		s := startBinaryOnce(t, pgtest.WithPassword(t, dsn, secret, url.Values{"sslmode": {mode}}), senderConfig, nil)
		if !s.up {
			t.Fatalf("sslmode=%s: the binary did not start:\n%s", mode, s.out)
		}
		if !strings.Contains(s.out, "citus: processed_messages is distributed") {
			t.Fatalf("sslmode=%s: the binary did not take the fake catalog for Citus:\n%s", mode, s.out)
		}
		if !strings.Contains(s.out, "ingest calls go through the coordinator, not straight to the workers") ||
			!strings.Contains(s.out, "--citus-worker-hosts") || !strings.Contains(s.out, "sslmode=verify-full") {
			t.Errorf("sslmode=%s: no line says that the calls go through the coordinator and how to change it:\n%s", mode, s.out)
		}
		if strings.Contains(s.out, secret) {
			t.Errorf("sslmode=%s: the output shows the password:\n%s", mode, s.out)
		}
	}
	if n, got := trap.Connections(), trap.Passwords(); n != 0 || len(got) != 0 {
		t.Fatalf("the host of pg_dist_node got %d connections and the passwords %v; want none", n, got)
	}

	s := startBinaryOnce(t, pgtest.WithPassword(t, dsn, secret, url.Values{"sslmode": {"prefer"}}), senderConfig, []string{"HOOKGATE_CITUS_WORKER_HOSTS", trap.Addr})
	if !s.up {
		t.Fatalf("with the host listed: the binary did not start:\n%s", s.out)
	}
	if trap.Connections() == 0 || !strings.Contains(s.out, "citus: cannot connect to a worker") {
		t.Errorf("with the host listed: %d connections to it; want the routes tried there:\n%s", trap.Connections(), s.out)
	}
	for _, p := range trap.Passwords() {
		if !p.TLS {
			t.Errorf("with the host listed under sslmode=prefer: the password went without TLS")
		}
	}
	if strings.Contains(s.out, secret) {
		t.Errorf("with the host listed: the output shows the password:\n%s", s.out)
	}
}

// TestMigrateConnectsToNoWorker: `hookgate migrate` (the real binary) on a
// coordinator whose pg_dist_node names a host (a trap) applies the
// migrations and never connects to that host, with sslmode=prefer: it
// connects to DATABASE_URL alone. (A worker contacted during a migration
// on Citus is contacted by the coordinator, over its own connections:
// docs/distributed.md#which-workers-the-gateway-contacts.)
func TestMigrateConnectsToNoWorker(t *testing.T) {
	pgtest.SkipOnCitus(t, "a fake Citus catalog on PostgreSQL")
	t.Parallel()
	trap := pgtest.NewPasswordTrap(t, pgtest.NewTestCA(t).Cert(t, "127.0.0.1"))
	dsn := emptyDB(t)
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	pgtest.FakeCitus(t, pool, trap.Addr)
	pool.Close()
	const secret = "migrate-secret-51c2e7"
	cmd := exec.Command(buildBinary(t), "migrate")
	cmd.Env = []string{"DATABASE_URL=" + pgtest.WithPassword(t, dsn, secret, url.Values{"sslmode": {"prefer"}}), "HOOKGATE_LOG_FORMAT=text"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("hookgate migrate: %v\n%s", err, out)
	}
	checkMigrated(t, dsn)
	if n, got := trap.Connections(), trap.Passwords(); n != 0 || len(got) != 0 {
		t.Errorf("the host of pg_dist_node got %d connections and the passwords %v during migrate; want none", n, got)
	}
	if strings.Contains(string(out), secret) {
		t.Errorf("migrate's output shows the password:\n%s", out)
	}
}
