package transport

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/hookgate/hookgate/internal/config"
)

// A transform's headers (Message.AddHeaders) win over the target's own
// headers, over HTTP and on a broker message alike; the rest of the
// target's headers stay.
func TestAddHeadersWinOverTheTargets(t *testing.T) {
	t.Parallel()
	target := &config.Target{Name: "chat", URL: "http://127.0.0.1:9/hooks", Timeout: config.Duration(time.Second),
		Headers: map[string]string{"X-Env": "prod", "X-Tenant": "static"}}
	m := Message{Sender: "acme", Target: target, EventID: uuid.New(), DeliveryID: "d1",
		Headers: map[string][]string{"Content-Type": {"application/json"}}, Body: []byte(`{}`),
		AddHeaders: map[string]string{"X-Tenant": "t-7"}}
	req, err := NewHTTP(nil, time.Now).request(t.Context(), m)
	if err != nil {
		t.Fatal(err)
	}
	if got := req.Header.Values("X-Tenant"); len(got) != 1 || got[0] != "t-7" || req.Header.Get("X-Env") != "prod" {
		t.Errorf("HTTP: X-Tenant %q, X-Env %q; want the transform's t-7 and the target's prod", got, req.Header.Get("X-Env"))
	}
	last := map[string]string{} // a broker sets each header in turn
	for _, h := range brokerHeaders(m, time.Now()) {
		last[h[0]] = h[1]
	}
	if last["X-Tenant"] != "t-7" || last["X-Env"] != "prod" || last["Content-Type"] != "application/json" {
		t.Errorf("broker: headers %v; want X-Tenant t-7, X-Env prod, Content-Type application/json", last)
	}
}
