package sender_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/hookgate/hookgate/internal/sender"
)

func TestParseIngestHardeningFields(t *testing.T) {
	t.Parallel()
	c := mustParse(t, "senders:\n"+senderYAML("a", "delivery_id: { header: X-Id }", "accept_encodings: [gzip]", "store_headers: [X-Id, X-Api-Key]")+
		senderYAML("b", "delivery_id: { header: X-Id }", "drop_headers: [User-Agent]"), noEnv)
	if a := c.Senders[0]; !a.AcceptsEncoding("gzip") || a.AcceptsEncoding("br") {
		t.Errorf("a accepts gzip %v, br %v; want true, false", a.AcceptsEncoding("gzip"), a.AcceptsEncoding("br"))
	}
	if b := c.Senders[1]; b.AcceptsEncoding("gzip") {
		t.Error("a sender without accept_encodings accepts gzip")
	}
	for _, tc := range []struct{ extra, want string }{
		{"accept_encodings: [br]", "senders[0].accept_encodings[0]: must be one of: gzip"},
		{"accept_encodings: [identity]", "senders[0].accept_encodings[0]: must be one of: gzip"},
		{"accept_encodings: [gzip, gzip]", "senders[0].accept_encodings"},
		{"store_headers: [Authorization]", "senders[0].store_headers[0]: Authorization is never stored"},
		{"store_headers: [cookie]", "senders[0].store_headers[0]: cookie is never stored"},
		{"store_headers: [\"bad name\"]", "senders[0].store_headers[0]: must be an HTTP header name"},
		{"store_headers: [X-A]\n    drop_headers: [X-B]", "senders[0].store_headers: cannot be set together with drop_headers"},
	} {
		_, err := parse([]byte("senders:\n"+senderYAML("a", "delivery_id: { header: X-Id }", tc.extra)), noEnv)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want it to contain %q", tc.extra, err, tc.want)
		}
	}
}

// A sender's signature headers (its preset's, or its hmac-sha256 header)
// cannot be listed in store_headers, and are not stored when a filter would
// keep them otherwise; another sender's signature header may be.
func TestSignatureHeadersAreNeverStored(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ yaml, want string }{
		{"  - name: a\n    preset: github\n    secret: s-0123456789abcdef\n    store_headers: [X-Hub-Signature-256]\n", "senders[0].store_headers[0]: X-Hub-Signature-256 is never stored (it carries the sender's signature"},
		{"  - name: a\n    preset: github\n    secret: s-0123456789abcdef\n    store_headers: [X-Keep, x-hub-signature]\n", "senders[0].store_headers[1]: x-hub-signature is never stored"},
		{"  - name: a\n    preset: airtable\n    secret: " + testKey + "\n    store_headers: [X-Airtable-Content-MAC]\n", "senders[0].store_headers[0]: X-Airtable-Content-MAC is never stored"},
		{senderYAML("a", "delivery_id: { header: X-Id }", "signature: { scheme: hmac-sha256, header: X-Body-Check }", "secret: s-0123456789abcdef", "store_headers: [X-Body-Check]"), "senders[0].store_headers[0]: X-Body-Check is never stored"},
	} {
		_, err := parse([]byte("senders:\n"+tc.yaml), noEnv)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), ": s") {
			t.Errorf("%s: err = %v, want it to contain %q", tc.yaml, err, tc.want)
		}
	}
	set := mustParse(t, "senders:\n  - name: a\n    preset: airtable\n    secret: "+testKey+"\n    drop_headers: [X-Other]\n"+
		"  - name: b\n    preset: generic\n    delivery_id: { header: X-Id }\n    store_headers: [X-Airtable-Content-MAC]\n", noEnv)
	h := http.Header{"X-Airtable-Content-Mac": {"hmac-sha256=00"}, "Content-Type": {"application/json"}}
	a, _ := set.Get("a")
	b, _ := set.Get("b")
	if got := a.HeaderFilter.Filter(h); got.Get("X-Airtable-Content-Mac") != "" {
		t.Errorf("airtable sender stores its signature header: %v", got)
	}
	if got := b.HeaderFilter.Filter(h); got.Get("X-Airtable-Content-Mac") == "" {
		t.Errorf("a generic sender's store_headers does not keep a header that is no signature of its own: %v", got)
	}
}

// StoredBody takes Mailgun's signature out of a JSON body (its signature
// member) or a form (its timestamp, token and signature fields), keeping
// the rest as sent; other senders' bodies, and bodies without it, come back
// as they are.
func TestStoredBodyLeavesTheSignatureOut(t *testing.T) {
	t.Parallel()
	set := mustParse(t, "senders:\n  - name: mg\n    preset: mailgun\n    secret: k-0123456789abcdef\n"+
		"  - name: gh\n    preset: github\n    secret: k-0123456789abcdef\n", noEnv)
	mg, _ := set.Get("mg")
	gh, _ := set.Get("gh")
	const form = "application/x-www-form-urlencoded"
	for _, tc := range []struct {
		s                *sender.Sender
		body, ctype, out string
	}{
		{mg, `{"signature":{"token":"t","timestamp":"1","signature":"s"}, "event-data":{"id":"e","signature":"kept"}}`, "application/json", `{"event-data":{"id":"e","signature":"kept"}}`},
		{mg, `{"event-data":{"id":"e"} ,"signature":{} }`, "", `{"event-data":{"id":"e"} }`},
		{mg, "event=delivered&timestamp=1&token=t&recipient=a%40b&signature=s", form, "event=delivered&recipient=a%40b"},
		{mg, "timestamp=1&token=t&signature=s", form + "; charset=utf-8", ""},
		{mg, "%73ignature=s&event=x", form, "event=x"},
		{mg, "event=x&signatures=kept", form, "event=x&signatures=kept"},
		{mg, `[{"signature":1}]`, "application/json", `[{"signature":1}]`},
		{mg, `not json`, "application/json", `not json`},
		{gh, `{"signature":{"token":"t"}}`, "application/json", `{"signature":{"token":"t"}}`},
	} {
		if got := tc.s.StoredBody([]byte(tc.body), tc.ctype); string(got) != tc.out {
			t.Errorf("%s: StoredBody(%q, %q) = %q, want %q", tc.s.Name, tc.body, tc.ctype, got, tc.out)
		}
	}
}
