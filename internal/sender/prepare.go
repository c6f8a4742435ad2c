package sender

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"time"

	"github.com/hookgate/hookgate/internal/events"
	"github.com/hookgate/hookgate/internal/idempotency"
	"github.com/hookgate/hookgate/internal/jsonptr"
	"github.com/hookgate/hookgate/internal/rules"
)

// Prepared is a request that [Sender.Prepare] turned into a delivery.
// Ingest stores it, routes it and answers with it.
type Prepared struct {
	// Handshake is true when the request is a provider's handshake. Reply
	// is then the answer, and nothing else is set: nothing is recorded.
	Handshake bool
	Reply     HandshakeReply

	DeliveryID string
	// EventType is "" when the request has none.
	EventType string
	// EventTypeLabel is the event type's value of the event_type metric
	// label ([Sender.EventTypeLabel]).
	EventTypeLabel string
	// Targets are the targets the delivery goes to: those [Sender.Route]
	// picks whose filter, if any, passes. The slice may be shared: do not
	// modify it.
	Targets []string
	// RuleErrors are the routed targets whose filter failed to evaluate;
	// they are not in Targets. Ingest records them on the event and counts
	// them. Nil when none failed.
	RuleErrors []events.RuleError
	// OrderKeys are the ordering keys of Targets, one each, "" for a
	// forward that is not ordered; nil when none is ([Sender.OrderKeys]).
	OrderKeys []string
	// Header and Body are what is stored and forwarded. Header holds the
	// headers the sender's [Sender.HeaderFilter] keeps. Body is
	// decompressed and has no signature inside it ([Sender.StoredBody]).
	Header http.Header
	Body   []byte
	// BodySHA256 is Body's SHA-256: the delivery's fingerprint.
	BodySHA256 [32]byte
	// Parsed is Body as the filters parsed it, for the fast path's
	// transforms; nil when no filter read it.
	Parsed *rules.Parsed
	// Nonce is the single-use token the signature covers instead of the
	// body, when HasNonce is true (Mailgun's). Ingest accepts it for one
	// delivery only.
	Nonce    Nonce
	HasNonce bool
}

// Nonce is a single-use token and the time it was signed at.
type Nonce struct {
	Token    string
	SignedAt time.Time
}

// SignatureError is a request whose signature did not verify. Err is the
// verifier's error, which never holds a secret.
type SignatureError struct{ Err error }

func (e *SignatureError) Error() string { return "signature: " + e.Err.Error() }

func (e *SignatureError) Unwrap() error { return e.Err }

// DeliveryIDError is a request without a valid delivery ID. Detail says
// why, in words a client can be shown.
type DeliveryIDError struct{ Detail string }

func (e *DeliveryIDError) Error() string { return "delivery ID: " + e.Detail }

// Prepare turns a request into a delivery, in one pass over it. It checks
// the signature on body as received, and decompresses body with inflate
// when inflate is not nil. It then reads the body once, answers a
// handshake, and finds the delivery ID, the event type and the targets:
// those the routes pick whose filter passes.
// Errors are a [*SignatureError], a [*DeliveryIDError], or inflate's.
// now is the time the signature's timestamp is checked against.
func (s *Sender) Prepare(r *http.Request, body []byte, inflate func([]byte) ([]byte, error), now time.Time) (Prepared, error) {
	if err := s.Verify(r, body, now); err != nil {
		return Prepared{}, &SignatureError{Err: err}
	}
	// The signature covers the bytes as sent. A handshake and a nonce read
	// them again; everything else reads the decompressed body.
	signed := body
	if inflate != nil {
		var err error
		if body, err = inflate(body); err != nil {
			return Prepared{}, err
		}
	}
	in := s.Inspect(body)
	if reply, ok := s.Handshake(r, signed, &in, now); ok {
		return Prepared{Handshake: true, Reply: reply}, nil
	}
	// A signature inside the body is not stored. The fingerprint is taken
	// without it, so a retry signed afresh is the same delivery.
	body = s.StoredBody(body, r.Header.Get("Content-Type"))
	p := Prepared{Body: body, BodySHA256: sha256.Sum256(body)}
	var err error
	if p.DeliveryID, err = s.deliveryID(r.Header, p.BodySHA256, &in); err != nil {
		return Prepared{}, err
	}
	// The event type and the routes read the headers as received, before
	// the storage filter.
	p.EventType = s.EventTypeOf(r.Header, &in)
	p.EventTypeLabel = s.EventTypeLabel(p.EventType)
	p.Targets = s.Route(p.EventType, r.Header, &in)
	p.Header = s.HeaderFilter.Filter(r.Header)
	if inflate != nil {
		// The stored body is decompressed.
		p.Header.Del("Content-Encoding")
		p.Header.Del("Content-Length")
	}
	if fs := s.plan.filters; fs != nil && len(p.Targets) > 0 {
		// The filters read the headers as received, as the routes do.
		p.Targets, p.RuleErrors = s.filter(fs, &p, r.Header)
	}
	p.OrderKeys = s.OrderKeys(p.Targets, r.Header, &in)
	p.Nonce.Token, p.Nonce.SignedAt, p.HasNonce = s.nonce(r, signed)
	return p, nil
}

// deliveryID returns the delivery ID from where the sender's configuration
// says it is: a header, a JSON value that in holds, or the hex of sum, the
// body's SHA-256. The ID must pass [idempotency.CheckDeliveryID].
func (s *Sender) deliveryID(h http.Header, sum [32]byte, in *Inspection) (string, error) {
	var id string
	src := s.DeliveryID
	switch {
	case src.BodySHA256:
		id = hex.EncodeToString(sum[:])
	case src.Header != "":
		vals := h.Values(src.Header)
		if len(vals) == 0 {
			return "", &DeliveryIDError{fmt.Sprintf("The %s header is missing: sender %q carries its delivery ID there.", src.Header, s.Name)}
		}
		if len(vals) > 1 {
			return "", &DeliveryIDError{fmt.Sprintf("The %s header appears %d times; send exactly one delivery ID.", src.Header, len(vals))}
		}
		id = vals[0]
	default:
		v := in.value(s.plan.idSlot)
		switch {
		case in.JSONErr != nil:
			return "", &DeliveryIDError{fmt.Sprintf("The body is not valid JSON, and sender %q carries its delivery ID at the JSON pointer %s.", s.Name, src.JSONPointer)}
		case !v.Found:
			return "", &DeliveryIDError{fmt.Sprintf("The JSON body has no value at %s: sender %q carries its delivery ID there.", src.JSONPointer, s.Name)}
		case v.Kind != jsonptr.KindString && v.Kind != jsonptr.KindNumber:
			return "", &DeliveryIDError{fmt.Sprintf("The value at %s must be a string or a number to be a delivery ID.", src.JSONPointer)}
		}
		id = v.Str
	}
	if reason := idempotency.CheckDeliveryID(id); reason != "" {
		return "", &DeliveryIDError{"The delivery ID " + reason + ". Nothing was recorded."}
	}
	return id, nil
}
