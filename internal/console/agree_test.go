package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertest"
	"github.com/riverqueue/river/rivertype"

	"github.com/hookgate/hookgate/internal/console"
	"github.com/hookgate/hookgate/internal/queue"
	"github.com/hookgate/hookgate/internal/testing/queuetest"
)

// apiGet reads an operator API resource into v.
func (e *env) apiGet(path string, v any) {
	e.t.Helper()
	p := e.do(e.srv.Client(), http.MethodGet, path, nil, map[string]string{"Authorization": "Bearer " + token})
	if p.status != http.StatusOK {
		e.t.Fatalf("GET %s: %d %s", path, p.status, p.body)
	}
	if err := json.Unmarshal([]byte(p.body), v); err != nil {
		e.t.Fatalf("GET %s: %v", path, err)
	}
}

// overviewRow matches the overview's row of orders-svc: pending, running,
// retrying and the failed count.
var overviewRow = regexp.MustCompile(`<td class="num">(\d+)</td><td class="num">(\d+)</td><td class="num">(\d+)</td>\s*<td class="num"><a href="/console/senders/orders/targets/orders-svc/failed">(\d+)</a>`)

// TestConsoleAgreesWithTheAPIAfterBulkRedelivery: after the console's
// "Redeliver all failed" and its job have run, the console's overview
// counts and its failed page agree with the JSON API's counts and failed
// forwards: a forward redelivered since is no longer failed in either, and
// only the failures that were not redelivered are listed.
func TestConsoleAgreesWithTheAPIAfterBulkRedelivery(t *testing.T) {
	t.Parallel()
	e := newEnv(t, console.Config{AdminToken: token})
	for _, id := range []string{"o-1", "o-2", "o-3"} {
		e.ingest(id, "application/json", `{}`)
	}
	e.failForwards("o-1", "target answered 410")
	e.failForwards("o-2", "target answered 410")
	c := e.client()
	csrf := e.signIn(c)
	p := e.do(c, http.MethodPost, "/console/senders/orders/targets/orders-svc/redeliver",
		url.Values{"since": {""}, "csrf_token": {csrf}}, nil)
	if loc := p.header.Get("Location"); p.status != http.StatusSeeOther || !strings.HasSuffix(loc, "matched=2") {
		t.Fatalf("bulk redeliver: %d to %q, want 303 with matched=2", p.status, loc)
	}
	// A worker runs the bulk job (found with River's API), then o-3 fails
	// too: it was not part of the redelivery.
	ctx := t.Context()
	jobs, err := listJobs(t, ctx, e.pool, river.NewJobListParams().Kinds(queue.BulkArgs{}.Kind()))
	if err != nil || len(jobs.Jobs) != 1 {
		t.Fatalf("bulk jobs: %+v, %v; want one", jobs, err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	bulk, err := queue.NewBulkWorker(queue.BulkWorkerConfig{Pool: e.pool, Senders: e.cfg, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	w := rivertest.NewWorker(t, riverpgxv5.New(e.pool), &river.Config{Logger: log}, bulk)
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	res, err := w.WorkJob(ctx, t, tx, jobs.Jobs[0])
	if err != nil || res.EventKind != river.EventKindJobCompleted {
		t.Fatalf("bulk job: %+v, %v", res, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	e.failForwards("o-3", "target answered 410")

	var targets struct {
		Items []struct {
			Name     string
			Forwards struct{ Pending, Running, Retrying, Delivered, Failed int64 }
		}
	}
	e.apiGet("/v1/senders/orders/targets", &targets)
	if len(targets.Items) != 1 || targets.Items[0].Name != "orders-svc" {
		t.Fatalf("targets = %+v", targets)
	}
	api := targets.Items[0].Forwards
	if api.Failed != 1 || api.Pending != 2 {
		t.Errorf("API counts %+v, want 1 failed (o-3) and 2 pending (o-1 and o-2 again)", api)
	}
	m := overviewRow.FindStringSubmatch(e.do(c, http.MethodGet, "/console/", nil, nil).body)
	if m == nil {
		t.Fatal("the overview has no row for orders-svc")
	}
	n := func(i int) int64 { v, _ := strconv.ParseInt(m[i], 10, 64); return v }
	if got := [4]int64{n(1), n(2), n(3), n(4)}; got != [4]int64{api.Pending, api.Running, api.Retrying, api.Failed} {
		t.Errorf("console overview counts pending, running, retrying, failed = %v; the API's are %+v", got, api)
	}

	var failed struct {
		Items []struct {
			DeliveryID string `json:"delivery_id"`
		}
	}
	e.apiGet("/v1/senders/orders/targets/orders-svc/forwards?state=failed", &failed)
	page := e.do(c, http.MethodGet, "/console/senders/orders/targets/orders-svc/failed", nil, nil).body
	listed := map[string]bool{}
	for _, id := range []string{"o-1", "o-2", "o-3"} {
		listed[id] = strings.Contains(page, fmt.Sprintf("/deliveries/%s\"", id))
	}
	apiListed := map[string]bool{"o-1": false, "o-2": false, "o-3": false}
	for _, it := range failed.Items {
		apiListed[it.DeliveryID] = true
	}
	if fmt.Sprint(listed) != fmt.Sprint(apiListed) || !apiListed["o-3"] || apiListed["o-1"] {
		t.Errorf("the console's failed page lists %v, the API's failed forwards %v; want o-3 only in both", listed, apiListed)
	}
}

// TestConsoleBulkRedeliverUnderWay: the target page's "Redeliver under
// way" redelivers the forwards still retrying, as the API's bulk
// redelivery of state retrying does, and says that each new forward is
// queued after the current one; its job queues the new forward after the
// one under way (a job that waits for it), and the failed one is left.
func TestConsoleBulkRedeliverUnderWay(t *testing.T) {
	t.Parallel()
	e := newEnv(t, console.Config{AdminToken: token})
	for _, id := range []string{"u-1", "u-2"} {
		e.ingest(id, "application/json", `{}`)
	}
	e.failForwards("u-1", "target answered 503")
	e.failForwards("u-2", "target answered 410")
	ctx := t.Context()
	jobs, err := queuetest.New(e.pool).ForwardJobs(ctx)
	if err != nil || len(jobs) != 2 {
		t.Fatalf("forward jobs: %+v, %v", jobs, err)
	}
	retrying := jobs[0].ID
	if jobs[0].DeliveryID != "u-1" {
		retrying = jobs[1].ID
	}
	if err := queuetest.New(e.pool).SetForwardJob(ctx, retrying, queuetest.JobFixture{State: rivertype.JobStateRetryable, Attempt: 1, Errors: []string{"target answered 503"},
		ScheduledAt: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	c := e.client()
	csrf := e.signIn(c)
	p := e.do(c, http.MethodPost, "/console/senders/orders/targets/orders-svc/redeliver",
		url.Values{"state": {"retrying"}, "csrf_token": {csrf}}, nil)
	loc := p.header.Get("Location")
	if p.status != http.StatusSeeOther || !strings.HasSuffix(loc, "matched=1&state=retrying") {
		t.Fatalf("bulk redeliver under way: %d to %q, want 303 with matched=1&state=retrying", p.status, loc)
	}
	if page := e.do(c, http.MethodGet, loc, nil, nil).body; !strings.Contains(page, "1 retrying forwards get a new attempt: a new forward is queued after each current one") {
		t.Errorf("the target page does not say the new forward is queued after the current one:\n%s", page)
	}
	bulk, err := listJobs(t, ctx, e.pool, river.NewJobListParams().Kinds(queue.BulkArgs{}.Kind()))
	if err != nil || len(bulk.Jobs) != 1 {
		t.Fatalf("bulk jobs: %+v, %v; want one", bulk, err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	bw, err := queue.NewBulkWorker(queue.BulkWorkerConfig{Pool: e.pool, Senders: e.cfg, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	w := rivertest.NewWorker(t, riverpgxv5.New(e.pool), &river.Config{Logger: log}, bw)
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := w.WorkJob(ctx, t, tx, bulk.Jobs[0]); err != nil || res.EventKind != river.EventKindJobCompleted {
		t.Fatalf("bulk job: %+v, %v", res, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	after, err := listJobs(t, ctx, e.pool, river.NewJobListParams().Kinds(queue.Args{}.Kind()).States(rivertype.JobStateAvailable))
	if err != nil || len(after.Jobs) != 1 {
		t.Fatalf("new forwards: %+v, %v; want one", after, err)
	}
	var a queue.Args
	if err := json.Unmarshal(after.Jobs[0].EncodedArgs, &a); err != nil || a.After != retrying || a.DeliveryID != "u-1" {
		t.Errorf("the new forward's args %+v (%v); want u-1's, queued after job %d", a, err, retrying)
	}
	if wait, err := queue.NewJobs(e.pool).EarlierForwardUnfinished(ctx, "orders", "orders-svc", a.EventID, after.Jobs[0].ID); err != nil || !wait {
		t.Errorf("the new forward waits for the retrying one: %v, %v; want true", wait, err)
	}
}

// listJobs lists River's jobs on pool with River's own API (an insert-only
// client of the test's: hookgate's code reaches River through package
// queue only).
func listJobs(t *testing.T, ctx context.Context, pool *pgxpool.Pool, params *river.JobListParams) (*river.JobListResult, error) {
	t.Helper()
	c, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return c.JobList(ctx, params)
}
