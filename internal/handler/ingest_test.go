package handler_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/testing/pgtest"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// acceptedBody is the 202 body of a first delivery.
type acceptedBody struct {
	EventID    string `json:"event_id"`
	Sender     string `json:"sender"`
	DeliveryID string `json:"delivery_id"`
	ReceivedAt string `json:"received_at"`
}

// wantAccepted checks that r is a first delivery's 202 for sender and id and
// returns its body.
func wantAccepted(t *testing.T, r reply, sender, id string) acceptedBody {
	t.Helper()
	if r.status != http.StatusAccepted {
		t.Fatalf("status = %d, want 202; response: %s", r.status, r)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	if v := r.header.Values("Idempotent-Replayed"); len(v) != 0 {
		t.Errorf("first delivery has Idempotent-Replayed: %q", v)
	}
	var a acceptedBody
	dec := json.NewDecoder(bytes.NewReader(r.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil {
		t.Fatalf("202 body %q: %v", r.body, err)
	}
	u, err := uuid.Parse(a.EventID)
	if err != nil {
		t.Errorf("event_id %q is not a UUID: %v", a.EventID, err)
	} else if u.Version() != 7 || u.Variant() != uuid.RFC4122 {
		t.Errorf("event_id %s is UUID version %d variant %v, want version 7 (RFC 9562)", u, u.Version(), u.Variant())
	}
	if a.Sender != sender || a.DeliveryID != id {
		t.Errorf("202 body sender, delivery_id = %q, %q; want %q, %q", a.Sender, a.DeliveryID, sender, id)
	}
	if _, err := time.Parse(time.RFC3339Nano, a.ReceivedAt); err != nil || !strings.HasSuffix(a.ReceivedAt, "Z") {
		t.Errorf("received_at %q is not an RFC 3339 UTC time (%v)", a.ReceivedAt, err)
	}
	if cl := r.header.Get("Content-Length"); cl != strconv.Itoa(len(r.body)) {
		t.Errorf("Content-Length = %q, body has %d bytes", cl, len(r.body))
	}
	return a
}

// storedKey is a processed_messages row.
type storedKey struct {
	sha256      []byte
	eventID     uuid.UUID
	status      int
	contentType string
	body        []byte
	createdAt   time.Time
	expiresAt   time.Time
}

func readKey(t *testing.T, pool *pgxpool.Pool, sender, id string) storedKey {
	t.Helper()
	var k storedKey
	err := pool.QueryRow(t.Context(), `SELECT request_sha256, event_id, response_status, response_content_type,
  response_body, created_at, expires_at FROM processed_messages WHERE sender = $1 AND delivery_id = $2`, sender, id).
		Scan(&k.sha256, &k.eventID, &k.status, &k.contentType, &k.body, &k.createdAt, &k.expiresAt)
	if err != nil {
		t.Fatalf("read processed_messages (%s, %s): %v", sender, id, err)
	}
	return k
}

// storedEvent is a webhook_events row.
type storedEvent struct {
	id         uuid.UUID
	deliveryID string
	receivedAt time.Time
	headers    map[string][]string
	body       []byte
}

func readEvent(t *testing.T, pool *pgxpool.Pool, sender, id string) storedEvent {
	t.Helper()
	var e storedEvent
	err := pool.QueryRow(t.Context(), `SELECT id, delivery_id, received_at, headers, body
FROM webhook_events WHERE sender = $1 AND delivery_id = $2`, sender, id).
		Scan(&e.id, &e.deliveryID, &e.receivedAt, &e.headers, &e.body)
	if err != nil {
		t.Fatalf("read webhook_events (%s, %s): %v", sender, id, err)
	}
	return e
}

func TestIngestFirstDeliveryIsAccepted(t *testing.T) {
	t.Parallel()
	s, pool := newDBServer(t, options{})
	body := []byte(`{"type":"invoice.paid","amount":4200}`)
	before := time.Now().UTC().Truncate(time.Microsecond)
	r := s.post("hdr", "evt-1", body)
	after := time.Now().UTC()
	a := wantAccepted(t, r, "hdr", "evt-1")

	receivedAt, err := time.Parse(time.RFC3339Nano, a.ReceivedAt)
	if err == nil && (receivedAt.Before(before) || receivedAt.After(after)) {
		t.Errorf("received_at %v is not between the request's start %v and end %v", receivedAt, before, after)
	}

	k := readKey(t, pool, "hdr", "evt-1")
	sum := sha256.Sum256(body)
	if !bytes.Equal(k.sha256, sum[:]) {
		t.Errorf("request_sha256 = %x, want %x", k.sha256, sum)
	}
	if k.eventID.String() != a.EventID {
		t.Errorf("processed_messages.event_id = %s, response event_id %s", k.eventID, a.EventID)
	}
	if k.status != http.StatusAccepted || k.contentType != "application/json" || !bytes.Equal(k.body, r.body) {
		t.Errorf("stored response = %d %q %q; sent 202 application/json %q", k.status, k.contentType, k.body, r.body)
	}
	if !k.createdAt.Equal(receivedAt) {
		t.Errorf("created_at = %v, received_at in the response %v", k.createdAt, receivedAt)
	}
	if got := k.expiresAt.Sub(k.createdAt); got != 168*time.Hour {
		t.Errorf("expires_at - created_at = %v, want the default retention 168h", got)
	}

	e := readEvent(t, pool, "hdr", "evt-1")
	if e.id != k.eventID || !bytes.Equal(e.body, body) || !e.receivedAt.Equal(receivedAt) {
		t.Errorf("event = %v %q %v; want %v %q %v", e.id, e.body, e.receivedAt, k.eventID, body, receivedAt)
	}
	wantCounts(t, pool, 1, 1)
}

func TestIngestReplayReturnsStoredResponse(t *testing.T) {
	t.Parallel()
	s, pool := newDBServer(t, options{})
	for _, tc := range []struct{ sender, id, body string }{
		{"hdr", "evt-1", `{"n":1}`},
		{"ptr", "evt_2", `{"id":"evt_2","n":2}`},
		{"ptr", "42", `{"id":42}`}, // a number is a delivery ID too
		{"hdr", "empty-body", ""},
	} {
		id := tc.id
		var body []byte
		if tc.body != "" {
			body = []byte(tc.body)
		}
		first := s.post(tc.sender, id, body)
		a := wantAccepted(t, first, tc.sender, id)
		for i := range 3 {
			r := s.post(tc.sender, id, body)
			if r.status != first.status {
				t.Errorf("%s/%s replay %d: status %d, first %d", tc.sender, id, i, r.status, first.status)
			}
			if !bytes.Equal(r.body, first.body) {
				t.Errorf("%s/%s replay %d: body %q, first %q", tc.sender, id, i, r.body, first.body)
			}
			if got, want := r.header.Get("Content-Type"), first.header.Get("Content-Type"); got != want {
				t.Errorf("%s/%s replay %d: Content-Type %q, first %q", tc.sender, id, i, got, want)
			}
			if !r.replayed() {
				t.Errorf("%s/%s replay %d: Idempotent-Replayed = %q, want true", tc.sender, id, i, r.header.Values("Idempotent-Replayed"))
			}
		}
		if e := readEvent(t, pool, tc.sender, id); e.id.String() != a.EventID {
			t.Errorf("%s/%s: stored event %s, response %s", tc.sender, id, e.id, a.EventID)
		}
	}
	// The same delivery ID under another sender is another key.
	wantAccepted(t, s.post("tiny", "evt-1", []byte(`{"n":1}`)), "tiny", "evt-1")
	wantCounts(t, pool, 5, 5)
}

func TestIngestSameIDDifferentBodyIs422(t *testing.T) {
	t.Parallel()
	s, pool := newDBServer(t, options{})
	original := []byte(`{"amount":100}`)
	first := s.post("hdr", "evt-1", original)
	wantAccepted(t, first, "hdr", "evt-1")
	keyBefore := readKey(t, pool, "hdr", "evt-1")
	eventBefore := readEvent(t, pool, "hdr", "evt-1")

	for _, other := range [][]byte{[]byte(`{"amount":999}`), []byte(`{"amount":100} `), nil} {
		r := s.post("hdr", "evt-1", other)
		wantProblem(t, r, http.StatusUnprocessableEntity, "payload-mismatch")
	}

	keyAfter := readKey(t, pool, "hdr", "evt-1")
	if fmt.Sprint(keyAfter) != fmt.Sprint(keyBefore) {
		t.Errorf("processed_messages row changed:\nbefore %+v\nafter  %+v", keyBefore, keyAfter)
	}
	eventAfter := readEvent(t, pool, "hdr", "evt-1")
	if fmt.Sprint(eventAfter) != fmt.Sprint(eventBefore) || !bytes.Equal(eventAfter.body, original) {
		t.Errorf("webhook_events row changed:\nbefore %+v\nafter  %+v", eventBefore, eventAfter)
	}
	wantCounts(t, pool, 1, 1)

	// The original body still replays.
	r := s.post("hdr", "evt-1", original)
	if r.status != http.StatusAccepted || !r.replayed() || !bytes.Equal(r.body, first.body) {
		t.Errorf("replay after a mismatch: %s (replayed %v); want the first response %q", r, r.replayed(), first.body)
	}
}

func TestIngestUnknownSenderIs404(t *testing.T) {
	t.Parallel()
	s, pool := newDBServer(t, options{})
	for _, name := range []string{"nope", "HDR", "hdr2", "a.b", strings.Repeat("a", 70)} {
		r := s.post(name, "evt-1", []byte(`{"id":"evt-1"}`))
		p := wantProblem(t, r, http.StatusNotFound, "unknown-sender")
		if !strings.Contains(p.Detail, name) {
			t.Errorf("detail %q does not name the sender %q", p.Detail, name)
		}
	}
	wantCounts(t, pool, 0, 0)
}

func TestIngestInvalidDeliveryIDIs400(t *testing.T) {
	t.Parallel()
	s, pool := newDBServer(t, options{})
	header := func(vals ...string) func(*http.Request) {
		return func(r *http.Request) {
			r.Header.Del("X-Delivery-Id")
			for _, v := range vals {
				r.Header.Add("X-Delivery-Id", v)
			}
		}
	}
	jsonID := func(v any) []byte {
		b, err := json.Marshal(map[string]any{"id": v, "type": "x"})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, tc := range []struct {
		name   string
		sender string
		body   []byte
		mod    func(*http.Request)
	}{
		{"header missing", "hdr", []byte(`{}`), header()},
		{"header empty", "hdr", []byte(`{}`), header("")},
		{"header 256 bytes", "hdr", []byte(`{}`), header(strings.Repeat("a", 256))},
		{"header 1000 bytes", "hdr", []byte(`{}`), header(strings.Repeat("x", 1000))},
		{"header with a space", "hdr", []byte(`{}`), header("evt 1")},
		{"header with a tab", "hdr", []byte(`{}`), header("evt\t1")},
		{"header with UTF-8 é", "hdr", []byte(`{}`), header("caf\u00e9")},
		{"header with byte 0x80", "hdr", []byte(`{}`), header("evt\x80")},
		{"header sent twice", "hdr", []byte(`{}`), header("evt-1", "evt-2")},
		{"header sent twice with one value", "hdr", []byte(`{}`), header("evt-1", "evt-1")},
		{"pointer missing", "ptr", []byte(`{"ID":"evt-1","data":{"id":"x"}}`), nil},
		{"body not JSON (form)", "ptr", []byte(`id=evt-1`), nil},
		{"body not JSON (truncated)", "ptr", []byte(`{"id":"evt-1"`), nil},
		{"body empty", "ptr", nil, nil},
		{"body a JSON array", "ptr", []byte(`["evt-1"]`), nil},
		{"pointer at an object", "ptr", jsonID(map[string]string{"id": "x"}), nil},
		{"pointer at an array", "ptr", jsonID([]string{"x"}), nil},
		{"pointer at true", "ptr", jsonID(true), nil},
		{"pointer at null", "ptr", []byte(`{"id":null}`), nil},
		{"pointer at empty string", "ptr", jsonID(""), nil},
		{"pointer at 256 bytes", "ptr", jsonID(strings.Repeat("b", 256)), nil},
		{"pointer at a space", "ptr", jsonID("evt 1"), nil},
		{"pointer at a tab", "ptr", jsonID("evt\t1"), nil},
		{"pointer at a newline", "ptr", jsonID("evt\n1"), nil},
		{"pointer at UTF-8 é", "ptr", jsonID("caf\u00e9"), nil},
		{"pointer at DEL", "ptr", jsonID("evt\x7f"), nil},
		{"pointer at NUL", "ptr", jsonID("evt\x00"), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var mods []func(*http.Request)
			if tc.mod != nil {
				mods = append(mods, tc.mod)
			}
			id := ""
			if tc.sender == "hdr" {
				id = "placeholder" // replaced by tc.mod
			}
			r := s.post(tc.sender, id, tc.body, mods...)
			wantProblem(t, r, http.StatusBadRequest, "invalid-delivery-id")
			wantCounts(t, pool, 0, 0)
		})
	}

	// http.Client refuses to send a DEL in a header value; net/http's server
	// answers such a request 400 itself, before any handler runs.
	t.Run("header with DEL", func(t *testing.T) {
		t.Parallel()
		body := `{"a":1}`
		r := s.raw("POST /webhooks/hdr HTTP/1.1\r\nHost: hookgate\r\nX-Delivery-Id: evt\x7f1\r\n" +
			"Content-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\nConnection: close\r\n\r\n" + body)
		if r.status != http.StatusBadRequest {
			t.Errorf("status = %d, want 400: %s", r.status, r)
		}
		wantCounts(t, pool, 0, 0)
	})
}

func TestIngestDeliveryIDBoundaries(t *testing.T) {
	t.Parallel()
	s, pool := newDBServer(t, options{})
	var visible strings.Builder
	for c := byte(0x21); c <= 0x7e; c++ {
		visible.WriteByte(c)
	}
	long := strings.Repeat("a", 255)
	for _, id := range []string{long, visible.String(), "1", "~"} {
		wantAccepted(t, s.post("hdr", id, []byte(`{}`)), "hdr", id)
		b, err := json.Marshal(map[string]string{"id": id})
		if err != nil {
			t.Fatal(err)
		}
		wantAccepted(t, s.post("ptr", "", b), "ptr", id)
	}
	// Surrounding whitespace is not part of a header's value (RFC 9110 §5.5).
	r := s.post("hdr", "", []byte(`{}`), func(r *http.Request) { r.Header.Set("X-Delivery-Id", "  padded\t") })
	wantAccepted(t, r, "hdr", "padded")
	// Header names are case-insensitive.
	r = s.raw("POST /webhooks/hdr HTTP/1.1\r\nHost: hookgate\r\nx-delivery-id: lower\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
	wantAccepted(t, r, "hdr", "lower")
	wantCounts(t, pool, 10, 10)
	if e := readEvent(t, pool, "hdr", long); e.deliveryID != long {
		t.Errorf("stored delivery_id has %d bytes, want 255", len(e.deliveryID))
	}
}

func TestIngestBodyOverLimitIs413(t *testing.T) {
	t.Parallel()
	s, pool := newDBServer(t, options{})
	chunked := func(r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Fatal(err)
		}
		r.ContentLength = -1
		r.TransferEncoding = []string{"chunked"}
		// An io.Reader of unknown length: the transport must stream it in chunks.
		r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body[:len(body)/2]), bytes.NewReader(body[len(body)/2:])))
		r.GetBody = nil
	}
	for _, tc := range []struct {
		name   string
		sender string
		size   int
		mods   []func(*http.Request)
	}{
		{"Content-Length over a 16-byte limit", "tiny", 17, nil},
		{"chunked over a 16-byte limit", "tiny", 17, []func(*http.Request){chunked}},
		{"chunked far over a 16-byte limit", "tiny", 64 << 10, []func(*http.Request){chunked}},
		{"Content-Length over the default 1 MiB", "hdr", 1<<20 + 1, nil},
		{"chunked over the default 1 MiB", "hdr", 1<<20 + 1, []func(*http.Request){chunked}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := s.post(tc.sender, "too-big", bytes.Repeat([]byte("x"), tc.size), tc.mods...)
			wantProblem(t, r, http.StatusRequestEntityTooLarge, "payload-too-large")
			wantCounts(t, pool, 0, 0)
		})
	}

	// The same key is accepted afterwards with a body within the limit: a 413
	// consumed nothing. Exactly the limit is within it.
	t.Run("at the limit", func(t *testing.T) {
		t.Parallel()
		s, pool := newDBServer(t, options{})
		wantAccepted(t, s.post("tiny", "too-big", bytes.Repeat([]byte("y"), 16)), "tiny", "too-big")
		wantAccepted(t, s.post("tiny", "chunked", bytes.Repeat([]byte("z"), 16), chunked), "tiny", "chunked")
		wantAccepted(t, s.post("hdr", "mib", bytes.Repeat([]byte("m"), 1<<20)), "hdr", "mib")
		wantCounts(t, pool, 3, 3)
		if e := readEvent(t, pool, "hdr", "mib"); len(e.body) != 1<<20 {
			t.Errorf("stored body has %d bytes, want 1 MiB", len(e.body))
		}
	})
}

