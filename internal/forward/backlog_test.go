package forward_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/hookgate/hookgate/internal/forward"
	"github.com/hookgate/hookgate/internal/queue"
	"github.com/hookgate/hookgate/internal/testing/pgtest"
	"github.com/hookgate/hookgate/internal/testing/storetest"
)

// TestBacklogCollectorDuringOutage: a scrape that cannot read the database
// still reports the backlog (the last counts taken) and says it could not
// count (hookgate_forward_backlog_up 0), so that the backlog alert does not
// go to "no data" during an outage, and the outage alert fires.
func TestBacklogCollectorDuringOutage(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDB(t)
	for i := range 3 {
		r := storetest.Outbox{Sender: "acme", EventID: uuid.New(), Target: "t", DeliveryID: fmt.Sprintf("d%d", i+1)}
		if err := storetest.InsertOutbox(t.Context(), pool, r, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	// An ordering key that a failed forward holds.
	if _, err := pool.Exec(t.Context(), `INSERT INTO forward_keys (sender, target, order_key, last_seq, head_seq, blocked_event, blocked_at, updated_at)
VALUES ('acme', 't', 'order-7', 3, 1, gen_random_uuid(), now(), now())`); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(forward.NewBacklogCollector(queue.NewJobs(pool), func() []string { return []string{"acme"} }))
	want := func(when, up string) {
		t.Helper()
		expected := `# HELP hookgate_forward_backlog_up 1 when the last scrape counted the forward backlog in the database, 0 when it could not (hookgate_forward_backlog then repeats the last counts taken).
# TYPE hookgate_forward_backlog_up gauge
hookgate_forward_backlog_up ` + up + `
# HELP hookgate_forward_blocked_keys Ordering keys that a forward which failed for good holds (on_failure: hold): their later forwards wait until an operator redelivers or skips it. Counted with hookgate_forward_backlog.
# TYPE hookgate_forward_blocked_keys gauge
hookgate_forward_blocked_keys 1
`
		if err := testutil.GatherAndCompare(reg, strings.NewReader(expected), "hookgate_forward_backlog_up", "hookgate_forward_blocked_keys"); err != nil {
			t.Errorf("%s: %v", when, err)
		}
		n, err := testutil.GatherAndCount(reg, "hookgate_forward_backlog")
		if err != nil || n != 6 {
			t.Errorf("%s: %d hookgate_forward_backlog series, %v; want 6 (one per state)", when, n, err)
		}
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				if mf.GetName() == "hookgate_forward_backlog" && m.GetLabel()[0].GetValue() == "outbox" && m.GetGauge().GetValue() != 3 {
					t.Errorf("%s: outbox backlog %v; want 3", when, m.GetGauge().GetValue())
				}
			}
		}
	}
	want("database up", "1")
	pool.Close() // every query fails from here on, as in an outage
	want("database unreachable", "0")
}
