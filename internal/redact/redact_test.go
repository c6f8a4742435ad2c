package redact_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/hookgate/hookgate/internal/redact"
)

func TestURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in         string
		secretPath bool
		want       string
	}{
		{"http://svc/hook", false, "http://svc/hook"},
		{"https://svc.internal:8443/a/b", false, "https://svc.internal:8443/a/b"},
		{"https://user:hunter22@svc/hook", false, "https://xxxxx:xxxxx@svc/hook"},
		{"https://TOKEN123@svc/hook", false, "https://xxxxx@svc/hook"},
		{"https://:pw@svc/hook", false, "https://xxxxx:xxxxx@svc/hook"},
		{"https://svc/hook?token=s3cr3t&v=1", false, "https://svc/hook?token=xxxxx&v=xxxxx"},
		{"https://svc/hook?token=a&token=b", false, "https://svc/hook?token=xxxxx"},
		{"https://svc/hook?s3cr3t", false, "https://svc/hook?s3cr3t=xxxxx"},
		{"https://svc/hook#frag-secret", false, "https://svc/hook#xxxxx"},
		{"https://svc/a/b/SECRET", true, "https://svc/xxxxx/xxxxx/xxxxx"},
		{"https://svc/", true, "https://svc/"},
		{"https://hooks.slack.com/services/T000/B000/XXXXSECRET", false, "https://hooks.slack.com/xxxxx/xxxxx/xxxxx/xxxxx"},
		{"https://HOOKS.SLACK.COM/services/T000/B000/XXXXSECRET", false, "https://HOOKS.SLACK.COM/xxxxx/xxxxx/xxxxx/xxxxx"},
		{"https://discord.com/api/webhooks/123/TOKENxyz", false, "https://discord.com/xxxxx/xxxxx/xxxxx/xxxxx"},
		{"https://acme.webhook.office.com/webhookb2/abc/IncomingWebhook/def/ghi", false, "https://acme.webhook.office.com/xxxxx/xxxxx/xxxxx/xxxxx/xxxxx"},
		{"https://u:p@hooks.slack.com/services/T/B/S?x=1#f", false, "https://xxxxx:xxxxx@hooks.slack.com/xxxxx/xxxxx/xxxxx/xxxxx?x=xxxxx#xxxxx"},
		{"http://[::1", false, redact.Unparseable},
		// A NATS URL lists servers as nats.go splits it: each server's
		// secrets are hidden (the later ones parse as the first's path).
		{"nats://127.0.0.1:14222,nats://hg:pw@127.0.0.1:14223", false, "nats://127.0.0.1:14222,nats://xxxxx:xxxxx@127.0.0.1:14223"},
		{"nats://a:4222, hg:pw@b:4223 ,", false, "nats://a:4222,xxxxx:xxxxx@b:4223,"},
		{"tls://TOKEN@a:4222,tls://b:4222", false, "tls://xxxxx@a:4222,tls://b:4222"},
		{"nats://a:4222, b:4223", false, "nats://a:4222, b:4223"},
		{"https://svc/a,b", false, "https://svc/a,b"},
	} {
		if got := redact.URL(tc.in, tc.secretPath); got != tc.want {
			t.Errorf("URL(%q, %v) = %q, want %q", tc.in, tc.secretPath, got, tc.want)
		}
	}
}

// An error of Go's HTTP client quotes the URL with the password hidden but
// the user name and query as they are; URLInText leaves no part of any
// secret.
func TestURLInText(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		target     string
		secretPath bool
		secrets    []string
	}{
		{"http://fwduser:PaSsW0rdXYZ@127.0.0.1:1/hook?token=QUERYTOKEN123", false, []string{"fwduser", "PaSsW0rdXYZ", "QUERYTOKEN123"}},
		{"http://USERONLYTOKEN@127.0.0.1:1/hook", false, []string{"USERONLYTOKEN"}},
		{"http://127.0.0.1:1/services/T0001/B0001/PATHSECRET99", true, []string{"PATHSECRET99"}},
		{"http://127.0.0.1:1/hook?t=a%2Fb%20c+d", false, []string{"a/b c d"}},
	} {
		req, err := http.NewRequest(http.MethodPost, tc.target, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, err = http.DefaultTransport.RoundTrip(req) // port 1: connection refused
		if err == nil {
			t.Fatalf("POST %s: no error", tc.target)
		}
		texts := []string{
			err.Error(),
			fmt.Sprintf("post to target: %v", &urlError{tc.target, err}),
			"target " + tc.target + " is not configured",
		}
		for _, text := range texts {
			got := redact.URLInText(text, tc.target, tc.secretPath)
			for _, s := range append(tc.secrets, strings.ReplaceAll(tc.secrets[0], " ", "+"), strings.ReplaceAll(tc.secrets[0], " ", "%20")) {
				if strings.Contains(got, s) {
					t.Errorf("URLInText(%q) = %q: still contains %q", text, got, s)
				}
			}
			if !strings.Contains(got, "127.0.0.1:1") {
				t.Errorf("URLInText(%q) = %q: want the host kept", text, got)
			}
		}
	}
}

