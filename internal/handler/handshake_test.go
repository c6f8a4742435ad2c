package handler_test

import (
	"bytes"
	"compress/gzip"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// The handshakes of Zoom, Twitch, Discord and Meta are answered as each
// provider's documentation prescribes (cited next to the presets' rows),
// only after their signature or verify token is checked, and leave no
// trace: no key claimed, no event stored.

const handshakeYAML = `senders:
  - name: zoom
    preset: zoom
    secret: ${ZOOM1}
    secrets: ["${ZOOM2}"]
  - name: zoom-gz
    preset: zoom
    secret: ${ZOOM1}
    accept_encodings: [gzip]
  - name: twitch
    preset: twitch
    secret: ${TWITCH}
  - name: discord
    preset: discord
    secret: ${DISCORD}
  - name: meta
    preset: meta
    secret: ${META}
    verify_token: ${META_VERIFY}
  - name: meta-notoken
    preset: meta
    secret: ${META}
  - name: gh
    preset: github
    secret: ${META}
`

func TestHandshakesLeaveNoTrace(t *testing.T) {
	t.Parallel()
	zoom1, zoom2 := []byte("zoom-secret-token-1"), []byte("zoom-secret-token-2")
	twitchKey := []byte("twitch-eventsub-secret")
	discordKey := []byte("discord-app-key")
	const metaVerify = "meta-verify-token-5b1e"
	vars := map[string]string{
		"ZOOM1": string(zoom1), "ZOOM2": string(zoom2), "TWITCH": string(twitchKey),
		"DISCORD": ed25519Public(discordKey), "META": "meta-app-secret-0123", "META_VERIFY": metaVerify,
	}
	s, pool := newDBServer(t, options{yaml: handshakeYAML, env: vars})
	leaks := []string{string(zoom1), string(zoom2), string(twitchKey), "meta-app-secret-0123", metaVerify}
	post := func(sender string, body []byte, h http.Header) reply {
		return s.post(sender, "", body, func(r *http.Request) {
			for k, v := range h {
				r.Header[k] = v
			}
		})
	}
	now := time.Now().Unix()
	zoomSign := func(key []byte, ts int64, body []byte) http.Header {
		t := strconv.FormatInt(ts, 10)
		return header("x-zm-request-timestamp", t, "x-zm-signature", "v0="+hexOf(macOf(key, "v0:", t, ":", string(body))))
	}

	t.Run("zoom url_validation", func(t *testing.T) {
		// The request of https://developers.zoom.us/docs/api/webhooks/#validate-your-webhook-endpoint
		body := []byte(`{"payload":{"plainToken":"qgg8vlvZRS6UYooatFL8Aw"},"event_ts":1654503849680,"event":"endpoint.url_validation"}`)
		for i, key := range [][]byte{zoom1, zoom2} {
			r := post("zoom", body, zoomSign(key, now, body))
			if r.status != http.StatusOK || r.header.Get("Content-Type") != "application/json" || r.replayed() {
				t.Fatalf("key %d: %s; want 200 JSON", i, r)
			}
			var got map[string]string
			if err := json.Unmarshal(r.body, &got); err != nil {
				t.Fatal(err)
			}
			// encryptedToken is keyed with the secret that signed the request.
			if want := hexOf(macOf(key, "qgg8vlvZRS6UYooatFL8Aw")); len(got) != 2 || got["plainToken"] != "qgg8vlvZRS6UYooatFL8Aw" || got["encryptedToken"] != want {
				t.Errorf("key %d: %s, want plainToken and encryptedToken %s", i, r.body, want)
			}
		}
		// Gzip-encoded (a sender that accepts it): the signature covers the
		// bytes as sent, and so does the check that picks the key.
		var gz bytes.Buffer
		zw := gzip.NewWriter(&gz)
		if _, err := zw.Write(body); err != nil {
			t.Fatal(err)
		}
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
		h := zoomSign(zoom1, now, gz.Bytes())
		h.Set("Content-Encoding", "gzip")
		if r := post("zoom-gz", gz.Bytes(), h); r.status != http.StatusOK || !strings.Contains(string(r.body), hexOf(macOf(zoom1, "qgg8vlvZRS6UYooatFL8Aw"))) {
			t.Errorf("gzip: %s; want 200 with the token under the secret", r)
		}
		for name, h := range map[string]http.Header{
			"wrong secret": zoomSign([]byte("not-zoom"), now, body),
			"stale":        zoomSign(zoom1, now-301, body),
			"unsigned":     nil,
		} {
			r := post("zoom", body, h)
			wantRejected(t, r, leaks...)
			if strings.Contains(string(r.body), "qgg8vlvZRS6UYooatFL8Aw") {
				t.Errorf("%s: the 401 echoes the token", name)
			}
		}
	})

	twitchSign := func(id, typ string, ts int64, body []byte) http.Header {
		t := time.Unix(ts, 5).UTC().Format(time.RFC3339Nano)
		return header("Twitch-Eventsub-Message-Id", id, "Twitch-Eventsub-Message-Timestamp", t, "Twitch-Eventsub-Message-Type", typ,
			"Twitch-Eventsub-Message-Signature", "sha256="+hexOf(macOf(twitchKey, id, t, string(body))))
	}
	t.Run("twitch webhook_callback_verification", func(t *testing.T) {
		// The request of https://dev.twitch.tv/docs/eventsub/handling-webhook-events/#responding-to-a-challenge-request
		body := []byte(`{"challenge":"pogchamp-kappa-360noscope-vohiyo","subscription":{"id":"f1c2a387-161a-49f9-a165-0f21d7a4e1c4","status":"webhook_callback_verification_pending","type":"channel.follow","version":"1","cost":1,"condition":{"broadcaster_user_id":"12826"},"transport":{"method":"webhook","callback":"https://example.com/webhooks/callback"},"created_at":"2019-11-16T10:11:12.634234626Z"}}`)
		for i := range 2 {
			r := post("twitch", body, twitchSign("e76c6bd4-55c9-4987-8304-da1588d8988b", "webhook_callback_verification", now, body))
			if r.status != http.StatusOK || !strings.HasPrefix(r.header.Get("Content-Type"), "text/plain") ||
				string(r.body) != "pogchamp-kappa-360noscope-vohiyo" || r.replayed() {
				t.Fatalf("%d: %s; want 200 text/plain with the challenge alone", i, r)
			}
		}
		r := post("twitch", body, twitchSign("e76c6bd4", "webhook_callback_verification", now-601, body))
		wantRejected(t, r, leaks...)
		// A revocation, validly signed, is recorded like a notification.
		rev := []byte(`{"subscription":{"id":"f1c2a387","status":"authorization_revoked","type":"channel.follow","version":"1"}}`)
		wantAccepted(t, post("twitch", rev, twitchSign("rev-1", "revocation", now, rev)), "twitch", "rev-1")
		wantRecorded(t, pool, "twitch", "rev-1", 1)
	})

	t.Run("discord PING", func(t *testing.T) {
		ping := []byte(`{"id":"1133441121231312312","type":1,"application_id":"11223344556677","version":1}`)
		sign := func(key []byte, ts int64, body []byte) http.Header {
			t := strconv.FormatInt(ts, 10)
			return header("X-Signature-Timestamp", t, "X-Signature-Ed25519", hexOf(ed25519.Sign(ed25519Key(key), append([]byte(t), body...))))
		}
		for i := range 2 {
			r := post("discord", ping, sign(discordKey, now, ping))
			if r.status != http.StatusOK || r.header.Get("Content-Type") != "application/json" || string(r.body) != `{"type":1}` {
				t.Fatalf("%d: %s; want 200 {\"type\":1}", i, r)
			}
		}
		// Discord checks that a bad signature is refused with 401.
		wantRejected(t, post("discord", ping, sign([]byte("not-discord"), now, ping)), leaks...)
		wantRejected(t, post("discord", ping, nil), leaks...)
		wantRecorded(t, pool, "discord", "1133441121231312312", 0)
		// An application command (type 2) is a delivery.
		cmd := []byte(`{"id":"2233","type":2,"data":{"name":"hello"}}`)
		wantAccepted(t, post("discord", cmd, sign(discordKey, now, cmd)), "discord", "2233")
		wantRecorded(t, pool, "discord", "2233", 1)
	})

	t.Run("meta GET hub.challenge", func(t *testing.T) {
		get := func(sender string, q url.Values) reply {
			return s.get("/webhooks/" + sender + "?" + q.Encode())
		}
		ok := url.Values{"hub.mode": {"subscribe"}, "hub.challenge": {"1158201444"}, "hub.verify_token": {metaVerify}}
		for i := range 2 {
			r := get("meta", ok)
			if r.status != http.StatusOK || !strings.HasPrefix(r.header.Get("Content-Type"), "text/plain") || string(r.body) != "1158201444" {
				t.Fatalf("%d: %s; want 200 text/plain 1158201444", i, r)
			}
		}
		for _, tc := range []struct {
			sender string
			q      url.Values
			status int
			slug   string
		}{
			{"meta", url.Values{"hub.mode": {"subscribe"}, "hub.challenge": {"1158201444"}, "hub.verify_token": {"wrong"}}, http.StatusForbidden, "invalid-verify-token"},
			{"meta", url.Values{"hub.mode": {"subscribe"}, "hub.challenge": {"1158201444"}}, http.StatusForbidden, "invalid-verify-token"},
			{"meta", url.Values{"hub.mode": {"unsubscribe"}, "hub.challenge": {"1"}, "hub.verify_token": {metaVerify}}, http.StatusBadRequest, "invalid-parameter"},
			{"meta", url.Values{"hub.mode": {"subscribe"}, "hub.challenge": {strings.Repeat("9", 1025)}, "hub.verify_token": {metaVerify}}, http.StatusBadRequest, "invalid-parameter"},
			{"meta-notoken", url.Values{"hub.mode": {"subscribe"}, "hub.challenge": {"1"}, "hub.verify_token": {""}}, http.StatusForbidden, "invalid-verify-token"},
			{"gh", ok, http.StatusMethodNotAllowed, "method-not-allowed"},
			{"nobody", ok, http.StatusNotFound, "unknown-sender"},
		} {
			r := get(tc.sender, tc.q)
			p := wantProblem(t, r, tc.status, tc.slug)
			if tc.status == http.StatusMethodNotAllowed && r.header.Get("Allow") != http.MethodPost {
				t.Errorf("%s: 405 with Allow %q, want POST", tc.sender, r.header.Get("Allow"))
			}
			if leak := containsAny(string(r.body), append(leaks, "1158201444")...); leak != "" {
				t.Errorf("%s %v: the answer shows %q: %s", tc.sender, tc.q, leak, p.Detail)
			}
		}
	})

	t.Run("nothing recorded, handshakes counted", func(t *testing.T) {
		wantCounts(t, pool, 2, 2) // Twitch's revocation and Discord's command
		m := samples(t, s.get("/metrics").body, "hookgate_deliveries_total")
		for sender, n := range map[string]float64{"zoom": 2, "twitch": 2, "discord": 2, "meta": 2} {
			if got := m[fmt.Sprintf(`{event_type="",outcome="url_verification",sender=%q}`, sender)]; got != n {
				t.Errorf("%s: %v handshakes counted, want %v; all: %v", sender, got, n, m)
			}
		}
	})
}

// Handshakes touch no database: with PostgreSQL unreachable they are still
// answered (and a delivery gets 503).
func TestHandshakesWithoutDatabase(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(t.Context(), "postgres://hookgate@"+addr+"/nowhere?sslmode=disable&connect_timeout=5")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	discordKey := []byte("discord-app-key-nodb")
	s := newServer(t, pool, options{yaml: handshakeYAML, env: map[string]string{
		"ZOOM1": "zoom-secret-token-z1", "ZOOM2": "zoom-secret-token-z2", "TWITCH": "twitch-secret-0123", "DISCORD": ed25519Public(discordKey), "META": "meta-app-secret-0123", "META_VERIFY": "meta-verify-token-mv",
	}})
	now := time.Now().Unix()
	ts := strconv.FormatInt(now, 10)
	sendDiscord := func(body string) reply {
		return s.post("discord", "", []byte(body), func(r *http.Request) {
			r.Header.Set("X-Signature-Timestamp", ts)
			r.Header.Set("X-Signature-Ed25519", hexOf(ed25519.Sign(ed25519Key(discordKey), []byte(ts+body))))
		})
	}
	if r := sendDiscord(`{"id":"9","type":1}`); r.status != http.StatusOK || string(r.body) != `{"type":1}` {
		t.Errorf("discord PING with the database down: %s", r)
	}
	zoomBody := `{"event":"endpoint.url_validation","payload":{"plainToken":"tok"}}`
	r := s.post("zoom", "", []byte(zoomBody), func(r *http.Request) {
		r.Header.Set("x-zm-request-timestamp", ts)
		r.Header.Set("x-zm-signature", "v0="+hexOf(macOf([]byte("zoom-secret-token-z2"), "v0:", ts, ":", zoomBody)))
	})
	if r.status != http.StatusOK || !strings.Contains(string(r.body), hexOf(macOf([]byte("zoom-secret-token-z2"), "tok"))) {
		t.Errorf("zoom url_validation with the database down: %s", r)
	}
	if r := s.get("/webhooks/meta?hub.mode=subscribe&hub.challenge=77&hub.verify_token=meta-verify-token-mv"); r.status != http.StatusOK || string(r.body) != "77" {
		t.Errorf("meta subscription check with the database down: %s", r)
	}
	wantProblem(t, sendDiscord(`{"id":"10","type":2}`), http.StatusServiceUnavailable, "unavailable")
}
