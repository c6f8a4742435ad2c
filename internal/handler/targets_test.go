package handler_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/forward"
	"github.com/hookgate/hookgate/internal/queue"
	"github.com/hookgate/hookgate/internal/sender"
	"github.com/hookgate/hookgate/internal/store"
	"github.com/hookgate/hookgate/internal/testing/queuetest"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

const (
	routeTargets         = "/v1/senders/{sender}/targets"
	routeTargetForwards  = "/v1/senders/{sender}/targets/{target}/forwards"
	routeTargetRedeliver = "/v1/senders/{sender}/targets/{target}/redeliver"
	routeTargetPause     = "/v1/senders/{sender}/targets/{target}/pause"
	routeTargetResume    = "/v1/senders/{sender}/targets/{target}/resume"
	routeTargetBlocked   = "/v1/senders/{sender}/targets/{target}/blocked"
	routeForwardSkip     = "/v1/senders/{sender}/targets/{target}/forwards/{event_id}/skip"
)

type (
	targetList struct {
		Items []targetStatus `json:"items"`
	}
	targetStatus struct {
		Name       string   `json:"name"`
		URL        string   `json:"url"`
		EventTypes []string `json:"event_types"`
		Rate       *string  `json:"rate"`
		Burst      *int     `json:"burst"`
		Breaker    struct {
			State       string     `json:"state"`
			OpenedAt    *time.Time `json:"opened_at"`
			PausedUntil *time.Time `json:"paused_until"`
		} `json:"breaker"`
		Pause    *operatorPause `json:"pause"`
		Forwards forwardCounts  `json:"forwards"`
		Held     *string        `json:"held"`
	}
	operatorPause struct {
		Since  time.Time  `json:"since"`
		Until  *time.Time `json:"until"`
		Reason string     `json:"reason"`
		By     string     `json:"by"`
	}
	forwardCounts struct {
		Pending   int64 `json:"pending"`
		Running   int64 `json:"running"`
		Retrying  int64 `json:"retrying"`
		Delivered int64 `json:"delivered"`
		Failed    int64 `json:"failed"`
	}
	targetForwardPage struct {
		Items      []targetForward `json:"items"`
		NextCursor *string         `json:"next_cursor"`
	}
	targetForward struct {
		JobID       int64      `json:"job_id"`
		EventID     uuid.UUID  `json:"event_id"`
		DeliveryID  string     `json:"delivery_id"`
		EventType   string     `json:"event_type"`
		State       string     `json:"state"`
		Held        *string    `json:"held"`
		Attempts    int        `json:"attempts"`
		MaxAttempts int        `json:"max_attempts"`
		LastStatus  *int       `json:"last_status"`
		LastError   *string    `json:"last_error"`
		CreatedAt   time.Time  `json:"created_at"`
		AttemptedAt *time.Time `json:"attempted_at"`
		FinishedAt  *time.Time `json:"finished_at"`
		DeliveredAt *time.Time `json:"delivered_at"`
	}
	bulkRedelivery struct {
		Matched      int64 `json:"matched"`
		AfterCurrent bool  `json:"after_current"`
	}
)

// targets reads GET /v1/senders/{sender}/targets, by target name.
func (s *opServer) targets(sender string) map[string]targetStatus {
	s.t.Helper()
	var l targetList
	decode(s.t, s.call(http.MethodGet, "/v1/senders/"+sender+"/targets"), http.StatusOK, http.MethodGet, routeTargets, &l)
	out := map[string]targetStatus{}
	for _, ts := range l.Items {
		out[ts.Name] = ts
	}
	return out
}

// forwardPage reads one page of a target's forwards with the query q.
func (s *opServer) forwardPage(sender, target, q string) targetForwardPage {
	s.t.Helper()
	var p targetForwardPage
	decode(s.t, s.call(http.MethodGet, "/v1/senders/"+sender+"/targets/"+target+"/forwards"+q), http.StatusOK, http.MethodGet, routeTargetForwards, &p)
	return p
}

// bulkRedeliver posts body to a target's redeliver and returns the number
// matched; it fails the test when the answer says they are queued after
// the current ones.
func (s *opServer) bulkRedeliver(sender, target, body string) int64 {
	s.t.Helper()
	b := s.bulkRedeliverAnswer(sender, target, body)
	if b.AfterCurrent {
		s.t.Errorf("bulk redelivery %s: after_current true, want false", body)
	}
	return b.Matched
}

