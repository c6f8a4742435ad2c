package main

import (
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"testing"

	"github.com/hookgate/hookgate/internal/testing/pgtest"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// TestQueryExecModeInURL: a DATABASE_URL that sets pgx's
// default_query_exec_mode to a mode that prepares nothing (exec, or the
// simple protocol an older pooler needs) names each parameter's type from
// its Go type alone. The fast path's recording sends arrays of its own
// types; with the mode set, concurrent deliveries to one target that
// answers 200 and one that answers 500 are recorded by the process that
// attempted them: every delivered forward as a forward_delivered row, every
// failed one as a retrying job, none left in the outbox for the relay.
func TestQueryExecModeInURL(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"exec", "simple_protocol"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			pool, dsn := pgtest.NewDB(t)
			u := withSetting(t, dsn, "default_query_exec_mode", mode)
			ok := testkit.NewTarget(t, func(int, *http.Request) testkit.Answer { return testkit.Answer{Status: http.StatusOK} })
			bad := testkit.NewTarget(t, func(int, *http.Request) testkit.Answer { return testkit.Answer{Status: http.StatusInternalServerError} })
			cfg := senderConfig + fmt.Sprintf(`    forward:
      - name: ok
        url: %s
      - name: bad
        url: %s
        max_attempts: 5
`, ok.URL, bad.URL)
			// Retries an hour away: the failed forwards stay as the
			// recording left them.
			s := startRunWith(t, u, cfg, "--forward-backoff-base", "1h", "--forward-backoff-max", "1h")

			const n = 24
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() { deliverAll(t, http.DefaultClient, s.base, []string{"exec-" + mode + "-" + strconv.Itoa(i)}) })
			}
			wg.Wait()

			count := func(sql string) int {
				var c int
				if err := pool.QueryRow(t.Context(), sql).Scan(&c); err != nil {
					t.Fatal(err)
				}
				return c
			}
			delivered := func() int {
				return count(`SELECT count(*) FROM forward_delivered WHERE sender = 'acme' AND target = 'ok'`)
			}
			retrying := func() int {
				return count(`SELECT count(*) FROM river_job WHERE args->>'target' = 'bad' AND state = 'retryable' AND attempt = 1`)
			}
			testkit.Poll(t, stallTimeout, "every forward's first attempt recorded by the fast path", func() bool {
				return delivered() == n && retrying() == n && outboxRows(t, pool) == 0
			}, func() string {
				return fmt.Sprintf("%d delivered rows, %d retrying jobs, %d outbox rows; jobs %v", delivered(), retrying(), outboxRows(t, pool), jobStates(t, pool))
			})
			if got := count(`SELECT count(*) FROM river_job WHERE args->>'target' = 'ok'`); got != 0 {
				t.Errorf("%d jobs of target ok, want none: its forwards were delivered by the fast path", got)
			}
		})
	}
}
