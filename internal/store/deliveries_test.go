package store

// These tests are in package store so that they can EXPLAIN the listing's
// own SQL.

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/dedup"
	"github.com/hookgate/hookgate/internal/events"
	"github.com/hookgate/hookgate/internal/idempotency"
	"github.com/hookgate/hookgate/internal/testing/pgtest"
	"github.com/hookgate/hookgate/internal/testing/queuetest"
	"github.com/hookgate/hookgate/internal/testing/storetest"
)

// fixture is a fresh database: its pool, the ingest pipeline that stores
// deliveries in it, and the queries that read them.
type fixture struct {
	*Queries
	ingest *dedup.Store
	pool   *pgxpool.Pool
	// jobs are River's jobs, put in a state and read back.
	jobs *queuetest.Jobs
}

// store returns a fixture on a fresh database, and its pool.
func store(t *testing.T) (*fixture, *pgxpool.Pool) {
	t.Helper()
	pool, _ := pgtest.NewDB(t)
	ingest, err := dedup.New(dedup.Config{Pool: pool, InFlightWait: dedup.DefaultInFlightWait})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{Queries: New(pool), ingest: ingest, pool: pool, jobs: queuetest.New(pool)}, pool
}

// accept stores a delivery of sender with id received at at, through Run,
// and returns it.
func accept(t *testing.T, s *fixture, sender, id string, at time.Time) idempotency.Delivery {
	t.Helper()
	return acceptAnswered(t, s, sender, id, at, 202, nil)
}

// acceptAnswered is accept with a stored response of status and body (the
// event's ID in JSON when body is nil).
func acceptAnswered(t *testing.T, s *fixture, sender, id string, at time.Time, status int, body []byte) idempotency.Delivery {
	t.Helper()
	eventID, err := uuid.NewV7()
	if err != nil {
		t.Fatal(err)
	}
	if body == nil {
		body = fmt.Appendf(nil, `{"event_id":%q}`, eventID)
	}
	at = at.UTC().Truncate(time.Microsecond)
	d := idempotency.Delivery{
		Key:           idempotency.Key{Sender: sender, DeliveryID: id},
		RequestSHA256: sha256.Sum256([]byte("body of " + id)),
		EventID:       eventID,
		Response:      idempotency.Response{Status: status, ContentType: "application/json", Body: body},
		ReceivedAt:    at,
		ExpiresAt:     at.Add(time.Hour),
	}
	if _, err := s.ingest.Run(t.Context(), d, nil); err != nil {
		t.Fatalf("accept %s/%s: %v", sender, id, err)
	}
	return d
}

