package handler_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/signature"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// Signature verification through real HTTP, one sender per preset. The
// requests are signed here with crypto/hmac, independently of package
// signature (whose SignStandard is used only as a cross-check).

// macOf returns HMAC-SHA256(key, concat(parts)).
func macOf(key []byte, parts ...string) []byte {
	m := hmac.New(sha256.New, key)
	for _, p := range parts {
		m.Write([]byte(p))
	}
	return m.Sum(nil)
}

func hexOf(b []byte) string { return hex.EncodeToString(b) }
func b64Of(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// provider is a sender preset as a webhook provider uses it: how its
// sender is configured, where the delivery ID goes and how requests are
// signed.
type provider struct {
	name string // the sender's name
	// lines are the sender's YAML lines after "- name:", secrets excluded.
	lines []string
	// idHeader carries the delivery ID; "" when it is in the JSON body
	// (payload puts it at /id and /event_id).
	idHeader string
	// timestamped schemes sign a timestamp checked against a tolerance.
	timestamped bool
	// std: the configured secret is "whsec_" + base64(key), not the key.
	std bool
	// public, when set, is what the configuration holds for a key: the
	// public half of the key pair the key names (ECDSA).
	public func(key []byte) string
	// sigHeaders are the headers the signature check requires.
	sigHeaders []string
	// sign returns the headers of a request with body and delivery ID id,
	// signed with key at Unix time ts.
	sign func(key []byte, id string, ts int64, body []byte) http.Header
	// unbound: the scheme sends the secret itself (a token), which does
	// not bind the body, so a tampered body is not detected (only TLS
	// protects it) and the tampered-body checks are skipped.
	unbound bool
	// multi, when the scheme allows several signatures in one header,
	// returns headers holding several signatures of which only the last is
	// valid (under key).
	multi func(key []byte, id string, ts int64, body []byte) http.Header
	// query, when set, returns the query string of a request with body
	// (Twilio's bodySHA256).
	query func(body []byte) string
	// tol is the preset's default tolerance in seconds (0: 300).
	tol int64
}

// tolerance returns p's default timestamp tolerance in seconds.
func (p provider) tolerance() int64 {
	if p.tol == 0 {
		return 300
	}
	return p.tol
}

func header(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}

var providers = append(append(basicProviders, moreProviders...), urlProviders...)

var basicProviders = []provider{
	{
		name:       "github",
		lines:      []string{"preset: github"},
		idHeader:   "X-GitHub-Delivery",
		sigHeaders: []string{"X-Hub-Signature-256"},
		sign: func(key []byte, _ string, _ int64, body []byte) http.Header {
			return header("X-Hub-Signature-256", "sha256="+hexOf(macOf(key, string(body))))
		},
	},
	{
		name:        "stripe",
		lines:       []string{"preset: stripe"},
		timestamped: true,
		sigHeaders:  []string{"Stripe-Signature"},
		sign: func(key []byte, _ string, ts int64, body []byte) http.Header {
			t := strconv.FormatInt(ts, 10)
			return header("Stripe-Signature", "t="+t+",v1="+hexOf(macOf(key, t, ".", string(body))))
		},
		multi: func(key []byte, _ string, ts int64, body []byte) http.Header {
			t := strconv.FormatInt(ts, 10)
			good := hexOf(macOf(key, t, ".", string(body)))
			bad := hexOf(macOf([]byte("not-the-secret"), t, ".", string(body)))
			v0 := hexOf(macOf(key, "v0:", string(body)))
			return header("Stripe-Signature", "t="+t+",v1="+bad+",v0="+v0+",v1="+good)
		},
	},
	{
		name:       "shopify",
		lines:      []string{"preset: shopify"},
		idHeader:   "X-Shopify-Event-Id",
		sigHeaders: []string{"X-Shopify-Hmac-Sha256"},
		sign: func(key []byte, _ string, _ int64, body []byte) http.Header {
			return header("X-Shopify-Hmac-Sha256", b64Of(macOf(key, string(body))))
		},
	},
	{
		name:        "slack",
		lines:       []string{"preset: slack"},
		timestamped: true,
		sigHeaders:  []string{"X-Slack-Signature", "X-Slack-Request-Timestamp"},
		sign: func(key []byte, _ string, ts int64, body []byte) http.Header {
			t := strconv.FormatInt(ts, 10)
			return header("X-Slack-Request-Timestamp", t,
				"X-Slack-Signature", "v0="+hexOf(macOf(key, "v0:", t, ":", string(body))))
		},
	},
	{
		name:  "standard-webhooks",
		lines: []string{"preset: standard-webhooks"},
		// The delivery ID is webhook-id, which is signed: sign sets it.
		timestamped: true,
		std:         true,
		sigHeaders:  []string{"webhook-id", "webhook-timestamp", "webhook-signature"},
		sign: func(key []byte, id string, ts int64, body []byte) http.Header {
			t := strconv.FormatInt(ts, 10)
			return header("webhook-id", id, "webhook-timestamp", t,
				"webhook-signature", "v1,"+b64Of(macOf(key, id, ".", t, ".", string(body))))
		},
		multi: func(key []byte, id string, ts int64, body []byte) http.Header {
			t := strconv.FormatInt(ts, 10)
			good := b64Of(macOf(key, id, ".", t, ".", string(body)))
			bad := b64Of(macOf([]byte("not-the-secret"), id, ".", t, ".", string(body)))
			return header("webhook-id", id, "webhook-timestamp", t,
				"webhook-signature", "v1,"+bad+" v1a,"+good+" v2,"+good+" v1,"+good)
		},
	},
	{
		name: "generic-hex",
		lines: []string{
			"preset: generic",
			"delivery_id: { header: X-Delivery-Id }",
			`signature: { scheme: hmac-sha256, header: X-Signature, encoding: hex, prefix: "sha256=" }`,
		},
		idHeader:   "X-Delivery-Id",
		sigHeaders: []string{"X-Signature"},
		sign: func(key []byte, _ string, _ int64, body []byte) http.Header {
			return header("X-Signature", "sha256="+hexOf(macOf(key, string(body))))
		},
	},
	{
		name: "generic-b64",
		lines: []string{
			"preset: generic",
			"delivery_id: { json_pointer: /id }",
			"signature: { scheme: hmac-sha256, header: X-Payload-Mac, encoding: base64 }",
		},
		sigHeaders: []string{"X-Payload-Mac"},
		sign: func(key []byte, _ string, _ int64, body []byte) http.Header {
			return header("X-Payload-Mac", b64Of(macOf(key, string(body))))
		},
	},
}

// Key indexes: the main sender has key 0; the rotation sender has keys 1
// (secrets[0], "old"), 2 (secret) and 3 (secrets[1], "new"); key 9 is
// configured nowhere.
const (
	keyMain  = 0
	keyOld   = 1
	keyCur   = 2
	keyNew   = 3
	keyWrong = 9
)

// key returns p's key number i.
func (p provider) key(i int) []byte {
	return []byte(fmt.Sprintf("k%d-%s-Q7ro9XhYtP2wLsVb", i, p.name))
}

// secret returns what the configuration holds for p's key number i.
func (p provider) secret(i int) string {
	if p.public != nil {
		return p.public(p.key(i))
	}
	if p.std {
		return signature.StandardSecretPrefix + b64Of(p.key(i))
	}
	return string(p.key(i))
}

// leakable returns every form in which p's configured secrets could leak.
func (p provider) leakable() []string {
	var out []string
	for _, i := range []int{keyMain, keyOld, keyCur, keyNew} {
		k := p.key(i)
		out = append(out, p.secret(i), string(k), hexOf(k), b64Of(k))
	}
	return out
}

// config returns hookgate.yaml for p: the sender p.name with key 0; p.name-rot
// with secret: key 2 and secrets: [key 1, key 3]; and, for timestamped
// schemes, p.name-tol30 and p.name-tol900 with key 0 and those tolerances.
func (p provider) config() (string, map[string]string) {
	var b strings.Builder
	b.WriteString("senders:\n")
	add := func(name string, extra ...string) {
		b.WriteString("  - name: " + name + "\n")
		for _, l := range append(append([]string(nil), p.lines...), extra...) {
			b.WriteString("    " + l + "\n")
		}
	}
	add(p.name, "secret: ${MAIN}")
	add(p.name+"-rot", "secret: ${CUR}", `secrets: ["${OLD}", "${NEW}"]`)
	if p.timestamped {
		add(p.name+"-tol30", "secret: ${MAIN}", "tolerance: 30s")
		add(p.name+"-tol900", "secret: ${MAIN}", "tolerance: 900s")
	}
	return b.String(), map[string]string{
		"MAIN": p.secret(keyMain), "OLD": p.secret(keyOld), "CUR": p.secret(keyCur), "NEW": p.secret(keyNew),
	}
}

// payload is a JSON body carrying id where the body-ID presets look for it
// (/id for Stripe and generic-b64, /event_id for Slack); n varies the body.
// (also /event/id for Coinbase Commerce and PagerDuty, /update_id for
// Telegram).
func payload(id string, n int) []byte {
	return fmt.Appendf(nil, `{"id":%q,"event_id":%q,"event":{"id":%q},"update_id":%q,"type":"event_callback","n":%d}`, id, id, id, id, n)
}

// deliver POSTs body to sender with the delivery ID id (in p.idHeader when
// the preset reads it from a header) and the headers h.
func (p provider) deliver(s *server, sender, id string, body []byte, h http.Header) reply {
	s.t.Helper()
	return s.post(sender, "", body, func(r *http.Request) {
		if p.query != nil {
			r.URL.RawQuery = p.query(body)
		}
		if p.idHeader != "" {
			r.Header.Set(p.idHeader, id)
		}
		for k, v := range h {
			r.Header[k] = v
		}
	})
}

// signed delivers body to sender with delivery ID id, signed with p's key
// number k at Unix time ts.
func (p provider) signed(s *server, sender, id string, body []byte, k int, ts int64) reply {
	s.t.Helper()
	return p.deliver(s, sender, id, body, p.sign(p.key(k), id, ts, body))
}

// expected returns the MACs the server computes for body (delivery ID id,
// time ts) under each of p's configured keys: what a 401 must not reveal.
func (p provider) expected(id string, ts int64, body []byte) []string {
	var out []string
	for _, i := range []int{keyMain, keyOld, keyCur, keyNew} {
		for _, vals := range p.sign(p.key(i), id, ts, body) {
			for _, v := range vals {
				for _, tok := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == '=' || r == ' ' }) {
					if len(tok) >= 40 { // a 64-digit hex or 43/44-character base64 MAC
						out = append(out, strings.TrimRight(tok, "="))
					}
				}
			}
		}
	}
	return out
}