func TestIngestStoresRawBodyAndHeaders(t *testing.T) {
	t.Parallel()
	s, pool := newDBServer(t, options{})
	for _, tc := range []struct {
		id, contentType string
		body            []byte
	}{
		{"json", "application/json", []byte("{ \"b\" : 1,\n\t\"a\":\"\\u00e9\",  \"a\":2 }\n")}, // not re-encoded
		{"form", "application/x-www-form-urlencoded", []byte("a=1&b=%20x+y&c=%C3%A9&c=2")},
		{"xml", "application/xml; charset=utf-8", []byte(`<?xml version="1.0"?><event id="1"><![CDATA[<&>]]></event>`)},
		{"binary", "application/octet-stream", []byte("\x00\xff\xfe\x00\x01binary\x00\r\n\x80\xff")},
		{"text", "text/plain", []byte("invalid UTF-8 \xc3\x28 kept as is")},
		{"empty", "application/octet-stream", []byte{}},
	} {
		r := s.post("hdr", tc.id, tc.body, func(r *http.Request) {
			r.Header.Set("Content-Type", tc.contentType)
			r.Header.Set("Authorization", "Bearer s3cr3t-token")
			r.Header.Set("Cookie", "session=s3cr3t-cookie")
			r.Header.Set("Proxy-Authorization", "Basic s3cr3t-proxy")
			r.Header.Add("X-Custom", "one")
			r.Header.Add("X-Custom", "two")
		})
		wantAccepted(t, r, "hdr", tc.id)
		e := readEvent(t, pool, "hdr", tc.id)
		if !bytes.Equal(e.body, tc.body) {
			t.Errorf("%s: stored body %q, sent %q", tc.id, e.body, tc.body)
		}
		if e.body == nil {
			t.Errorf("%s: stored body is NULL", tc.id)
		}
		for name := range e.headers {
			switch strings.ToLower(name) {
			case "authorization", "cookie", "proxy-authorization":
				t.Errorf("%s: header %s was stored", tc.id, name)
			}
		}
		raw, err := json.Marshal(e.headers)
		if err != nil {
			t.Fatal(err)
		}
		if leak := containsAny(string(raw), "s3cr3t"); leak != "" {
			t.Errorf("%s: stored headers contain a credential: %s", tc.id, raw)
		}
		if got := http.Header(e.headers).Values("X-Custom"); fmt.Sprint(got) != "[one two]" {
			t.Errorf("%s: stored X-Custom = %q, want [one two]", tc.id, got)
		}
		if got := http.Header(e.headers).Get("Content-Type"); got != tc.contentType {
			t.Errorf("%s: stored Content-Type = %q, want %q", tc.id, got, tc.contentType)
		}
		if got := http.Header(e.headers).Get("X-Delivery-Id"); got != tc.id {
			t.Errorf("%s: stored X-Delivery-Id = %q", tc.id, got)
		}
		k := readKey(t, pool, "hdr", tc.id)
		if sum := sha256.Sum256(tc.body); !bytes.Equal(k.sha256, sum[:]) {
			t.Errorf("%s: request_sha256 %x, want %x", tc.id, k.sha256, sum)
		}
	}
	wantCounts(t, pool, 6, 6)
}

