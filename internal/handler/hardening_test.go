package handler_test

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/hookgate/hookgate/internal/authlimit"
	"github.com/hookgate/hookgate/internal/dedup"
	"github.com/hookgate/hookgate/internal/testing/pgtest"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// The request ID in the log is hookgate's own, never the client's
// X-Request-Id, which is logged apart, cut to 64 bytes.
func TestRequestIDIsGenerated(t *testing.T) {
	t.Parallel()
	var logs testkit.LogBuffer
	s, _ := newDBServer(t, options{log: &logs})
	spoof := "spoofed-" + strings.Repeat("a", 100)
	req := s.newRequest(http.MethodGet, "/healthz", nil)
	req.Header.Set("X-Request-Id", spoof)
	r := s.do(req)
	if r.status != http.StatusOK {
		t.Fatalf("GET /healthz: %s", r)
	}
	id := r.header.Get("X-Request-Id")
	if _, err := uuid.Parse(id); err != nil {
		t.Errorf("X-Request-Id of the response = %q, want a UUID of hookgate's", id)
	}
	line := regexp.MustCompile(`(?m)^.*msg=request.*path=/healthz.*$`).FindString(logs.String())
	if line == "" {
		t.Fatalf("no request log line in %q", logs.String())
	}
	if !strings.Contains(line, "request_id="+id+" ") {
		t.Errorf("log line %q: want request_id=%s", line, id)
	}
	if m := regexp.MustCompile(`client_request_id=(\S+)`).FindStringSubmatch(line); m == nil || m[1] != spoof[:64] {
		t.Errorf("log line %q: want client_request_id=%s (the client's, cut to 64 bytes)", line, spoof[:64])
	}
	// Two requests get two IDs.
	if id2 := s.get("/healthz").header.Get("X-Request-Id"); id2 == id || id2 == "" {
		t.Errorf("second request's ID %q, first %q", id2, id)
	}
}

// Every response, the API explorer's included, carries the same security
// headers; the explorer's CSP allows its own inline scripts by hash and
// nothing from another origin.
func TestSecurityHeaders(t *testing.T) {
	t.Parallel()
	s, _ := newDBServer(t, options{})
	for _, path := range []string{"/docs", "/docs/", "/docs/swagger-ui.css", "/docs/nope.js", "/healthz", "/openapi.yaml", "/v1/senders", "/webhooks/nope", "/nope"} {
		r := s.get(path)
		for h, want := range map[string]string{
			"X-Content-Type-Options": "nosniff",
			"X-Frame-Options":        "DENY",
			"Referrer-Policy":        "no-referrer",
		} {
			if got := r.header.Get(h); got != want {
				t.Errorf("GET %s (%d): %s = %q, want %q", path, r.status, h, got, want)
			}
		}
		csp := r.header.Get("Content-Security-Policy")
		if !strings.Contains(csp, "frame-ancestors 'none'") || !strings.HasPrefix(csp, "default-src 'none'") {
			t.Errorf("GET %s: Content-Security-Policy = %q, want default-src 'none' and frame-ancestors 'none'", path, csp)
		}
		if strings.Contains(csp, "unsafe-eval") || strings.Contains(csp, "http:") || strings.Contains(csp, "https:") || strings.Contains(csp, "*") {
			t.Errorf("GET %s: Content-Security-Policy = %q allows eval or another origin", path, csp)
		}
	}
	page := s.get("/docs")
	csp := page.header.Get("Content-Security-Policy")
	scripts := regexp.MustCompile(`(?s)<script>(.*?)</script>`).FindAllStringSubmatch(string(page.body), -1)
	if len(scripts) == 0 {
		t.Fatalf("the explorer's page has no inline script: %s", page.body)
	}
	for _, m := range scripts {
		sum := sha256.Sum256([]byte(m[1]))
		if h := "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"; !strings.Contains(csp, h) {
			t.Errorf("the explorer's CSP %q does not allow its inline script %s", csp, h)
		}
	}
	if !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "connect-src 'self'") {
		t.Errorf("the explorer's CSP %q must let it load its scripts and the spec from this origin", csp)
	}
}

// from returns a copy of s whose requests come from the loopback address ip
// (any of 127.0.0.0/8), as another client would.
func (s *server) from(t *testing.T, ip string) *server {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	tr := &http.Transport{DialContext: d.DialContext}
	t.Cleanup(tr.CloseIdleConnections)
	c := *s
	c.client = &http.Client{Transport: tr}
	return &c
}

