package handler_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/dedup"
	"github.com/hookgate/hookgate/internal/handler"
	"github.com/hookgate/hookgate/internal/sender"
)

// Mailgun signs inside the body; Twilio's usual body is a form; HubSpot's
// an array of events. Each through real HTTP and PostgreSQL.

// mailgunBody returns a Mailgun webhook body for event id, signed with key
// at ts (https://documentation.mailgun.com/docs/mailgun/user-manual/webhooks/securing-webhooks).
func mailgunBody(key []byte, id string, ts int64, token string) []byte {
	return mailgunSigned(key, ts, token, id, ts)
}

// mailgunSigned is mailgunBody signed at ts for an event of eventTS (a
// retry signs the same event again, later).
func mailgunSigned(key []byte, ts int64, token, id string, eventTS int64) []byte {
	t := strconv.FormatInt(ts, 10)
	sig := hexOf(macOf(key, t, token))
	return fmt.Appendf(nil, `{"signature":{"timestamp":%q,"token":%q,"signature":%q},"event-data":{"id":%q,"event":"delivered","timestamp":%d}}`,
		t, token, sig, id, eventTS)
}

func TestMailgunSignatureInBody(t *testing.T) {
	t.Parallel()
	keys := [][]byte{[]byte("mg-key-main-3f1a"), []byte("mg-key-old-0123456"), []byte("mg-key-new-0123456")}
	yaml := "senders:\n  - name: mailgun\n    preset: mailgun\n    secret: ${MG}\n" +
		"  - name: mailgun-rot\n    preset: mailgun\n    secrets: [\"${MG_OLD}\", \"${MG_NEW}\"]\n"
	s, pool := newDBServer(t, options{yaml: yaml, env: map[string]string{"MG": string(keys[0]), "MG_OLD": string(keys[1]), "MG_NEW": string(keys[2])}})
	leaks := []string{string(keys[0]), string(keys[1]), string(keys[2])}
	post := func(sender string, body []byte) reply { return s.post(sender, "", body) }
	now := time.Now().Unix()

	body := mailgunBody(keys[0], "evt-1", now, "tok-1")
	first := post("mailgun", body)
	wantAccepted(t, first, "mailgun", "evt-1")
	wantReplay(t, post("mailgun", body), first)
	// A retry signed afresh (a new timestamp and token, the same event) is
	// the same delivery: the stored body, and its SHA-256, leave the
	// signature object out.
	wantReplay(t, post("mailgun", mailgunSigned(keys[0], now+1, "tok-1-again", "evt-1", now)), first)
	wantRecorded(t, pool, "mailgun", "evt-1", 1)
	if k, e := readKey(t, pool, "mailgun", "evt-1"), readEvent(t, pool, "mailgun", "evt-1"); string(e.body) != fmt.Sprintf(`{"event-data":{"id":"evt-1","event":"delivered","timestamp":%d}}`, now) ||
		!bytes.Equal(k.sha256, sha256Of(e.body)) {
		t.Errorf("stored body %s (SHA-256 %x): want the body sent less its signature object, and its SHA-256", e.body, k.sha256)
	}

	for name, b := range map[string][]byte{
		"wrong key":         mailgunBody([]byte("not-mailgun"), "evt-2", now, "tok-2"),
		"stale":             mailgunBody(keys[0], "evt-2", now-301, "tok-2"),
		"future":            mailgunBody(keys[0], "evt-2", now+305, "tok-2"),
		"token changed":     []byte(strings.Replace(string(mailgunBody(keys[0], "evt-2", now, "tok-2")), `"token":"tok-2"`, `"token":"tok-3"`, 1)),
		"no signature":      []byte(`{"event-data":{"id":"evt-2","event":"delivered"}}`),
		"signature garbled": []byte(`{"signature":{"timestamp":"1","token":"t","signature":"zz"},"event-data":{"id":"evt-2"}}`),
		"not JSON":          []byte(`event-data=1`),
	} {
		wantRejected(t, post("mailgun", b), leaks...)
		wantRecorded(t, pool, "mailgun", "evt-2", 0)
		_ = name
	}
	// Not consumed: the same event, validly signed, is accepted.
	wantAccepted(t, post("mailgun", mailgunBody(keys[0], "evt-2", now, "tok-2")), "mailgun", "evt-2")

	// Rotation: either listed key; not the other sender's.
	for i, k := range keys[1:] {
		id := fmt.Sprintf("rot-%d", i)
		wantAccepted(t, post("mailgun-rot", mailgunBody(k, id, now, "tok-r"+id)), "mailgun-rot", id)
	}
	wantRejected(t, post("mailgun-rot", mailgunBody(keys[0], "rot-x", now, "tok")), leaks...)
	wantRecorded(t, pool, "mailgun-rot", "rot-x", 0)

	// A subaccount's event: signature under the subaccount's key (not
	// configured here), parent-signature under the primary account's.
	t.Run("parent-signature", func(t *testing.T) {
		ts := strconv.FormatInt(now, 10)
		body := fmt.Appendf(nil, `{"signature":{"timestamp":%q,"token":"tok-p","signature":%q,"parent-signature":%q},"event-data":{"id":"evt-p","event":"delivered"}}`,
			ts, hexOf(macOf([]byte("subaccount-key"), ts, "tok-p")), hexOf(macOf(keys[0], ts, "tok-p")))
		wantAccepted(t, post("mailgun", body), "mailgun", "evt-p")
		bad := fmt.Appendf(nil, `{"signature":{"timestamp":%q,"token":"tok-q","signature":%q,"parent-signature":%q},"event-data":{"id":"evt-q","event":"delivered"}}`,
			ts, hexOf(macOf([]byte("subaccount-key"), ts, "tok-q")), hexOf(macOf([]byte("other-primary"), ts, "tok-q")))
		wantRejected(t, post("mailgun", bad), leaks...)
		wantRecorded(t, pool, "mailgun", "evt-q", 0)
	})

	// A form body (Mailgun's routes and legacy webhooks) with the same fields.
	t.Run("form", func(t *testing.T) {
		ts := strconv.FormatInt(now, 10)
		form := url.Values{"timestamp": {ts}, "token": {"tok-f"}, "signature": {hexOf(macOf(keys[0], ts, "tok-f"))}, "event": {"delivered"}}
		r := s.post("mailgun", "", []byte(form.Encode()), func(r *http.Request) {
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		})
		// The form carries no /event-data/id: 400, after the signature passed.
		wantProblem(t, r, http.StatusBadRequest, "invalid-delivery-id")
	})
}