// bulkRedeliverAnswer posts body to a target's redeliver and returns the
// answer.
func (s *opServer) bulkRedeliverAnswer(sender, target, body string) bulkRedelivery {
	s.t.Helper()
	req := s.opRequest(http.MethodPost, "/v1/senders/"+sender+"/targets/"+target+"/redeliver", "Bearer "+testToken)
	req.Body = nopCloser{strings.NewReader(body)}
	req.ContentLength = int64(len(body))
	req.Header.Set("Content-Type", "application/json")
	var b bulkRedelivery
	decode(s.t, s.do(req), http.StatusAccepted, http.MethodPost, routeTargetRedeliver, &b)
	return b
}

type nopCloser struct{ *strings.Reader }

func (nopCloser) Close() error { return nil }

// countJobs counts the River jobs of kind whose state is one of states
// (any state when none).
func (s *opServer) countJobs(kind string, states ...string) int {
	s.t.Helper()
	var js []rivertype.JobState
	for _, st := range states {
		js = append(js, rivertype.JobState(st))
	}
	n, err := queuetest.New(s.pool).CountJobs(s.t.Context(), kind, js...)
	if err != nil {
		s.t.Fatal(err)
	}
	return n
}

func TestTargetsListCountsAndBreaker(t *testing.T) {
	t.Parallel()
	ok := testkit.NewTarget(t, testkit.Sequence(http.StatusOK))
	bad := testkit.NewTarget(t, testkit.Sequence(http.StatusBadRequest))
	s := newOpServer(t, opOptions{work: true, yaml: fmt.Sprintf(`
senders:
  - name: fwd
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    forward:
      - name: good
        url: %s/ok
      - name: bad
        url: %s/bad?token=sekrit
  - name: quiet
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    forward:
      - name: idle
        url: http://127.0.0.1:1/never
        rate: 600/m
`, ok.Server(), bad.Server())})
	for i := range 3 {
		s.accept("fwd", fmt.Sprintf("d-%d", i), []byte(`{}`))
	}
	var got map[string]targetStatus
	// The counts are read by state, a statement each: a forward that ends
	// between two of them is counted in both, so wait for all to be ended.
	testkit.Poll(t, pollTimeout, "3 forwards delivered to good and 3 failed at bad, none under way", func() bool {
		got = s.targets("fwd")
		return got["good"].Forwards == (forwardCounts{Delivered: 3}) && got["bad"].Forwards == (forwardCounts{Failed: 3})
	})
	if len(got) != 2 {
		t.Fatalf("targets = %+v, want good and bad", got)
	}
	if g := got["good"]; g.URL != ok.Server()+"/ok" || g.Breaker.State != "closed" || g.Breaker.OpenedAt != nil ||
		g.Forwards != (forwardCounts{Delivered: 3}) {
		t.Errorf("good = %+v", g)
	}
	if b := got["bad"]; strings.Contains(b.URL, "sekrit") || b.Breaker.State != "closed" || b.Forwards != (forwardCounts{Failed: 3}) {
		t.Errorf("bad = %+v; want its token redacted, closed, 3 failed", b)
	}

	// A breaker recorded by a worker is shown; the others stay closed.
	opened := time.Date(2026, 11, 30, 5, 12, 40, 118000000, time.UTC)
	if err := store.New(s.pool).RecordBreaker(t.Context(), "fwd", "bad", store.BreakerOpen, &opened, "target answered 503"); err != nil {
		t.Fatal(err)
	}
	got = s.targets("fwd")
	if b := got["bad"].Breaker; b.State != "open" || b.OpenedAt == nil || !b.OpenedAt.Equal(opened) {
		t.Errorf("bad's breaker = %+v, want open since %s", b, opened)
	}
	if b := got["good"].Breaker; b.State != "closed" || b.OpenedAt != nil {
		t.Errorf("good's breaker = %+v, want closed", b)
	}
	if q := s.targets("quiet"); len(q) != 1 || q["idle"].Forwards != (forwardCounts{}) || q["idle"].Breaker.State != "closed" {
		t.Errorf("quiet's targets = %+v, want idle with no forwards", q)
	} else if r, b := q["idle"].Rate, q["idle"].Burst; r == nil || *r != "600/m" || b == nil || *b != 60 {
		t.Errorf("idle's rate %v and burst %v, want 600/m and 60", r, b)
	}
	if g := got["good"]; g.Rate != nil || g.Burst != nil {
		t.Errorf("good has no rate, shown with rate %v and burst %v", g.Rate, g.Burst)
	}
	wantOpProblem(t, s.call(http.MethodGet, "/v1/senders/nobody/targets"), http.StatusNotFound, "unknown-sender", http.MethodGet, routeTargets)
}