// with returns a copy of s whose helpers report to t (a subtest).
func (s *server) with(t *testing.T) *server {
	c := *s
	c.t = t
	return &c
}

// wantRejected checks that r is the 401 invalid-signature problem, not a
// replay, and that neither its body nor its headers contain a secret or an
// expected signature.
func wantRejected(t *testing.T, r reply, leaks ...string) {
	t.Helper()
	p := wantProblem(t, r, http.StatusUnauthorized, "invalid-signature")
	all := string(r.body) + fmt.Sprint(r.header)
	if leak := containsAny(all, leaks...); leak != "" {
		t.Errorf("the 401 reveals %q: %s %v", leak, r.body, r.header)
	}
	if strings.Contains(p.Detail, "event_id") || strings.Contains(string(r.body), `"event_id"`) {
		t.Errorf("the 401 looks like a stored response: %s", r.body)
	}
}

// keyRows returns the rows of (sender, id) in processed_messages and
// webhook_events.
func keyRows(t *testing.T, pool *pgxpool.Pool, sender, id string) (keys, events int) {
	t.Helper()
	err := pool.QueryRow(t.Context(), `SELECT
  (SELECT count(*) FROM processed_messages WHERE sender = $1 AND delivery_id = $2),
  (SELECT count(*) FROM webhook_events WHERE sender = $1 AND delivery_id = $2)`, sender, id).Scan(&keys, &events)
	if err != nil {
		t.Fatalf("count rows of (%s, %s): %v", sender, id, err)
	}
	return keys, events
}