// A Twilio form POST, signed over the URL (with its query string) and the
// sorted parameters, is accepted; the same with one parameter changed, or
// to another URL, is not.
func TestTwilioFormBody(t *testing.T) {
	t.Parallel()
	const token = "twilio-auth-token-9c2e"
	yaml := "senders:\n  - name: twilio\n    preset: twilio\n    secret: ${TW}\n    public_url: " + twilioURL + "\n" +
		"  - name: twilio-direct\n    preset: twilio\n    secret: ${TW}\n"
	s, pool := newDBServer(t, options{yaml: yaml, env: map[string]string{"TW": token}})
	form := url.Values{"MessageSid": {"SM42"}, "From": {"+15551230000"}, "To": {"+15559870000"}, "Body": {"Hi & bye = ok"}}
	body := []byte(form.Encode())
	send := func(sender, query, sig string, body []byte) reply {
		return s.post(sender, "", body, func(r *http.Request) {
			r.URL.RawQuery = query
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			r.Header.Set("I-Twilio-Idempotency-Token", "idem-1")
			r.Header.Set("X-Twilio-Signature", sig)
		})
	}
	signed := twilioURL + "?tenant=a%20b" + "BodyHi & bye = okFrom+15551230000MessageSidSM42To+15559870000"
	first := send("twilio", "tenant=a%20b", twilioMAC([]byte(token), signed), body)
	wantAccepted(t, first, "twilio", "idem-1")
	wantReplay(t, send("twilio", "tenant=a%20b", twilioMAC([]byte(token), signed), body), first)
	changed := []byte(strings.Replace(string(body), "SM42", "SM43", 1))
	wantRejected(t, send("twilio", "tenant=a%20b", twilioMAC([]byte(token), signed), changed), token)
	wantRejected(t, send("twilio", "tenant=b", twilioMAC([]byte(token), signed), body), token)
	wantRecorded(t, pool, "twilio", "idem-1", 1)

	// Without public_url, the URL is the request's own.
	direct := s.url + "/webhooks/twilio-direct"
	sig := twilioMAC([]byte(token), direct+"BodyHi & bye = okFrom+15551230000MessageSidSM42To+15559870000")
	wantAccepted(t, send("twilio-direct", "", sig, body), "twilio-direct", "idem-1")
}