// TestTargetsHideNATSServerListCredentials: a NATS target's url that
// lists servers (nats://a,nats://user:password@b) is shown with every
// server's credentials hidden in GET /v1/senders/{sender}/targets, GET
// /v1/senders and the console's overview (start-up refuses such a url;
// before, it took it, and the second server's password was shown).
func TestTargetsHideNATSServerListCredentials(t *testing.T) {
	t.Parallel()
	const raw = "nats://127.0.0.1:14222,nats://hguser:pw-s3cret@127.0.0.1:14223, tokenUSER@127.0.0.1:14224"
	s := newOpServer(t, opOptions{console: true, yaml: `
senders:
  - name: s
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    forward:
      - { name: bus, url: "nats://127.0.0.1:14222", nats: { subject: "hooks.{sender}" } }
`, edit: func(c *config.Config) { c.Senders[0].Forward[0].URL = raw }})
	const want = "nats://127.0.0.1:14222,nats://xxxxx:xxxxx@127.0.0.1:14223,xxxxx@127.0.0.1:14224"
	if got := s.targets("s")["bus"].URL; got != want {
		t.Errorf("GET /v1/senders/s/targets: url %q, want %q", got, want)
	}
	pages := map[string]string{
		"GET /v1/senders/s/targets": string(s.call(http.MethodGet, "/v1/senders/s/targets").body),
		"GET /v1/senders":           string(s.call(http.MethodGet, "/v1/senders").body),
		"the console's overview":    consolePage(t, consoleClient(t, s), s.url, "/console/"),
	}
	for where, page := range pages {
		if leak := containsAny(page, "hguser", "pw-s3cret", "tokenUSER"); leak != "" {
			t.Errorf("%s shows %q", where, leak)
		}
		if !strings.Contains(page, "127.0.0.1:14224") {
			t.Errorf("%s does not show the servers", where)
		}
	}
}

// TestTargetsCountOutboxAsPending checks that forwards not yet relayed
// from the outbox, and relayed but not yet worked, are pending.
func TestTargetsCountOutboxAsPending(t *testing.T) {
	t.Parallel()
	s := newOpServer(t, opOptions{yaml: `
senders:
  - name: fwd
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    forward:
      - name: a
        url: http://127.0.0.1:1/a
      - name: b
        url: http://127.0.0.1:1/b
`})
	for i := range 4 {
		s.accept("fwd", fmt.Sprintf("d-%d", i), []byte(`{}`))
	}
	for _, when := range []string{"in the outbox", "relayed"} {
		got := s.targets("fwd")
		if got["a"].Forwards != (forwardCounts{Pending: 4}) || got["b"].Forwards != (forwardCounts{Pending: 4}) {
			t.Errorf("%s: targets = %+v, want 4 pending each", when, got)
		}
		if when == "in the outbox" {
			if n := s.relayOnce(); n != 8 {
				t.Fatalf("relayed %d forwards, want 8", n)
			}
		}
	}
}

