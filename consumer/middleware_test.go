package consumer_test

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/hookgate/hookgate/consumer"
)

const (
	secretA = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	secretB = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"
)

// signed returns a POST of body signed with secret, as hookgate sends a
// forward: webhook-id and Idempotency-Key are the event ID.
func signed(t *testing.T, url, secret, id string, body []byte) *http.Request {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	sig, err := wh.Sign(id, now, body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("webhook-id", id)
	req.Header.Set("webhook-timestamp", fmt.Sprint(now.Unix()))
	req.Header.Set("webhook-signature", sig)
	req.Header.Set("Idempotency-Key", id)
	return req
}

func do(t *testing.T, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// orders is a service's handler: it records the event in orders, on the
// message's transaction, and answers 201 with a body naming the row.
func orders(calls *atomic.Int64) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		body, _ := io.ReadAll(r.Body)
		var id int64
		if err := consumer.Tx(r.Context()).QueryRow(r.Context(),
			`INSERT INTO orders (event_id, body) VALUES ($1, $2) RETURNING id`, r.Header.Get("webhook-id"), body).Scan(&id); err != nil {
			http.Error(w, "cannot store", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"order":%d}`, id)
	}
}

func ordersDB(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, _ := newDB(t)
	if _, err := pool.Exec(testCtx(t), `CREATE TABLE orders (id bigserial PRIMARY KEY, event_id text NOT NULL, body bytea NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return pool
}

func count(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(testCtx(t), sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// mwConfig is DefaultMiddlewareConfig for consumer name on pool, verifying
// with secrets.
func mwConfig(pool consumer.DB, name string, secrets ...string) consumer.MiddlewareConfig {
	c := consumer.DefaultMiddlewareConfig()
	c.DB, c.Consumer, c.Secrets = pool, name, secrets
	return c
}

// unsigned is DefaultMiddlewareConfig for consumer name on pool, without
// signatures, bounding bodies to maxBody bytes.
func unsigned(pool consumer.DB, name string, maxBody int64) consumer.MiddlewareConfig {
	c := consumer.DefaultMiddlewareConfig()
	c.DB, c.Consumer, c.Unsigned, c.MaxBodyBytes = pool, name, true, maxBody
	return c
}

func middleware(t *testing.T, cfg consumer.MiddlewareConfig) func(http.Handler) http.Handler {
	t.Helper()
	mw, err := consumer.Middleware(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return mw
}

// TestMiddlewareProcessesOnceAndReplays: a signed forward runs the
// handler's change once; a repeat (a redelivery: same webhook-id) gets the
// stored answer byte for byte with Idempotent-Replayed, without the handler.
// Mounted on a chi router.
func TestMiddlewareProcessesOnceAndReplays(t *testing.T) {
	t.Parallel()
	pool := ordersDB(t)
	var calls atomic.Int64
	r := chi.NewRouter()
	r.With(middleware(t, mwConfig(pool, "orders", secretA))).
		Post("/hooks", orders(&calls))
	srv := httptest.NewServer(r)
	defer srv.Close()

	first, firstBody := do(t, signed(t, srv.URL+"/hooks", secretA, "evt_1", []byte(`{"n":1}`)))
	if first.StatusCode != http.StatusCreated || first.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("first: %d %v %s", first.StatusCode, first.Header, firstBody)
	}
	again, againBody := do(t, signed(t, srv.URL+"/hooks", secretA, "evt_1", []byte(`{"n":1}`)))
	if again.StatusCode != http.StatusCreated || againBody != firstBody ||
		again.Header.Get("Content-Type") != "application/json" || again.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("repeat: %d %v %q; want the stored 201 %q replayed", again.StatusCode, again.Header, againBody, firstBody)
	}
	if calls.Load() != 1 || count(t, pool, `SELECT count(*) FROM orders WHERE event_id = 'evt_1'`) != 1 {
		t.Fatalf("handler called %d times, %d orders; want 1 and 1", calls.Load(), count(t, pool, `SELECT count(*) FROM orders`))
	}
}

// TestMiddlewareRefusesBadSignatures: a tampered body, a wrong secret, a
// stale timestamp or a missing signature get 401 and record nothing; the
// same message signed right afterwards is processed.
func TestMiddlewareRefusesBadSignatures(t *testing.T) {
	t.Parallel()
	pool := ordersDB(t)
	var calls atomic.Int64
	srv := httptest.NewServer(middleware(t, mwConfig(pool, "orders", secretA))(orders(&calls)))
	defer srv.Close()

	tampered := signed(t, srv.URL, secretA, "evt_bad", []byte(`{"n":1}`))
	tampered.Body = io.NopCloser(strings.NewReader(`{"n":2}`))
	tampered.ContentLength = 7
	wrong := signed(t, srv.URL, secretB, "evt_bad", []byte(`{"n":1}`))
	stale := signed(t, srv.URL, secretA, "evt_bad", []byte(`{"n":1}`))
	wh, _ := standardwebhooks.NewWebhook(secretA)
	old := time.Now().Add(-time.Hour)
	sig, _ := wh.Sign("evt_bad", old, []byte(`{"n":1}`))
	stale.Header.Set("webhook-timestamp", fmt.Sprint(old.Unix()))
	stale.Header.Set("webhook-signature", sig)
	missing := signed(t, srv.URL, secretA, "evt_bad", []byte(`{"n":1}`))
	missing.Header.Del("webhook-signature")
	for name, req := range map[string]*http.Request{"tampered": tampered, "wrong secret": wrong, "stale": stale, "missing": missing} {
		resp, body := do(t, req)
		if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s: %d %s, want 401 problem+json", name, resp.StatusCode, body)
		}
	}
	if calls.Load() != 0 || count(t, pool, `SELECT count(*) FROM consumer_processed_messages`) != 0 {
		t.Fatalf("a refused request ran the handler (%d) or recorded a key", calls.Load())
	}
	if resp, body := do(t, signed(t, srv.URL, secretA, "evt_bad", []byte(`{"n":1}`))); resp.StatusCode != http.StatusCreated {
		t.Fatalf("the valid delivery after refusals: %d %s, want 201", resp.StatusCode, body)
	}
}

// TestMiddlewareRotation: during a rotation both secrets are accepted.
func TestMiddlewareRotation(t *testing.T) {
	t.Parallel()
	pool := ordersDB(t)
	var calls atomic.Int64
	srv := httptest.NewServer(middleware(t, mwConfig(pool, "orders", secretA, secretB))(orders(&calls)))
	defer srv.Close()
	for i, s := range []string{secretA, secretB} {
		if resp, body := do(t, signed(t, srv.URL, s, fmt.Sprintf("evt_rot_%d", i), []byte(`{}`))); resp.StatusCode != http.StatusCreated {
			t.Fatalf("secret %d: %d %s, want 201", i, resp.StatusCode, body)
		}
	}
}

// TestMiddlewareHandlerFailureIsNotStored: a handler that answers 5xx has
// its change rolled back and its answer passed on; the retry runs it again.
func TestMiddlewareHandlerFailureIsNotStored(t *testing.T) {
	t.Parallel()
	pool := ordersDB(t)
	var calls atomic.Int64
	failFirst := func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			if _, err := consumer.Tx(r.Context()).Exec(r.Context(), `INSERT INTO orders (event_id, body) VALUES ('evt_f', '')`); err != nil {
				t.Error(err)
			}
			http.Error(w, "downstream busy", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}
	srv := httptest.NewServer(middleware(t, mwConfig(pool, "orders", secretA))(http.HandlerFunc(failFirst)))
	defer srv.Close()
	if resp, _ := do(t, signed(t, srv.URL, secretA, "evt_f", []byte(`{}`))); resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("failing handler: %d, want its 503", resp.StatusCode)
	}
	if n := count(t, pool, `SELECT count(*) FROM orders`) + count(t, pool, `SELECT count(*) FROM consumer_processed_messages`); n != 0 {
		t.Fatalf("the failed attempt left %d rows", n)
	}
	if resp, _ := do(t, signed(t, srv.URL, secretA, "evt_f", []byte(`{}`))); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("retry: %d, want 204", resp.StatusCode)
	}
	if resp, _ := do(t, signed(t, srv.URL, secretA, "evt_f", []byte(`{}`))); resp.StatusCode != http.StatusNoContent || resp.Header.Get("Idempotent-Replayed") != "true" || calls.Load() != 2 {
		t.Fatalf("repeat: %d %v, handler calls %d; want a replayed 204 and 2 calls", resp.StatusCode, resp.Header, calls.Load())
	}
}

// TestMiddlewareConfig: the constructor refuses what cannot work; a field
// left at zero takes its default, so a config written as a literal with only
// DB, Consumer and Secrets (the zero value otherwise) keeps working.
func TestMiddlewareConfig(t *testing.T) {
	t.Parallel()
	pool := ordersDB(t)
	for name, apply := range map[string]func(*consumer.MiddlewareConfig){
		"no DB":              func(c *consumer.MiddlewareConfig) { c.DB = nil },
		"no consumer":        func(c *consumer.MiddlewareConfig) { c.Consumer = "" },
		"no secret":          func(c *consumer.MiddlewareConfig) { c.Secrets = nil },
		"bad secret":         func(c *consumer.MiddlewareConfig) { c.Secrets = []string{"not a secret"} },
		"negative limit":     func(c *consumer.MiddlewareConfig) { c.MaxBodyBytes = -1 },
		"negative in-flight": func(c *consumer.MiddlewareConfig) { c.InFlightWait = -time.Second },
	} {
		cfg := mwConfig(pool, "c", secretA)
		apply(&cfg)
		if _, err := consumer.Middleware(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := consumer.Middleware(mwConfig(pool, "c", secretA)); err != nil {
		t.Errorf("the defaults: %v", err)
	}
	if _, err := consumer.Middleware(consumer.MiddlewareConfig{DB: pool, Consumer: "c", Secrets: []string{secretA}}); err != nil {
		t.Errorf("zero limit and in-flight wait (their defaults): %v", err)
	}
}

// TestConfigZeroTakesTheDefault: the public package's zero Config is valid:
// an InFlightWait of 0 is DefaultInFlightWait (never PostgreSQL's
// lock_timeout 0, which would wait for ever); a negative one is refused.
func TestConfigZeroTakesTheDefault(t *testing.T) {
	t.Parallel()
	pool := ordersDB(t)
	if got := consumer.DefaultConfig(); got.InFlightWait != consumer.DefaultInFlightWait {
		t.Errorf("DefaultConfig() = %+v", got)
	}
	if _, err := consumer.New(pool, consumer.Config{InFlightWait: -time.Millisecond}); err == nil || !strings.Contains(err.Error(), "InFlightWait") {
		t.Errorf("New(negative InFlightWait) = %v, want an error naming InFlightWait", err)
	}
	if _, err := consumer.New(pool, consumer.Config{}); err != nil {
		t.Errorf("New(Config{}): %v", err)
	}
	if _, err := consumer.New(pool, consumer.DefaultConfig()); err != nil {
		t.Errorf("New(DefaultConfig()): %v", err)
	}
}

// TestMiddlewareBounds: a body over the limit is 413, a message without an
// ID (unsigned mode) is 400, and neither records anything.
func TestMiddlewareBounds(t *testing.T) {
	t.Parallel()
	pool := ordersDB(t)
	var calls atomic.Int64
	srv := httptest.NewServer(middleware(t, unsigned(pool, "orders", 16))(orders(&calls)))
	defer srv.Close()
	big, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL, strings.NewReader(strings.Repeat("x", 17)))
	big.Header.Set("Idempotency-Key", "evt_big")
	if resp, _ := do(t, big); resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("big body: %d, want 413", resp.StatusCode)
	}
	noID, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL, strings.NewReader("{}"))
	if resp, _ := do(t, noID); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("no ID: %d, want 400", resp.StatusCode)
	}
	nul, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL, strings.NewReader("{}"))
	nul.Header.Set("Idempotency-Key", "a\xffb")
	if resp, _ := do(t, nul); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("invalid ID: %d, want 400", resp.StatusCode)
	}
	if calls.Load() != 0 || count(t, pool, `SELECT count(*) FROM consumer_processed_messages`) != 0 {
		t.Fatal("a refused request ran the handler or recorded a key")
	}
	ok, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL, strings.NewReader("{}"))
	ok.Header.Set("Idempotency-Key", "evt_ok")
	if resp, _ := do(t, ok); resp.StatusCode != http.StatusCreated {
		t.Errorf("unsigned with an Idempotency-Key: %d, want 201", resp.StatusCode)
	}
}