// Wrong admin tokens are slowed down per client: after a burst of 401s a
// client gets 429 with Retry-After for its wrong tokens, while the right
// token still passes, from it and from another client.
func TestOperatorWrongTokensAreLimited(t *testing.T) {
	t.Parallel()
	s := newOpServer(t, opOptions{})
	attacker, operator := s.from(t, "127.0.0.2"), s.from(t, "127.0.0.3")
	var unauthorized, limited int
	for range 40 {
		r := attacker.do(s.opRequest("GET", "/v1/senders", "Bearer wrong-token-wrong-token-wrong-token"))
		switch r.status {
		case http.StatusUnauthorized:
			unauthorized++
		case http.StatusTooManyRequests:
			limited++
			wantProblem(t, r, http.StatusTooManyRequests, "too-many-attempts")
			wantRetryAfter(t, r)
		default:
			t.Fatalf("wrong token: %s", r)
		}
	}
	// A burst of 10, plus one a second refilled while the loop runs.
	if unauthorized < 10 || unauthorized > 20 || limited < 20 {
		t.Errorf("40 wrong tokens: %d answered 401, %d 429; want about 10 and 30", unauthorized, limited)
	}
	if r := attacker.do(s.opRequest("GET", "/v1/senders", "Bearer "+testToken)); r.status != http.StatusOK {
		t.Errorf("right token from the limited client: %s, want 200 (the right token is never limited)", r)
	}
	if r := operator.do(s.opRequest("GET", "/v1/senders", "Bearer "+testToken)); r.status != http.StatusOK {
		t.Errorf("right token from another client: %s, want 200", r)
	}
}

// Operator path parameters that no resource can have are refused with 400
// before any query: a NUL, other control characters, invalid UTF-8, an
// over-long delivery ID.
func TestOperatorInvalidPathsAre400(t *testing.T) {
	t.Parallel()
	s := newOpServer(t, opOptions{})
	for _, path := range []string{
		"/v1/senders/hdr/deliveries/%00",
		"/v1/senders/hdr/deliveries/a%00b",
		"/v1/senders/hdr/deliveries/%0A",
		"/v1/senders/hdr/deliveries/%FF",
		"/v1/senders/hdr/deliveries/caf%C3%A9",
		"/v1/senders/hdr/deliveries/" + strings.Repeat("a", 256),
		"/v1/senders/hdr/deliveries/a%20b",
		"/v1/senders/%00/deliveries",
		"/v1/senders/%FF/deliveries/x",
		"/v1/events/%00",
	} {
		r := s.call("GET", path)
		wantProblem(t, r, http.StatusBadRequest, "invalid-parameter")
	}
	// What a delivery ID may be still reaches the database.
	r := s.call("GET", "/v1/senders/hdr/deliveries/"+strings.Repeat("a", 255))
	wantProblem(t, r, http.StatusNotFound, "not-found")
}

// Stored headers: credential-like ones are dropped by default (signature
// headers too), a sender's store_headers keeps only what it lists (and
// Content-Type), drop_headers drops more, and at most 100 values are stored.
func TestIngestStoredHeaders(t *testing.T) {
	t.Parallel()
	s, pool := newDBServer(t, options{yaml: `
senders:
  - name: hdr
    preset: generic
    delivery_id: { header: X-Delivery-Id }
  - name: allow
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    store_headers: [X-Delivery-Id, x-hub-signature-256, X-Keep]
  - name: drop
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    drop_headers: [User-Agent, X-Internal-Route]
`})
	credentials := map[string]string{
		"Authorization": "Bearer cred-1", "Cookie": "s=cred-2", "Proxy-Authorization": "Basic cred-3",
		"X-Api-Key": "cred-4", "X-Auth-Token": "cred-5", "X-Amz-Security-Token": "cred-6",
		"X-Webhook-Secret": "cred-7", "X-Password": "cred-8", "X-Hub-Signature-256": "sha256=cred-9",
		"Stripe-Signature": "t=1,v1=cred-10", "X-Shopify-Hmac-Sha256": "cred-11", "X-Session-Id": "cred-12",
		"Apikey": "cred-13",
	}
	mods := func(r *http.Request) {
		for k, v := range credentials {
			r.Header.Set(k, v)
		}
		r.Header.Set("X-Keep", "kept")
		r.Header.Set("X-Internal-Route", "a")
		r.Header.Set("User-Agent", "sender/1.0")
	}
	stored := func(sender string) http.Header {
		wantAccepted(t, s.post(sender, "d1", []byte(`{}`), mods), sender, "d1")
		return http.Header(readEvent(t, pool, sender, "d1").headers)
	}

	h := stored("hdr")
	for k := range credentials {
		if v := h.Values(k); len(v) > 0 {
			t.Errorf("default: %s stored: %q", k, v)
		}
	}
	for _, k := range []string{"Content-Type", "X-Delivery-Id", "X-Keep", "X-Internal-Route", "User-Agent"} {
		if h.Get(k) == "" {
			t.Errorf("default: %s not stored: %v", k, h)
		}
	}

	h = stored("allow")
	if len(h) != 4 || h.Get("Content-Type") == "" || h.Get("X-Delivery-Id") != "d1" || h.Get("X-Keep") != "kept" || h.Get("X-Hub-Signature-256") != "sha256=cred-9" {
		t.Errorf("store_headers: stored %v; want Content-Type, X-Delivery-Id, X-Keep and X-Hub-Signature-256 only", h)
	}

	h = stored("drop")
	if h.Get("User-Agent") != "" || h.Get("X-Internal-Route") != "" || h.Get("X-Api-Key") != "" || h.Get("X-Keep") != "kept" {
		t.Errorf("drop_headers: stored %v; want User-Agent, X-Internal-Route and credentials dropped, X-Keep kept", h)
	}

	// 300 headers: 100 values are stored, Content-Type among them.
	r := s.post("hdr", "many", []byte(`{}`), func(r *http.Request) {
		for i := range 300 {
			r.Header.Set(fmt.Sprintf("X-H-%03d", i), "v")
		}
	})
	wantAccepted(t, r, "hdr", "many")
	h = http.Header(readEvent(t, pool, "hdr", "many").headers)
	n := 0
	for _, v := range h {
		n += len(v)
	}
	if n != 100 || h.Get("Content-Type") == "" {
		t.Errorf("300 headers sent: %d values stored (Content-Type %q), want 100 with Content-Type", n, h.Get("Content-Type"))
	}
}