func TestIngestDatabaseUnreachableIs503(t *testing.T) {
	t.Parallel()
	// A port nobody listens on: reserve one, then release it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(addr)
	pool, err := pgxpool.New(t.Context(), "postgres://hookgate@"+addr+"/nowhere?sslmode=disable&connect_timeout=5")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	var logs testkit.LogBuffer
	s := newServer(t, pool, options{log: &logs})

	for _, sender := range []string{"hdr", "tiny"} {
		r := s.post(sender, "evt-1", []byte(`{"a":1}`))
		p := wantProblem(t, r, http.StatusServiceUnavailable, "unavailable")
		wantRetryAfter(t, r)
		if leak := containsAny(string(r.body)+fmt.Sprint(r.header),
			addr, port, "127.0.0.1", "nowhere", "dial", "connect", "refused", "pgx", "pgconn", "SQLSTATE", "in-flight wait", "claim"); leak != "" {
			t.Errorf("the response leaks internal error text (%q): %s %v", leak, r.body, r.header)
		}
		if p.Title == "" {
			t.Error("no title")
		}
	}
	// The cause is logged (at error level), not sent.
	if logged := logs.String(); !strings.Contains(logged, port) || !strings.Contains(logged, "level=ERROR") {
		t.Errorf("the 503's cause is not logged as an error; log:\n%s", logged)
	}
}

