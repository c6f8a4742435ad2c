package handler_test

import (
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/google/uuid"
)

// The request ID in the log is hookgate's own, never the client's
// X-Request-Id, which is logged apart, cut to 64 bytes.
func TestRequestIDIsGenerated(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
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
