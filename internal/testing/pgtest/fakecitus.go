package pgtest

import (
	"context"
	"net"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// fakeCitusSQL creates Citus's catalog tables in pg_catalog of one
// database, with the columns that package dedup reads of them.
const fakeCitusSQL = `
CREATE TABLE pg_catalog.pg_dist_partition (logicalrelid regclass, partmethod "char", colocationid int);
CREATE TABLE pg_catalog.pg_dist_shard (logicalrelid regclass, shardid bigint);
CREATE TABLE pg_catalog.pg_dist_placement (shardid bigint, groupid int);
CREATE TABLE pg_catalog.pg_dist_node (nodeid int, groupid int, nodename text, nodeport int,
  noderole text, isactive bool, hasmetadata bool, metadatasynced bool);
CREATE TABLE pg_catalog.pg_dist_object (classid oid, objid oid, distribution_argument_index int, colocationid int);`

// fakeShardsSQL distributes processed_messages and delegates
// ingest_deliveries in the fake catalog, with one shard on each group
// 1…$1.
const fakeShardsSQL = `WITH
  p AS (INSERT INTO pg_catalog.pg_dist_partition VALUES ('processed_messages', 'h', 1)),
  o AS (INSERT INTO pg_catalog.pg_dist_object VALUES ('pg_catalog.pg_proc'::regclass, 'ingest_deliveries'::regproc::oid, 0, 1)),
  s AS (INSERT INTO pg_catalog.pg_dist_shard SELECT 'processed_messages', 102000 + g FROM generate_series(1, $1::int) g)
INSERT INTO pg_catalog.pg_dist_placement SELECT 102000 + g, g FROM generate_series(1, $1::int) g`

// FakeCitus makes the database of pool, on plain PostgreSQL, look like a
// Citus coordinator to what hookgate reads of Citus's catalog. It creates
// Citus's catalog tables in pg_catalog, which needs a superuser. It adds
// the workers, each "host:port", as primary nodes. A migrated database
// gets processed_messages distributed, with a shard on each worker, and
// ingest_deliveries delegated. Nothing of Citus runs. It serves tests of
// whom the gateway contacts when pg_dist_node names a host. The database
// is not reused afterwards, since its catalog differs from the template's.
func FakeCitus(t testing.TB, pool *pgxpool.Pool, workers ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL allow_system_table_mods = on"); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, fakeCitusSQL); err != nil {
			return err
		}
		for i, w := range workers {
			host, p, err := net.SplitHostPort(w)
			if err != nil {
				return err
			}
			port, err := strconv.Atoi(p)
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `INSERT INTO pg_catalog.pg_dist_node VALUES ($1, $1, $2, $3, 'primary', true, true, true)`,
				i+1, host, port); err != nil {
				return err
			}
		}
		var migrated bool
		if err := tx.QueryRow(ctx, `SELECT to_regclass('public.processed_messages') IS NOT NULL`).Scan(&migrated); err != nil || !migrated {
			return err
		}
		_, err := tx.Exec(ctx, fakeShardsSQL, len(workers))
		return err
	})
	if err != nil {
		t.Fatalf("pgtest: fake Citus catalog: %v", err)
	}
}
