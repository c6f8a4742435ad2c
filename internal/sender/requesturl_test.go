package sender_test

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"testing"
)

// RequestURL is public_url plus the query string as sent, or else the
// request's own URL (scheme from the connection, Host, path and query as
// sent); X-Forwarded-* headers are not read.
func TestRequestURL(t *testing.T) {
	t.Parallel()
	set := mustParse(t, "senders:\n"+
		presetSender("pub", "twilio", "secret: s-0123456789abcdef", "public_url: https://hooks.example.com/in/twilio")+
		presetSender("own", "square", "secret: s-0123456789abcdef"), noEnv)
	pub, _ := set.Get("pub")
	own, _ := set.Get("own")
	req := func(target string) *http.Request {
		r := httptest.NewRequest(http.MethodPost, target, nil)
		r.Host = "gw.internal:8080"
		r.Header.Set("X-Forwarded-Host", "evil.example")
		r.Header.Set("X-Forwarded-Proto", "https")
		return r
	}
	for _, tc := range []struct {
		s    interface{ RequestURL(*http.Request) string }
		r    *http.Request
		want string
	}{
		{pub, req("/webhooks/pub"), "https://hooks.example.com/in/twilio"},
		{pub, req("/webhooks/pub?tenant=a%20b&x=1"), "https://hooks.example.com/in/twilio?tenant=a%20b&x=1"},
		{own, req("/webhooks/own?x=%2F"), "http://gw.internal:8080/webhooks/own?x=%2F"},
	} {
		if got := tc.s.RequestURL(tc.r); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.r.RequestURI, got, tc.want)
		}
	}
	r := req("/webhooks/own")
	r.TLS = &tls.ConnectionState{}
	if got := own.RequestURL(r); got != "https://gw.internal:8080/webhooks/own" {
		t.Errorf("over TLS: %q", got)
	}
}
