package console_test

import (
	"context"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// orderedYAML: sender orders forwards to orders-svc, ordered by /key.
const orderedYAML = `
senders:
  - name: orders
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    forward:
      - name: orders-svc
        url: http://127.0.0.1:9/hooks/orders
        max_attempts: 3
        ordering: { json_pointer: /key }
`

// TestConsoleSkipBlockedKeyInBrowser: in a real browser an operator opens
// an ordered target's page, which shows a key held by a failed forward as
// "blocked by <event> (N waiting)", and clicks Skip: the page says the
// forward is skipped and no key is blocked, the key's next forward is
// released (its outbox row no longer waits), and the audit trail records
// the skip with the event.
func TestConsoleSkipBlockedKeyInBrowser(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	e := newEnvWith(t, orderedYAML, newOptions(), workOpts{})
	for _, id := range []string{"o-1", "o-2", "o-3"} {
		e.ingest(id, "application/json", `{"key":"order-7"}`)
	}
	first, second := e.eventOf("o-1"), e.eventOf("o-2")
	// The first forward failed for good, and holds its key.
	bg := context.Background()
	if _, err := e.pool.Exec(bg, `DELETE FROM forward_outbox WHERE sender = 'orders' AND event_id = $1`, first); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(bg, `UPDATE forward_keys SET blocked_event = $1, blocked_at = now() WHERE sender = 'orders' AND order_key = 'order-7'`, first); err != nil {
		t.Fatal(err)
	}
	do := func(what string, steps ...chromedp.Action[chromedp.Void]) { t.Helper(); browse(t, ctx, what, steps...) }
	do("sign in and open the target",
		chromedp.Navigate(e.url+"/console/"),
		chromedp.WaitVisible(chromedp.CSS(`#token`)),
		chromedp.SendKeys(chromedp.CSS(`#token`), token),
		chromedp.Submit(chromedp.CSS(`#token`)),
		chromedp.WaitVisible(chromedp.CSS(`section.sender`)),
		chromedp.Navigate(e.url+"/console/senders/orders/targets/orders-svc/failed"),
		chromedp.WaitVisible(chromedp.CSS(`table.blocked`)),
	)
	if got, want := textOf(t, ctx, `table.blocked td.blocked-by`), "blocked by "+first.String()+" (2 waiting)"; got != want {
		t.Errorf("the blocked key: %q, want %q", got, want)
	}
	if got := textOf(t, ctx, `table.blocked td.key`); got != "order-7" {
		t.Errorf("the blocked key's name: %q, want order-7", got)
	}
	do("skip the forward", chromedp.Click(chromedp.CSS(`table.blocked button.skip`)), chromedp.WaitVisible(chromedp.CSS(`p.notice`)))
	if got := textOf(t, ctx, `p.notice`); !strings.HasPrefix(got, "Skipped:") || !strings.Contains(got, "2 were waiting") {
		t.Errorf("the notice after Skip: %q", got)
	}
	if got := textOf(t, ctx, `h2 + p.none`); !strings.HasPrefix(got, "No key is blocked") {
		t.Errorf("the blocked keys after Skip: %q, want none", got)
	}
	var waits bool
	if err := e.pool.QueryRow(bg, `SELECT coalesce(leased_until = 'infinity', false) FROM forward_outbox WHERE sender = 'orders' AND event_id = $1`, second).Scan(&waits); err != nil {
		t.Fatal(err)
	}
	if waits {
		t.Error("the key's next forward still waits after the skip")
	}
	var action, outcome, event string
	if err := e.pool.QueryRow(bg, `SELECT action, outcome, event_id::text FROM audit_log WHERE action = 'skip'`).Scan(&action, &outcome, &event); err != nil {
		t.Fatalf("the audit trail's skip: %v", err)
	}
	if outcome != "ok" || event != first.String() {
		t.Errorf("the audit trail's skip: %s %s event %s, want ok, event %s", action, outcome, event, first)
	}
}