// A delivery whose connection is cut after its COMMIT reached PostgreSQL,
// before the answer came back (a proxy that lets the COMMIT through and
// closes the connection), is answered 503 with Retry-After, saying that
// it may have been stored, not that nothing was; it was, and the sender's
// retry with the same delivery ID gets the stored 202, replayed. A database
// that cannot be reached at all still says that nothing was recorded.
func TestIngestCommitCutSaysItMayBeStored(t *testing.T) {
	t.Parallel()
	pgtest.SkipOnCitus(t, "the proxy cuts the COMMIT of a transaction; on Citus a delivery is one call of the delegated function")
	pool, dsn := pgtest.NewDB(t)
	proxy, viaProxy := pgtest.NewCutProxy(t, dsn)
	s := newServer(t, newPool(t, viaProxy, 2), options{})
	// A first delivery prepares the statements, on the connection the cut
	// then hits.
	wantAccepted(t, s.post("hdr", "warm-1", []byte(`{"a":0}`)), "hdr", "warm-1")

	proxy.ArmCommitCut()
	r := s.post("hdr", "cut-1", []byte(`{"a":1}`))
	if proxy.Cuts() != 1 {
		t.Fatalf("the proxy cut %d connections after a COMMIT, want 1: %s", proxy.Cuts(), r)
	}
	p := wantProblem(t, r, http.StatusServiceUnavailable, "unavailable")
	wantRetryAfter(t, r)
	if !strings.Contains(p.Detail, "may have been stored") || strings.Contains(p.Detail, "nothing was recorded") {
		t.Errorf("the 503 of a COMMIT whose answer was lost says %q; want that the delivery may have been stored", p.Detail)
	}
	var stored string
	if err := pool.QueryRow(t.Context(), `SELECT event_id::text FROM processed_messages WHERE sender = 'hdr' AND delivery_id = 'cut-1'`).Scan(&stored); err != nil {
		t.Fatalf("the cut delivery's key: %v; want it stored (the COMMIT went through)", err)
	}
	retry := s.post("hdr", "cut-1", []byte(`{"a":1}`))
	var body acceptedBody
	if retry.status != http.StatusAccepted || !retry.replayed() || json.Unmarshal(retry.body, &body) != nil || body.EventID != stored {
		t.Errorf("the retry: %s; want the stored 202 of event %s, replayed", retry, stored)
	}

	// Nothing sent: nothing recorded, and it says so.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	down := newServer(t, newPool(t, "postgres://hookgate@"+addr+"/nowhere?sslmode=disable&connect_timeout=5", 2), options{})
	p = wantProblem(t, down.post("hdr", "down-1", []byte(`{"a":1}`)), http.StatusServiceUnavailable, "unavailable")
	if !strings.Contains(p.Detail, "nothing was recorded") {
		t.Errorf("the 503 of an unreachable database says %q; want that nothing was recorded", p.Detail)
	}
}

