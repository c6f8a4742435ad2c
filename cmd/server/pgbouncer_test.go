package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/testing/brokertest"
	"github.com/hookgate/hookgate/internal/testing/pgtest"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// TestServeThroughPgBouncer: hookgate sends PostgreSQL a session setting
// at connect (idle_in_transaction_session_timeout), which PgBouncer
// refuses unless its ignore_startup_parameters lists it. Without that,
// serve stops at once with an error that names both settings operations.md
// gives; a search_path in the URL, which PgBouncer refuses too, with one
// that says to make it the role's default. With them, an api process and a worker process behind one
// PgBouncer in session mode work as they do connected directly: a burst of
// concurrent deliveries is stored once each, each retry is answered from
// it, and every forward reaches the target through the worker (River's
// LISTEN included).
func TestServeThroughPgBouncer(t *testing.T) {
	t.Parallel()
	pool, dsn := pgtest.NewDB(t)

	refused := brokertest.StartPgBouncer(t, dsn)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	err := run(ctx, []string{"serve", "--role", "api", "--addr", "127.0.0.1:0", "--config", writeConfig(t, senderConfig)},
		envOf("DATABASE_URL", refused), io.Discard, newLogSink())
	if err == nil || !strings.Contains(err.Error(), "unsupported startup parameter") ||
		!strings.Contains(err.Error(), "ignore_startup_parameters") || !strings.Contains(err.Error(), "idle_transaction_timeout = 30") {
		t.Fatalf("serve through a PgBouncer that refuses the setting: %v; want PgBouncer's refusal and what to set", err)
	}

	through := brokertest.StartPgBouncer(t, dsn,
		"ignore_startup_parameters = idle_in_transaction_session_timeout", "idle_transaction_timeout = 30")
	// A setting of the URL that PgBouncer refuses: the error says to make
	// it the role's default.
	ctx2, cancel2 := context.WithTimeout(t.Context(), time.Minute)
	defer cancel2()
	err = run(ctx2, []string{"serve", "--role", "api", "--addr", "127.0.0.1:0", "--config", writeConfig(t, senderConfig)},
		envOf("DATABASE_URL", withParam(through, "search_path=public")), io.Discard, newLogSink())
	if err == nil || !strings.Contains(err.Error(), "unsupported startup parameter: search_path") || !strings.Contains(err.Error(), "ALTER ROLE … SET search_path") {
		t.Fatalf("serve through PgBouncer with search_path in the URL: %v; want PgBouncer's refusal and the role's default as the way", err)
	}
	tg := testkit.NewTarget(t, testkit.Always(http.StatusOK))
	cfg := senderConfig + "    forward:\n      - { name: ok, url: " + tg.URL + " }\n"
	api := startRunWith(t, through, cfg, "--role", "api")
	startRunWith(t, through, cfg, "--role", "worker")
	c := newClient(t)
	ids := makeIDs("pgb-", 300)
	l := &load{client: c, base: api.base, ids: ids, senders: 16, backoff: 20 * time.Millisecond}
	rl := l.start(t)
	<-rl.done
	reportLoad(t, rl.st)
	replayAll(t, c, api.base, ids, rl.st)
	checkStored(t, pool, ids, rl.st)
	testkit.Poll(t, stallTimeout, "every forward to reach the target through the worker", func() bool {
		return len(tg.Delivered()) == len(ids)
	})
}