// HubSpot sends an array of events: the preset takes the first one's
// eventId and subscriptionType; a retry (the same bytes) is a replay.
func TestHubSpotBatch(t *testing.T) {
	t.Parallel()
	const secret = "hubspot-client-secret-77"
	yaml := "senders:\n  - name: hubspot\n    preset: hubspot\n    secret: ${HS}\n    public_url: " + hubspotURL + "\n"
	s, pool := newDBServer(t, options{yaml: yaml, env: map[string]string{"HS": secret}})
	body := []byte(`[{"eventId":1001,"subscriptionId":12345,"portalId":62515,"occurredAt":1564113600000,"subscriptionType":"contact.creation","attemptNumber":0,"objectId":123},` +
		`{"eventId":1002,"subscriptionId":12345,"portalId":62515,"occurredAt":1564113600001,"subscriptionType":"contact.deletion","attemptNumber":0,"objectId":124}]`)
	send := func(query string, ms int64) reply {
		u := hubspotURL
		if query != "" {
			u += "?" + query
		}
		t := strconv.FormatInt(ms, 10)
		return s.post("hubspot", "", body, func(r *http.Request) {
			r.URL.RawQuery = query
			r.Header.Set("X-HubSpot-Request-Timestamp", t)
			r.Header.Set("X-HubSpot-Signature-v3", b64Of(macOf([]byte(secret), "POST", u, string(body), t)))
		})
	}
	ms := time.Now().UnixMilli()
	first := send("portal=62515", ms)
	wantAccepted(t, first, "hubspot", "1001")
	wantReplay(t, send("portal=62515", ms+1000), first)
	wantRecorded(t, pool, "hubspot", "1001", 1)
	var eventType string
	if err := pool.QueryRow(t.Context(), `SELECT event_type FROM webhook_events WHERE sender = 'hubspot'`).Scan(&eventType); err != nil || eventType != "contact.creation" {
		t.Errorf("event type %q, %v; want contact.creation", eventType, err)
	}
	wantRejected(t, send("portal=62515", ms-301_000), secret)
}

func sha256Of(b []byte) []byte { sum := sha256.Sum256(b); return sum[:] }

// Mailgun signs its timestamp and token, not the event (issue 29): a
// genuine signature object reused with another event is refused with 401
// and records nothing, whether the event has another delivery ID or the
// same one with another body, for as long as the timestamp is within the
// tolerance; Mailgun's retry of the same delivery (the same bytes) is
// replayed.
func TestMailgunTokenReuseIsRefused(t *testing.T) {
	t.Parallel()
	key := []byte("mg-key-reuse-41c7")
	yaml := "senders:\n  - name: mailgun\n    preset: mailgun\n    secret: ${MG}\n" +
		"  - name: other\n    preset: mailgun\n    secret: ${MG}\n"
	s, pool := newDBServer(t, options{yaml: yaml, env: map[string]string{"MG": string(key)}})
	now := time.Now().Unix()
	genuine := mailgunSigned(key, now, "tok-genuine-7a0e", "evt-genuine", now)
	first := s.post("mailgun", "", genuine)
	wantAccepted(t, first, "mailgun", "evt-genuine")

	// The attacker keeps the signature object and writes its own event.
	sigObject := genuine[:bytes.Index(genuine, []byte(`,"event-data"`))]
	forged := func(eventData string) []byte {
		return append(bytes.Clone(sigObject), `,"event-data":`+eventData+`}`...)
	}
	for _, body := range [][]byte{
		forged(`{"id":"evt-forged","event":"delivered"}`),
		forged(`{"id":"evt-genuine","event":"failed","severity":"permanent"}`),
		forged(fmt.Sprintf(`{"id":"evt-genuine","event":"delivered","timestamp":%d,"extra":1}`, now)),
	} {
		wantRejected(t, s.post("mailgun", "", body), string(key))
	}
	wantRecorded(t, pool, "mailgun", "evt-forged", 0)
	if k := readKey(t, pool, "mailgun", "evt-genuine"); !bytes.Equal(k.body, first.body) {
		t.Errorf("the genuine delivery's record changed: %s", k.body)
	}
	// Mailgun's retry, the same bytes: replayed.
	wantReplay(t, s.post("mailgun", "", genuine), first)
	// A token is the sender's: another sender with the same key is not
	// refused for it.
	wantAccepted(t, s.post("other", "", mailgunSigned(key, now, "tok-genuine-7a0e", "evt-other", now)), "other", "evt-other")
	wantCounts(t, pool, 2, 2)
}