// wantRecorded checks that (sender, id) has n rows in each table (0 or 1).
func wantRecorded(t *testing.T, pool *pgxpool.Pool, sender, id string, n int) {
	t.Helper()
	if k, e := keyRows(t, pool, sender, id); k != n || e != n {
		t.Errorf("(%s, %s): %d processed_messages and %d webhook_events rows, want %d of each", sender, id, k, e, n)
	}
}

// wantReplay checks that r replays first: same status, Content-Type and
// body, and Idempotent-Replayed: true.
func wantReplay(t *testing.T, r, first reply) {
	t.Helper()
	if r.status != first.status || !bytes.Equal(r.body, first.body) ||
		r.header.Get("Content-Type") != first.header.Get("Content-Type") || !r.replayed() {
		t.Errorf("duplicate: %s (Idempotent-Replayed %q); want a replay of %s", r, r.header.Values("Idempotent-Replayed"), first)
	}
}

func TestSignatureProviders(t *testing.T) {
	t.Parallel()
	for _, p := range providers {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			yaml, vars := p.config()
			var logs testkit.LogBuffer
			base, pool := newDBServer(t, options{yaml: yaml, env: vars, log: &logs})
			leaks := p.leakable()
			now := func() int64 { return time.Now().Unix() }
			// runIf runs the subtest only where the scheme has the feature.
			runIf := func(cond bool, name string, f func(*testing.T)) {
				if cond {
					t.Run(name, f)
				}
			}

			runIf(!p.unbound, "tampered then genuine", func(t *testing.T) {
				s := base.with(t)
				id := "tamper-1"
				genuine, tampered := payload(id, 1), payload(id, 2)
				ts := now()
				h := p.sign(p.key(keyMain), id, ts, genuine)
				r := p.deliver(s, p.name, id, tampered, h)
				wantRejected(t, r, append(leaks, p.expected(id, ts, tampered)...)...)
				wantRecorded(t, pool, p.name, id, 0)
				// Nothing was recorded: the genuine delivery is new.
				wantAccepted(t, p.deliver(s, p.name, id, genuine, h), p.name, id)
				wantRecorded(t, pool, p.name, id, 1)
			})

			t.Run("wrong secret then genuine", func(t *testing.T) {
				s := base.with(t)
				id := "wrong-1"
				body := payload(id, 1)
				ts := now()
				wantRejected(t, p.signed(s, p.name, id, body, keyWrong, ts), append(leaks, p.expected(id, ts, body)...)...)
				wantRecorded(t, pool, p.name, id, 0)
				wantAccepted(t, p.signed(s, p.name, id, body, keyMain, ts), p.name, id)
				wantRecorded(t, pool, p.name, id, 1)
			})

			t.Run("duplicates", func(t *testing.T) {
				s := base.with(t)
				id := "dup-1"
				body := payload(id, 1)
				first := p.signed(s, p.name, id, body, keyMain, now())
				a := wantAccepted(t, first, p.name, id)

				// A retry, signed again (later, for timestamped schemes): replay.
				wantReplay(t, p.signed(s, p.name, id, body, keyMain, now()+1), first)

				// Duplicates whose own signature is invalid: 401, not a replay
				// (and not 422 for the tampered body).
				ts := now()
				h := p.sign(p.key(keyMain), id, ts, body)
				if !p.unbound {
					wantRejected(t, p.deliver(s, p.name, id, payload(id, 2), h), append(leaks, p.expected(id, ts, payload(id, 2))...)...)
				}
				wantRejected(t, p.signed(s, p.name, id, body, keyWrong, ts), append(leaks, p.expected(id, ts, body)...)...)
				unsigned := p.sign(p.key(keyMain), id, ts, body)
				for _, name := range p.sigHeaders {
					unsigned.Del(name)
				}
				wantRejected(t, p.deliver(s, p.name, id, body, unsigned), leaks...)

				wantRecorded(t, pool, p.name, id, 1)
				if k := readKey(t, pool, p.name, id); k.eventID.String() != a.EventID || !bytes.Equal(k.body, first.body) {
					t.Errorf("stored record changed: event %s body %q; first %s %q", k.eventID, k.body, a.EventID, first.body)
				}
				// And the genuine duplicate still replays.
				wantReplay(t, p.signed(s, p.name, id, body, keyMain, now()), first)
			})

			t.Run("missing or malformed signature headers", func(t *testing.T) {
				s := base.with(t)
				for i, name := range p.sigHeaders {
					for _, value := range []string{"", "garbage"} {
						id := fmt.Sprintf("missing-%d-%t", i, value == "")
						body := payload(id, 1)
						h := p.sign(p.key(keyMain), id, now(), body)
						if value == "" {
							h.Del(name)
						} else {
							h.Set(name, value)
						}
						wantRejected(t, p.deliver(s, p.name, id, body, h), leaks...)
						wantRecorded(t, pool, p.name, id, 0)
					}
				}
				id := "missing-all"
				wantRejected(t, p.deliver(s, p.name, id, payload(id, 1), nil), leaks...)
				wantRecorded(t, pool, p.name, id, 0)
			})

			runIf(p.timestamped, "timestamps", func(t *testing.T) {
				s := base.with(t)
				tol := p.tolerance()
				// The server's clock reads at or after the test's: a timestamp
				// tol+1 s before the test's now is always stale, and one tol s
				// ahead is never too far ahead. The other two edges allow the
				// request 5 s to arrive.
				for _, tc := range []struct {
					id     string
					offset int64
					ok     bool
				}{
					{"ts-stale", -tol - 1, false},
					{"ts-very-stale", -3600 - tol, false},
					{"ts-future", tol + 5, false},
					{"ts-far-future", 86400, false},
					{"ts-old-edge", -tol + 5, true},
					{"ts-future-edge", tol, true},
				} {
					body := payload(tc.id, 1)
					ts := now() + tc.offset
					r := p.signed(s, p.name, tc.id, body, keyMain, ts)
					if tc.ok {
						wantAccepted(t, r, p.name, tc.id)
						wantRecorded(t, pool, p.name, tc.id, 1)
						continue
					}
					wantRejected(t, r, append(leaks, p.expected(tc.id, ts, body)...)...)
					wantRecorded(t, pool, p.name, tc.id, 0)
					// Not consumed: the same delivery signed now is accepted.
					wantAccepted(t, p.signed(s, p.name, tc.id, body, keyMain, now()), p.name, tc.id)
				}
			})

			runIf(p.timestamped, "per-sender tolerance", func(t *testing.T) {
				s := base.with(t)
				for _, tc := range []struct {
					sender string
					offset int64
					ok     bool
				}{
					{p.name + "-tol30", -31, false},
					{p.name + "-tol30", -200, false}, // within the default 300 s
					{p.name + "-tol30", 35, false},
					{p.name + "-tol30", -25, true},
					{p.name + "-tol30", 30, true},
					{p.name + "-tol900", -600, true}, // beyond the default 300 s
					{p.name + "-tol900", 600, true},
					{p.name + "-tol900", -901, false},
					{p.name, -2 * p.tolerance(), false}, // the default sender does not take it
				} {
					id := fmt.Sprintf("tol%+d", tc.offset)
					body := payload(id, 1)
					r := p.signed(s, tc.sender, id, body, keyMain, now()+tc.offset)
					if tc.ok {
						wantAccepted(t, r, tc.sender, id)
						wantRecorded(t, pool, tc.sender, id, 1)
					} else {
						wantRejected(t, r, leaks...)
						wantRecorded(t, pool, tc.sender, id, 0)
					}
				}
			})

			t.Run("rotation", func(t *testing.T) {
				s := base.with(t)
				rot := p.name + "-rot"
				for _, k := range []int{keyOld, keyCur, keyNew} {
					id := fmt.Sprintf("rot-%d", k)
					wantAccepted(t, p.signed(s, rot, id, payload(id, k), k, now()), rot, id)
					wantRecorded(t, pool, rot, id, 1)
				}
				for _, k := range []int{keyMain, keyWrong} {
					id := fmt.Sprintf("rot-%d", k)
					wantRejected(t, p.signed(s, rot, id, payload(id, k), k, now()), leaks...)
					wantRecorded(t, pool, rot, id, 0)
				}
				// The main sender does not take the rotation sender's keys.
				id := "rot-other-sender"
				wantRejected(t, p.signed(s, p.name, id, payload(id, 1), keyNew, now()), leaks...)
			})

			runIf(p.multi != nil, "several signatures in one header", func(t *testing.T) {
				s := base.with(t)
				id := "multi-1"
				body := payload(id, 1)
				wantAccepted(t, p.deliver(s, p.name, id, body, p.multi(p.key(keyMain), id, now(), body)), p.name, id)
				wantRecorded(t, pool, p.name, id, 1)
				// The same list without a valid signature fails.
				id = "multi-2"
				body = payload(id, 1)
				wantRejected(t, p.deliver(s, p.name, id, body, p.multi(p.key(keyWrong), id, now(), body)), leaks...)
				wantRecorded(t, pool, p.name, id, 0)
			})

			t.Run("no endpoint returns a secret", func(t *testing.T) {
				s := base.with(t)
				for _, path := range []string{"/metrics", "/healthz", "/readyz", "/openapi.yaml"} {
					r := s.get(path)
					if leak := containsAny(string(r.body)+fmt.Sprint(r.header), leaks...); leak != "" {
						t.Errorf("GET %s reveals %q", path, leak)
					}
				}
			})

			// Every request has been answered; closing the server waits for
			// the last log lines.
			base.srv.Close()
			logged := logs.String()
			if !strings.Contains(logged, "status=401") || !strings.Contains(logged, "status=202") {
				t.Fatalf("the log was not captured:\n%s", logged)
			}
			if leak := containsAny(logged, leaks...); leak != "" {
				t.Errorf("the log contains %q:\n%s", leak, logged)
			}
		})
	}
}

