package dedup_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/dedup"
	"github.com/hookgate/hookgate/internal/testing/pgtest"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// The tests of whom Routes contacts run on plain PostgreSQL: the test
// database gets a fake Citus catalog (pgtest.FakeCitus) whose pg_dist_node
// names password traps (pgtest.PasswordTrap: listeners on 127.0.0.1 that
// ask for the password in clear and record it), and the workers' pools are
// made from a DATABASE_URL with the password routeSecret and the TLS
// settings under test, parsed as serve parses it.

// routeSecret returns a password for the test's DATABASE_URL (the test
// server trusts every local connection and never asks for it).
func routeSecret(t *testing.T) string {
	t.Helper()
	return "route-secret-" + strings.ReplaceAll(t.Name(), "/", "-")
}

// routeBase returns the configuration parsed, as serve parses
// DATABASE_URL, from dsn with the password secret and the query params
// (sslmode=…, sslrootcert=…).
func routeBase(t *testing.T, dsn, secret string, params url.Values) *pgxpool.Config {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgtest.WithPassword(t, dsn, secret, params))
	if err != nil {
		t.Fatalf("parse %v: %v", params, err)
	}
	return cfg
}

// routesFrom runs dedup.NewRoutesFrom and closes what it returns at the
// test's end.
func routesFrom(t *testing.T, ctx context.Context, pool *pgxpool.Pool, base *pgxpool.Config, cfg dedup.RoutesConfig) (*dedup.Routes, error) {
	t.Helper()
	r, err := dedup.NewRoutesFrom(ctx, pool, base, cfg)
	if err == nil {
		t.Cleanup(r.Close)
	}
	return r, err
}

// TestRoutesContactNoUnverifiedWorker: with no worker listed and a
// DATABASE_URL whose connection does not verify the server's name
// (sslmode disable, allow, prefer, require, verify-ca), Routes refuses
// (ErrWorkersUnverified) without connecting to the node pg_dist_node
// names: a trap there that speaks TLS, with a certificate of the URL's CA,
// is never connected to and gets no password. (Before, each of these sent
// it the password: in clear under disable, over TLS it was not asked to
// prove anything under the others.)
func TestRoutesContactNoUnverifiedWorker(t *testing.T) {
	pgtest.SkipOnCitus(t, "a fake Citus catalog on PostgreSQL")
	t.Parallel()
	ctx := testCtx(t)
	ca := pgtest.NewTestCA(t)
	trap := pgtest.NewPasswordTrap(t, ca.Cert(t, "worker-1.invalid"))
	pool, dsn := pgtest.NewDB(t)
	pgtest.FakeCitus(t, pool, trap.Addr)
	for _, mode := range []url.Values{
		{"sslmode": {"disable"}},
		{"sslmode": {"allow"}},
		{"sslmode": {"prefer"}},
		{"sslmode": {"require"}},
		{"sslmode": {"require"}, "sslrootcert": {ca.File}},
		{"sslmode": {"verify-ca"}, "sslrootcert": {ca.File}},
	} {
		r, err := routesFrom(t, ctx, pool, routeBase(t, dsn, routeSecret(t), mode), dedup.RoutesConfig{})
		if !errors.Is(err, dedup.ErrWorkersUnverified) {
			t.Errorf("%v, no worker listed: NewRoutes = %v, %v; want ErrWorkersUnverified", mode, r, err)
		}
	}
	if n, got := trap.Connections(), trap.Passwords(); n != 0 || len(got) != 0 {
		t.Errorf("the node of pg_dist_node got %d connections and the passwords %v; want none", n, got)
	}
}

