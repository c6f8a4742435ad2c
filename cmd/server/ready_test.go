package main

import (
	"context"
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
