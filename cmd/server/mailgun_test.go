package main

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/testing/pgtest"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// A Mailgun token is remembered in PostgreSQL, so that every replica
// refuses its reuse (issue 29): two gateway processes on one database, a
// genuine Mailgun delivery accepted by one and forwarded without its
// signature object; the same signature object with another event, sent to
// the other process, gets 401 and is neither recorded nor forwarded;
// Mailgun's retry of the genuine delivery, to the other process, is
// replayed.
func TestMailgunTokenReuseAcrossProcesses(t *testing.T) {
	t.Parallel()
	pool, dsn := pgtest.NewDB(t)
	target := testkit.NewTarget(t, testkit.Always(http.StatusOK))
	key := randHex(16)
	cfg := fmt.Sprintf(`senders:
  - name: mailgun
    preset: mailgun
    secret: %s
    forward:
      - { name: t, url: %q }
`, key, target.URL)
	a := startRunWith(t, dsn, cfg)
	b := startRunWith(t, dsn, cfg)
	c := newClient(t)
	post := func(base string, body []byte) reply {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/webhooks/mailgun", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		r, err := do(c, req)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	m := hmac.New(sha256.New, []byte(key))
	m.Write([]byte(ts + "tok-procs-2f81c0d4e9"))
	sigObject := `{"signature":{"timestamp":"` + ts + `","token":"tok-procs-2f81c0d4e9","signature":"` + hex.EncodeToString(m.Sum(nil)) + `"}`
	genuine := []byte(sigObject + `,"event-data":{"id":"evt-genuine","event":"delivered"}}`)
	forged := []byte(sigObject + `,"event-data":{"id":"evt-forged","event":"unsubscribed"}}`)

	first := post(a.base, genuine)
	if first.status != http.StatusAccepted {
		t.Fatalf("the genuine delivery: %s", first)
	}
	if r := post(b.base, forged); r.status != http.StatusUnauthorized {
		t.Errorf("the forged delivery at the other process: %s, want 401", r)
	}
	if r := post(b.base, genuine); r.status != http.StatusAccepted || !bytes.Equal(r.body, first.body) || r.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("Mailgun's retry at the other process: %s, want a replay of %s", r, first)
	}
	testkit.Poll(t, 30*time.Second, "the genuine delivery's forward", func() bool { return len(target.Hits()) >= 1 })
	hits := target.Hits()
	if len(hits) != 1 || string(hits[0].Body) != `{"event-data":{"id":"evt-genuine","event":"delivered"}}` {
		t.Errorf("forwards: %d, the first's body %q; want one, the genuine event without its signature object", len(hits), hits[0].Body)
	}
	var keys, tokens int
	if err := pool.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM processed_messages), (SELECT count(*) FROM signature_tokens)`).Scan(&keys, &tokens); err != nil {
		t.Fatal(err)
	}
	if keys != 1 || tokens != 1 {
		t.Errorf("%d keys and %d signature tokens, want 1 of each", keys, tokens)
	}
}
