package store

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/testing/pgtest"
	"github.com/hookgate/hookgate/internal/testing/storetest"
)

// TestEventSendersProbesTheIndex: EventSenders finds every sender that has
// events, in order (on Citus too, where a recursive CTE without a filter
// on the distribution column is refused), and on PostgreSQL each probe
// reads the first entry above the last sender in an index that leads with
// sender, never every event.
func TestEventSendersProbesTheIndex(t *testing.T) {
	t.Parallel()
	s, pool := store(t)
	ctx := t.Context()
	got, err := s.EventSenders(ctx)
	if err != nil || len(got) != 0 {
		t.Fatalf("EventSenders of an empty table = %v, %v; want none", got, err)
	}
	if _, err := storetest.InsertGenerated(ctx, s.DB(), storetest.Generated{Sender: "s", Senders: 20, Prefix: "d", N: 20000, Newest: time.Now(), Events: true}); err != nil {
		t.Fatal(err)
	}
	// ANALYZE: the plan is what the test examines.
	pgtest.Analyze(t, pool, "webhook_events")
	var want []string
	for i := range 20 {
		want = append(want, fmt.Sprintf("s%d", i))
	}
	slices.Sort(want)
	got, err = s.EventSenders(ctx)
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("EventSenders = %v, %v; want %v", got, err, want)
	}
	if pgtest.Citus() {
		return // EXPLAIN shows one shard's plan; the list above is what counts
	}
	for _, mode := range planModes() {
		plan := pgtest.Explain(t, pool, mode, nextEventSenderSQL, "text", "'s3'")
		if !strings.Contains(plan, "Limit") || !strings.Contains(plan, "Index Cond: ((sender IS NOT NULL) AND (sender > ") || strings.Contains(plan, "Seq Scan") {
			t.Errorf("%s: the probe does not read one entry of an index by sender:\n%s", mode, plan)
		}
	}
}
