package main

import (
	"bytes"
	"context"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/signature"
	"github.com/hookgate/hookgate/internal/testing/pgtest"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// hookgate sink answers 204 to a forward signed with its secret and prints
// it; a forward signed with another secret, or unsigned, is 401.
func TestSinkVerifiesSignatures(t *testing.T) {
	t.Parallel()
	const secret = "whsec_aG9va2dhdGUgZXhhbXBsZSBzaW5rIGtleSwgcHVibGljIQ=="
	addr := freeAddr(t)
	out := newLogSink()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"sink", "--addr", addr, "--secret", secret}, envOf(), out, out) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("sink: %v", err)
		}
	})
	key, err := signature.DecodeStandardSecret(secret)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := signature.DecodeStandardSecret("whsec_b3RoZXIgc2VjcmV0IG9mIDI0IGJ5dGVzLi4u")
	send := func(key []byte) int {
		body := []byte(`{"order":42}`)
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/hooks/orders", bytes.NewReader(body))
		now := time.Now()
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("webhook-id", "evt_1")
		req.Header.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
		req.Header.Set("X-Hookgate-Delivery-Id", "d1")
		if key != nil {
			req.Header.Set("webhook-signature", signature.SignStandard(key, "evt_1", now, body))
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	var status int
	testkit.Poll(t, time.Minute, "the sink to answer", func() bool { status = send(key); return status != 0 })
	if status != http.StatusNoContent {
		t.Errorf("signed with the secret: %d, want 204", status)
	}
	for name, k := range map[string][]byte{"another secret": other, "unsigned": nil} {
		if s := send(k); s != http.StatusUnauthorized {
			t.Errorf("%s: %d, want 401", name, s)
		}
	}
	testkit.Poll(t, time.Minute, "the sink's output", func() bool { return strings.Contains(out.tail(100), "signature: valid") })
	if got := out.tail(100); !strings.Contains(got, "X-Hookgate-Delivery-Id: d1") || !strings.Contains(got, `body (12 bytes): {"order":42}`) || !strings.Contains(got, "signature: INVALID") {
		t.Errorf("sink output:\n%s", got)
	}
}

// With a database, hookgate sink processes forwards through the consumer
// package: a redelivered forward (the same webhook-id) is answered with the
// stored 204 and Idempotent-Replayed, and printed as already processed.
func TestSinkRecognisesRedelivery(t *testing.T) {
	t.Parallel()
	const secret = "whsec_aG9va2dhdGUgZXhhbXBsZSBzaW5rIGtleSwgcHVibGljIQ=="
	_, dsn := pgtest.NewDB(t)
	addr := freeAddr(t)
	out := newLogSink()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"sink", "--addr", addr, "--secret", secret}, envOf("DATABASE_URL", dsn), out, out)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("sink: %v", err)
		}
	})
	key, err := signature.DecodeStandardSecret(secret)
	if err != nil {
		t.Fatal(err)
	}
	send := func() (int, string) {
		body := []byte(`{"order":42}`)
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/hooks/orders", bytes.NewReader(body))
		now := time.Now()
		req.Header.Set("webhook-id", "evt_redelivered")
		req.Header.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
		req.Header.Set("webhook-signature", signature.SignStandard(key, "evt_redelivered", now, body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, ""
		}
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("Idempotent-Replayed")
	}
	var status int
	var replayed string
	testkit.Poll(t, time.Minute, "the sink to answer", func() bool { status, replayed = send(); return status != 0 })
	if status != http.StatusNoContent || replayed != "" {
		t.Fatalf("first forward: %d (replayed %q), want 204", status, replayed)
	}
	if status, replayed = send(); status != http.StatusNoContent || replayed != "true" {
		t.Fatalf("redelivered forward: %d (replayed %q), want the stored 204 replayed", status, replayed)
	}
	testkit.Poll(t, time.Minute, "the sink's output", func() bool { return strings.Contains(out.tail(100), "ALREADY PROCESSED") })
	if got := out.tail(100); strings.Count(got, "first delivery of this event") != 1 {
		t.Errorf("sink output:\n%s", got)
	}
}

// Without --secret, hookgate sink refuses to start when its configuration
// cannot be loaded (missing, an unset ${VAR}, invalid), naming the file and
// why, rather than accepting every request unchecked. A configuration that
// loads but has no signing secret starts, and says that it checks nothing.
func TestSinkRefusesConfigItCannotLoad(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "hookgate.yaml")
	unset := writeConfig(t, senderConfig+"    forward:\n      - name: s\n        url: http://127.0.0.1:9/\n        signing_secret: ${HOOKGATE_TEST_SINK_UNSET}\n")
	invalid := writeConfig(t, "senders: [")
	for name, tc := range map[string]struct{ path, says string }{
		"missing":      {missing, "no such file"},
		"unset ${VAR}": {unset, "HOOKGATE_TEST_SINK_UNSET"},
		"invalid":      {invalid, "parse YAML"},
	} {
		var stdout, stderr bytes.Buffer
		err := run(t.Context(), []string{"sink", "--addr", "127.0.0.1:0", "--config", tc.path}, envOf(), &stdout, &stderr)
		if err == nil || !strings.Contains(err.Error(), tc.path) || !strings.Contains(err.Error(), tc.says) || !strings.Contains(err.Error(), "cannot check signatures") {
			t.Errorf("%s: err = %v, want a refusal naming %s and %q", name, err, tc.path, tc.says)
		}
		if strings.Contains(stdout.String(), "listening") {
			t.Errorf("%s: the sink started: %s", name, stdout.String())
		}
	}

	// Loaded, without a signing secret: it starts and says so.
	out := newLogSink()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"sink", "--addr", "127.0.0.1:0", "--config", writeConfig(t, senderConfig)}, envOf(), out, out)
	}()
	testkit.Poll(t, time.Minute, "the sink to start", func() bool { return strings.Contains(out.tail(10), "listening") })
	cancel()
	if err := <-done; err != nil {
		t.Errorf("sink: %v", err)
	}
	if got := out.tail(10); !strings.Contains(got, "none of its targets has a signing_secret") {
		t.Errorf("sink output: %s", got)
	}
}