// A failure of the state change — here another constraint of webhook_events
// — rolls back the claim too: the answer is 500 (not a transient failure: a
// retry meets it again until the cause is gone), its cause is logged,
// nothing is recorded, the key is not consumed, and the retry is accepted
// once the cause is gone.
func TestIngestFailingStateChangeIs500AndConsumesNothing(t *testing.T) {
	t.Parallel()
	var logs testkit.LogBuffer
	s, pool := newDBServer(t, options{log: &logs})
	ctx := t.Context()
	// The test's DDL: on Citus it reaches every shard, committed in two
	// phases (TwoPhaseFixture: not hookgate's).
	exec := func(sql string) {
		t.Helper()
		var err error
		pgtest.TwoPhaseFixture(pool, func() { _, err = pool.Exec(ctx, sql) })
		if err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}

	exec(`ALTER TABLE webhook_events ADD CONSTRAINT test_refuses_boom CHECK (delivery_id <> 'boom')`)
	r := s.post("hdr", "boom", []byte(`{}`))
	wantProblem(t, r, http.StatusInternalServerError, "internal")
	wantRetryAfter(t, r)
	if leak := containsAny(string(r.body), "test_refuses_boom", "check", "23514", "webhook_events"); leak != "" {
		t.Errorf("the response leaks %q: %s", leak, r.body)
	}
	if logged := logs.String(); !strings.Contains(logged, "test_refuses_boom") || !strings.Contains(logged, "level=ERROR") {
		t.Errorf("the 500's cause is not logged as an error; log:\n%s", logged)
	}
	wantCounts(t, pool, 0, 0)
	exec(`ALTER TABLE webhook_events DROP CONSTRAINT test_refuses_boom`)
	wantAccepted(t, s.post("hdr", "boom", []byte(`{}`)), "hdr", "boom")

	// A unique violation of ANOTHER constraint is not a duplicate: no replay.
	exec(`CREATE UNIQUE INDEX test_one_body_per_sender ON webhook_events (sender, md5(body))`)
	r = s.post("hdr", "same-body", []byte(`{}`))
	wantProblem(t, r, http.StatusInternalServerError, "internal")
	wantCounts(t, pool, 1, 1)
	exec(`DROP INDEX test_one_body_per_sender`)
	wantAccepted(t, s.post("hdr", "same-body", []byte(`{}`)), "hdr", "same-body")
	wantCounts(t, pool, 2, 2)

	// Not even when the claim itself (the processed_messages insert) hits
	// another unique constraint.
	// "abcd" has the length of the stored "boom".
	exec(`CREATE UNIQUE INDEX test_one_key_per_length ON processed_messages (sender, length(delivery_id))`)
	r = s.post("hdr", "abcd", []byte(`{"x":1}`))
	wantProblem(t, r, http.StatusInternalServerError, "internal")
	wantCounts(t, pool, 2, 2)
	exec(`DROP INDEX test_one_key_per_length`)
	wantAccepted(t, s.post("hdr", "abcd", []byte(`{"x":1}`)), "hdr", "abcd")
	wantCounts(t, pool, 3, 3)
}

// newPool returns a pool on the database at dsn with up to maxConns
// connections, closed when the test ends (before the database is dropped).
func newPool(t *testing.T, dsn string, maxConns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(context.WithoutCancel(t.Context()), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}
