package console_test

import (
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/riverqueue/river/rivertype"

	"github.com/hookgate/hookgate/internal/testing/queuetest"
)

// TestConsoleDeliveriesShowForwardStates: each row of the deliveries list
// says in words what its event's forwards are doing, by their newest
// forward to each target: still in the outbox (pending), failed, retrying
// after a failed attempt whose retry is due soon (River leaves it
// available), and a failure redelivered (pending again).
func TestConsoleDeliveriesShowForwardStates(t *testing.T) {
	t.Parallel()
	e := newEnv(t, newOptions())
	ctx := t.Context()
	for _, id := range []string{"s-outbox", "s-failed", "s-retrying", "s-redelivered"} {
		e.ingest(id, "application/json", `{}`)
	}
	e.failForwards("s-failed", "target answered 400")
	e.failForwards("s-redelivered", "target answered 400")
	e.failForwards("s-retrying", "target answered 500")
	sd, _ := e.cfg.Sender("orders")
	jobs, err := e.rc.Redeliver(ctx, sd, e.eventOf("s-retrying"), "s-retrying")
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		if err := queuetest.New(e.pool).SetForwardJob(ctx, j.JobID, queuetest.JobFixture{State: rivertype.JobStateAvailable, Attempt: 1,
			Errors: []string{"target answered 500"}, ScheduledAt: time.Now().Add(3 * time.Second)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.rc.Redeliver(ctx, sd, e.eventOf("s-redelivered"), "s-redelivered"); err != nil {
		t.Fatal(err)
	}

	c := e.client()
	e.signIn(c)
	p := e.do(c, http.MethodGet, "/console/senders/orders/deliveries", nil, nil)
	if p.status != http.StatusOK {
		t.Fatalf("deliveries list: %d", p.status)
	}
	row := regexp.MustCompile(`(?s)/deliveries/(s-[a-z]+)">.*?<td class="forwards">([^<]*)</td>`)
	got := map[string]string{}
	for _, m := range row.FindAllStringSubmatch(p.body, -1) {
		got[m[1]] = m[2]
	}
	want := map[string]string{"s-outbox": "1 pending", "s-failed": "1 failed", "s-retrying": "1 retrying", "s-redelivered": "1 pending"}
	for id, w := range want {
		if got[id] != w {
			t.Errorf("delivery %s: forwards %q, want %q (all: %v)", id, got[id], w, got)
		}
	}
	// The exact lookup of one delivery says the same.
	p = e.do(c, http.MethodGet, "/console/senders/orders/deliveries?delivery_id=s-retrying", nil, nil)
	if m := row.FindStringSubmatch(p.body); m == nil || m[2] != "1 retrying" {
		t.Errorf("lookup of s-retrying: forwards %q, want 1 retrying", m)
	}
}
