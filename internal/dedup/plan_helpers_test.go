package dedup

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/idempotency"
	"github.com/hookgate/hookgate/internal/testing/pgtest"
)

// noPool is the Pool of the Configs of tests that run no statement: it is
// never connected.
var noPool = new(pgxpool.Pool)

// store returns a Store on a fresh database, and its pool.
func store(t *testing.T) (*Store, *pgxpool.Pool) {
	t.Helper()
	pool, _ := pgtest.NewDB(t)
	return mustNew(t, pool, Config{InFlightWait: DefaultInFlightWait}), pool
}

// mustNew returns New(cfg) on pool, failing t when cfg is invalid.
func mustNew(t testing.TB, pool *pgxpool.Pool, cfg Config) *Store {
	t.Helper()
	cfg.Pool = pool
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// claimKeys stores the keys of ds, all of one sender, on db with the
// pipeline's own claim statement (claimSQL, without the RETURNING the
// pipeline adds), without their changes:
// on a transaction left open it holds them, as a delivery in flight does.
// (Package dedup's tests build their rows so; the others use package
// store's fixtures, which this package cannot import: store imports it.)
func claimKeys(t testing.TB, ctx context.Context, db interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}, ds ...idempotency.Delivery) {
	t.Helper()
	n := len(ds)
	var (
		ids, ctypes       = make([]string, n), make([]string, n)
		sums, bodies      = make([][]byte, n), make([][]byte, n)
		eventIDs          = make([][16]byte, n)
		statuses          = make([]int16, n)
		received, expires = make([]time.Time, n), make([]time.Time, n)
	)
	for i, d := range ds {
		if d.Sender != ds[0].Sender {
			t.Fatalf("claimKeys: deliveries of senders %s and %s", ds[0].Sender, d.Sender)
		}
		ids[i], sums[i], eventIDs[i] = d.DeliveryID, d.RequestSHA256[:], [16]byte(d.EventID)
		statuses[i], ctypes[i], bodies[i] = int16(d.Response.Status), d.Response.ContentType, d.Response.Body
		if bodies[i] == nil {
			bodies[i] = []byte{}
		}
		received[i], expires[i] = d.ReceivedAt, d.ExpiresAt
	}
	sql, args := claimSQL, []any{ds[0].Sender, ids, sums, eventIDs, statuses, ctypes, bodies, received, expires}
	if pgtest.Citus() {
		// The form the pipeline claims with there: claimSQL's INSERT …
		// SELECT would commit in two phases, which the tests refuse.
		sql, args = claimValuesSQL(n), []any{ds[0].Sender}
		for i := range ds {
			args = append(args, ids[i], sums[i], eventIDs[i], statuses[i], ctypes[i], bodies[i], received[i], expires[i])
		}
	}
	tag, err := db.Exec(ctx, sql, args...)
	if err != nil {
		t.Fatalf("claim %d keys of %s: %v", n, ds[0].Sender, err)
	}
	if tag.RowsAffected() != int64(n) {
		t.Fatalf("claim %d keys of %s: %d claimed", n, ds[0].Sender, tag.RowsAffected())
	}
}