// The Standard Webhooks signatures made above agree with the signature
// package's signer.
func TestStandardWebhooksSigningCrossCheck(t *testing.T) {
	t.Parallel()
	var p provider
	for _, q := range providers {
		if q.name == "standard-webhooks" {
			p = q
		}
	}
	ts := time.Unix(1714000000, 0)
	body := payload("msg_1", 1)
	ours := p.sign(p.key(keyMain), "msg_1", ts.Unix(), body).Get("webhook-signature")
	if theirs := signature.SignStandard(p.key(keyMain), "msg_1", ts, body); ours != theirs {
		t.Errorf("test signer %q, signature.SignStandard %q", ours, theirs)
	}
	// And the whsec_ secret in the configuration decodes to the key signed with.
	if k, err := signature.DecodeStandardSecret(p.secret(keyMain)); err != nil || !bytes.Equal(k, p.key(keyMain)) {
		t.Errorf("DecodeStandardSecret(config secret) = %q, %v", k, err)
	}

	// A delivery signed by SignStandard is accepted through HTTP.
	yaml, vars := p.config()
	s, pool := newDBServer(t, options{yaml: yaml, env: vars})
	now := time.Now()
	h := header("webhook-id", "msg_1", "webhook-timestamp", strconv.FormatInt(now.Unix(), 10),
		"webhook-signature", signature.SignStandard(p.key(keyMain), "msg_1", now, body))
	wantAccepted(t, p.deliver(s, p.name, "msg_1", body, h), p.name, "msg_1")
	wantRecorded(t, pool, p.name, "msg_1", 1)
}

