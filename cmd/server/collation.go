package main

import (
	"context"
	"log/slog"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
)

// keyCollationSQL reads the collation under which PostgreSQL compares
// processed_messages' delivery IDs, as every text key of hookgate's tables
// is compared: its name, its provider (c for libc, i for ICU, b for
// PostgreSQL 17's builtin one) and, for libc, its LC_COLLATE. A column of
// the database's default collation takes the database's. Its columns are
// read through to_jsonb, which leaves a column a version lacks NULL.
const keyCollationSQL = `SELECT
  CASE WHEN c.collname = 'default' THEN coalesce(to_jsonb(d)->>'datlocale', to_jsonb(d)->>'daticulocale', d.datcollate) ELSE c.collname END,
  coalesce(CASE WHEN c.collname = 'default' THEN to_jsonb(d)->>'datlocprovider' ELSE c.collprovider::text END, 'c'),
  CASE WHEN c.collname = 'default' THEN d.datcollate ELSE coalesce(to_jsonb(c)->>'collcollate', '') END
FROM pg_attribute a
JOIN pg_collation c ON c.oid = a.attcollation
JOIN pg_database d ON d.datname = current_database()
WHERE a.attrelid = 'processed_messages'::regclass AND a.attname = 'delivery_id'`

// byteOrder reports whether a collation orders text by bytes (by code
// points, in UTF-8) at a byte comparison's cost: libc's "C" and "POSIX",
// which PostgreSQL compares itself, every collation of its builtin
// provider, and glibc's C.UTF-8, for which PostgreSQL calls strcoll but
// which cost no more than "C" in make bench (docs/benchmarks).
func byteOrder(provider, collate string) bool {
	switch provider {
	case "b":
		return true
	case "c":
		switch strings.ToLower(collate) {
		case "c", "posix", "c.utf-8", "c.utf8":
			return true
		}
	}
	return false
}

// checkCollation warns when the keys of hookgate's tables compare under a
// linguistic collation (en_US.UTF-8, an ICU locale): every index probe
// and insert on a text key then calls the C library or ICU instead of
// comparing bytes, and a delivery costs PostgreSQL about a third more CPU
// (docs/operations.md). Nothing in hookgate needs a linguistic order. A
// failure to read it is only logged.
func checkCollation(ctx context.Context, pool *pgxpool.Pool, log *slog.Logger) {
	var name, provider, collate string
	if err := pool.QueryRow(ctx, keyCollationSQL).Scan(&name, &provider, &collate); err != nil {
		log.Info("the collation of the database's keys could not be read", "err", err)
		return
	}
	if byteOrder(provider, collate) {
		return
	}
	log.Warn(collationWarning, "collation", name, "provider", provider)
}

// collationWarning is checkCollation's warning.
const collationWarning = "the database's text keys compare under a linguistic collation: each delivery costs PostgreSQL about a third more CPU than under \"C\", " +
	"and hookgate needs no linguistic order; create hookgate's database with LOCALE 'C' (docs/operations.md#the-databases-collation)"
