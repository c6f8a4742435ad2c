package consumer_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/consumer"
	"github.com/hookgate/hookgate/internal/testing/pgtest"
)

// A service applies an order once per event, however often it is told.
// (The example runs against the database `make test` starts, in a schema
// of its own.)
func ExampleProcess() {
	ctx := context.Background()
	pool, done := exampleDB(ctx)
	defer done()

	apply := func(eventID string) {
		res, err := consumer.Process(ctx, pool, "orders", eventID, func(ctx context.Context, tx pgx.Tx) (consumer.Response, error) {
			// The state change, on the transaction that claimed the event.
			if _, err := tx.Exec(ctx, `INSERT INTO orders (event_id) VALUES ($1)`, eventID); err != nil {
				return consumer.Response{}, err
			}
			return consumer.Response{Status: 201, Body: []byte("order created")}, nil
		})
		if err != nil {
			log.Fatal(err) // rolled back: nothing recorded, the retry can succeed
		}
		fmt.Printf("%s: duplicate=%v, response %d %q\n", eventID, res.Duplicate, res.Response.Status, res.Response.Body)
	}
	apply("evt_1")
	apply("evt_1") // a redelivery
	apply("evt_2")

	var orders int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM orders`).Scan(&orders); err != nil {
		log.Fatal(err)
	}
	fmt.Println("orders:", orders)
	// Output:
	// evt_1: duplicate=false, response 201 "order created"
	// evt_1: duplicate=true, response 201 "order created"
	// evt_2: duplicate=false, response 201 "order created"
	// orders: 2
}

// A service receiving hookgate's forwards: the middleware verifies the
// Standard Webhooks signature with the target's signing secret, runs the
// handler at most once per event (its change on consumer.Tx), and replays
// the stored answer to a redelivery.
func ExampleMiddleware() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	if err := consumer.Migrate(ctx, pool); err != nil {
		log.Fatal(err)
	}
	mc := consumer.DefaultMiddlewareConfig() // a 1 MiB body limit, a 5 s in-flight wait
	mc.DB = pool
	mc.Consumer = "orders"
	mc.Secrets = []string{os.Getenv("ORDERS_SIGNING_SECRET")} // the target's signing_secret in hookgate.yaml
	once, err := consumer.Middleware(mc)
	if err != nil {
		log.Fatal(err)
	}
	http.Handle("POST /hooks/github", once(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx := consumer.Tx(r.Context())
		if _, err := tx.Exec(r.Context(), `INSERT INTO orders (event_id) VALUES ($1)`, r.Header.Get("webhook-id")); err != nil {
			http.Error(w, "try again", http.StatusServiceUnavailable) // rolled back; hookgate retries
			return
		}
		w.WriteHeader(http.StatusNoContent) // committed with the event's key
	})))
	log.Fatal(http.ListenAndServe(":9000", nil))
}

// exampleDB returns a pool on a schema of its own in the test database,
// with the package's table and an orders table, and a function that drops
// the schema and closes the pool.
func exampleDB(ctx context.Context) (*pgxpool.Pool, func()) {
	cfg, err := pgxpool.ParseConfig(os.Getenv(pgtest.EnvURL))
	if err != nil {
		log.Fatal(err)
	}
	schema := fmt.Sprintf("example_%d", os.Getpid())
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := pool.Exec(ctx, fmt.Sprintf(`DROP SCHEMA IF EXISTS %[1]s CASCADE; CREATE SCHEMA %[1]s;
CREATE TABLE %[1]s.orders (event_id text NOT NULL)`, schema)); err != nil {
		log.Fatal(err)
	}
	if err := consumer.Migrate(ctx, pool); err != nil {
		log.Fatal(err)
	}
	return pool, func() {
		if _, err := pool.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			log.Print(err)
		}
		pool.Close()
	}
}
