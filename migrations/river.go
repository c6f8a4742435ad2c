package migrations

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/pressly/goose/v3"
	"github.com/riverqueue/river/riverdriver/riverdatabasesql"
	"github.com/riverqueue/river/rivermigrate"
)

// River's own schema is brought up by goose migrations written in Go, so
// every schema change runs in order under goose's advisory lock. Migration 2
// takes it to River's version 4 and migration 3 to version 8. They are two
// transactions because version 4 adds an enum value that version 6 uses.
// PostgreSQL allows that only once the value is committed. A River upgrade
// that needs a newer schema gets a new migration with a higher target.
const (
	riverVersionAt2 = 4
	riverVersionAt3 = 8
)

// RiverSchemaVersion is the version of River's schema that this build's
// migrations bring the database to, and that its River library expects. A
// test checks that it is River's latest, so a River upgrade with a newer
// schema fails there, not at run time.
const RiverSchemaVersion = riverVersionAt3

// CheckRiverSchema returns nil when River's schema in db is at
// [RiverSchemaVersion]. Otherwise its error says which version is there, or
// that none is.
func CheckRiverSchema(ctx context.Context, db *sql.DB) error {
	m, err := rivermigrate.New(riverdatabasesql.New(db), nil)
	if err != nil {
		return fmt.Errorf("river migrator: %w", err)
	}
	versions, err := m.ExistingVersions(ctx)
	if err != nil {
		return fmt.Errorf("read River's schema version: %w", err)
	}
	if len(versions) == 0 {
		return fmt.Errorf("the River schema is not installed; this build expects version %d", RiverSchemaVersion)
	}
	if v := versions[len(versions)-1].Version; v != RiverSchemaVersion {
		return fmt.Errorf("the River schema is at version %d; this build expects version %d", v, RiverSchemaVersion)
	}
	return nil
}

// goMigrations are the migrations written in Go, registered beside the SQL
// files.
func goMigrations() []*goose.Migration {
	step := func(version int64, up, down int) *goose.Migration {
		return goose.NewGoMigration(version,
			&goose.GoFunc{RunTx: func(ctx context.Context, tx *sql.Tx) error {
				return migrateRiver(ctx, tx, rivermigrate.DirectionUp, up)
			}},
			&goose.GoFunc{RunTx: func(ctx context.Context, tx *sql.Tx) error {
				return migrateRiver(ctx, tx, rivermigrate.DirectionDown, down)
			}},
		)
	}
	return []*goose.Migration{
		step(2, riverVersionAt2, -1),
		step(3, riverVersionAt3, riverVersionAt2),
	}
}

// migrateRiver runs River's migrator in goose's transaction, in direction
// dir, to version target. A target of -1 goes all the way down.
func migrateRiver(ctx context.Context, tx *sql.Tx, dir rivermigrate.Direction, target int) error {
	m, err := rivermigrate.New(riverdatabasesql.New(nil), nil)
	if err != nil {
		return fmt.Errorf("river migrator: %w", err)
	}
	//nolint:staticcheck // SA1019: the schema moves in the caller's transaction, under its advisory lock; Migrate would open transactions of its own
	if _, err := m.MigrateTx(ctx, tx, dir, &rivermigrate.MigrateOpts{TargetVersion: target}); err != nil {
		return fmt.Errorf("river schema %s: %w", dir, err)
	}
	return nil
}