func TestCursorRoundTrip(t *testing.T) {
	t.Parallel()
	for _, c := range []Cursor{
		{ReceivedAt: time.Date(2026, 11, 29, 19, 31, 7, 412345000, time.UTC), DeliveryID: "evt_1"},
		{ReceivedAt: time.Unix(0, 0).UTC(), DeliveryID: `a/b%c?d#e"\`},
		{ReceivedAt: time.Date(1999, 1, 1, 0, 0, 0, 1000, time.UTC), DeliveryID: strings.Repeat("x", 255)},
	} {
		s := c.String()
		if strings.ContainsAny(s, "+/=") {
			t.Errorf("cursor %q is not URL-safe unpadded base64", s)
		}
		got, err := ParseCursor(s)
		if err != nil {
			t.Errorf("ParseCursor(%q): %v", s, err)
			continue
		}
		if !got.ReceivedAt.Equal(c.ReceivedAt) || got.DeliveryID != c.DeliveryID {
			t.Errorf("ParseCursor(String(%+v)) = %+v", c, got)
		}
	}
}

func TestParseCursorRejectsMalformed(t *testing.T) {
	t.Parallel()
	enc := base64.RawURLEncoding.EncodeToString
	valid := Cursor{ReceivedAt: time.UnixMicro(1795980667412000), DeliveryID: "evt_1"}.String()
	for name, s := range map[string]string{
		"empty":            "",
		"not base64":       "not a cursor!",
		"padded":           base64.URLEncoding.EncodeToString([]byte(`{"t":12,"d":"x"}`)),
		"standard base64":  base64.StdEncoding.EncodeToString([]byte(`{"t":1,"d":"x>?"}`)),
		"trailing garbage": valid + "AA",
		"not JSON":         enc([]byte("hello")),
		"JSON array":       enc([]byte(`[1,"x"]`)),
		"unknown field":    enc([]byte(`{"t":1,"d":"x","x":1}`)),
		"no delivery ID":   enc([]byte(`{"t":1}`)),
		"empty ID":         enc([]byte(`{"t":1,"d":""}`)),
		"time as string":   enc([]byte(`{"t":"1","d":"x"}`)),
		"reordered":        enc([]byte(`{"d":"x","t":1}`)),
		"two documents":    enc([]byte(`{"t":1,"d":"x"}{"t":1,"d":"x"}`)),
	} {
		if c, err := ParseCursor(s); err == nil {
			t.Errorf("%s: ParseCursor(%q) = %+v, want an error", name, s, c)
		} else if !errors.Is(err, ErrBadCursor) {
			t.Errorf("%s: error %v does not wrap ErrBadCursor", name, err)
		}
	}
}

// TestListPagesNewestFirst walks a sender's deliveries page by page, with
// several received at the same microsecond, and checks that the walk
// visits each exactly once in (received at, delivery ID) descending order,
// leaves out other senders' deliveries and ends with a nil Next.
func TestListPagesNewestFirst(t *testing.T) {
	t.Parallel()
	s, _ := store(t)
	base := time.Date(2026, 11, 29, 19, 0, 0, 0, time.UTC)
	var want []idempotency.Delivery
	for i := range 10 {
		at := base.Add(time.Duration(i/3) * time.Second) // groups of three share a time
		want = append(want, accept(t, s, "github", fmt.Sprintf("d%02d", i), at))
		accept(t, s, "stripe", fmt.Sprintf("d%02d", i), at.Add(time.Minute)) // newer, another sender
	}
	slices.SortFunc(want, func(a, b idempotency.Delivery) int {
		if c := b.ReceivedAt.Compare(a.ReceivedAt); c != 0 {
			return c
		}
		return strings.Compare(b.DeliveryID, a.DeliveryID)
	})

	for _, limit := range []int{1, 3, 4, 5, 10, 11, MaxListLimit} {
		var (
			got   []Delivery
			after *Cursor
			pages int
		)
		for {
			page, err := s.ListDeliveries(t.Context(), "github", limit, after)
			if err != nil {
				t.Fatalf("limit %d: List: %v", limit, err)
			}
			pages++
			if len(page.Deliveries) > limit {
				t.Fatalf("limit %d: page of %d", limit, len(page.Deliveries))
			}
			got = append(got, page.Deliveries...)
			if page.Next == nil {
				break
			}
			if len(page.Deliveries) != limit {
				t.Errorf("limit %d: a page of %d has a next page", limit, len(page.Deliveries))
			}
			// The cursor goes through its opaque form, as over HTTP.
			c, err := ParseCursor(page.Next.String())
			if err != nil {
				t.Fatal(err)
			}
			after = &c
		}
		if wantPages := max(1, (len(want)+limit-1)/limit); pages != wantPages {
			t.Errorf("limit %d: %d pages, want %d (no empty last page)", limit, pages, wantPages)
		}
		if len(got) != len(want) {
			t.Fatalf("limit %d: walked %d deliveries, want %d", limit, len(got), len(want))
		}
		for i, r := range got {
			w := want[i]
			if r.Key != w.Key || r.EventID != w.EventID || !r.ReceivedAt.Equal(w.ReceivedAt) || !r.ExpiresAt.Equal(w.ExpiresAt) ||
				r.RequestSHA256 != w.RequestSHA256 || r.Response.Status != 202 || r.Response.ContentType != "application/json" {
				t.Errorf("limit %d: item %d = %+v, want %+v", limit, i, r, w)
			}
			if r.Response.Body != nil {
				t.Errorf("limit %d: item %d has a response body; List leaves it out", limit, i)
			}
		}
	}
}

func TestListEmptyAndOutOfRange(t *testing.T) {
	t.Parallel()
	s, _ := store(t)
	accept(t, s, "github", "d1", time.Now())

	page, err := s.ListDeliveries(t.Context(), "nobody", 10, nil)
	if err != nil {
		t.Fatal(err)
	}
	if page.Deliveries == nil || len(page.Deliveries) != 0 || page.Next != nil {
		t.Errorf("unknown sender: page = %+v, want no records (non-nil) and no next", page)
	}
	// After the oldest delivery: nothing more.
	page, err = s.ListDeliveries(t.Context(), "github", 10, &Cursor{ReceivedAt: time.Unix(0, 0), DeliveryID: "z"})
	if err != nil || len(page.Deliveries) != 0 || page.Next != nil {
		t.Errorf("after the oldest: page = %+v, %v; want empty", page, err)
	}
	for _, limit := range []int{-1, 0, MaxListLimit + 1} {
		if _, err := s.ListDeliveries(t.Context(), "github", limit, nil); err == nil {
			t.Errorf("List with limit %d: no error", limit)
		}
	}
}

func TestGet(t *testing.T) {
	t.Parallel()
	s, _ := store(t)
	d := accept(t, s, "github", "a/b%c?d#e", time.Now())
	empty := acceptAnswered(t, s, "github", "empty", time.Now(), 202, []byte{})

	r, err := s.GetDelivery(t.Context(), d.Key)
	if err != nil {
		t.Fatal(err)
	}
	if r.Key != d.Key || r.EventID != d.EventID || r.RequestSHA256 != d.RequestSHA256 || !r.ReceivedAt.Equal(d.ReceivedAt) ||
		!r.ExpiresAt.Equal(d.ExpiresAt) || r.Response.Status != 202 || r.Response.ContentType != "application/json" ||
		string(r.Response.Body) != string(d.Response.Body) {
		t.Errorf("Get = %+v, want %+v", r, d)
	}
	r, err = s.GetDelivery(t.Context(), empty.Key)
	if err != nil || r.Response.Body == nil || len(r.Response.Body) != 0 {
		t.Errorf("Get of an empty stored body: body %v (nil %v), err %v; want empty, not nil", r.Response.Body, r.Response.Body == nil, err)
	}
	for _, k := range []idempotency.Key{{Sender: "github", DeliveryID: "nope"}, {Sender: "stripe", DeliveryID: d.DeliveryID}} {
		if _, err := s.GetDelivery(t.Context(), k); !errors.Is(err, ErrNotFound) {
			t.Errorf("Get(%v) error = %v, want ErrNotFound", k, err)
		}
	}
}

// TestListUsesIndex checks that both listing queries read the sender's rows
// in order from processed_messages_sender_created_idx, with the cursor as
// an index condition and no sort, in custom and generic plans.
func TestListUsesIndex(t *testing.T) {
	t.Parallel()
	s, pool := store(t)
	ctx := t.Context()
	now := time.Now()
	if _, err := storetest.InsertGenerated(ctx, s.DB(), storetest.Generated{Sender: "s", Senders: 20, Prefix: "d", N: 20000, Newest: now, Step: time.Second,
		ExpiresAt: now.Add(24 * time.Hour), Status: 202, Keys: true}); err != nil {
		t.Fatal(err)
	}
	// ANALYZE: the plans are what the test examines.
	pgtest.Analyze(t, pool, "processed_messages")
	for _, tc := range []struct {
		name, sql, types, args string
	}{
		{"first page", listFirstSQL, "text, int", "'s7', 51"},
		{"after cursor", listAfterSQL, "text, timestamptz, text, int", "'s7', now() - interval '1 hour', 'd3607', 51"},
	} {
		for _, mode := range planModes() {
			plan := pgtest.Explain(t, pool, mode, tc.sql, tc.types, tc.args)
			if !strings.Contains(plan, "Index Scan using processed_messages_sender_created_idx") || strings.Contains(plan, "Sort") {
				t.Errorf("%s, %s: plan does not read processed_messages_sender_created_idx in order:\n%s", tc.name, mode, plan)
			}
			if tc.name == "after cursor" && !cursorIsIndexCond(plan) {
				t.Errorf("%s, %s: the cursor is not an index condition:\n%s", tc.name, mode, plan)
			}
		}
	}
}

// cursorIsIndexCond reports whether plan's index condition compares
// (created_at, delivery_id).
func cursorIsIndexCond(plan string) bool {
	for line := range strings.Lines(plan) {
		if strings.Contains(line, "Index Cond:") && strings.Contains(line, "created_at") && strings.Contains(line, "delivery_id") {
			return true
		}
	}
	return false
}

// explain returns the plan of sql, prepared with parameter types and
// executed with args, under plan_cache_mode mode.
// planModes are the plan cache modes whose plans the tests check: custom
// and generic plans, and only custom ones on Citus, which cannot make a
// generic plan of a statement on a distributed table whose parameters
// decide its shard (it plans such a statement at every execution; its
// EXPLAIN shows the plan of the shard's worker).
func planModes() []string {
	if pgtest.Citus() {
		return []string{"force_custom_plan"}
	}
	return []string{"force_custom_plan", "force_generic_plan"}
}

// acceptTyped is accept with the delivery's event stored too, with the
// event type eventType (as ingest's change stores it, in a statement of
// its own here).
func acceptTyped(t *testing.T, s *fixture, pool *pgxpool.Pool, sender, id, eventType string, at time.Time) idempotency.Delivery {
	t.Helper()
	d := accept(t, s, sender, id, at)
	if err := storetest.InsertEvent(t.Context(), s.DB(), events.Event{ID: d.EventID, Sender: sender, DeliveryID: id, ReceivedAt: d.ReceivedAt,
		Headers: http.Header{}, Body: []byte{}, EventType: eventType}); err != nil {
		t.Fatal(err)
	}
	return d
}

// walk follows ListByEventType's pages from the first to the last.
func walk(t *testing.T, s *fixture, sender, eventType string, limit int) []Delivery {
	t.Helper()
	var (
		got   []Delivery
		after *Cursor
	)
	for {
		page, err := s.ListDeliveriesByType(t.Context(), sender, eventType, limit, after)
		if err != nil {
			t.Fatalf("%s, limit %d: %v", eventType, limit, err)
		}
		// A prefix's page may be short when deliveries of its events are
		// gone (their keys expired before the events).
		short := strings.HasSuffix(eventType, "*") && eventType != "*"
		if len(page.Deliveries) > limit || (page.Next != nil && len(page.Deliveries) != limit && !short) {
			t.Fatalf("%s, limit %d: page of %d, next %v", eventType, limit, len(page.Deliveries), page.Next)
		}
		got = append(got, page.Deliveries...)
		if page.Next == nil {
			return got
		}
		c, err := ParseCursor(page.Next.String())
		if err != nil {
			t.Fatal(err)
		}
		after = &c
	}
}

// Filtering by event type, exact or by prefix, walks every matching
// delivery once, newest first, with List's keyset pagination; records carry
// their event type, in the unfiltered list too.
func TestListByEventType(t *testing.T) {
	t.Parallel()
	s, pool := store(t)
	base := time.Date(2026, 11, 29, 19, 0, 0, 0, time.UTC)
	types := []string{"invoice.paid", "invoice.voided", "invoiced", "customer.created", "", "invoice.paid"}
	type typed struct {
		d  idempotency.Delivery
		et string
	}
	var all []typed
	for i := range 30 {
		at := base.Add(time.Duration(i/4) * time.Second) // groups of four share a time
		et := types[i%len(types)]
		all = append(all, typed{acceptTyped(t, s, pool, "stripe", fmt.Sprintf("d%02d", i), et, at), et})
		acceptTyped(t, s, pool, "other", fmt.Sprintf("d%02d", i), et, at) // another sender's
	}
	accept(t, s, "stripe", "no-event", base) // a delivery without a stored event: type ""
	slices.SortFunc(all, func(a, b typed) int {
		if c := b.d.ReceivedAt.Compare(a.d.ReceivedAt); c != 0 {
			return c
		}
		return strings.Compare(b.d.DeliveryID, a.d.DeliveryID)
	})
	for _, filter := range []string{"invoice.paid", "invoice.*", "inv*", "customer.created", "customer*", "nope", "nope*", "invoice.paid.*"} {
		var want []typed
		for _, x := range all {
			if p, ok := strings.CutSuffix(filter, "*"); (ok && strings.HasPrefix(x.et, p)) || x.et == filter {
				want = append(want, x)
			}
		}
		for _, limit := range []int{1, 2, 3, 7, MaxListLimit} {
			got := walk(t, s, "stripe", filter, limit)
			if len(got) != len(want) {
				t.Fatalf("%s, limit %d: walked %d deliveries, want %d", filter, limit, len(got), len(want))
			}
			for i, r := range got {
				w := want[i]
				if r.Key != w.d.Key || r.EventID != w.d.EventID || !r.ReceivedAt.Equal(w.d.ReceivedAt) || r.EventType != w.et || r.RequestSHA256 != w.d.RequestSHA256 {
					t.Errorf("%s, limit %d: item %d = %+v, want %+v (%q)", filter, limit, i, r, w.d, w.et)
				}
			}
		}
	}
	// Unfiltered ("" or "*"): every delivery, each with its event type.
	for _, filter := range []string{"", "*"} {
		got := walk(t, s, "stripe", filter, 4)
		if len(got) != len(all)+1 {
			t.Fatalf("%q: %d deliveries, want %d", filter, len(got), len(all)+1)
		}
		for _, r := range got {
			for _, x := range all {
				if x.d.Key == r.Key && x.et != r.EventType {
					t.Errorf("%q: %s has event type %q, want %q", filter, r.DeliveryID, r.EventType, x.et)
				}
			}
		}
	}
	// Keys expire before their events: those events are not listed, and a
	// walk by prefix still visits every other one once.
	var kept []typed
	for i, x := range all {
		if i%3 == 1 {
			if ok, err := storetest.DeleteKey(t.Context(), s.DB(), x.d.Key); err != nil || !ok {
				t.Fatalf("delete key %v: %v, %v", x.d.Key, ok, err)
			}
			continue
		}
		kept = append(kept, x)
	}
	for _, filter := range []string{"invoice.*", "invoice.paid"} {
		var want []string
		for _, x := range kept {
			if p, ok := strings.CutSuffix(filter, "*"); (ok && strings.HasPrefix(x.et, p)) || x.et == filter {
				want = append(want, x.d.DeliveryID)
			}
		}
		for _, limit := range []int{1, 2, 3, 7} {
			var got []string
			for _, r := range walk(t, s, "stripe", filter, limit) {
				got = append(got, r.DeliveryID)
			}
			if !slices.Equal(got, want) {
				t.Errorf("%s, limit %d, some keys gone: walked %v, want %v", filter, limit, got, want)
			}
		}
	}
	rec, err := s.GetDelivery(t.Context(), idempotency.Key{Sender: "stripe", DeliveryID: "d00"})
	if err != nil || rec.EventType != "invoice.paid" {
		t.Errorf("Get: event type %q, err %v; want invoice.paid", rec.EventType, err)
	}
}

// The filtered list reads a sender's events of one type in order from the
// index webhook_events_sender_type_received_idx, without sorting them all,
// and each one's delivery by its key; a prefix probes that index once per
// type and sorts only each type's page.
func TestListByEventTypeUsesIndex(t *testing.T) {
	t.Parallel()
	s, pool := store(t)
	ctx := t.Context()
	now := time.Now()
	if _, err := storetest.InsertGenerated(ctx, s.DB(), storetest.Generated{Sender: "s", Senders: 5, Prefix: "d", N: 20000, Newest: now, Step: time.Second,
		ExpiresAt: now.Add(24 * time.Hour), Status: 202, Keys: true, Events: true, EventTypes: 16}); err != nil {
		t.Fatal(err)
	}
	// ANALYZE: the plans are what the test examines.
	pgtest.Analyze(t, pool, "processed_messages", "webhook_events")
	for _, tc := range []struct {
		name, sql, types, args string
	}{
		{"exact, first page", typeFirstSQL, "text, text, int", "'s3', 'type.7', 51"},
		{"exact, after cursor", typeAfterSQL, "text, text, int, timestamptz, text", "'s3', 'type.7', 51, now() - interval '1 hour', 'd3603'"},
		{"prefix, first page", prefixFirstSQL, "text, text, int", "'s3', 'type.1', 51"},
		{"prefix, after cursor", prefixAfterSQL, "text, text, int, timestamptz, text", "'s3', 'type.1', 51, now() - interval '1 hour', 'd3603'"},
	} {
		// A page of one type runs under IndexOrderScans; a prefix's, whose
		// page is sorted from the types' pages, under no settings.
		settings := ""
		if strings.HasPrefix(tc.name, "exact") {
			settings = IndexOrderScans
		}
		for _, mode := range planModes() {
			plan := pgtest.ExplainUnder(t, pool, settings, mode, tc.sql, tc.types, tc.args)
			if !strings.Contains(plan, "webhook_events_sender_type_received_idx") || strings.Contains(plan, "Seq Scan") {
				t.Errorf("%s, %s: plan does not read webhook_events_sender_type_received_idx:\n%s", tc.name, mode, plan)
			}
			if strings.HasPrefix(tc.name, "exact") && strings.Contains(plan, "Sort") {
				t.Errorf("%s, %s: plan sorts:\n%s", tc.name, mode, plan)
			}
			if !strings.HasPrefix(tc.name, "exact") || pgtest.Citus() {
				// On Citus the settings stay on the coordinator: the
				// workers plan each shard's statement with their own.
				continue
			}
			// Under the settings a page of one type runs with, whatever
			// the statistics: without the index of types, or without the
			// key's, every plan left has a disabled path. (By time, with
			// the type as a filter, it read 9,992 events of other types
			// for a page; by equality, the delivery's lookup could read
			// the sender's every key through the index by time.)
			for _, index := range []string{"DROP INDEX webhook_events_sender_type_received_idx", "ALTER TABLE processed_messages DROP CONSTRAINT processed_messages_key CASCADE"} {
				plan := pgtest.ExplainUnder(t, pool, index+"; "+IndexOrderScans, mode, tc.sql, tc.types, tc.args)
				if !pgtest.PlanTextDisabled(plan) {
					t.Errorf("%s, %s, after %s: a plan with no disabled path is left:\n%s", tc.name, mode, index, plan)
				}
			}
		}
	}
}
