package sender_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/sender"
)

// Prepare turns a signed request into one delivery: the ID, event type,
// targets, stored headers and body, and the body's SHA-256. It checks the
// signature on the body as sent, before it calls inflate.
func TestPrepare(t *testing.T) {
	t.Parallel()
	const secret = "k-0123456789abcdef"
	c := mustParse(t, "senders:\n"+senderYAML("s",
		"delivery_id: { json_pointer: /id }",
		"event_type: { json_pointer: /type }",
		"signature: { scheme: hmac-sha256, header: X-Signature }",
		"secret: ${K}",
		"forward:\n      - { name: paid, url: 'https://example.com/a', event_types: [invoice.paid] }\n      - { name: all, url: 'https://example.com/b' }",
	), env(map[string]string{"K": secret}))
	s, _ := c.Get("s")
	body := []byte(`{"id":"evt-1","type":"invoice.paid"}`)
	request := func(body []byte, sign bool) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/webhooks/s", nil)
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("X-Trace", "t1")
		if sign {
			m := hmac.New(sha256.New, []byte(secret))
			m.Write(body)
			r.Header.Set("X-Signature", hex.EncodeToString(m.Sum(nil)))
		}
		return r
	}

	p, err := s.Prepare(request(body, true), body, nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if p.Handshake || p.DeliveryID != "evt-1" || p.EventType != "invoice.paid" || p.EventTypeLabel != "invoice.paid" ||
		!slices.Equal(p.Targets, []string{"paid", "all"}) || string(p.Body) != string(body) || p.BodySHA256 != sha256.Sum256(body) || p.HasNonce {
		t.Errorf("Prepare = %+v", p)
	}
	if p.Header.Get("X-Trace") != "t1" || p.Header.Get("X-Signature") != "" {
		t.Errorf("stored headers %v: want X-Trace and no X-Signature", p.Header)
	}

	// A wrong signature is a SignatureError, found before inflate runs.
	inflated := false
	inflate := func(b []byte) ([]byte, error) { inflated = true; return b, nil }
	_, err = s.Prepare(request(body, false), body, inflate, time.Now())
	var se *sender.SignatureError
	if !errors.As(err, &se) || inflated {
		t.Errorf("unsigned: %v (inflated %v); want a SignatureError before inflate", err, inflated)
	}

	// inflate's body is the one read and stored; its error is Prepare's.
	short := []byte(`{"id":"evt-2"}`)
	p, err = s.Prepare(request(body, true), body, func([]byte) ([]byte, error) { return short, nil }, time.Now())
	if err != nil || p.DeliveryID != "evt-2" || string(p.Body) != string(short) {
		t.Errorf("inflated: %+v, %v", p, err)
	}
	boom := errors.New("boom")
	if _, err := s.Prepare(request(body, true), body, func([]byte) ([]byte, error) { return nil, boom }, time.Now()); !errors.Is(err, boom) {
		t.Errorf("inflate's error: %v", err)
	}

	// A body without a valid delivery ID is a DeliveryIDError whose detail
	// says why.
	for _, b := range []string{`{"type":"x"}`, `not json`, `{"id":{}}`, `{"id":""}`} {
		_, err := s.Prepare(request([]byte(b), true), []byte(b), nil, time.Now())
		var ide *sender.DeliveryIDError
		if !errors.As(err, &ide) || !strings.HasPrefix(ide.Detail, "The ") {
			t.Errorf("%s: %v; want a DeliveryIDError", b, err)
		}
	}
}
