package transport

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/hookgate/hookgate/internal/config"

	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// The allowed hosts parse names, *.domain, addresses and prefixes (and
// refuse ports, schemes, paths and a bare *), and match case-insensitively,
// without a trailing dot, "*." below the domain only, IPv4-mapped
// addresses as IPv4.
func TestAllowedHostsParseAndMatch(t *testing.T) {
	t.Parallel()
	if a, err := ParseAllowedHosts(" , "); a != nil || err != nil {
		t.Errorf("an empty list: %v %v, want nil (any host)", a, err)
	}
	for _, bad := range []string{"*", "hooks.example.com:443", "https://hooks.example.com", "hooks.example.com/x", "10.0.0.0/33", "a..b", "exa mple.com", "*.", "**.example.com"} {
		if _, err := ParseAllowedHosts("ok.example.com," + bad); err == nil || !strings.Contains(err.Error(), "forward allowed hosts") {
			t.Errorf("%q: %v, want an error", bad, err)
		}
	}
	a, err := ParseAllowedHosts("Orders.Internal., *.example.com, 10.1.0.0/16, 192.0.2.7, 2001:db8::/32")
	if err != nil {
		t.Fatal(err)
	}
	for host, want := range map[string]bool{
		"orders.internal": true, "ORDERS.internal.": true, "x.orders.internal": false,
		"a.example.com": true, "a.b.example.com": true, "example.com": false, "badexample.com": false,
		"10.1.2.3": true, "10.2.0.1": false, "192.0.2.7": true, "192.0.2.8": false, "::ffff:10.1.9.9": true,
		"2001:db8::1": true, "2001:db9::1": false, "[2001:db8::1]": true,
	} {
		var got bool
		if ip, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
			got = a.allowsAddr(ip)
		} else {
			got = a.allowsName(host)
		}
		if got != want {
			t.Errorf("%s: allowed %v, want %v", host, got, want)
		}
	}
	// A name no name entry lists passes start-up when there are prefixes
	// (it is checked at each connection), not otherwise.
	names, _ := ParseAllowedHosts("orders.internal")
	if names.allowsTarget("other.internal") || !a.allowsTarget("other.internal") || a.allowsTarget("10.9.9.9") {
		t.Error("allowsTarget: names only, or names and prefixes")
	}
}

// CheckTargets names each target whose host is not allowed, and its host,
// never the rest of its URL.
func TestAllowedHostsCheckTargets(t *testing.T) {
	t.Parallel()
	cfg := testkit.ParseConfig(t, `senders:
  - name: acme
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    forward:
      - { name: ok, url: "https://hooks.example.com/a" }
      - { name: bad, url: "https://evil.example.net/in/s3cr3t?token=t0k3n", secret_path: true }
      - { name: ip, url: "http://169.254.169.254/latest/meta-data" }
`)
	a, _ := ParseAllowedHosts("*.example.com")
	err := a.CheckTargets(cfg)
	if err == nil {
		t.Fatal("CheckTargets allowed evil.example.net and 169.254.169.254")
	}
	for _, want := range []string{"senders[0].forward[1].url (acme, target bad): its host evil.example.net is not in --forward-allowed-hosts",
		"senders[0].forward[2].url (acme, target ip): its host 169.254.169.254"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%v: does not say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "s3cr3t") || strings.Contains(err.Error(), "t0k3n") || strings.Contains(err.Error(), "hooks.example.com") {
		t.Errorf("the error shows more than the refused hosts: %v", err)
	}
	if err := (*AllowedHosts)(nil).CheckTargets(cfg); err != nil {
		t.Errorf("no list: %v", err)
	}
}

// CheckTargets checks the host of every server of a NATS target's list,
// split as nats.go splits it (before, it saw the first host only).
func TestAllowedHostsCheckNATSServerList(t *testing.T) {
	t.Parallel()
	cfg := testkit.ParseConfig(t, `senders:
  - name: acme
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    forward:
      - { name: ok, url: "nats://127.0.0.1:4222, 127.0.0.2:4223 ,", nats: { subject: hooks } }
      - { name: bus, url: "nats://127.0.0.1:4222,nats://10.1.2.3:4223", nats: { subject: hooks } }
`)
	a, _ := ParseAllowedHosts("127.0.0.0/8")
	err := a.CheckTargets(cfg)
	if err == nil || !strings.Contains(err.Error(), "senders[0].forward[1].url (acme, target bus): its host 10.1.2.3 is not in") {
		t.Fatalf("CheckTargets: %v, want target bus refused for its second server", err)
	}
	if strings.Contains(err.Error(), "target ok") {
		t.Errorf("CheckTargets refused the list inside 127.0.0.0/8: %v", err)
	}
}

// The guarded client reaches a listed name and an address inside a listed
// prefix, and refuses, before any byte is sent, an address outside and a
// name whose address is outside the prefixes (localhost against
// 10.0.0.0/8), with an error that wraps ErrHostNotAllowed.
func TestGuardedHTTPClientDials(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { hits.Add(1); w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	for _, tc := range []struct {
		list, host string
		ok         bool
	}{
		{"", "127.0.0.1", true},
		{"127.0.0.1", "127.0.0.1", true},
		{"127.0.0.0/8", "127.0.0.1", true},
		{"localhost", "localhost", true},
		{"127.0.0.0/8,::1", "localhost", true},
		{"10.0.0.0/8", "127.0.0.1", false},
		{"10.0.0.0/8", "localhost", false},
		{"orders.internal", "127.0.0.1", false},
		{"orders.internal", "localhost", false},
	} {
		a, err := ParseAllowedHosts(tc.list)
		if err != nil {
			t.Fatal(err)
		}
		c := NewGuardedHTTPClient(1, a)
		c.Transport.(*guardedTransport).Proxy = nil
		before := hits.Load()
		// Through net/http's Transport, as a target behind a proxy is
		// reached, then over the client's own connections.
		resp, err := c.Post("http://"+net.JoinHostPort(tc.host, port)+"/hooks", "text/plain", strings.NewReader("x"))
		if err == nil {
			resp.Body.Close()
		}
		target := &config.Target{Name: "t", URL: "http://" + net.JoinHostPort(tc.host, port) + "/hooks", Timeout: config.Duration(5 * time.Second)}
		sent := NewHTTP(c, time.Now).Send(t.Context(), Message{Sender: "s", Target: target, EventID: uuid.New(), DeliveryID: "d", Body: []byte("x")})
		c.CloseIdleConnections()
		if testing.Verbose() && err != nil {
			t.Logf("list %q, host %s: %v; own connections: %v", tc.list, tc.host, err, sent.Err)
		}
		if tc.ok != (err == nil) || (err != nil && !errors.Is(err, ErrHostNotAllowed)) {
			t.Errorf("list %q, host %s: %v, want allowed %v", tc.list, tc.host, err, tc.ok)
		}
		if tc.ok != (sent.Verdict == VerdictDelivered) || (!tc.ok && !errors.Is(sent.Err, ErrHostNotAllowed)) {
			t.Errorf("list %q, host %s, own connections: %s, %v, want allowed %v", tc.list, tc.host, sent.Verdict, sent.Err, tc.ok)
		}
		if !tc.ok && hits.Load() != before {
			t.Errorf("list %q, host %s: the request reached the server", tc.list, tc.host)
		}
	}
}
