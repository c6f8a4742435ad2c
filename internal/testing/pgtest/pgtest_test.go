package pgtest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/hookgate/hookgate/internal/idempotency"
	"github.com/hookgate/hookgate/internal/testing/pgtest"
	"github.com/hookgate/hookgate/internal/testing/storetest"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(pgtest.M(m))
}

func TestNewDBIsMigratedAndIsolated(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	poolA, dsnA := pgtest.NewDB(t)
	poolB, dsnB := pgtest.NewDB(t)
	if dsnA == dsnB {
		t.Fatalf("two NewDB calls returned the same DSN %q", dsnA)
	}

	var nameA, nameB string
	if err := poolA.QueryRow(ctx, "SELECT current_database()").Scan(&nameA); err != nil {
		t.Fatal(err)
	}
	if err := poolB.QueryRow(ctx, "SELECT current_database()").Scan(&nameB); err != nil {
		t.Fatal(err)
	}
	if nameA == nameB {
		t.Fatalf("both pools are connected to database %q", nameA)
	}

	for _, table := range []string{"processed_messages", "webhook_events"} {
		var exists bool
		if err := poolA.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", table).Scan(&exists); err != nil {
			t.Fatal(err)
		}
		if !exists {
			t.Errorf("table %s is missing from the new database", table)
		}
	}

	now := time.Now()
	err := storetest.InsertKey(ctx, poolA, idempotency.Delivery{Key: idempotency.Key{Sender: "github", DeliveryID: "d1"}, EventID: uuid.New(),
		Response: idempotency.Response{Status: 202, ContentType: "application/json", Body: []byte("{}")}, ReceivedAt: now, ExpiresAt: now.Add(24 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	var inA, inB int
	if err := poolA.QueryRow(ctx, "SELECT count(*) FROM processed_messages").Scan(&inA); err != nil {
		t.Fatal(err)
	}
	if err := poolB.QueryRow(ctx, "SELECT count(*) FROM processed_messages").Scan(&inB); err != nil {
		t.Fatal(err)
	}
	if inA != 1 || inB != 0 {
		t.Fatalf("rows: %d in the database written to, %d in the other; want 1 and 0", inA, inB)
	}

	// The DSN reaches the same database as the pool.
	conn, err := pgx.Connect(ctx, dsnA)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var viaDSN string
	if err := conn.QueryRow(ctx, "SELECT current_database()").Scan(&viaDSN); err != nil {
		t.Fatal(err)
	}
	if viaDSN != nameA {
		t.Fatalf("DSN connects to %q, pool to %q", viaDSN, nameA)
	}
}

// TestNewDBConcurrent creates databases from the one template at once, the way
// parallel tests do.
func TestNewDBConcurrent(t *testing.T) {
	t.Parallel()
	for i := range 6 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel()
			pool, _ := pgtest.NewDB(t)
			var n int
			if err := pool.QueryRow(t.Context(), "SELECT count(*) FROM processed_messages").Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != 0 {
				t.Fatalf("new database holds %d processed_messages rows, want 0", n)
			}
		})
	}
}

// TestNewDBDropsDatabase: when its test ends, a database is dropped, or,
// with EnvReuse, emptied and kept for the next test of the process. Not
// parallel: no other test of the process may take the spare database
// before it is looked at.
func TestNewDBDropsDatabase(t *testing.T) {
	var name, dsn string
	t.Run("use", func(t *testing.T) {
		var pool *pgxpool.Pool
		pool, dsn = pgtest.NewDB(t)
		if err := pool.QueryRow(t.Context(), "SELECT current_database()").Scan(&name); err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		err := storetest.InsertKey(t.Context(), pool, idempotency.Delivery{Key: idempotency.Key{Sender: "github", DeliveryID: "d1"}, EventID: uuid.New(),
			Response: idempotency.Response{Status: 202, ContentType: "application/json", Body: []byte("{}")}, ReceivedAt: now, ExpiresAt: now.Add(24 * time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
	})
	if pgtest.ReuseDBs() {
		if !pgtest.IsSpare(name) {
			t.Fatalf("database %q is not kept for reuse after its test ended", name)
		}
		conn := connect(t, dsn)
		defer conn.Close(context.Background())
		var n int
		if err := conn.QueryRow(t.Context(), "SELECT count(*) FROM processed_messages").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Fatalf("database %q, kept for reuse, holds %d rows of its last test", name, n)
		}
		return
	}
	conn := connect(t, pgtest.URL(t))
	defer conn.Close(context.Background())
	var exists bool
	if err := conn.QueryRow(t.Context(), "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if exists {
		t.Fatalf("database %q still exists after its test ended", name)
	}
}

func TestClusterStopStart(t *testing.T) {
	testkit.Slow(t, "starts, crashes and restarts a private PostgreSQL (the outage suite's tool)")
	t.Parallel()
	c := pgtest.StartCluster(t)
	if c.BinDir() == "" {
		t.Error("BinDir is empty")
	}

	ctx := t.Context()
	conn := connect(t, c.URL())
	if _, err := conn.Exec(ctx, "CREATE TABLE survives (v int); INSERT INTO survives VALUES (7)"); err != nil {
		t.Fatal(err)
	}

	c.Stop(t)
	if err := conn.Ping(ctx); err == nil {
		t.Error("a connection opened before Stop still works")
	}
	conn.Close(context.Background())
	if conn, err := tryConnect(ctx, c.URL()); err == nil {
		conn.Close(context.Background())
		t.Fatal("connecting to a stopped cluster succeeded")
	}
	c.Stop(t) // stopping a stopped cluster does nothing

	c.Start(t)
	c.Start(t) // starting a running cluster does nothing
	conn = connect(t, c.URL())
	defer conn.Close(context.Background())
	var v int
	if err := conn.QueryRow(ctx, "SELECT v FROM survives").Scan(&v); err != nil {
		t.Fatalf("committed data after restart: %v", err)
	}
	if v != 7 {
		t.Fatalf("read %d after restart, want 7", v)
	}
}

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := tryConnect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

func tryConnect(ctx context.Context, url string) (*pgx.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return pgx.Connect(ctx, url)
}
