// Package migrations holds hookgate's SQL migrations, embedded in the
// binary. It applies them with goose under a PostgreSQL advisory lock, so
// several replicas can start at once.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

//go:embed *.sql
var files embed.FS

// FS returns the embedded migration files.
func FS() fs.FS { return files }

// provider returns a goose provider on db, with a session locker when
// locked.
func provider(db *sql.DB, locked bool) (*goose.Provider, error) {
	opts := []goose.ProviderOption{goose.WithGoMigrations(goMigrations()...)}
	if locked {
		// Retry the advisory lock every second for up to an hour. Another
		// replica may be building an index CONCURRENTLY on a large table.
		locker, err := lock.NewPostgresSessionLocker(lock.WithLockTimeout(1, 3600))
		if err != nil {
			return nil, fmt.Errorf("create migration lock: %w", err)
		}
		opts = append(opts, goose.WithSessionLocker(locker))
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, files, opts...)
	if err != nil {
		return nil, fmt.Errorf("create migration provider: %w", err)
	}
	return p, nil
}

// Up applies every pending migration to the database at dsn under a
// session advisory lock. So replicas that start together apply each
// migration once. A database already at head is left alone, without the
// lock. It returns the number of migrations it applied.
func Up(ctx context.Context, dsn string) (int, error) {
	// Parse dsn as the pool does, so a URL with pool settings is accepted.
	pc, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return 0, fmt.Errorf("parse database URL: %w", err)
	}
	db := stdlib.OpenDB(*pc.ConnConfig)
	defer db.Close()
	return UpDB(ctx, db)
}

// UpDB is [Up] on db. On stdlib.OpenDBFromPool of the process's pool, the
// migrations open no session of their own.
func UpDB(ctx context.Context, db *sql.DB) (int, error) {
	// A database with no version table has every migration pending.
	// goose would create the table, and try again for seconds when it may
	// not: mayCreate says so at once. A database at head needs no right to
	// create.
	var versioned bool
	if err := db.QueryRowContext(ctx, `SELECT to_regclass($1) IS NOT NULL`, goose.DefaultTablename).Scan(&versioned); err != nil {
		return 0, fmt.Errorf("apply migrations: %w", err)
	}
	if versioned {
		if pending, err := Pending(ctx, db); err == nil && !pending {
			return 0, nil
		}
	}
	if err := mayCreate(ctx, db); err != nil {
		return 0, err
	}
	p, err := provider(db, true)
	if err != nil {
		return 0, err
	}
	res, err := p.Up(ctx)
	if err != nil {
		return len(res), fmt.Errorf("apply migrations: %w", err)
	}
	return len(res), nil
}

// Pending reports whether the database behind db lacks any embedded migration.
// It returns an error, not true, when the database cannot be read.
func Pending(ctx context.Context, db *sql.DB) (bool, error) {
	p, err := provider(db, false)
	if err != nil {
		return false, err
	}
	pending, err := p.HasPending(ctx)
	if err != nil {
		return false, fmt.Errorf("check pending migrations: %w", err)
	}
	return pending, nil
}

// ErrCannotCreate is in the error of [Up] and [UpDB] when the role may not
// create the migrations' tables.
var ErrCannotCreate = errors.New("the migrations cannot create their tables")

// mayCreate returns an error with [ErrCannotCreate] when the role may not
// create tables in the schema they would go to: the first of search_path
// that exists.
func mayCreate(ctx context.Context, db *sql.DB) error {
	var (
		schema, role sql.NullString
		may          bool
	)
	err := db.QueryRowContext(ctx, `SELECT current_schema(), current_user,
  coalesce(has_schema_privilege(current_schema(), 'CREATE'), false)`).Scan(&schema, &role, &may)
	switch {
	case err != nil:
		return fmt.Errorf("apply migrations: %w", err)
	case !schema.Valid:
		return fmt.Errorf("apply migrations: %w: no schema of the search_path exists", ErrCannotCreate)
	case !may:
		return fmt.Errorf("apply migrations: %w: the role %s may not create tables in schema %s", ErrCannotCreate, role.String, schema.String)
	}
	return nil
}
