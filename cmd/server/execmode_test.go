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
// its Go type alone. With the mode set:
//   - concurrent deliveries to one target that answers 200 and one that
//     answers 500 are recorded by the process that attempted them: every
//     delivered forward as a forward_delivered row, every failed one as a
//     retrying job, none left in the outbox for the relay;
//   - the operator API lists a target's forwards (it reads their events'
//     types by an array of IDs);
//   - a reload through the API is in the audit trail with its details
//     (JSON).
func TestQueryExecModeInURL(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"exec", "simple_protocol"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			pool, dsn := pgtest.NewDB(t)
			ok := testkit.NewTarget(t, func(int, *http.Request) testkit.Answer { return testkit.Answer{Status: http.StatusOK} })
			bad := testkit.NewTarget(t, func(int, *http.Request) testkit.Answer { return testkit.Answer{Status: http.StatusInternalServerError} })
			cfg := senderConfig + fmt.Sprintf(`    forward:
      - name: ok
        url: %s
      - name: bad
        url: %s
        max_attempts: 5
`, ok.URL, bad.URL)
			token := randHex(16)
			// Retries an hour away: the failed forwards stay as the
			// recording left them.
			s := startRunWith(t, withSetting(t, dsn, "default_query_exec_mode", mode), cfg,
				"--admin-token", token, "--forward-backoff-base", "1h", "--forward-backoff-max", "1h")

			const n = 24
			var (
				wg   sync.WaitGroup
				errs = make([]error, n)
			)
			for i := range n {
				wg.Go(func() {
					id := "exec-" + mode + "-" + strconv.Itoa(i)
					r, err := deliver(t.Context(), http.DefaultClient, s.base, id, bodyFor(id))
					if err == nil {
						_, err = parseAccepted(r, id)
					}
					errs[i] = err
				})
			}
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					t.Fatalf("delivery %d: %v", i, err)
				}
			}

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

			for _, c := range [][2]string{{http.MethodGet, "/v1/senders/acme/targets/ok/forwards"}, {http.MethodPost, "/v1/config/reload"}} {
				if r := operator(t, http.DefaultClient, c[0], s.base, c[1], token); r.status != http.StatusOK {
					t.Errorf("%s %s: %d %s", c[0], c[1], r.status, r.body)
				}
			}
			if got := count(`SELECT count(*) FROM audit_log WHERE action = 'reload' AND details ? 'hash'`); got != 1 {
				t.Errorf("%d reloads with their details in the audit trail, want 1", got)
			}
		})
	}
}
