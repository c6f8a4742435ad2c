package console_test

import (
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/console"
	"github.com/hookgate/hookgate/internal/idempotency"
	"github.com/hookgate/hookgate/internal/store"
	"github.com/hookgate/hookgate/internal/testing/storetest"
)

// benchDeliveries is how many deliveries of one sender BenchmarkConsoleList
// seeds.
const benchDeliveries = 1_000_000

// BenchmarkConsoleList times the console's delivery list, as a signed-in
// browser gets it over HTTP (query, rendering, transfer), on 1,000,000
// deliveries of one sender received over the last 7 days: the first page,
// a page deep in the history (by cursor), an exact delivery ID, and time
// ranges; and the overview, which counts the last day's deliveries (its
// open ends from processed_messages, its closed hours as kept once counted)
// and draws its charts from the last hour's per-minute counts and the last
// day's per-hour counts (query/overview-charts: both spans of a sender and
// its target). Run it with make bench-console; it seeds the deliveries with
// store.InsertGenerated (one INSERT … SELECT generate_series, about a
// minute on 2 cores) and the counts with store.AddTraffic.
func BenchmarkConsoleList(b *testing.B) {
	e := newEnv(b, console.Config{AdminToken: token})
	ctx := b.Context()
	start := time.Now()
	if _, err := storetest.InsertGenerated(ctx, e.q.DB(), storetest.Generated{Sender: "orders", Prefix: "dlv_", N: benchDeliveries, Newest: start,
		Step: 7 * 24 * time.Hour / benchDeliveries, ExpiresAt: start.Add(24 * time.Hour), Status: 202, Keys: true}); err != nil {
		b.Fatal(err)
	}
	// The charts' counts of the same deliveries: two days of minutes (the
	// retention), of every kind, as the processes' flushes leave them (in
	// traffic_minutes and, added up, traffic_hours). The target's rows
	// carry latency histograms.
	var deltas []store.TrafficDelta
	minute := start.UTC().Truncate(time.Minute)
	for m := range 2880 {
		for _, k := range []struct{ target, kind string }{{"", "accepted"}, {"", "replayed"}, {"", "refused"}, {"orders-svc", "delivered"}, {"orders-svc", "failed"}} {
			d := store.TrafficDelta{Sender: "orders", Target: k.target, Kind: k.kind, Minute: minute.Add(-time.Duration(m) * time.Minute),
				N: 1000000 / 10080, SumMS: 40 * (1000000 / 10080)}
			if k.target != "" {
				d.Hist = make([]int64, store.LatencyBuckets)
				for i := range d.Hist {
					d.Hist[i] = int64(((i+1)*7 + m) % 13)
				}
			}
			deltas = append(deltas, d)
		}
	}
	for chunk := range slices.Chunk(deltas, 1000) {
		if err := e.q.AddTraffic(ctx, chunk, start); err != nil {
			b.Fatal(err)
		}
	}
	// ANALYZE: as a database that has run a while has its statistics.
	if _, err := e.pool.Exec(ctx, `ANALYZE processed_messages; ANALYZE traffic_minutes; ANALYZE traffic_hours`); err != nil {
		b.Fatal(err)
	}
	b.Logf("seeded %d deliveries in %s", benchDeliveries, time.Since(start).Round(time.Second))
	c := e.client()
	e.signIn(c)
	// A cursor in the middle of the history: the position of dlv_500000.
	half, err := e.q.GetDelivery(ctx, idempotency.Key{Sender: "orders", DeliveryID: "dlv_500000"})
	if err != nil {
		b.Fatal(err)
	}
	mid := half.ReceivedAt
	day := func(d int) string { return time.Now().UTC().AddDate(0, 0, -d).Format("2006-01-02T15:04") }
	// The queries alone, as the list pages run them.
	parse := func(s string) time.Time { t, _ := time.Parse("2006-01-02T15:04", s); return t }
	queries := []struct {
		name         string
		after        *store.Cursor
		since, until string
	}{
		{name: "first-page"},
		{name: "since-1-day", since: day(1)},
		{name: "until-3-days-ago", until: day(3)},
		{name: "between-5-and-4-days-ago", since: day(5), until: day(4)},
		{name: "page-at-half-way", after: &store.Cursor{ReceivedAt: mid, DeliveryID: "dlv_500000"}},
	}
	for _, q := range queries {
		b.Run("query/"+q.name, func(b *testing.B) {
			after := q.after
			if q.until != "" {
				after = &store.Cursor{ReceivedAt: parse(q.until)}
			}
			var since time.Time
			if q.since != "" {
				since = parse(q.since)
			}
			for b.Loop() {
				pg, err := e.q.ListDeliveriesSince(ctx, "orders", 50, after, since)
				if err != nil || len(pg.Deliveries) != 50 {
					b.Fatalf("%d records, %v", len(pg.Deliveries), err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/1000, "ms/query")
		})
	}
	b.Run("query/delivery-id", func(b *testing.B) {
		for b.Loop() {
			if _, err := e.q.GetDelivery(ctx, idempotency.Key{Sender: "orders", DeliveryID: "dlv_777777"}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/1000, "ms/query")
	})
	// The day's closed hours are counted once, by the first view of the
	// overview on the database (and then one hour as each closes): that
	// first count is timed here, once; the overview's timings below come
	// after it.
	// (Signing in viewed the overview: its count is forgotten first.)
	if err := storetest.ForgetHourCounts(ctx, e.q.DB(), ""); err != nil {
		b.Fatal(err)
	}
	firstCount := time.Now()
	counted, err := e.q.CountDeliveries(ctx, "orders", firstCount)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("first count of the day's closed hours (once per database): %s", time.Since(firstCount).Round(100*time.Microsecond))
	// The counts are a scan's: the day's deliveries by status, counted
	// once the slow way (the reference the test examines: raw SQL on
	// purpose).
	var inHour, inDay int64
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE created_at >= $3), count(*) FROM processed_messages WHERE sender = $1 AND created_at >= $2 AND response_status = 202`,
		"orders", firstCount.Add(-24*time.Hour), firstCount.Add(-time.Hour)).Scan(&inHour, &inDay); err != nil {
		b.Fatal(err)
	}
	if len(counted) != 1 || counted[0].Status != 202 || counted[0].LastHour != inHour || counted[0].LastDay != inDay || inDay < 140_000 {
		b.Fatalf("overview counts %+v, a scan of the day counts 202: %d in the hour, %d in the day", counted, inHour, inDay)
	}
	b.Logf("the day's deliveries: %d (%d in the last hour), as a scan counts them", inDay, inHour)
	b.Run("query/overview-counts", func(b *testing.B) {
		for b.Loop() {
			if _, err := e.q.CountDeliveries(ctx, "orders", time.Now()); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/1000, "ms/query")
	})
	b.Run("query/overview-charts", func(b *testing.B) {
		for b.Loop() {
			now := time.Now()
			for _, span := range []time.Duration{time.Minute, time.Hour} {
				rows, err := e.q.Traffic(ctx, "orders", now.Add(-60*span), now, span)
				if err != nil || len(rows) == 0 {
					b.Fatalf("%d buckets, %v", len(rows), err)
				}
			}
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/1000, "ms/query")
	})
	cases := []struct{ name, query string }{
		{"first-page", ""},
		{"delivery-id", "delivery_id=dlv_777777"},
		{"delivery-id-absent", "delivery_id=nope"},
		{"since-1-day", "since=" + day(1)},
		{"until-3-days-ago", "until=" + day(3)},
		{"between-5-and-4-days-ago", "since=" + day(5) + "&until=" + day(4)},
		{"range-with-no-deliveries", "since=" + day(30) + "&until=" + day(20)},
		{"page-at-half-way", "cursor=" + cursorAt(mid, "dlv_500000")},
		{"overview", ""}, // the overview page, not the list: counts of the last day
	}
	for _, tc := range cases {
		b.Run("page/"+tc.name, func(b *testing.B) {
			path := "/console/senders/orders/deliveries?" + tc.query
			if tc.name == "overview" {
				path = "/console/"
			}
			for b.Loop() {
				if p := e.do(c, http.MethodGet, path, nil, nil); p.status != http.StatusOK {
					b.Fatalf("%s: %d", path, p.status)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/1000, "ms/page")
		})
	}
}

// cursorAt returns the list cursor of the delivery id received at t, as
// the console's "Older deliveries" link carries it.
func cursorAt(t time.Time, id string) string {
	return url.QueryEscape(store.Cursor{ReceivedAt: t, DeliveryID: id}.String())
}