// Requests reusing one token race: whatever their number and order, at
// most one delivery is accepted with it. After a genuine delivery, every
// forged request reusing its token under another delivery ID is refused
// while the genuine retries race beside them; a token no delivery has
// used yet goes to exactly one of the delivery IDs that race for it.
func TestMailgunTokenReuseRaces(t *testing.T) {
	t.Parallel()
	key := []byte("mg-key-race-93bd")
	s, pool := newDBServer(t, options{yaml: "senders:\n  - name: mailgun\n    preset: mailgun\n    secret: ${MG}\n", env: map[string]string{"MG": string(key)}})
	now := time.Now().Unix()
	genuine := mailgunSigned(key, now, "tok-race-genuine", "evt-race", now)
	first := s.post("mailgun", "", genuine)
	wantAccepted(t, first, "mailgun", "evt-race")

	const n = 16
	race := func(bodies [][]byte) []reply {
		replies := make([]reply, len(bodies))
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i, b := range bodies {
			wg.Go(func() {
				<-start
				replies[i] = s.do(s.postRequest("mailgun", "", b))
			})
		}
		close(start)
		wg.Wait()
		return replies
	}
	var bodies [][]byte
	for i := range n {
		bodies = append(bodies, mailgunSigned(key, now, "tok-race-genuine", fmt.Sprintf("evt-forged-%d", i), now))
		if i%4 == 0 {
			bodies = append(bodies, genuine) // Mailgun retrying meanwhile
		}
	}
	for i, r := range race(bodies) {
		if bytes.Equal(bodies[i], genuine) {
			wantReplay(t, r, first)
			continue
		}
		wantRejected(t, r, string(key))
	}
	wantCounts(t, pool, 1, 1)

	// A fresh token, n delivery IDs racing for it: one wins.
	bodies = bodies[:0]
	for i := range n {
		bodies = append(bodies, mailgunSigned(key, now, "tok-race-fresh", fmt.Sprintf("evt-fresh-%d", i), now))
	}
	accepted := 0
	for _, r := range race(bodies) {
		switch r.status {
		case http.StatusAccepted:
			accepted++
		case http.StatusUnauthorized:
			wantRejected(t, r, string(key))
		default:
			t.Errorf("a request racing for a fresh token: %s", r)
		}
	}
	if accepted != 1 {
		t.Errorf("%d deliveries accepted with one token, want 1", accepted)
	}
	wantCounts(t, pool, 2, 2)
}

// A server with a Mailgun sender needs somewhere to remember its tokens:
// handler.New refuses one without Config.Tokens, naming the sender; with
// the database unreachable, a valid Mailgun delivery gets 503 (the token
// is not decided, nothing is recorded) and an invalid one still 401.
func TestMailgunNeedsTheTokenStore(t *testing.T) {
	t.Parallel()
	cfg, err := config.Parse([]byte("senders:\n  - name: mg\n    preset: mailgun\n    secret: k-0123456789abcdef\n"), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	hc := handler.DefaultConfig()
	hc.Senders, hc.Ingest, hc.Ready = sender.MustCompile(cfg), new(dedup.Store), func(context.Context) error { return nil } // never run: New refuses
	hc.Registry, hc.Log = prometheus.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil))
	_, err = handler.New(hc)
	if err == nil || !strings.Contains(err.Error(), "Tokens") || !strings.Contains(err.Error(), `"mg"`) {
		t.Errorf("handler.New without a token store: %v", err)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	pool, err := pgxpool.New(t.Context(), "postgres://hookgate@"+addr+"/nowhere?sslmode=disable&connect_timeout=5")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s := newServer(t, pool, options{yaml: "senders:\n  - name: mg\n    preset: mailgun\n    secret: k-0123456789abcdef\n"})
	now := time.Now().Unix()
	wantProblem(t, s.post("mg", "", mailgunBody([]byte("k-0123456789abcdef"), "evt-1", now, "tok-1")), http.StatusServiceUnavailable, "unavailable")
	wantRejected(t, s.post("mg", "", mailgunBody([]byte("not-k"), "evt-1", now, "tok-1")))
}
