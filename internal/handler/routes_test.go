package handler_test

import (
	"context"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/dedup"
	"github.com/hookgate/hookgate/internal/handler"
	"github.com/hookgate/hookgate/internal/sender"
)

// explorerAssets is the route of the API explorer's static files, which
// openapi.yaml does not describe (it describes GET /docs, the page).
const explorerAssets = "GET /docs/*"

// TestRouterServesExactlyTheSpecsOperations walks the router and checks that
// its routes (method and path pattern) are exactly the operations of the
// openapi.yaml it serves at /openapi.yaml, in both directions, apart from
// the explorer's assets.
func TestRouterServesExactlyTheSpecsOperations(t *testing.T) {
	t.Parallel()
	doc, err := specDoc()
	if err != nil {
		t.Fatalf("load openapi.yaml: %v", err)
	}
	spec := map[string]bool{}
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			spec[method+" "+path] = true
		}
	}

	cfg, err := config.Parse([]byte(sendersYAML), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	hc := handler.DefaultConfig()
	hc.AdminToken = "t"
	// The routes are only walked: the ingest store and the readiness
	// check are never run.
	hc.Senders, hc.Ingest, hc.Ready = sender.MustCompile(cfg), new(dedup.Store), func(context.Context) error { return nil }
	hc.Registry, hc.Log = prometheus.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil))
	h, err := handler.New(hc)
	if err != nil {
		t.Fatal(err)
	}
	routes, ok := h.Router().(chi.Routes)
	if !ok {
		t.Fatalf("Router() is a %T, not chi.Routes", h.Router())
	}
	served := map[string]bool{}
	err = chi.Walk(routes, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		served[method+" "+route] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !served[explorerAssets] {
		t.Errorf("the router does not serve the explorer's assets (%s)", explorerAssets)
	}
	delete(served, explorerAssets)

	for op := range spec {
		if !served[op] {
			t.Errorf("openapi.yaml has %s, which the router does not serve", op)
		}
	}
	for op := range served {
		if !spec[op] {
			t.Errorf("the router serves %s, which openapi.yaml does not describe", op)
		}
	}
	if len(spec) < 11 || !slices.ContainsFunc(slices.Collect(maps.Keys(spec)), func(op string) bool { return strings.HasPrefix(op, "GET /v1/") }) {
		t.Errorf("openapi.yaml has only %v", slices.Sorted(maps.Keys(spec)))
	}
}