// TestTargetsRemovedByReloadShownHeld: a target a reload removed while its
// forwards are unfinished is listed after the configured ones, with its
// counts, no URL and held; its forwards on a delivery's record are held
// too, the configured target's are not.
func TestTargetsRemovedByReloadShownHeld(t *testing.T) {
	t.Parallel()
	yaml := `
senders:
  - name: fwd
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    forward:
      - name: a
        url: http://127.0.0.1:1/a
      - name: b
        url: http://127.0.0.1:1/b?token=b-secret-7c1e
`
	s := newOpServer(t, opOptions{yaml: yaml})
	s.accept("fwd", "d-0", []byte(`{}`))
	s.accept("fwd", "d-1", []byte(`{}`))
	cfg, err := config.Parse([]byte(strings.Replace(yaml, "      - name: b\n        url: http://127.0.0.1:1/b?token=b-secret-7c1e\n", "", 1)), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	s.live.Swap(sender.MustCompile(cfg).Snapshot())

	var list targetList
	decode(t, s.call(http.MethodGet, "/v1/senders/fwd/targets"), http.StatusOK, http.MethodGet, routeTargets, &list)
	if len(list.Items) != 2 || list.Items[0].Name != "a" || list.Items[0].Held != nil ||
		list.Items[1].Name != "b" || list.Items[1].URL != "" || list.Items[1].Held == nil || *list.Items[1].Held != forward.HeldTargetRemoved ||
		list.Items[1].Forwards != (forwardCounts{Pending: 2}) {
		t.Errorf("targets after b was removed: %+v; want a, then b held with its 2 pending forwards", list.Items)
	}
	d := s.delivery("fwd", "d-0")
	held := map[string]string{}
	for _, f := range d.Forwards {
		held[f.Target] = "null"
		if f.Held != nil {
			held[f.Target] = *f.Held
		}
	}
	if held["a"] != "null" || held["b"] != forward.HeldTargetRemoved {
		t.Errorf("forwards' held: %v; want a's null and b's %q", held, forward.HeldTargetRemoved)
	}
}

// TestTargetForwardsPaginationAndFilters lists a target's forwards page by
// page, by state and by time window, with errors redacted.
func TestTargetForwardsPaginationAndFilters(t *testing.T) {
	t.Parallel()
	s := newOpServer(t, opOptions{yaml: `
senders:
  - name: fwd
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    event_type: { header: X-Event-Type }
    forward:
      - name: a
        url: http://127.0.0.1:1/a?token=sekrit
        max_attempts: 7
      - name: b
        url: http://127.0.0.1:1/b
`})
	events := map[string]string{} // delivery ID → event ID
	for i := range 7 {
		id := fmt.Sprintf("d-%d", i)
		events[id] = s.accept("fwd", id, []byte(`{}`), func(r *http.Request) { r.Header.Set("X-Event-Type", "type."+id) })
	}
	if n := s.relayOnce(); n != 14 {
		t.Fatalf("relayed %d, want 14", n)
	}
	// Every page of 3, newest first, no forward twice, none of target b.
	var all []targetForward
	q := "?limit=3"
	for pages := 0; ; pages++ {
		if pages > 3 {
			t.Fatal("more than 3 pages")
		}
		p := s.forwardPage("fwd", "a", q)
		all = append(all, p.Items...)
		if p.NextCursor == nil {
			break
		}
		if len(p.Items) != 3 {
			t.Fatalf("a page before the last has %d items", len(p.Items))
		}
		q = "?limit=3&cursor=" + url.QueryEscape(*p.NextCursor)
	}
	if len(all) != 7 || !slices.IsSortedFunc(all, func(x, y targetForward) int { return int(y.JobID - x.JobID) }) {
		t.Fatalf("forwards = %+v; want 7, newest first", all)
	}
	seen := map[uuid.UUID]bool{}
	for _, f := range all {
		if seen[f.EventID] || events[f.DeliveryID] != f.EventID.String() || f.EventType != "type."+f.DeliveryID || f.State != "pending" || f.MaxAttempts != 7 || f.FinishedAt != nil {
			t.Errorf("forward %+v", f)
		}
		seen[f.EventID] = true
	}

	// Four of them failed, an hour apart (as River records a failure).
	base := time.Date(2026, 11, 30, 1, 0, 0, 0, time.UTC)
	var failedIDs []int64
	for i, f := range all[3:] {
		failedIDs = append(failedIDs, f.JobID)
		if err := queuetest.New(s.pool).SetForwardJob(t.Context(), f.JobID, queuetest.JobFixture{State: rivertype.JobStateDiscarded, Attempt: 7,
			At: base.Add(time.Duration(i) * time.Hour), Errors: []string{"post to http://127.0.0.1:1/a?token=sekrit: target answered 503"}}); err != nil {
			t.Fatal(err)
		}
	}
	failed := s.forwardPage("fwd", "a", "?state=failed")
	if len(failed.Items) != 4 || failed.NextCursor != nil {
		t.Fatalf("failed = %+v, want 4", failed)
	}
	for _, f := range failed.Items {
		if f.State != "failed" || f.LastStatus == nil || *f.LastStatus != 503 || f.LastError == nil || strings.Contains(*f.LastError, "sekrit") ||
			!strings.Contains(*f.LastError, "target answered 503") || f.FinishedAt == nil || f.Attempts != 7 {
			t.Errorf("failed forward %+v (last error %v)", f, f.LastError)
		}
	}
	window := "?state=failed&since=" + url.QueryEscape(base.Add(time.Hour).Format(time.RFC3339)) + "&until=" + url.QueryEscape(base.Add(3*time.Hour).Format(time.RFC3339))
	// By when they failed, newest first: the one that failed at 2h first.
	if w := s.forwardPage("fwd", "a", window); len(w.Items) != 2 || w.Items[0].JobID != failedIDs[2] || w.Items[1].JobID != failedIDs[1] {
		t.Errorf("failed in [1h, 3h) = %+v, want jobs %d and %d", w.Items, failedIDs[2], failedIDs[1])
	}
	if p := s.forwardPage("fwd", "a", "?state=pending"); len(p.Items) != 3 {
		t.Errorf("pending = %d, want 3", len(p.Items))
	}
	if p := s.forwardPage("fwd", "a", "?state=delivered"); len(p.Items) != 0 || p.NextCursor != nil {
		t.Errorf("delivered = %+v, want none", p)
	}
	if c := s.targets("fwd")["a"].Forwards; c != (forwardCounts{Pending: 3, Failed: 4}) {
		t.Errorf("counts of a = %+v", c)
	}

	for _, tc := range []struct{ q, mention string }{
		{"?state=lost", "state"},
		{"?cursor=abc", "cursor"},
		{"?limit=0", "limit"},
		{"?since=yesterday", "since"},
	} {
		wantOpProblem(t, s.call(http.MethodGet, "/v1/senders/fwd/targets/a/forwards"+tc.q), http.StatusBadRequest, "invalid-parameter", http.MethodGet, routeTargetForwards)
	}
	wantOpProblem(t, s.call(http.MethodGet, "/v1/senders/fwd/targets/nope/forwards"), http.StatusNotFound, "not-found", http.MethodGet, routeTargetForwards)
	wantOpProblem(t, s.call(http.MethodGet, "/v1/senders/nobody/targets/a/forwards"), http.StatusNotFound, "unknown-sender", http.MethodGet, routeTargetForwards)
}

// TestTargetBulkRedeliverAfterOutage fails forwards at a real target (400),
// redelivers them in bulk once it is back, and checks that each event
// reached it again with its original Idempotency-Key, and that a second
// bulk redelivery matches and sends nothing.
func TestTargetBulkRedeliverAfterOutage(t *testing.T) {
	t.Parallel()
	const n = 5
	statuses := make([]int, n, n+1)
	for i := range statuses {
		statuses[i] = http.StatusBadRequest
	}
	tg := testkit.NewTarget(t, testkit.Sequence(append(statuses, http.StatusOK)...))
	s := newOpServer(t, opOptions{work: true, yaml: fmt.Sprintf(`
senders:
  - name: fwd
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    forward:
      - name: orders
        url: %s/hooks
`, tg.Server())})
	events := map[string]bool{}
	for i := range n {
		events[s.accept("fwd", fmt.Sprintf("d-%d", i), []byte(`{}`))] = true
	}
	testkit.Poll(t, pollTimeout, "every forward to fail", func() bool { return s.targets("fwd")["orders"].Forwards.Failed == n })
	start := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)

	if m := s.bulkRedeliver("fwd", "orders", `{"state":"failed","since":"`+start+`"}`); m != n {
		t.Fatalf("matched %d, want %d", m, n)
	}
	testkit.Poll(t, pollTimeout, "every redelivery to be delivered", func() bool {
		c := s.targets("fwd")["orders"].Forwards
		return c.Delivered == n && c.Failed == 0 && c.Pending == 0
	})
	reqs := tg.Hits()
	if len(reqs) != 2*n {
		t.Fatalf("the target got %d requests, want %d", len(reqs), 2*n)
	}
	again := map[string]bool{}
	for _, r := range reqs[n:] {
		again[r.Header.Get("Idempotency-Key")] = true
	}
	for id := range events {
		if !again[id] {
			t.Errorf("event %s was not redelivered with its Idempotency-Key; redelivered: %v", id, again)
		}
	}

	// Twice: the failures were redelivered, so nothing matches any more.
	if m := s.bulkRedeliver("fwd", "orders", `{"state":"failed"}`); m != 0 {
		t.Errorf("second bulk redelivery matched %d, want 0", m)
	}
	if got := s.countJobs(queue.ForwardKind); got != 2*n {
		t.Errorf("%d forward jobs, want %d", got, 2*n)
	}
	if got := s.countJobs(queue.BulkArgs{}.Kind(), "completed"); got != 1 {
		t.Errorf("%d completed bulk jobs, want 1", got)
	}

	for _, tc := range []struct{ body, mention string }{
		{`{"state":"pending"}`, "state"},
		{`{"state":"failed","since":"2h"}`, "RFC 3339"},
		{`{"state":"failed","extra":1}`, "no other members"},
		{`not json`, "JSON"},
	} {
		req := s.opRequest(http.MethodPost, "/v1/senders/fwd/targets/orders/redeliver", "Bearer "+testToken)
		req.Body = nopCloser{strings.NewReader(tc.body)}
		p := wantOpProblem(t, s.do(req), http.StatusBadRequest, "invalid-parameter", http.MethodPost, routeTargetRedeliver)
		if !strings.Contains(p.Detail, tc.mention) {
			t.Errorf("%s: detail %q does not mention %q", tc.body, p.Detail, tc.mention)
		}
	}
	req := s.opRequest(http.MethodPost, "/v1/senders/fwd/targets/nope/redeliver", "Bearer "+testToken)
	req.Body = nopCloser{strings.NewReader(`{"state":"failed"}`)}
	wantOpProblem(t, s.do(req), http.StatusNotFound, "not-found", http.MethodPost, routeTargetRedeliver)
}

