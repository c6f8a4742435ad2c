package handler_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/config"
)

// bodyWithID returns a JSON body holding id at the JSON pointer ptr (an
// array where a token is an index), and the values payload holds.
func bodyWithID(ptr, id string) []byte {
	switch ptr {
	case "", "/id", "/event_id", "/event/id", "/update_id":
		return payload(id, 1)
	}
	toks := strings.Split(ptr, "/")[1:]
	var v any = id
	for i := len(toks) - 1; i >= 0; i-- {
		if _, err := strconv.Atoi(toks[i]); err == nil {
			v = []any{v}
		} else {
			v = map[string]any{toks[i]: v, "n": 1}
		}
	}
	b, _ := json.Marshal(v)
	return b
}

// Issue 29: a captured request of each preset, sent again under a new
// delivery ID, is accepted as a new event exactly where the preset table's
// Replay (and docs/providers.md's table, made of it) says yes: where the
// ID is an unsigned header (within the tolerance, for Zendesk), and where
// nothing is signed; elsewhere it is refused (the ID is in the signed
// body, is its hash, or is a signed header; Mailgun's token is taken).
// Where the table says body-hash IDs help, a sender of the preset with
// delivery_id: { body_sha256: true } replays the copy instead.
func TestReplayUnderANewDeliveryID(t *testing.T) {
	t.Parallel()
	signers := map[string]provider{}
	for _, p := range providers {
		signers[p.name] = p
	}
	signers["generic"] = signers["generic-hex"]
	type sender struct {
		name     string
		row      config.Preset
		p        provider
		bodyHash bool // the variant with body-hash IDs
	}
	var (
		senders []sender
		b       strings.Builder
		env     = map[string]string{}
	)
	b.WriteString("senders:\n")
	for _, row := range config.Presets {
		if row.Name == "mailgun" {
			continue // below: its signature is in the body
		}
		p, ok := signers[row.Name]
		if !ok {
			t.Fatalf("no signer for preset %s", row.Name)
		}
		add := func(name string, bodyHash bool) {
			fmt.Fprintf(&b, "  - name: %s\n    secret: ${K_%d}\n", name, len(senders))
			env[fmt.Sprintf("K_%d", len(senders))] = p.secret(keyMain)
			for _, l := range p.lines {
				// The preset's own delivery ID, not the one the signature
				// tests give some presets (generic has none of its own).
				if !strings.HasPrefix(l, "delivery_id:") || (row.Name == "generic" && !bodyHash) {
					fmt.Fprintf(&b, "    %s\n", l)
				}
			}
			if bodyHash {
				b.WriteString("    delivery_id: { body_sha256: true }\n")
			}
			senders = append(senders, sender{name, row, p, bodyHash})
		}
		add(row.Name, false)
		if row.Replay.NewID && strings.Contains(row.Replay.Do, "body_sha256") {
			add(row.Name+"-bodyhash", true)
		}
	}
	mgKey := []byte("mg-key-replay-5e0c")
	fmt.Fprintf(&b, "  - { name: mailgun, preset: mailgun, secret: %s }\n", mgKey)
	s, pool := newDBServer(t, options{yaml: b.String(), env: env})

	for _, x := range senders {
		t.Run(x.name, func(t *testing.T) {
			s := s.with(t)
			id, newID := "replay-"+x.name, "replay-new-"+x.name
			body := bodyWithID(x.row.DeliveryID.JSONPointer, id)
			h := x.p.sign(x.p.key(keyMain), id, time.Now().Unix(), body)
			idHeader := x.row.DeliveryID.Header
			if x.row.Name == "generic" {
				idHeader = "X-Delivery-Id"
			}
			if idHeader != "" && h.Get(idHeader) == "" {
				h.Set(idHeader, id)
			}
			first := x.p.deliver(s, x.name, id, body, h)
			if first.status != http.StatusAccepted {
				t.Fatalf("the genuine request: %s", first)
			}
			// The copy: the same signed headers and body with another
			// delivery ID wherever the preset reads it.
			copyBody, copyHeader := bytes.Clone(body), h.Clone()
			switch {
			case x.bodyHash:
				copyHeader.Set(idHeader, newID) // the ID the preset would have read
			case idHeader != "":
				copyHeader.Set(idHeader, newID)
			case x.row.DeliveryID.BodySHA256:
				copyBody = append(copyBody, ' ') // another hash: another body
			default:
				copyBody = bytes.ReplaceAll(copyBody, []byte(id), []byte(newID))
			}
			r := x.p.deliver(s, x.name, newID, copyBody, copyHeader)
			switch {
			case x.bodyHash:
				wantReplay(t, r, first)
			case x.row.Replay.NewID:
				if r.status != http.StatusAccepted || r.replayed() {
					t.Errorf("the table says a copy under a new ID is accepted, but: %s", r)
				}
			default:
				// Refused by the signature check: the new ID is not what
				// was signed.
				if r.status != http.StatusUnauthorized {
					t.Errorf("the table says no, but a copy under a new ID got %s, not 401", r)
				}
				wantRecorded(t, pool, x.name, newID, 0)
			}
		})
	}
	t.Run("mailgun", func(t *testing.T) {
		s := s.with(t)
		row, _ := config.PresetNamed("mailgun")
		now := time.Now().Unix()
		genuine := mailgunSigned(mgKey, now, "tok-replay-0d3b", "replay-mailgun", now)
		wantAccepted(t, s.post("mailgun", "", genuine), "mailgun", "replay-mailgun")
		r := s.post("mailgun", "", bytes.ReplaceAll(genuine, []byte("replay-mailgun"), []byte("replay-new-mailgun")))
		if row.Replay.NewID || r.status != http.StatusUnauthorized {
			t.Errorf("a copy under a new ID: %s; the table says accepted: %t", r, row.Replay.NewID)
		}
		wantRecorded(t, pool, "mailgun", "replay-new-mailgun", 0)
	})
}
