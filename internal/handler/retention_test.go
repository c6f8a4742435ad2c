package handler_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// Until its key expires a retry is replayed; after, the same delivery ID is
// accepted as a new event, even before the retention job has deleted the
// expired row.
func TestRetryReplayedUntilExpiryThenAcceptedAsNew(t *testing.T) {
	t.Parallel()
	s, pool := newDBServer(t, options{yaml: `
senders:
  - name: short
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    retention: 2s
`})
	body := []byte(`{"n":1}`)
	first := s.post("short", "r1", body)
	if first.status != http.StatusAccepted || first.replayed() {
		t.Fatalf("first delivery: %s", first)
	}
	var stored struct {
		EventID string `json:"event_id"`
	}
	if err := json.Unmarshal(first.body, &stored); err != nil {
		t.Fatal(err)
	}
	var expires time.Time
	if err := pool.QueryRow(t.Context(), `SELECT expires_at FROM processed_messages WHERE delivery_id = 'r1'`).Scan(&expires); err != nil {
		t.Fatal(err)
	}

	// Before the expiry every retry is a replay of the first response.
	r := s.post("short", "r1", body)
	if !time.Now().Before(expires) {
		t.Skip("the machine took longer than the 2s retention to send one retry") // cannot judge "before expiry"
	}
	if r.status != http.StatusAccepted || !r.replayed() || string(r.body) != string(first.body) {
		t.Fatalf("retry before expiry: %s; want the replayed first response", r)
	}

	// After it, the same ID is a new delivery with a new event.
	var again reply
	testkit.Poll(t, pollTimeout, "the key to expire", func() bool {
		again = s.post("short", "r1", body)
		return !again.replayed()
	})
	if again.status != http.StatusAccepted {
		t.Fatalf("delivery after expiry: %s", again)
	}
	var second struct {
		EventID string `json:"event_id"`
	}
	if err := json.Unmarshal(again.body, &second); err != nil {
		t.Fatal(err)
	}
	if second.EventID == stored.EventID {
		t.Errorf("delivery after expiry got the old event %s; want a new one", second.EventID)
	}
	wantCounts(t, pool, 1, 2) // one live key; both events (event retention is the job's business)
}