// A delivery that cannot get a database connection within the longest
// queueing wait is answered 503 overloaded with Retry-After, records
// nothing and is counted by reason; copies of a delivery in flight wait for
// it without taking a place in the queue, and once the connection is free
// every waiting delivery is accepted.
func TestIngestShedsAfterMaxQueueWait(t *testing.T) {
	t.Parallel()
	_, dsn := pgtest.NewDB(t)
	pool := newPool(t, dsn, 1)
	holder := newPool(t, dsn, 2) // the held transaction's and the test's queries
	// (The layout is given, so that the store does not look it up on the
	// connection the test holds.)
	layout := dedup.LayoutPlain
	if pgtest.Citus() {
		layout = dedup.LayoutDistributed
	}
	s := newServer(t, pool, options{store: dedup.Config{Layout: layout,
		Shedding: &dedup.ShedPolicy{Target: dedup.DefaultShedTarget, Interval: dedup.DefaultShedInterval, MaxWait: 200 * time.Millisecond}}})

	// The pool's only connection is taken: a delivery queues for it.
	conn, err := pool.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	r := s.post("hdr", "shed-me", []byte(`{}`))
	wantProblem(t, r, http.StatusServiceUnavailable, "overloaded")
	wantRetryAfter(t, r)
	m := s.get("/metrics")
	if !regexp.MustCompile(`(?m)^hookgate_ingest_shed_total\{reason="queue_timeout"\} 1$`).Match(m.body) ||
		!regexp.MustCompile(`(?m)^hookgate_deliveries_total\{event_type="none",outcome="shed",sender="hdr"\} 1$`).Match(m.body) {
		t.Errorf("metrics do not count the shed delivery:\n%s", m.body)
	}
	conn.Release()

	// A held key keeps the connection busy: copies of one delivery wait for
	// the first, which waits on the key; none of them is shed.
	tx, _, _ := holdKey(t, holder, "hdr", "held", []byte(`{}`))
	results := make(chan reply, 5)
	for range 5 {
		req := s.postRequest("hdr", "held", []byte(`{}`))
		go func() {
			r, err := s.send(req)
			if err != nil {
				t.Error(err)
			}
			results <- r
		}()
	}
	testkit.Poll(t, pollTimeout, "a delivery waiting on the held key", func() bool { return lockWaiters(t, holder) == 1 })
	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	accepted, replayed := 0, 0
	for range 5 {
		r := <-results
		switch {
		case r.status == http.StatusAccepted && r.header.Get("Idempotent-Replayed") == "true":
			replayed++
		case r.status == http.StatusAccepted:
			accepted++
		default:
			t.Errorf("a copy of a delivery waiting on a held key: %s", r)
		}
	}
	if accepted != 1 || replayed != 4 {
		t.Errorf("5 copies of a delivery waiting on a held key: %d new, %d replays; want 1 and 4", accepted, replayed)
	}
	wantAccepted(t, s.post("hdr", "after", []byte(`{}`)), "hdr", "after")
	var n int
	if err := holder.QueryRow(t.Context(), `SELECT count(*) FROM processed_messages WHERE delivery_id = 'shed-me'`).Scan(&n); err != nil || n != 0 {
		t.Errorf("the shed delivery was recorded (%d rows, %v)", n, err)
	}
	wantCounts(t, holder, 2, 2)
}

