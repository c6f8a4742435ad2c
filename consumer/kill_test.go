package consumer_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/consumer"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// The child process of TestKilledUnderLoad is this test binary, started
// with these variables: a service that applies each forward through the
// middleware.
const (
	envServiceDSN  = "CONSUMER_TEST_SERVICE_DSN"
	envServiceAddr = "CONSUMER_TEST_SERVICE_ADDR"
)

// serviceMain runs the service when the process was started as one, and
// reports whether it was. The service records each message in effects (a
// table without a unique constraint, so that a change applied twice shows)
// and runs until it is killed or its standard input closes.
func serviceMain() bool {
	dsn := os.Getenv(envServiceDSN)
	if dsn == "" {
		return false
	}
	if err := service(dsn, os.Getenv(envServiceAddr)); err != nil {
		fmt.Fprintln(os.Stderr, "service:", err)
		os.Exit(1)
	}
	return true
}

func service(dsn, addr string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); stop() }() // the parent went away
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return err
	}
	defer pool.Close()
	mw, err := consumer.Middleware(mwConfig(pool, "svc", secretA))
	if err != nil {
		return err
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := consumer.Tx(r.Context()).Exec(r.Context(), `INSERT INTO effects (message_id) VALUES ($1)`, r.Header.Get("webhook-id")); err != nil {
			http.Error(w, "cannot store", http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	fmt.Println("ready")
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { <-ctx.Done(); _ = srv.Close() }()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// child is a running service process.
type child struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func startService(t *testing.T, dsn, addr string) *child {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), envServiceDSN+"="+dsn, envServiceAddr+"="+addr)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, done: make(chan struct{})}
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		ok := sc.Scan() && sc.Text() == "ready"
		ready <- ok
		_, _ = io.Copy(io.Discard, out)
		_ = cmd.Wait()
		_ = stdin.Close()
		close(c.done)
	}()
	if !<-ready {
		t.Fatal("the service did not start")
	}
	return c
}

// kill SIGKILLs the service and waits for it to be gone.
func (c *child) kill() {
	_ = c.cmd.Process.Kill()
	<-c.done
}

// TestKilledUnderLoad: a service using the middleware is SIGKILLed three
// times while signed forwards of 300 messages arrive from 16 clients that
// retry each until it gets a 2xx (as hookgate does). In the end every
// message has been answered 2xx and has one row of its state change, never two.
func TestKilledUnderLoad(t *testing.T) {
	testkit.Slow(t, "kills a process under load")
	t.Parallel()
	ctx := testCtx(t)
	pool, dsn := newDB(t)
	if _, err := pool.Exec(ctx, `CREATE TABLE effects (message_id text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

	var mu sync.Mutex
	svc := startService(t, dsn, addr)
	defer func() { mu.Lock(); svc.kill(); mu.Unlock() }()

	const messages, clients = 300, 16
	ids := make(chan string, messages)
	for i := range messages {
		ids <- fmt.Sprintf("evt_%03d", i)
	}
	close(ids)
	var answered atomic.Int64
	kills := []int64{50, 130, 210} // kill after this many messages were answered 2xx
	killed := make(chan struct{})
	go func() {
		defer close(killed)
		for _, at := range kills {
			for answered.Load() < at {
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Millisecond):
				}
			}
			mu.Lock()
			svc.kill()
			svc = startService(t, dsn, addr)
			mu.Unlock()
		}
	}()
	client := &http.Client{Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	var wg sync.WaitGroup
	var failures atomic.Int64 // attempts without a 2xx: the kills' doing
	for range clients {
		wg.Go(func() {
			for id := range ids {
				body := fmt.Appendf(nil, `{"id":%q}`, id)
				for {
					if ctx.Err() != nil {
						t.Errorf("%s: not delivered before the deadline", id)
						return
					}
					resp, err := client.Do(signed(t, "http://"+addr+"/", secretA, id, body))
					if err == nil {
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						if resp.StatusCode/100 == 2 {
							answered.Add(1)
							break
						}
					}
					failures.Add(1)
					select { // the service is restarting: pace the retries
					case <-ctx.Done():
					case <-time.After(5 * time.Millisecond):
					}
				}
			}
		})
	}
	wg.Wait()
	<-killed
	if answered.Load() != messages {
		t.Fatalf("%d of %d messages answered 2xx", answered.Load(), messages)
	}
	var distinct, total, twice int
	if err := pool.QueryRow(ctx, `SELECT count(DISTINCT message_id), count(*),
  (SELECT count(*) FROM (SELECT 1 FROM effects GROUP BY message_id HAVING count(*) > 1) d) FROM effects`).Scan(&distinct, &total, &twice); err != nil {
		t.Fatal(err)
	}
	if distinct != messages || total != messages || twice != 0 {
		t.Fatalf("%d effects of %d messages (%d applied more than once), want exactly one per message", total, distinct, twice)
	}
	if failures.Load() == 0 {
		t.Fatal("no attempt failed: the service was not killed under load")
	}
	t.Logf("3 kills under load: %d attempts failed and were retried; every message applied once", failures.Load())
}
