// Command harness serves hookgate's HTTP handler wired like cmd/server, with
// knobs cmd/server does not have, for the benchmark's experiments only
// (go run ./internal/bench -server harness …). It reads DATABASE_URL,
// HOOKGATE_ADDR and HOOKGATE_CONFIG like the server, and:
//
//	HARNESS_POOL_MAX_CONNS  the pool's size (default 32, like cmd/server)
//	HARNESS_LOG             json (like cmd/server) or discard (no request log)
//	HARNESS_MODE            "" (the real thing), fakedb (the whole handler,
//	                        but every transaction succeeds at once without
//	                        PostgreSQL: the cost of everything but the
//	                        database) or bare (a net/http handler that reads
//	                        the body and answers 202: the cost of HTTP alone)
//
// It stops on SIGTERM.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/dedup"
	"github.com/hookgate/hookgate/internal/handler"
	"github.com/hookgate/hookgate/migrations"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "harness:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	url := os.Getenv("DATABASE_URL")
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	if os.Getenv("HARNESS_LOG") == "discard" {
		log = slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelError + 1}))
	}
	cfg, err := config.Load(os.Getenv("HOOKGATE_CONFIG"))
	if err != nil {
		return err
	}
	if _, err := migrations.Up(ctx, url); err != nil {
		return err
	}
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return err
	}
	pc.MaxConns = 32
	if n, err := strconv.Atoi(os.Getenv("HARNESS_POOL_MAX_CONNS")); err == nil && n > 0 {
		pc.MaxConns = int32(n)
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return err
	}
	defer pool.Close()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector())
	ready := func(ctx context.Context) error { return pool.Ping(ctx) }
	var db dedup.Querier = pool
	if os.Getenv("HARNESS_MODE") == "fakedb" {
		db = fakeDB{}
	}
	var h http.Handler = handler.New(cfg, dedup.New(db, 0), ready, reg, log).Router()
	if os.Getenv("HARNESS_MODE") == "bare" {
		h = bare()
	}
	ln, err := net.Listen("tcp", os.Getenv("HOOKGATE_ADDR"))
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
	}()
	if err := hs.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// fakeDB is a dedup.Querier on which every batch succeeds at once.
type fakeDB struct{}

func (fakeDB) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults { return fakeResults{} }

func (fakeDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return errRow{errors.New("fakedb: no rows")}
}

type fakeResults struct{}

func (fakeResults) Exec() (pgconn.CommandTag, error) { return pgconn.NewCommandTag("INSERT 0 1"), nil }
func (fakeResults) Query() (pgx.Rows, error)         { return nil, errors.New("fakedb: no Query") }
func (fakeResults) QueryRow() pgx.Row                { return errRow{errors.New("fakedb: no QueryRow")} }
func (fakeResults) Close() error                     { return nil }
func (fakeResults) Tx() pgx.Tx                       { return nil }

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// bare answers 202 with a JSON body like the gateway's after reading the
// request body, and /readyz with 200.
func bare() http.Handler {
	resp := []byte(`{"event_id":"0193a1c2-7b4e-7c3d-9a8b-1234567890ab","sender":"bench","delivery_id":"fd-0-0","received_at":"2026-01-01T00:00:00.000000Z"}` + "\n")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.URL.Path == "/readyz" {
			w.WriteHeader(http.StatusOK)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(resp)))
		w.WriteHeader(http.StatusAccepted)
		_, _ = w.Write(resp)
	})
}