// Behind a trusted reverse proxy (every client arrives from its address),
// wrong tokens are limited per client as X-Forwarded-For names it: a
// guesser's 100 wrong tokens limit the guesser, never an operator with the
// right token (from another address or from the guesser's own), and
// another client's wrong tokens still get 401. From an untrusted peer the
// header is ignored, so a guesser cannot escape its limit by writing it.
func TestOperatorLimiterBehindTrustedProxy(t *testing.T) {
	t.Parallel()
	s := newOpServer(t, opOptions{limiter: authlimit.New(netip.MustParsePrefix("127.0.0.0/8"))})
	from := func(xff, token string) reply {
		req := s.opRequest("GET", "/v1/senders", "Bearer "+token)
		req.Header.Set("X-Forwarded-For", xff)
		return s.do(req)
	}
	var limited, refusedOperators int
	for i := range 100 {
		if r := from("203.0.113.5", "wrong-token-wrong-token-wrong-token"); r.status == http.StatusTooManyRequests {
			limited++
		} else if r.status != http.StatusUnauthorized {
			t.Fatalf("wrong token: %s", r)
		}
		if i%5 == 0 {
			for _, xff := range []string{"198.51.100.7", "203.0.113.5"} {
				if r := from(xff, testToken); r.status != http.StatusOK {
					refusedOperators++
					t.Errorf("right token from %s after %d wrong ones from 203.0.113.5: %s, want 200", xff, i+1, r)
				}
			}
		}
	}
	if limited < 70 {
		t.Errorf("the guesser behind the proxy got %d of 100 wrong tokens answered 429, want most", limited)
	}
	if r := from("198.51.100.8", "wrong-token-wrong-token-wrong-token"); r.status != http.StatusUnauthorized {
		t.Errorf("another client's first wrong token: %s, want 401 (its own allowance)", r)
	}
	if r := from("1.2.3.4, 203.0.113.5", "wrong-token-wrong-token-wrong-token"); r.status != http.StatusTooManyRequests {
		t.Errorf("the guesser writing another address in front of its own: %s, want 429", r)
	}

	// Not behind a trusted proxy: X-Forwarded-For is the client's to write,
	// and ignored.
	u := newOpServer(t, opOptions{limiter: authlimit.New(netip.MustParsePrefix("10.0.0.0/8"))})
	var last reply
	for i := range 30 {
		req := u.opRequest("GET", "/v1/senders", "Bearer wrong-token-wrong-token-wrong-token")
		req.Header.Set("X-Forwarded-For", fmt.Sprintf("203.0.113.%d", i+1))
		last = u.do(req)
	}
	if last.status != http.StatusTooManyRequests {
		t.Errorf("an untrusted client rotating X-Forwarded-For: %s after 30 wrong tokens, want 429", last)
	}
}

// A cursor crafted to carry a delivery ID that no delivery can have (a
// NUL, invalid UTF-8, a control character, over 255 bytes) is refused 400
// like any other malformed cursor, before it reaches PostgreSQL.
func TestOperatorCraftedCursorsAre400(t *testing.T) {
	t.Parallel()
	s := newOpServer(t, opOptions{})
	for _, d := range []string{"a\u0000b", "\u0000", "a\nb", "caf\u00e9", strings.Repeat("a", 256), "a b"} {
		raw, err := json.Marshal(map[string]any{"t": 1764547200000000, "d": d})
		if err != nil {
			t.Fatal(err)
		}
		cur := base64.RawURLEncoding.EncodeToString(raw)
		for _, q := range []string{"?cursor=" + cur, "?event_type=a.*&cursor=" + cur} {
			r := s.call("GET", "/v1/senders/hdr/deliveries"+q)
			wantProblem(t, r, http.StatusBadRequest, "invalid-parameter")
		}
	}
	// An invalid UTF-8 byte in the JSON itself.
	cur := base64.RawURLEncoding.EncodeToString([]byte("{\"t\":1764547200000000,\"d\":\"a\xffb\"}"))
	wantProblem(t, s.call("GET", "/v1/senders/hdr/deliveries?cursor="+cur), http.StatusBadRequest, "invalid-parameter")
	for _, q := range []string{"?event_type=%00", "?event_type=%FF%FE", "?event_type=" + strings.Repeat("a", 1000)} {
		wantProblem(t, s.call("GET", "/v1/senders/hdr/deliveries"+q), http.StatusBadRequest, "invalid-parameter")
	}
}