// TestTargetBulkRedeliverInBatches redelivers 5,000 failed forwards: the
// request counts them and enqueues one job (a second identical request
// enqueues no second one), which inserts them in batches; afterwards
// nothing matches.
func TestTargetBulkRedeliverInBatches(t *testing.T) {
	testkit.Slow(t, "redelivers 5,000 forwards (load)")
	t.Parallel()
	const n = 5000
	s := newOpServer(t, opOptions{yaml: `
senders:
  - name: fwd
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    forward:
      - name: orders
        url: http://127.0.0.1:1/hooks
        max_attempts: 3
      - name: other
        url: http://127.0.0.1:1/other
`})
	ctx := t.Context()
	// n failed forwards of orders, and n of other that must stay alone.
	for _, target := range []string{"orders", "other"} {
		jobs := make([]queuetest.NewForwardJob, n)
		for i := range jobs {
			jobs[i] = queuetest.NewForwardJob{Sender: "fwd", Target: target, DeliveryID: fmt.Sprintf("d-%d", i+1), MaxAttempts: 3}
		}
		if _, err := queuetest.New(s.pool).InsertForwardJobs(ctx, queue.ForwardQueue, queuetest.JobFixture{State: rivertype.JobStateDiscarded, At: time.Now().Add(-time.Minute)}, jobs...); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		if m := s.bulkRedeliver("fwd", "orders", `{"state":"failed"}`); m != n {
			t.Fatalf("matched %d, want %d", m, n)
		}
	}
	if got := s.countJobs(queue.BulkArgs{}.Kind()); got != 1 {
		t.Fatalf("%d bulk jobs after two identical requests, want 1", got)
	}

	// A worker process of bulk redeliveries only (the forwards stay
	// available, so that they can be counted).
	workers := river.NewWorkers()
	bulk, err := queue.NewBulkWorker(queue.BulkWorkerConfig{Pool: s.pool, Senders: s.cfg, Log: s.log})
	if err != nil {
		t.Fatal(err)
	}
	river.AddWorker(workers, bulk)
	client, err := river.NewClient(riverpgxv5.New(s.pool), &river.Config{
		Logger:              s.log,
		Workers:             workers,
		Queues:              map[string]river.QueueConfig{queue.BulkQueue: {MaxWorkers: 1}},
		FetchPollInterval:   100 * time.Millisecond,
		SkipUnknownJobCheck: true, // it inserts forward jobs it does not work
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := client.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := client.Stop(ctx); err != nil {
			t.Errorf("stop River: %v", err)
		}
	})
	// The job inserts 5,000 forwards, a batch of 1,000 per transaction. On
	// a loaded machine (the race detector, the other tests, other work)
	// the whole job took longer than pollTimeout, and the test failed while
	// the job was still inserting them. What must not happen is a stall:
	// the guard fails the test when no batch has been added for a minute,
	// however long the whole job takes.
	const stall = time.Minute
	started := time.Now()
	added, progressed := -1, started
	testkit.Poll(t, 15*time.Minute, "the bulk job to complete", func() bool {
		if s.countJobs(queue.BulkArgs{}.Kind(), "completed") == 1 {
			return true
		}
		if got := s.countJobs(queue.ForwardKind, "available"); got != added {
			added, progressed = got, time.Now()
		} else if time.Since(progressed) > stall {
			t.Fatalf("the bulk job added no forward for %v (%d of %d added); bulk jobs available %d, running %d, retryable %d", stall, got, n,
				s.countJobs(queue.BulkArgs{}.Kind(), "available"), s.countJobs(queue.BulkArgs{}.Kind(), "running"), s.countJobs(queue.BulkArgs{}.Kind(), "retryable"))
		}
		return false
	})
	t.Logf("the bulk job inserted its forwards in %v", time.Since(started).Round(100*time.Millisecond))
	if got := s.countJobs(queue.ForwardKind, "available"); got != n {
		t.Errorf("%d forwards enqueued, want %d", got, n)
	}
	all, err := queuetest.New(s.pool).ForwardJobs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	events, maxAttempts := map[string]bool{}, 0
	for _, j := range all {
		if j.State == rivertype.JobStateAvailable && j.Sender == "fwd" && j.Target == "orders" {
			events[j.EventID] = true
			if maxAttempts == 0 || j.MaxAttempts < maxAttempts {
				maxAttempts = j.MaxAttempts
			}
		}
	}
	if distinct := len(events); distinct != n || maxAttempts != 3 {
		t.Errorf("new forwards: %d events (want %d), max_attempts %d (want 3)", distinct, n, maxAttempts)
	}
	c := s.targets("fwd")
	if c["orders"].Forwards != (forwardCounts{Pending: n}) || c["other"].Forwards != (forwardCounts{Failed: n}) {
		t.Errorf("counts = %+v", c)
	}
	if m := s.bulkRedeliver("fwd", "orders", `{"state":"failed"}`); m != 0 {
		t.Errorf("after the bulk job, matched %d, want 0", m)
	}
	if got := s.countJobs(queue.BulkArgs{}.Kind()); got != 1 {
		t.Errorf("%d bulk jobs, want one", got)
	}
}

