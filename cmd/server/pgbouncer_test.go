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
// gives; with a search_path in the URL, which PgBouncer refuses too, with
// one that says to make it the role's default. With the settings, an api
// process and a worker process behind one PgBouncer in session mode work
// as they do connected directly: a burst of concurrent deliveries is
// stored once each, each retry is answered from it, and every forward
// reaches the target through the worker (River's LISTEN included).
func TestServeThroughPgBouncer(t *testing.T) {
	t.Parallel()
	pool, dsn := pgtest.NewDB(t)
	// refusal runs serve on url, and fails unless it stops with an error
	// that holds every one of want.
	refusal := func(url string, want ...string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		err := run(ctx, []string{"serve", "--role", "api", "--addr", "127.0.0.1:0", "--config", writeConfig(t, senderConfig)},
			envOf("DATABASE_URL", url), io.Discard, newLogSink())
		for _, w := range want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Fatalf("serve through PgBouncer: %v; want an error with %q", err, w)
			}
		}
	}
	refusal(brokertest.StartPgBouncer(t, dsn),
		"unsupported startup parameter: idle_in_transaction_session_timeout", "ignore_startup_parameters", "idle_transaction_timeout = 30")

	through := brokertest.StartPgBouncer(t, dsn,
		"ignore_startup_parameters = idle_in_transaction_session_timeout", "idle_transaction_timeout = 30")
	refusal(withParam(through, "search_path=public"), "unsupported startup parameter: search_path", "ALTER ROLE … SET search_path")

	tg := testkit.NewTarget(t, testkit.Always(http.StatusOK))
	cfg := senderConfig + "    forward:\n      - { name: ok, url: " + tg.URL + " }\n"
	api := startRunWith(t, through, cfg, "--role", "api")
	startRunWith(t, through, cfg, "--role", "worker")
	burstStoredAndForwarded(t, api.base, pool, tg, "pgb-", 300)
}
