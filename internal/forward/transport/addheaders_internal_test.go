package transport

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/hookgate/hookgate/internal/config"
)

// A transform's headers (Message.AddHeaders) are added to a forward, over
// HTTP and on a broker message alike; the target's own headers win over
// them (they may hold its credentials), and hookgate's win over both.
func TestAddHeadersLoseToTheTargets(t *testing.T) {
	t.Parallel()
	target := &config.Target{Name: "chat", URL: "http://127.0.0.1:9/hooks", Timeout: config.Duration(time.Second),
		Headers: map[string]string{"X-Env": "prod", "Authorization": "Bearer target-own"}}
	m := Message{Sender: "acme", Target: target, EventID: uuid.New(), DeliveryID: "d1",
		Headers: map[string][]string{"Content-Type": {"application/json"}}, Body: []byte(`{}`),
		AddHeaders: map[string]string{"X-Tenant": "t-7", "Authorization": "Bearer from-the-body", "X-Hookgate-Sender": "other"}}
	want := map[string]string{"X-Tenant": "t-7", "X-Env": "prod", "Authorization": "Bearer target-own",
		"X-Hookgate-Sender": "acme", "Content-Type": "application/json"}
	hd := NewHTTP(nil, time.Now).header(m)
	for k, v := range want {
		if got := hd.Values(k); len(got) != 1 || got[0] != v {
			t.Errorf("HTTP: %s is %q, want %q", k, got, v)
		}
	}
	last := map[string]string{} // a broker sets each header in turn
	for _, h := range brokerHeaders(m, time.Now()) {
		last[h[0]] = h[1]
	}
	for k, v := range want {
		if last[k] != v {
			t.Errorf("broker: %s is %q, want %q", k, last[k], v)
		}
	}
}
