package dedup

import (
	"crypto/sha256"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/hookgate/hookgate/internal/idempotency"
	"github.com/hookgate/hookgate/internal/testing/pgtest"
)

// TestPipelinePlansProbeTheKey checks that the pipeline's statements that
// join the deliveries' arrays with processed_messages (the read, and a
// change statement guarded by ClaimedRow) probe the key's index row by row,
// in generic and custom plans, on a table that is empty and never analyzed
// (a new database: plans cached then stay on the connection while the table
// grows), on one analyzed with one key and grown since (the sender's keys
// look like one row, and an index whose first column is the sender looks
// as good as the key's; a new sender's keys look like none) and on a large
// analyzed one. A hash join or a sequential scan of
// processed_messages would read the whole table for every delivery.
func TestPipelinePlansProbeTheKey(t *testing.T) {
	t.Parallel()
	pgtest.SkipOnCitus(t, "it checks PostgreSQL's plans of the PostgreSQL forms (a claim by unnest, forced generic plans); "+
		"Citus cannot make generic plans of INSERT … SELECT, and TestCitusBatchOnOneShard checks the Citus forms' routing")
	_, pool := store(t)
	ctx := t.Context()
	if _, err := pool.Exec(ctx, `CREATE TABLE marks (event_id uuid NOT NULL, delivery_id text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	guarded := `INSERT INTO marks (event_id, delivery_id)
SELECT m.* FROM unnest($2::uuid[], $3::text[]) AS m(event_id, delivery_id) WHERE ` + ClaimedRow("m.delivery_id", "m.event_id")
	joined := `INSERT INTO marks (event_id, delivery_id)
SELECT m.* FROM unnest($2::uuid[], $3::text[]) AS m(event_id, delivery_id) ` + ClaimedJoin("m.delivery_id", "m.event_id")
	for _, size := range []string{"empty", "grown", "large"} {
		switch size {
		case "grown":
			// Statistics taken when the table held one key, of one sender:
			// they say a sender's keys are one row.
			now := time.Now()
			claimKeys(t, ctx, pool, idempotency.Delivery{Key: idempotency.Key{Sender: "seed", DeliveryID: "seed"},
				EventID: uuid.New(), Response: idempotency.Response{Status: 202, ContentType: "application/json", Body: []byte("{}")},
				ReceivedAt: now, ExpiresAt: now.Add(24 * time.Hour)})
			pgtest.Analyze(t, pool, "processed_messages")
			// Then 50,000 keys of 20 senders, one a second back from now,
			// claimed as the pipeline claims them.
			bySender := make([][]idempotency.Delivery, 20)
			for i := 1; i <= 50000; i++ {
				d := idempotency.Delivery{Key: idempotency.Key{Sender: fmt.Sprintf("s%d", i%20), DeliveryID: fmt.Sprintf("d%d", i)},
					RequestSHA256: sha256.Sum256([]byte(strconv.Itoa(i))), EventID: uuid.New(),
					Response:   idempotency.Response{Status: 202, ContentType: "application/json", Body: []byte("{}")},
					ReceivedAt: now.Add(-time.Duration(i) * time.Second), ExpiresAt: now.Add(24 * time.Hour)}
				bySender[i%20] = append(bySender[i%20], d)
			}
			for _, ds := range bySender {
				claimKeys(t, ctx, pool, ds...)
			}
		case "large":
			// ANALYZE: the plans are what the test examines.
			pgtest.Analyze(t, pool, "processed_messages")
		}
		for _, tc := range []struct {
			name, sql, types, args string
		}{
			{"read", storedSQL, "text, text[], uuid[]", "'s7', '{d7,d27,x}', ARRAY[gen_random_uuid(), gen_random_uuid(), gen_random_uuid()]"},
			{"guarded change", guarded, "text, uuid[], text[]", "'s7', ARRAY[gen_random_uuid(), gen_random_uuid()], '{d7,x}'"},
			{"joined change", joined, "text, uuid[], text[]", "'s7', ARRAY[gen_random_uuid(), gen_random_uuid()], '{d7,x}'"},
		} {
			for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
				// Under the settings that the pipeline, and the read of
				// held keys, send before them.
				plan := pgtest.ExplainUnder(t, pool, probeSettingsSQL, mode, tc.sql, tc.types, tc.args)
				if !strings.Contains(plan, "processed_messages_key") || strings.Contains(plan, "Seq Scan on processed_messages") || strings.Contains(plan, "Hash") {
					t.Errorf("%s, %s table, %s: plan does not probe processed_messages_key row by row:\n%s", tc.name, size, mode, plan)
				}
				// Whatever the statistics: without the key's index, every
				// plan left has a path the settings disable.
				plan = pgtest.ExplainUnder(t, pool, `ALTER TABLE processed_messages DROP CONSTRAINT processed_messages_key CASCADE; `+probeSettingsSQL, mode, tc.sql, tc.types, tc.args)
				if !pgtest.PlanTextDisabled(plan) {
					t.Errorf("%s, %s table, %s: without processed_messages_key, a plan without a disabled path is left, which statistics can make the cheapest:\n%s", tc.name, size, mode, plan)
				}
			}
		}
		// The forgetting of an expired key: the key's probe selects the
		// row, the DELETE takes it by ctid. Under its settings every scan
		// but by ctid is disabled, so every plan has a disabled path; the
		// one through the key's index has the fewest, whatever the
		// statistics, and without that index every plan left has more.
		const forgetTypes, forgetArgs = "text, text, timestamptz", "'s7', 'd7', now() + interval '2 days'"
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			plan := pgtest.ExplainUnder(t, pool, forgetSettingsSQL, mode, forgetExpiredSQL, forgetTypes, forgetArgs)
			if !strings.Contains(plan, "Tid Scan on processed_messages") || !strings.Contains(plan, "processed_messages_key") {
				t.Errorf("forget, %s table, %s: plan does not probe processed_messages_key and delete by ctid:\n%s", size, mode, plan)
			}
			without := pgtest.ExplainUnder(t, pool, `ALTER TABLE processed_messages DROP CONSTRAINT processed_messages_key CASCADE; `+forgetSettingsSQL, mode, forgetExpiredSQL, forgetTypes, forgetArgs)
			if n, m := pgtest.PlanTextDisabledNodes(plan), pgtest.PlanTextDisabledNodes(without); m <= n {
				t.Errorf("forget, %s table, %s: without processed_messages_key, a plan with %d disabled paths is left, as few as the key's probe has (%d): statistics can make it the cheapest:\n%s\nwith the key:\n%s", size, mode, m, n, without, plan)
			}
		}
	}
}
