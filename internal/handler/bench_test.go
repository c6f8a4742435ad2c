package handler_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/dedup"
	"github.com/hookgate/hookgate/internal/handler"
	"github.com/hookgate/hookgate/internal/sender"
	"github.com/hookgate/hookgate/internal/sigtoken"
	"github.com/hookgate/hookgate/internal/testing/pgtest"
)

// BenchmarkIngest measures one ingest request through the handler's router,
// from the request to the answer, on a real PostgreSQL: a first delivery
// of a 512-byte JSON body signed with HMAC-SHA256 and routed to no target,
// then a replay of a stored one. Its allocations per request show what the
// handler and package sender add to the store's round trip. On its own:
//
//	HOOKGATE_TEST_DATABASE_URL=… go test -run '^$' -bench BenchmarkIngest ./internal/handler/
func BenchmarkIngest(b *testing.B) {
	const yaml = `
senders:
  - name: bench
    preset: generic
    delivery_id: { json_pointer: /id }
    event_type: { json_pointer: /type }
    signature: { scheme: hmac-sha256, header: X-Signature }
    secret: ${SECRET}
`
	cfg, err := config.Parse([]byte(yaml), func(k string) (string, bool) { return "bench-secret-0123456789", k == "SECRET" })
	if err != nil {
		b.Fatal(err)
	}
	pool, _ := pgtest.NewDB(b)
	ingest, err := dedup.New(dedup.Config{Pool: pool, InFlightWait: dedup.DefaultInFlightWait})
	if err != nil {
		b.Fatal(err)
	}
	hc := handler.DefaultConfig()
	hc.Senders, hc.Ingest, hc.Registry = sender.MustCompile(cfg), ingest, prometheus.NewRegistry()
	hc.Ready = func(context.Context) error { return nil }
	hc.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	hc.Tokens = sigtoken.New(pool)
	h, err := handler.New(hc)
	if err != nil {
		b.Fatal(err)
	}
	router := h.Router()
	post := func(b *testing.B, id string) {
		body := []byte(`{"id":"` + id + `","type":"order.created","note":"` + strings.Repeat("x", 512-50-len(id)) + `"}`)
		req := httptest.NewRequestWithContext(b.Context(), http.MethodPost, "/webhooks/bench", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		mac := hmac.New(sha256.New, []byte("bench-secret-0123456789"))
		mac.Write(body)
		req.Header.Set("X-Signature", hex.EncodeToString(mac.Sum(nil)))
		w := httptest.NewRecorder()
		router.ServeHTTP(w, req)
		if w.Code != http.StatusAccepted {
			b.Fatalf("%s: %d %s", id, w.Code, w.Body)
		}
	}
	next := 0 // across the runs of the sub-benchmark: first deliveries stay first
	b.Run("first", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			next++
			post(b, "first-"+strconv.Itoa(next))
		}
	})
	post(b, "stored")
	b.Run("replay", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			post(b, "stored")
		}
	})
}
