package handler_test

import (
	"bytes"
	"compress/gzip"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"runtime"
	"testing"
)

const gzipSendersYAML = `
senders:
  - name: plain
    preset: generic
    delivery_id: { json_pointer: /id }
  - name: gz
    preset: generic
    delivery_id: { json_pointer: /id }
    accept_encodings: [gzip]
    max_body_bytes: 1048576
    signature: { scheme: hmac-sha256, header: X-Signature }
    secret: ${GZ_SECRET}
`

func gzipped(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// signed sets Content-Encoding: gzip and the hmac-sha256 signature of the
// raw (compressed) bytes.
func signed(body []byte, enc string) func(*http.Request) {
	return func(r *http.Request) {
		mac := hmac.New(sha256.New, []byte("gz-secret-0123456789"))
		mac.Write(body)
		r.Header.Set("X-Signature", hex.EncodeToString(mac.Sum(nil)))
		if enc != "" {
			r.Header.Set("Content-Encoding", enc)
		}
	}
}

// A body with a Content-Encoding is refused with 415 unless the sender
// accepts gzip; a gzip body is verified as sent, stored decompressed, its
// SHA-256 taken over the decompressed bytes, without Content-Encoding.
func TestIngestContentEncoding(t *testing.T) {
	t.Parallel()
	s, pool := newDBServer(t, options{yaml: gzipSendersYAML, env: map[string]string{"GZ_SECRET": "gz-secret-0123456789"}})
	json := []byte(`{"id":"evt-1","n":1}`)
	gz := gzipped(t, json)

	for _, tc := range []struct {
		sender, enc, accept string
		body                []byte
	}{
		{"plain", "gzip", "identity", gz},
		{"plain", "br", "identity", json},
		{"plain", "deflate", "identity", json},
		{"gz", "br", "gzip", json},
		{"gz", "gzip, gzip", "gzip", gzipped(t, gz)},
		{"gz", "deflate", "gzip", json},
	} {
		r := s.post(tc.sender, "", tc.body, signed(tc.body, tc.enc))
		wantProblem(t, r, http.StatusUnsupportedMediaType, "unsupported-encoding")
		if got := r.header.Get("Accept-Encoding"); got != tc.accept {
			t.Errorf("%s with %s: Accept-Encoding %q, want %q", tc.sender, tc.enc, got, tc.accept)
		}
	}
	wantCounts(t, pool, 0, 0)

	// identity is no encoding.
	wantAccepted(t, s.post("plain", "", json, signed(json, "identity")), "plain", "evt-1")

	// The signature is checked on the compressed bytes.
	wantProblem(t, s.post("gz", "", gz, signed(json, "gzip")), http.StatusUnauthorized, "invalid-signature")
	wantProblem(t, s.post("gz", "", []byte("not gzip"), signed([]byte("not gzip"), "gzip")), http.StatusBadRequest, "invalid-body")

	first := s.post("gz", "", gz, signed(gz, "gzip"))
	wantAccepted(t, first, "gz", "evt-1")
	e := readEvent(t, pool, "gz", "evt-1")
	if !bytes.Equal(e.body, json) {
		t.Errorf("stored body %q, want the decompressed %q", e.body, json)
	}
	if v := http.Header(e.headers).Values("Content-Encoding"); len(v) != 0 {
		t.Errorf("stored Content-Encoding %q, want none (the body is stored decompressed)", v)
	}
	k := readKey(t, pool, "gz", "evt-1")
	if sum := sha256.Sum256(json); !bytes.Equal(k.sha256, sum[:]) {
		t.Errorf("request_sha256 = %x, want the SHA-256 of the decompressed body %x", k.sha256, sum)
	}
	// The same payload sent uncompressed (or compressed otherwise) is the
	// same body: a replay.
	r := s.post("gz", "", json, signed(json, ""))
	if r.status != http.StatusAccepted || !r.replayed() {
		t.Errorf("the same payload uncompressed: %s, want a replay", r)
	}
	wantCounts(t, pool, 2, 2)
}

// A gzip bomb (a few hundred KB inflating to 256 MiB) gets 413 and costs
// about the sender's limit in memory, never the inflated size.
func TestIngestGzipBombIs413(t *testing.T) {
	t.Parallel()
	s, pool := newDBServer(t, options{yaml: gzipSendersYAML, env: map[string]string{"GZ_SECRET": "gz-secret-0123456789"}})
	// 256 gzip members of 1 MiB of zeros each, about 1 KB each: one
	// stream (RFC 1952 allows members to follow each other).
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := zw.Write(make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	bomb := bytes.Repeat(buf.Bytes(), 256)
	if len(bomb) > 1<<20 {
		t.Fatalf("the bomb is %d bytes compressed, over the limit itself", len(bomb))
	}
	req := s.postRequest("gz", "", bomb, signed(bomb, "gzip"))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	r := s.do(req)
	runtime.ReadMemStats(&after)
	wantProblem(t, r, http.StatusRequestEntityTooLarge, "payload-too-large")
	wantCounts(t, pool, 0, 0)
	// The whole process's allocations while the request ran, other tests'
	// included: far below the 256 MiB an inflate in full would take.
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 64<<20 {
		t.Errorf("the request allocated %d MiB; a capped inflate needs about the 1 MiB limit", alloc>>20)
	}
}