func TestTargetsWithoutDatabaseIs503(t *testing.T) {
	t.Parallel()
	s := newOpServer(t, opOptions{noDB: true, yaml: `
senders:
  - name: fwd
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    forward:
      - name: a
        url: http://127.0.0.1:1/a
`})
	for _, tc := range []struct{ method, path, route string }{
		{http.MethodGet, "/v1/senders/fwd/targets", routeTargets},
		{http.MethodGet, "/v1/senders/fwd/targets/a/forwards", routeTargetForwards},
	} {
		r := s.call(tc.method, tc.path)
		wantOpProblem(t, r, http.StatusServiceUnavailable, "unavailable", tc.method, tc.route)
		wantRetryAfter(t, r)
	}
	req := s.opRequest(http.MethodPost, "/v1/senders/fwd/targets/a/redeliver", "Bearer "+testToken)
	req.Body = nopCloser{strings.NewReader(`{"state":"failed"}`)}
	wantOpProblem(t, s.do(req), http.StatusServiceUnavailable, "unavailable", http.MethodPost, routeTargetRedeliver)
}

// TestTargetBulkRedeliverUnderWayQueuesAfter: a redelivery is a new
// attempt, in bulk too. A target holds one event's forward (running) and
// another event's forward waits for its retry (retrying); a bulk
// redelivery of each state matches it, says that the new forward is queued
// after the current one, and the target receives nothing more while that
// one is under way. A second request matches nothing (the new forwards are
// the newest). Once the held forward is answered and the retry succeeds,
// each event reaches the target once more, after the current attempt's
// answer, with its Idempotency-Key.
func TestTargetBulkRedeliverUnderWayQueuesAfter(t *testing.T) {
	t.Parallel()
	tg := testkit.NewTarget(t, func(n int, r *http.Request) testkit.Answer {
		if n == 1 && strings.HasPrefix(r.Header.Get("X-Hookgate-Delivery-Id"), "run-") {
			return testkit.Answer{Status: http.StatusOK, Block: true}
		}
		return testkit.Answer{Status: http.StatusOK}
	})
	s := newOpServer(t, opOptions{work: true, yaml: fmt.Sprintf(`
senders:
  - name: fwd
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    forward:
      - name: orders
        url: %s/hooks
        timeout: 60s
`, tg.Server())})
	running := s.accept("fwd", "run-1", []byte(`{}`))
	retrying := s.accept("fwd", "retry-1", []byte(`{}`))
	testkit.Poll(t, pollTimeout, "the held forward to be running and the other delivered", func() bool {
		c := s.targets("fwd")["orders"].Forwards
		return c.Running == 1 && c.Delivered == 1
	})
	// The second event's forward failed its next attempt and waits an hour
	// for its retry: a job as River leaves it.
	q := queuetest.New(s.pool)
	retryJob, err := q.InsertForwardJobs(t.Context(), queue.ForwardQueue, queuetest.JobFixture{State: rivertype.JobStateRetryable, Attempt: 1,
		Errors: []string{"target answered 503"}, ScheduledAt: time.Now().Add(time.Hour)},
		queuetest.NewForwardJob{Sender: "fwd", Target: "orders", EventID: uuid.MustParse(retrying), DeliveryID: "retry-1", MaxAttempts: 5})
	if err != nil {
		t.Fatal(err)
	}

	for _, state := range []string{"running", "retrying"} {
		if b := s.bulkRedeliverAnswer("fwd", "orders", `{"state":"`+state+`"}`); b.Matched != 1 || !b.AfterCurrent {
			t.Fatalf("bulk redelivery of %s forwards = %+v; want 1 matched, queued after the current one", state, b)
		}
	}
	testkit.Poll(t, pollTimeout, "the bulk jobs to queue both new forwards", func() bool {
		return s.countJobs(queue.BulkArgs{}.Kind(), "completed") == 2 && s.targets("fwd")["orders"].Forwards.Pending == 2
	})
	for _, state := range []string{"running", "retrying"} {
		if b := s.bulkRedeliverAnswer("fwd", "orders", `{"state":"`+state+`"}`); b.Matched != 0 {
			t.Errorf("second bulk redelivery of %s forwards matched %d, want 0 (each has a new forward queued)", state, b.Matched)
		}
	}
	if n := len(tg.Hits()); n != 2 {
		t.Fatalf("the target got %d requests while the forwards were under way, want 2", n)
	}

	// The held forward is answered, and the retry comes due.
	tg.Release()
	if err := q.SetForwardJob(t.Context(), retryJob[0], queuetest.JobFixture{State: rivertype.JobStateAvailable, Attempt: 1,
		Errors: []string{"target answered 503"}, ScheduledAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	testkit.Poll(t, pollTimeout, "every forward to be delivered", func() bool {
		c := s.targets("fwd")["orders"].Forwards
		return c.Delivered == 5 && c.Pending == 0 && c.Running == 0 && c.Retrying == 0
	})
	for id, want := range map[string]int{running: 2, retrying: 3} {
		hits := tg.HitsFor(id)
		if len(hits) != want {
			t.Errorf("event %s reached the target %d times, want %d", id, len(hits), want)
			continue
		}
		last, prev := hits[want-1], hits[want-2]
		if !last.At.After(prev.AnswerAt) || last.Key() != id {
			t.Errorf("event %s: the redelivery (at %s, key %q) did not follow the current attempt's answer (%s)", id, last.At, last.Key(), prev.AnswerAt)
		}
	}
}
