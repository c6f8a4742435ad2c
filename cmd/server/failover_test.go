package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/testing/pgtest"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// TestFailoverToASynchronousStandby: hookgate's DATABASE_URL names a
// standby and its primary, with target_session_attrs=read-write, as
// operations.md says. The standby is synchronous. In the middle of a load
// from 16 concurrent senders, the primary crashes (immediate shutdown) and
// the standby is promoted. Every delivery is then answered 2xx (a sender
// retries what got an error) and stored once on the new primary, every
// answer's event is the stored one, and /readyz is ready again: nothing
// answered 2xx was lost with the old primary.
func TestFailoverToASynchronousStandby(t *testing.T) {
	t.Parallel()
	primary := pgtest.StartCluster(t)
	if err := run(t.Context(), []string{"migrate"}, envOf("DATABASE_URL", primary.URL()), io.Discard, newLogSink()); err != nil {
		t.Fatal(err)
	}
	standby := primary.StartStandby(t, "hookgate_standby", true)
	both := strings.Replace(primary.URL(), "127.0.0.1:", "127.0.0.1:"+strconv.Itoa(standby.Port())+",127.0.0.1:", 1)
	both = withParam(withParam(both, "target_session_attrs=read-write"), "connect_timeout=5")
	s := startRun(t, both, "--role", "api")
	c := newClient(t)

	ids := makeIDs("failover-", 3000)
	// A third of the deliveries answered, the load goes on while the
	// test's goroutine (t.Fatal's) crashes the primary and promotes the
	// standby.
	var (
		answered atomic.Int64
		once     sync.Once
		third    = make(chan struct{})
	)
	l := &load{client: c, base: s.base, ids: ids, senders: 16, backoff: 20 * time.Millisecond,
		observe: func(r reply, err error) {
			if err == nil && r.status/100 == 2 && answered.Add(1) == int64(len(ids)/3) {
				once.Do(func() { close(third) })
			}
		}}
	rl := l.start(t)
	select {
	case <-third:
	case <-rl.done:
		t.Fatalf("the load ended after %d answers, before the failover", answered.Load())
	}
	primary.Stop(t)
	standby.Promote(t)
	<-rl.done
	reportLoad(t, rl.st)
	if len(rl.st.unfinished) > 0 {
		t.Fatalf("%d deliveries never answered 2xx after the failover", len(rl.st.unfinished))
	}
	pool, err := pgxpool.New(t.Context(), standby.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	checkStored(t, pool, ids, rl.st)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if r, err := get(ctx, c, s.base+"/readyz"); err != nil || r.status != http.StatusOK {
		t.Errorf("/readyz after the failover: %v %v, want 200", r, err)
	}
}

// hungHost listens on a port of its own, takes every TCP connection and
// never answers: a database host that froze, or a proxy whose backend is
// gone. It returns its host:port; the connections close with the test.
func hungHost(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String()
}

// TestAHostThatNeverAnswers: a database host that takes the connection and
// never answers does not hold hookgate for ever. Alone in DATABASE_URL,
// migrate and serve stop with a timeout (pgx waits for ever without
// connect_timeout, and had held serve's start, saying nothing); named
// before a working host, as the old primary of a failover would be, each
// connection goes on to the next host after the default connect timeout,
// and a burst of 100 deliveries from 16 concurrent senders is stored once
// each and forwarded.
func TestAHostThatNeverAnswers(t *testing.T) {
	t.Parallel()
	pool, dsn := pgtest.NewDB(t)
	hung := hungHost(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	working := u.Host
	u.Host = hung
	alone := u.String()
	for _, cmd := range []string{"migrate", "serve"} {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		start := time.Now()
		err := run(ctx, []string{cmd, "--addr", "127.0.0.1:0", "--config", writeConfig(t, senderConfig)}, envOf("DATABASE_URL", alone), io.Discard, newLogSink())
		expired := ctx.Err()
		cancel()
		if err == nil || expired != nil || !strings.Contains(err.Error(), "timeout") {
			t.Fatalf("%s against a host that never answers: %v after %s; want it to stop by itself with a timeout", cmd, err, time.Since(start).Round(time.Millisecond))
		}
		t.Logf("%s stopped after %s: %v", cmd, time.Since(start).Round(time.Millisecond), err)
	}

	both := strings.Replace(dsn, working, hung+","+working, 1)
	tg := testkit.NewTarget(t, testkit.Always(http.StatusOK))
	s := startRunWith(t, both, senderConfig+"    forward:\n      - { name: ok, url: "+tg.URL+" }\n")
	burstStoredAndForwarded(t, s.base, pool, tg, "hung-", 100)
}