// TestMiddlewareRefusesUnusableSecrets: a secret whose HMAC key is empty or
// short is refused at construction, with an error that says why without
// repeating the secret, Unsigned or not. The README's own pattern,
// os.Getenv of a variable that is not set, is the first case: before, it
// built a middleware that accepted requests signed with an empty key.
func TestMiddlewareRefusesUnusableSecrets(t *testing.T) {
	t.Parallel()
	pool := ordersDB(t)
	const unset = "HOOKGATE_TEST_ORDERS_SIGNING_SECRET_NEVER_SET"
	if _, ok := os.LookupEnv(unset); ok {
		t.Fatalf("%s is set", unset)
	}
	// Exactly the README's lines.
	mc := consumer.DefaultMiddlewareConfig()
	mc.DB, mc.Consumer = pool, "orders"
	mc.Secrets = []string{os.Getenv(unset)}
	if _, err := consumer.Middleware(mc); err == nil || !strings.Contains(err.Error(), "Secrets[0] is empty") {
		t.Errorf("the README's service with %s unset: %v, want Secrets[0] is empty", unset, err)
	}
	short := "whsec_" + base64.StdEncoding.EncodeToString([]byte("fifteen bytes!!"))
	for name, c := range map[string]struct {
		secret, says string
	}{
		"the README's pattern, variable unset": {os.Getenv(unset), "is empty"},
		"whsec_ alone":                         {"whsec_", "0-byte key"},
		"blank":                                {"   ", "is empty"},
		"15-byte key":                          {short, "15-byte key"},
		"not base64":                           {"whsec_not base64!", "not a Standard Webhooks secret"},
	} {
		for _, unsigned := range []bool{false, true} {
			mc := consumer.DefaultMiddlewareConfig()
			mc.DB, mc.Consumer, mc.Unsigned = pool, "orders", unsigned
			mc.Secrets = []string{secretA, c.secret}
			_, err := consumer.Middleware(mc)
			if err == nil || !strings.Contains(err.Error(), "Secrets[1]") || !strings.Contains(err.Error(), c.says) {
				t.Errorf("%s (Unsigned %v): %v, want an error naming Secrets[1] and saying %q", name, unsigned, err, c.says)
			}
			if key := strings.TrimSpace(strings.TrimPrefix(c.secret, "whsec_")); err != nil && key != "" && strings.Contains(err.Error(), key) {
				t.Errorf("%s: the error repeats the secret: %v", name, err)
			}
		}
	}
	sixteen := "whsec_" + base64.StdEncoding.EncodeToString([]byte("sixteen bytes!!!"))
	if _, err := consumer.Middleware(mwConfig(pool, "c", sixteen)); err != nil {
		t.Errorf("a 16-byte key: %v", err)
	}
}