// Signatures are checked before any database work: with the database
// unreachable, a bad signature is still 401 (not 503), and Slack's
// url_verification is still answered; only a validly signed delivery reaches
// the database (and gets 503).
func TestSignatureCheckedBeforeDatabase(t *testing.T) {
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
	for _, p := range providers {
		yaml, vars := p.config()
		s := newServer(t, pool, options{yaml: yaml, env: vars})
		id := "before-db"
		body := payload(id, 1)
		ts := time.Now().Unix()
		wantRejected(t, p.signed(s, p.name, id, body, keyWrong, ts))
		wantRejected(t, p.deliver(s, p.name, id, body, nil))
		wantProblem(t, p.signed(s, p.name, id, body, keyMain, ts), http.StatusServiceUnavailable, "unavailable")
		if p.name == "slack" {
			r := p.signed(s, p.name, "", slackChallengeBody, keyMain, ts)
			if r.status != http.StatusOK || !strings.Contains(string(r.body), slackChallenge) {
				t.Errorf("url_verification with the database down: %s", r)
			}
		}
	}
}

const slackChallenge = "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"

var slackChallengeBody = []byte(`{"token":"Jhj5dZrVaK7ZwHHjRyZWjbDl","challenge":"` + slackChallenge + `","type":"url_verification"}`)