// URLInText hides every server's secrets of a NATS server list.
func TestURLInTextNATSServerList(t *testing.T) {
	t.Parallel()
	raw := "nats://127.0.0.1:14222,nats://hguser:pw-s3cret@127.0.0.1:14223, tokenUSER@127.0.0.1:14224"
	got := redact.URLInText("connect to "+raw+": refused by 127.0.0.1:14223 for hguser (pw-s3cret) and tokenUSER", raw, false)
	for _, s := range []string{"hguser", "pw-s3cret", "tokenUSER"} {
		if strings.Contains(got, s) {
			t.Errorf("URLInText = %q: still contains %q", got, s)
		}
	}
	if !strings.Contains(got, "127.0.0.1:14223") {
		t.Errorf("URLInText = %q: want the hosts kept", got)
	}
}

type urlError struct {
	url string
	err error
}

func (e *urlError) Error() string { return "Post " + e.url + ": " + e.err.Error() }

func TestText(t *testing.T) {
	t.Parallel()
	got := redact.Text("sign with whsec_abcdef; the token sk_live_1 and sk_live_12 and v=1", "sk_live_1", "sk_live_12", "1", "", "whsec_abcdef")
	if want := "sign with xxxxx; the token xxxxx and xxxxx and v=1"; got != want {
		t.Errorf("Text = %q, want %q", got, want)
	}
	if got := redact.Text("a b/c and a+b%2Fc and a%20b%2Fc", "a b/c"); strings.Contains(got, "b/c") || strings.Contains(got, "b%2Fc") {
		t.Errorf("Text left an encoded form of the secret: %q", got)
	}
}

// TestHeadersHidesCredentials: a target's response headers that may carry
// a credential keep their names and lose their values; others stay.
func TestHeadersHidesCredentials(t *testing.T) {
	in := map[string][]string{
		"Set-Cookie":       {"session=abc123"},
		"Authorization":    {"Bearer s3cret"},
		"X-Api-Key":        {"k-123456"},
		"X-Auth-Token":     {"tok-123456"},
		"X-Signature":      {"sig-123456"},
		"X-Client-Secret":  {"shh-123456"},
		"Content-Type":     {"text/plain"},
		"Retry-After":      {"1"},
		"Www-Authenticate": {"Basic realm=x"},
	}
	out := redact.Headers(in)
	for _, k := range []string{"Set-Cookie", "Authorization", "X-Api-Key", "X-Auth-Token", "X-Signature", "X-Client-Secret", "Www-Authenticate"} {
		if v := out[k]; len(v) != 1 || v[0] != redact.Mask {
			t.Errorf("%s: %q, want the mask", k, v)
		}
	}
	for _, k := range []string{"Content-Type", "Retry-After"} {
		if v := out[k]; len(v) != 1 || v[0] != in[k][0] {
			t.Errorf("%s: %q, want %q", k, v, in[k])
		}
	}
	if in["Set-Cookie"][0] != "session=abc123" {
		t.Error("Headers modified its argument")
	}
}

// CredentialHeader reads a name case-insensitively, as strings.ToLower
// does, also past its buffer, and allocates nothing for a usual one: every
// attempt tests the names of its target's answer.
func TestCredentialHeaderNames(t *testing.T) { //nolint:paralleltest // testing.AllocsPerRun refuses a parallel test
	for name, want := range map[string]bool{
		"X-API-KEY": true, "X-Api-\u212Aey": true, "X-\u00C4-Session": true, "Content-Type": false, "Date": false,
		strings.Repeat("X-Padding-", 10) + "Token": true, strings.Repeat("X-Padding-", 10): false,
	} {
		if got := redact.CredentialHeader(name); got != want {
			t.Errorf("CredentialHeader(%q) = %t, want %t", name, got, want)
		}
	}
	for _, name := range []string{"Content-Type", "X-Request-Id", "X-Auth-Token"} {
		if n := testing.AllocsPerRun(100, func() { redact.CredentialHeader(name) }); n != 0 {
			t.Errorf("CredentialHeader(%q): %.0f allocations, want none", name, n)
		}
	}
	if got := string(redact.LowerName([]byte("a:"), "X-\u00C4b")); got != "a:x-\u00e4b" {
		t.Errorf("LowerName appended %q, want a:x-\u00e4b", got)
	}
}
