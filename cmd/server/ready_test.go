package main

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/hookgate/hookgate/internal/testing/pgtest"
	"github.com/hookgate/hookgate/migrations"
)

// TestReadinessChecksRiversSchemaVersion: a database whose migrations are
// all applied is ready; once River's schema is at another version than the
// one this build expects (here, migrated one version down by River's own
// migrator), it is not, and the error names both versions.
func TestReadinessChecksRiversSchemaVersion(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDB(t)
	sqlDB := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { _ = sqlDB.Close() })
	ready := readiness(pool, sqlDB)
	ctx := t.Context()
	if err := ready(ctx); err != nil {
		t.Fatalf("a migrated database is not ready: %v", err)
	}
	m, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		t.Fatal(err)
	}
	older := migrations.RiverSchemaVersion - 1
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		//nolint:staticcheck // SA1019: as migrations/river.go does, in one transaction
		_, err := m.MigrateTx(ctx, tx, rivermigrate.DirectionDown, &rivermigrate.MigrateOpts{TargetVersion: older})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	err = ready(context.WithoutCancel(ctx))
	if err == nil {
		t.Fatalf("ready with River's schema at version %d", older)
	}
	for _, want := range []string{"version 7", "version 8"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("readiness error %q does not name %s", err, want)
		}
	}
}

// TestReadinessRefusesAReadOnlyDatabase: an api process on a database
// whose sessions are read-only, as a standby's are, answers every delivery
// 503 and loses nothing. /readyz then says it is not ready, and why, so
// that a load balancer sends the deliveries elsewhere; the same database
// writable again is ready.
func TestReadinessRefusesAReadOnlyDatabase(t *testing.T) {
	t.Parallel()
	_, dsn := pgtest.NewDB(t)
	s := startRun(t, withParam(dsn, "default_transaction_read_only=on"), "--role", "api")
	c := newClient(t)
	r, err := deliver(t.Context(), c, s.base, "ro-1", bodyFor("ro-1"))
	if err != nil {
		t.Fatal(err)
	}
	if r.status != http.StatusServiceUnavailable {
		t.Errorf("a delivery to a read-only database: %s, want 503", r)
	}
	r, err = get(t.Context(), c, s.base+"/readyz")
	if err != nil {
		t.Fatal(err)
	}
	if r.status != http.StatusServiceUnavailable || !strings.Contains(string(r.body), "read-only") {
		t.Errorf("/readyz on a read-only database: %s, want 503 naming a read-only database among the causes", r)
	}
	if !strings.Contains(s.log.tail(50), "the database is read-only (a standby, or default_transaction_read_only = on)") {
		t.Errorf("the log does not say the database is read-only:\n%s", s.log.tail(20))
	}

	w := startRun(t, dsn, "--role", "api")
	if r, err := get(t.Context(), c, w.base+"/readyz"); err != nil || r.status != http.StatusOK {
		t.Errorf("/readyz on the same database writable: %v %v, want 200", r, err)
	}
	if r, err := deliver(t.Context(), c, w.base, "ro-1", bodyFor("ro-1")); err != nil || r.status != http.StatusAccepted || r.header.Get("Idempotent-Replayed") == "true" {
		t.Errorf("the delivery once the database is writable: %v %v, want its first 202", r, err)
	}
}

// TestRiverSchemaVersionIsRiversLatest: the River schema version the
// migrations install is the newest one the River library knows, so that
// upgrading River to a release with a newer schema fails here.
func TestRiverSchemaVersionIsRiversLatest(t *testing.T) {
	t.Parallel()
	m, err := rivermigrate.New(riverpgxv5.New(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	all := m.AllVersions()
	if latest := all[len(all)-1].Version; latest != migrations.RiverSchemaVersion {
		t.Errorf("River knows schema versions up to %d; the migrations install %d: add a migration to %d", latest, migrations.RiverSchemaVersion, latest)
	}
}