func TestSlackURLVerification(t *testing.T) {
	t.Parallel()
	var p provider
	for _, q := range providers {
		if q.name == "slack" {
			p = q
		}
	}
	yaml, vars := p.config()
	s, pool := newDBServer(t, options{yaml: yaml, env: vars})
	now := time.Now().Unix()

	// Validly signed: 200 {"challenge": ...}, every time, and nothing recorded.
	for i := range 2 {
		r := p.signed(s, "slack", "", slackChallengeBody, keyMain, now)
		if r.status != http.StatusOK {
			t.Fatalf("url_verification %d: %s; want 200", i, r)
		}
		if ct := r.header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("Content-Type = %q, want application/json", ct)
		}
		if r.replayed() {
			t.Errorf("url_verification %d is marked as a replay", i)
		}
		var got map[string]any
		if err := json.Unmarshal(r.body, &got); err != nil {
			t.Fatalf("body %q: %v", r.body, err)
		}
		if len(got) != 1 || got["challenge"] != slackChallenge {
			t.Errorf("body = %s, want exactly {\"challenge\": %q}", r.body, slackChallenge)
		}
	}
	// The rotation sender answers under any of its secrets.
	for _, k := range []int{keyOld, keyNew} {
		if r := p.signed(s, "slack-rot", "", slackChallengeBody, k, now); r.status != http.StatusOK ||
			!strings.Contains(string(r.body), slackChallenge) {
			t.Errorf("url_verification to slack-rot under key %d: %s", k, r)
		}
	}

	// Not validly signed: 401, and the challenge is not echoed.
	for name, h := range map[string]http.Header{
		"wrong secret": p.sign(p.key(keyWrong), "", now, slackChallengeBody),
		"stale":        p.sign(p.key(keyMain), "", now-301, slackChallengeBody),
		"future":       p.sign(p.key(keyMain), "", now+305, slackChallengeBody),
		"unsigned":     nil,
		"tampered":     p.sign(p.key(keyMain), "", now, bytes.Replace(slackChallengeBody, []byte("3eZ"), []byte("4eZ"), 1)),
	} {
		r := p.deliver(s, "slack", "", slackChallengeBody, h)
		wantRejected(t, r, p.leakable()...)
		if strings.Contains(string(r.body), slackChallenge) {
			t.Errorf("%s: the 401 echoes the challenge: %s", name, r.body)
		}
	}
	wantCounts(t, pool, 0, 0)

	// A Slack event (not url_verification) is recorded as usual.
	wantAccepted(t, p.signed(s, "slack", "Ev1", payload("Ev1", 1), keyMain, now), "slack", "Ev1")
	wantCounts(t, pool, 1, 1)

	m := samples(t, s.get("/metrics").body, "hookgate_deliveries_total")
	if n := m[`{event_type="none",outcome="accepted",sender="slack"}`]; n != 1 {
		t.Errorf(`hookgate_deliveries_total{outcome="accepted",sender="slack"} = %v, want 1 (the event only, not the url_verification requests); all: %v`, n, m)
	}
	if n := m[`{event_type="none",outcome="accepted",sender="slack-rot"}`]; n != 0 {
		t.Errorf(`hookgate_deliveries_total{outcome="accepted",sender="slack-rot"} = %v, want 0; all: %v`, n, m)
	}
	if n := m[`{event_type="",outcome="rejected_signature",sender="slack"}`]; n != 5 {
		t.Errorf(`hookgate_deliveries_total{outcome="rejected_signature",sender="slack"} = %v, want 5; all: %v`, n, m)
	}
}

// A url_verification body sent to another preset is an ordinary delivery:
// only Slack senders answer the challenge.
func TestURLVerificationOnlyForSlack(t *testing.T) {
	t.Parallel()
	var p provider
	for _, q := range providers {
		if q.name == "generic-hex" {
			p = q
		}
	}
	yaml, vars := p.config()
	s, pool := newDBServer(t, options{yaml: yaml, env: vars})
	r := p.signed(s, p.name, "uv-1", slackChallengeBody, keyMain, time.Now().Unix())
	wantAccepted(t, r, p.name, "uv-1")
	wantCounts(t, pool, 1, 1)
}