// TestRoutesVerifyEachWorkersName: with sslmode=verify-full and no worker
// listed, Routes contacts every node of pg_dist_node over TLS and checks
// each certificate against the node's own name: a node whose certificate
// (of the URL's CA) names another host gets no password; one whose
// certificate names it is sent the password, over TLS, as the
// coordinator would be.
func TestRoutesVerifyEachWorkersName(t *testing.T) {
	pgtest.SkipOnCitus(t, "a fake Citus catalog on PostgreSQL")
	t.Parallel()
	ctx := testCtx(t)
	ca := pgtest.NewTestCA(t)
	wrong := pgtest.NewPasswordTrap(t, ca.Cert(t, "worker-1.invalid"))
	right := pgtest.NewPasswordTrap(t, ca.Cert(t, "127.0.0.1"))
	pool, dsn := pgtest.NewDB(t)
	pgtest.FakeCitus(t, pool, wrong.Addr, right.Addr)
	secret := routeSecret(t)
	var logs testkit.LogBuffer
	r, err := routesFrom(t, ctx, pool, routeBase(t, dsn, secret, url.Values{"sslmode": {"verify-full"}, "sslrootcert": {ca.File}}),
		dedup.RoutesConfig{Log: logs.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	if got := wrong.Passwords(); wrong.Connections() == 0 || len(got) != 0 {
		t.Errorf("the node with another host's certificate: %d connections, passwords %v; want a connection and no password", wrong.Connections(), got)
	}
	if got := right.Passwords(); len(got) != 1 || got[0].Password != secret || !got[0].TLS {
		t.Errorf("the node with its own certificate got the passwords %v; want the URL's, once, over TLS", got)
	}
	if n := r.Workers(); n != 0 {
		t.Errorf("Routes has %d workers; want 0 (neither trap lets the gateway in)", n)
	}
	if strings.Contains(logs.String(), secret) {
		t.Errorf("the log shows the password:\n%s", logs.String())
	}
}

// TestRoutesToListedWorkersOnly: with --citus-worker-hosts, Routes
// contacts the listed nodes of pg_dist_node and no other, whatever the
// sslmode: the real server listed becomes a worker; a node not listed is
// never connected to (and logged); and a listed node never gets the
// password in clear: without TLS (sslmode=disable) a request for it is
// refused, under sslmode=prefer a node that declines TLS gets no plain
// connection; a listed node that speaks TLS gets it over TLS.
func TestRoutesToListedWorkersOnly(t *testing.T) {
	pgtest.SkipOnCitus(t, "a fake Citus catalog on PostgreSQL")
	t.Parallel()
	ctx := testCtx(t)
	cert := pgtest.NewTestCA(t).Cert(t, "127.0.0.1")
	plainA := pgtest.NewPasswordTrap(t, nil)
	plainB := pgtest.NewPasswordTrap(t, nil)
	secure := pgtest.NewPasswordTrap(t, cert)
	unlisted := pgtest.NewPasswordTrap(t, cert)
	pool, dsn := pgtest.NewDB(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	server := u.Host // the test server itself, as a worker
	pgtest.FakeCitus(t, pool, server, plainA.Addr, plainB.Addr, secure.Addr, unlisted.Addr)
	secret := routeSecret(t)
	var logs testkit.LogBuffer
	log := logs.Logger()

	r, err := routesFrom(t, ctx, pool, routeBase(t, dsn, secret, url.Values{"sslmode": {"disable"}}),
		dedup.RoutesConfig{Workers: []string{server, plainA.Addr}, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	if n := r.Workers(); n != 1 {
		t.Errorf("sslmode=disable, the server and a trap listed: %d workers; want 1 (the server)", n)
	}
	if got := plainA.Passwords(); plainA.Connections() == 0 || len(got) != 0 {
		t.Errorf("sslmode=disable, a listed trap without TLS: %d connections, passwords %v; want a connection and no password",
			plainA.Connections(), got)
	}

	r, err = routesFrom(t, ctx, pool, routeBase(t, dsn, secret, url.Values{"sslmode": {"prefer"}}),
		dedup.RoutesConfig{Workers: []string{plainB.Addr, secure.Addr}, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	if n := r.Workers(); n != 0 {
		t.Errorf("sslmode=prefer, two traps listed: %d workers; want 0", n)
	}
	if got := plainB.Passwords(); plainB.Connections() == 0 || len(got) != 0 {
		t.Errorf("sslmode=prefer, a listed trap that declines TLS: %d connections, passwords %v; want a connection and no password",
			plainB.Connections(), got)
	}
	if got := secure.Passwords(); len(got) != 1 || got[0].Password != secret || !got[0].TLS {
		t.Errorf("sslmode=prefer, a listed trap with TLS got the passwords %v; want the URL's, once, over TLS", got)
	}

	if n, got := unlisted.Connections(), unlisted.Passwords(); n != 0 || len(got) != 0 {
		t.Errorf("the node not listed got %d connections and the passwords %v; want none", n, got)
	}
	if !strings.Contains(logs.String(), "not in --citus-worker-hosts") || !strings.Contains(logs.String(), unlisted.Addr) {
		t.Errorf("no log line names the worker left out (%s):\n%s", unlisted.Addr, logs.String())
	}
	if strings.Contains(logs.String(), secret) {
		t.Errorf("the log shows the password:\n%s", logs.String())
	}
}

// TestParseWorkerHosts: --citus-worker-hosts takes host:port entries
// (names, IPv4 and bracketed IPv6 addresses), comma-separated, empty
// entries ignored; an entry without a port, with a bad port, a scheme, a
// user or a wildcard is refused, naming it.
func TestParseWorkerHosts(t *testing.T) {
	t.Parallel()
	got, err := dedup.ParseWorkerHosts(" worker-1.internal:5432, 10.0.0.7:6432,,[::1]:9701 ")
	if want := []string{"worker-1.internal:5432", "10.0.0.7:6432", "[::1]:9701"}; err != nil || strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("ParseWorkerHosts = %q, %v; want %q", got, err, want)
	}
	if got, err := dedup.ParseWorkerHosts(" , "); err != nil || got != nil {
		t.Errorf("ParseWorkerHosts(\" , \") = %q, %v; want nil", got, err)
	}
	for _, bad := range []string{"worker-1.internal", "worker-1:0", "worker-1:70000", "worker-1:pg", "postgres://worker-1:5432",
		"hg@worker-1:5432", "*.internal:5432", ":5432", "10.0.0.0/8:5432"} {
		if _, err := dedup.ParseWorkerHosts("ok:5432," + bad); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("ParseWorkerHosts(%q): %v; want an error naming it", bad, err)
		}
	}
}
