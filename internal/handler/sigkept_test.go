package handler_test

import (
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// notSignature are the headers the test signers set that carry no
// signature: the timestamps and IDs a scheme signs along with the body,
// which may be stored like any other header.
var notSignature = map[string]bool{
	"Webhook-Id": true, "Webhook-Timestamp": true, "X-Slack-Request-Timestamp": true,
	"X-Twilio-Email-Event-Webhook-Timestamp": true, "X-Zendesk-Webhook-Signature-Timestamp": true,
	"X-Signature-Timestamp": true, "X-Zm-Request-Timestamp": true, "Twitch-Eventsub-Message-Id": true,
	"Twitch-Eventsub-Message-Timestamp": true, "Twitch-Eventsub-Message-Type": true, "X-Hubspot-Request-Timestamp": true,
}

// signatureValues returns what of the signed headers h is a signature: each
// header's value that is not in notSignature, and its parts of 16
// characters or more (the MAC without its prefix or its list's keys).
func signatureValues(h http.Header) (names, values []string) {
	for k, vs := range h {
		if notSignature[http.CanonicalHeaderKey(k)] {
			continue
		}
		names = append(names, http.CanonicalHeaderKey(k))
		for _, v := range vs {
			values = append(values, v)
			for _, part := range strings.FieldsFunc(v, func(r rune) bool { return strings.ContainsRune(",;= ", r) }) {
				if len(part) >= 16 {
					values = append(values, part)
				}
			}
		}
	}
	return names, values
}

// presetOf returns the row of the preset p's configuration names.
func presetOf(t *testing.T, p provider) config.Preset {
	t.Helper()
	for _, l := range p.lines {
		if name, ok := strings.CutPrefix(l, "preset: "); ok {
			row, found := config.PresetNamed(name)
			if !found {
				t.Fatalf("%s: no preset %q", p.name, name)
			}
			return row
		}
	}
	t.Fatalf("%s: no preset line", p.name)
	return config.Preset{}
}

// consoleClient returns a client signed in to s's console.
func consoleClient(t *testing.T, s *opServer) *http.Client {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.PostForm(s.url+"/console/login", url.Values{"token": {testToken}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("console sign-in: %d", resp.StatusCode)
	}
	return c
}

// consolePage returns the text of the console page at path, HTML entities
// decoded (not those of a raw body, which is no HTML).
func consolePage(t *testing.T, c *http.Client, base, path string) string {
	t.Helper()
	resp, err := c.Get(base + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", path, resp.StatusCode, err)
	}
	if strings.HasSuffix(path, "/body") {
		return string(b)
	}
	return html.UnescapeString(string(b))
}

// No preset's signature header, nor any other signature header its
// provider sends (the preset table names them), is stored with the event:
// the stored headers, the operator API's event, the console's delivery
// page and raw body, and the forward to the sender's target hold none of
// their values, whatever the header's name (Airtable's
// X-Airtable-Content-MAC, a generic sender's X-Payload-Mac). Each sender's
// request is validly signed as its provider signs it, through real HTTP,
// PostgreSQL, a forward worker and the console.
func TestSignaturesAreNeverStoredShownOrForwarded(t *testing.T) {
	t.Parallel()
	target := testkit.NewTarget(t, testkit.Always(http.StatusOK))
	var b strings.Builder
	env := map[string]string{}
	b.WriteString("senders:\n")
	for i, p := range providers {
		fmt.Fprintf(&b, "  - name: %s\n", p.name)
		for _, l := range p.lines {
			fmt.Fprintf(&b, "    %s\n", l)
		}
		fmt.Fprintf(&b, "    secret: ${K%d}\n    forward:\n      - { name: t, url: %q }\n", i, target.URL)
		env[fmt.Sprintf("K%d", i)] = p.secret(keyMain)
	}
	// Mailgun signs inside the body, JSON or a form.
	mgKey := []byte("mg-key-sig-kept-8e2b")
	fmt.Fprintf(&b, "  - { name: mailgun, preset: mailgun, secret: %s, forward: [{ name: t, url: %q }] }\n", mgKey, target.URL)
	fmt.Fprintf(&b, "  - { name: mailgun-form, preset: mailgun, secret: %s, delivery_id: { header: X-Delivery-Id }, forward: [{ name: t, url: %q }] }\n", mgKey, target.URL)
	s := newOpServer(t, opOptions{yaml: b.String(), env: env, work: true, console: true})
	cc := consoleClient(t, s)

	type sent struct {
		p       provider
		id      string
		eventID string
		names   []string
		values  []string
		body    string // the body that must be stored, when it differs from the one sent
	}
	var all []sent
	for _, p := range providers {
		id := "sig-kept-" + p.name
		body := payload(id, 1)
		h := p.sign(p.key(keyMain), id, time.Now().Unix(), body)
		names, values := signatureValues(h)
		// The table names every signature header the provider sends.
		sd, _ := s.cfg.Sender(p.name)
		for _, n := range names {
			if !slices.ContainsFunc(sd.SignatureCheck().SignatureHeaders, func(m string) bool { return http.CanonicalHeaderKey(m) == n }) {
				t.Errorf("%s: the preset table's SignatureHeaders %v do not name %s", p.name, sd.SignatureCheck().SignatureHeaders, n)
			}
		}
		// The provider's other signature headers, as the table names them.
		for _, name := range presetOf(t, p).Signature.SignatureHeaders {
			if h.Get(name) == "" {
				v := "other-signature-" + p.name + "-" + name
				h.Set(name, v)
				names, values = append(names, http.CanonicalHeaderKey(name)), append(values, v)
			}
		}
		r := p.deliver(s.server, p.name, id, body, h)
		all = append(all, sent{p: p, id: id, eventID: wantAccepted(t, r, p.name, id).EventID, names: names, values: values})
	}
	// Mailgun: the stored and forwarded body is the one sent without its
	// signature object (or, of a form, its timestamp, token and signature
	// fields), the rest byte for byte.
	now := strconv.FormatInt(time.Now().Unix(), 10)
	mgSig := hexOf(macOf(mgKey, now, "tok-kept-json-5d1f0a7c9e"))
	mgBody := `{"signature":{"timestamp":"` + now + `","token":"tok-kept-json-5d1f0a7c9e","signature":"` + mgSig + `"},` +
		"\n  \"event-data\": {\"id\": \"sig-kept-mailgun\", \"event\": \"delivered\"} }"
	r := s.post("mailgun", "", []byte(mgBody))
	all = append(all, sent{p: provider{name: "mailgun"}, id: "sig-kept-mailgun", eventID: wantAccepted(t, r, "mailgun", "sig-kept-mailgun").EventID,
		values: []string{mgSig, "tok-kept-json-5d1f0a7c9e", `"signature"`}, body: "{\"event-data\": {\"id\": \"sig-kept-mailgun\", \"event\": \"delivered\"} }"})
	formSig := hexOf(macOf(mgKey, now, "tok-kept-form-0b8e4c2a61"))
	form := "event=delivered&timestamp=" + now + "&token=tok-kept-form-0b8e4c2a61&recipient=a%40example.com&signature=" + formSig
	r = s.post("mailgun-form", "sig-kept-mailgun-form", []byte(form), func(r *http.Request) { r.Header.Set("Content-Type", "application/x-www-form-urlencoded") })
	all = append(all, sent{p: provider{name: "mailgun-form"}, id: "sig-kept-mailgun-form", eventID: wantAccepted(t, r, "mailgun-form", "sig-kept-mailgun-form").EventID,
		values: []string{formSig, "tok-kept-form-0b8e4c2a61", "signature=", "token=", "timestamp="}, body: "event=delivered&recipient=a%40example.com"})
	testkit.Poll(t, pollTimeout, "every forward to arrive", func() bool { return len(target.Delivered()) == len(all) })

	for _, x := range all {
		t.Run(x.p.name, func(t *testing.T) {
			var headers, body string
			if err := s.pool.QueryRow(t.Context(), `SELECT headers::text, convert_from(body, 'UTF8') FROM webhook_events WHERE sender = $1 AND delivery_id = $2`,
				x.p.name, x.id).Scan(&headers, &body); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(headers, "Content-Type") {
				t.Errorf("stored headers %s: Content-Type is missing", headers)
			}
			if x.body != "" && body != x.body {
				t.Errorf("stored body %q, want %q (the body sent less its signature)", body, x.body)
			}
			hits := target.HitsFor(x.eventID)
			if len(hits) == 0 {
				t.Fatalf("no forward of event %s", x.eventID)
			}
			if x.body != "" && string(hits[0].Body) != x.body {
				t.Errorf("forwarded body %q, want %q", hits[0].Body, x.body)
			}
			path := "/console/senders/" + x.p.name + "/deliveries/" + url.PathEscape(x.id)
			for where, text := range map[string]string{
				"the stored headers":         headers,
				"the stored body":            body,
				"the operator API's event":   string(s.call(http.MethodGet, "/v1/events/"+x.eventID).body),
				"the console's delivery":     consolePage(t, cc, s.url, path),
				"the console's raw body":     consolePage(t, cc, s.url, path+"/body"),
				"the forward's headers":      fmt.Sprint(hits[0].Header),
				"the forward's body":         string(hits[0].Body),
				"the stored headers' names":  strings.ToLower(headers),
				"the console's header names": strings.ToLower(consolePage(t, cc, s.url, path)),
			} {
				values := x.values
				if strings.HasSuffix(where, "names") {
					values = nil
					for _, n := range x.names {
						values = append(values, `"`+strings.ToLower(n)+`"`, ">"+strings.ToLower(n)+"<")
					}
				}
				if leak := containsAny(text, values...); leak != "" {
					t.Errorf("%s holds the signature %q: %.300s", where, leak, text[max(0, strings.Index(text, leak)-100):])
				}
			}
		})
	}
}
