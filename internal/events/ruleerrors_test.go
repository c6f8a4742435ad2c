package events_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/dedup"
	"github.com/hookgate/hookgate/internal/events"
	"github.com/hookgate/hookgate/internal/forward"
	"github.com/hookgate/hookgate/internal/idempotency"
	"github.com/hookgate/hookgate/internal/store"
	"github.com/hookgate/hookgate/internal/testing/pgtest"
)

// TestRuleErrorsStored: an event's rule errors are stored with it in its
// delivery's transaction, and read back by the event and the delivery;
// an event without any reads none. A message is cut to MaxRuleErrorBytes.
// Both the statement forms and a store whose pipelines go through the
// ingest function (as on Citus) store them: the function does not
// perform the insert of an event with rule errors, so that delivery runs
// in the statement forms.
func TestRuleErrorsStored(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDB(t)
	plain := dedup.Config{Pool: pool, InFlightWait: dedup.DefaultInFlightWait}
	delegated := plain
	delegated.Delegated = &dedup.Delegated{Function: "ingest_deliveries", Rows: []dedup.DelegatedRow{events.InsertRow(), forward.OutboxRow()}}
	if !pgtest.Citus() {
		delegated.Layout = dedup.LayoutDistributed
	}
	long := strings.Repeat("é", events.MaxRuleErrorBytes) // 2 bytes each
	errs := []events.RuleError{
		{Target: "analytics", Rule: "filter", Error: "filter: no such key: amount"},
		{Target: "chat", Rule: "filter", Error: long},
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	for name, cfg := range map[string]dedup.Config{"statements": plain, "delegated": delegated} {
		ingest, err := dedup.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for i, e := range []events.Event{
			{ID: newID(t), Sender: "s", DeliveryID: name + "-errors", ReceivedAt: now, Headers: http.Header{}, Body: []byte(`{}`), RuleErrors: errs},
			{ID: newID(t), Sender: "s", DeliveryID: name + "-none", ReceivedAt: now, Headers: http.Header{}, Body: []byte(`{}`)},
		} {
			d := idempotency.Delivery{Key: idempotency.Key{Sender: e.Sender, DeliveryID: e.DeliveryID}, EventID: e.ID,
				Response: idempotency.Response{Status: 202, ContentType: "application/json", Body: []byte("{}")}, ReceivedAt: now, ExpiresAt: now.Add(time.Hour)}
			res, err := ingest.Run(t.Context(), d, func(b *dedup.Batch) {
				events.QueueInsert(b, e)
				forward.QueueOutbox(b, e.ID, e.DeliveryID, now, []string{"orders"}, forward.Lease{})
			})
			if err != nil || res.Replayed {
				t.Fatalf("%s: insert event: %+v, %v", name, res, err)
			}
			got, err := store.New(pool).GetEvent(t.Context(), e.ID)
			if err != nil {
				t.Fatal(err)
			}
			rec, err := store.New(pool).GetDelivery(t.Context(), d.Key)
			if err != nil {
				t.Fatal(err)
			}
			if i == 1 {
				if got.RuleErrors != nil || rec.RuleErrors != nil {
					t.Errorf("%s: event without rule errors reads %v (event), %v (delivery); want nil", name, got.RuleErrors, rec.RuleErrors)
				}
				continue
			}
			for _, read := range [][]events.RuleError{got.RuleErrors, rec.RuleErrors} {
				if len(read) != 2 || read[0] != errs[0] || read[1].Target != "chat" || read[1].Rule != "filter" {
					t.Fatalf("%s: rule errors read %+v, want %+v", name, read, errs)
				}
				if n := len(read[1].Error); n > events.MaxRuleErrorBytes+3 || !strings.HasPrefix(long, strings.TrimSuffix(read[1].Error, "\ufffd")) {
					t.Errorf("%s: a long message is stored as %d bytes, want it cut to %d", name, n, events.MaxRuleErrorBytes)
				}
			}
		}
	}
}
