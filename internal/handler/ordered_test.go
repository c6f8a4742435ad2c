package handler_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
)

// orderedYAML: sender fwd forwards to target a, ordered by /key.
const orderedYAML = `
senders:
  - name: fwd
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    forward:
      - name: a
        url: http://127.0.0.1:1/a
        ordering: { json_pointer: /key }
`

type (
	blockedKeyList struct {
		Items []struct {
			Key       string    `json:"key"`
			EventID   uuid.UUID `json:"event_id"`
			BlockedAt time.Time `json:"blocked_at"`
			Waiting   int64     `json:"waiting"`
			Summary   string    `json:"summary"`
		} `json:"items"`
	}
	skippedForward struct {
		Sender   string    `json:"sender"`
		Target   string    `json:"target"`
		EventID  uuid.UUID `json:"event_id"`
		Key      string    `json:"key"`
		Released int64     `json:"released"`
	}
)

// An ordered target's forwards get their key's positions at ingest: the
// first is released to the relay, the others wait. A failed forward that
// holds its key is listed as "blocked by <event> (N waiting)"; skipping a
// forward that holds nothing is 409 not-blocked; skipping the one that
// does releases the next (only the next), answers what it released, and is
// in the audit trail.
func TestSkipTheForwardThatBlocksItsKey(t *testing.T) {
	t.Parallel()
	s := newOpServer(t, opOptions{yaml: orderedYAML})
	ctx := context.Background()
	ids := make([]string, 3)
	for i := range ids {
		ids[i] = s.accept("fwd", "d-"+string(rune('1'+i)), []byte(`{"key":"order-7"}`))
	}
	other := s.accept("fwd", "d-other", []byte(`{"key":"order-8"}`))
	type row struct {
		Seq     int64
		Waiting bool
	}
	outbox := func() map[string]row {
		rows, err := s.pool.Query(ctx, `SELECT event_id::text, seq, coalesce(leased_until = 'infinity', false) FROM forward_outbox WHERE sender = 'fwd' AND order_key IS NOT NULL`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		out := map[string]row{}
		for rows.Next() {
			var (
				id string
				r  row
			)
			if err := rows.Scan(&id, &r.Seq, &r.Waiting); err != nil {
				t.Fatal(err)
			}
			out[id] = r
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	ob := outbox()
	for i, id := range ids {
		if want := (row{Seq: int64(i + 1), Waiting: i > 0}); ob[id] != want {
			t.Errorf("outbox row of event %d: %+v, want %+v", i+1, ob[id], want)
		}
	}
	if want := (row{Seq: 1}); ob[other] != want {
		t.Errorf("outbox row of the other key's event: %+v, want %+v", ob[other], want)
	}

	heldOf := func(id string) string {
		t.Helper()
		d := s.delivery("fwd", id)
		if len(d.Forwards) != 1 || d.Forwards[0].Held == nil {
			return fmt.Sprintf("%+v", d.Forwards)
		}
		return *d.Forwards[0].Held
	}
	if got := heldOf("d-3"); got != "waiting for its ordering key's turn (2 before it)" {
		t.Errorf("the third forward's held: %q", got)
	}
	// The first forward fails for good: its row is gone (relayed), and it
	// holds its key.
	if _, err := s.pool.Exec(ctx, `DELETE FROM forward_outbox WHERE sender = 'fwd' AND event_id = $1`, ids[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, `UPDATE forward_keys SET blocked_event = $1, blocked_at = now() WHERE sender = 'fwd' AND order_key = 'order-7'`, ids[0]); err != nil {
		t.Fatal(err)
	}
	var list blockedKeyList
	decode(t, s.call(http.MethodGet, "/v1/senders/fwd/targets/a/blocked"), http.StatusOK, http.MethodGet, routeTargetBlocked, &list)
	if len(list.Items) != 1 || list.Items[0].Key != "order-7" || list.Items[0].EventID.String() != ids[0] || list.Items[0].Waiting != 2 ||
		list.Items[0].Summary != "blocked by "+ids[0]+" (2 waiting)" {
		t.Fatalf("blocked keys: %+v, want order-7 blocked by %s (2 waiting)", list.Items, ids[0])
	}

	if got, want := heldOf("d-2"), "blocked by "+ids[0]+" (2 waiting)"; got != want {
		t.Errorf("the second forward's held: %q, want %q", got, want)
	}
	r := s.postJSON("/v1/senders/fwd/targets/a/forwards/"+ids[1]+"/skip", "")
	wantProblem(t, r, http.StatusConflict, "not-blocked")
	wantSpecBody(t, r, http.MethodPost, routeForwardSkip)
	if ob := outbox(); !ob[ids[1]].Waiting {
		t.Errorf("a refused skip released the second forward: %+v", ob[ids[1]])
	}

	var sk skippedForward
	decode(t, s.postJSON("/v1/senders/fwd/targets/a/forwards/"+ids[0]+"/skip", ""), http.StatusOK, http.MethodPost, routeForwardSkip, &sk)
	if sk.Sender != "fwd" || sk.Target != "a" || sk.EventID.String() != ids[0] || sk.Key != "order-7" || sk.Released != 2 {
		t.Errorf("skip answer %+v, want fwd/a, event %s, key order-7, 2 released", sk, ids[0])
	}
	ob = outbox()
	if ob[ids[1]].Waiting || !ob[ids[2]].Waiting {
		t.Errorf("after the skip: second forward %+v (want released), third %+v (want waiting)", ob[ids[1]], ob[ids[2]])
	}
	decode(t, s.call(http.MethodGet, "/v1/senders/fwd/targets/a/blocked"), http.StatusOK, http.MethodGet, routeTargetBlocked, &list)
	if len(list.Items) != 0 {
		t.Errorf("blocked keys after the skip: %+v, want none", list.Items)
	}
	// Skipping it again: it holds nothing now.
	wantProblem(t, s.postJSON("/v1/senders/fwd/targets/a/forwards/"+ids[0]+"/skip", ""), http.StatusConflict, "not-blocked")

	var skips []auditEntry
	for _, e := range s.audit("Bearer "+testToken, "") {
		if e.Action == "skip" {
			skips = append(skips, e)
		}
	}
	if len(skips) != 3 {
		t.Fatalf("audit trail: %d skips, want 3 (one done, two refused): %+v", len(skips), skips)
	}
	done := skips[1] // newest first: refused, ok, refused
	if done.Outcome != "ok" || done.EventID == nil || done.EventID.String() != ids[0] || done.Target == nil || *done.Target != "a" || done.Details["key"] != "order-7" {
		t.Errorf("audit of the skip: %+v, want ok, event %s, target a, key order-7", done, ids[0])
	}
	if skips[0].Outcome != "refused" || skips[2].Outcome != "refused" {
		t.Errorf("audit of the refused skips: %+v, %+v; want refused", skips[0], skips[2])
	}

	wantProblem(t, s.call(http.MethodGet, "/v1/senders/fwd/targets/a/blocked?limit=0"), http.StatusBadRequest, "invalid-parameter")
}
