package handler

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/hookgate/hookgate/api"
	"github.com/hookgate/hookgate/internal/dedup"
	"github.com/hookgate/hookgate/internal/events"
	"github.com/hookgate/hookgate/internal/forward"
	"github.com/hookgate/hookgate/internal/idempotency"
	"github.com/hookgate/hookgate/internal/sender"
	"github.com/hookgate/hookgate/internal/sigtoken"
)

// IngestFunctionName is the database function that performs an ingest
// delivery's claim, its event and its outbox rows in one call.
const IngestFunctionName = "ingest_deliveries"

// IngestFunction describes [IngestFunctionName] for the ingest store
// ([dedup.Config.Delegated]): the event's insert and the outbox's, in the
// order of its parameters. Set it when Citus delegates the function to the
// sender's worker (docs/distributed.md).
func IngestFunction() *dedup.Delegated {
	return &dedup.Delegated{Function: IngestFunctionName, Rows: []dedup.DelegatedRow{events.InsertRow(), forward.OutboxRow()}}
}

// storeTimeout bounds the ingest transaction. The transaction is detached
// from the request's context, so a retry finds a clean outcome.
const storeTimeout = 15 * time.Second

// IngestWebhook accepts a delivery for sender. It answers 202 with the new
// event, the stored response with Idempotent-Replayed: true for a
// duplicate, or a problem. It counts the outcome in the metrics.
func (s *Server) IngestWebhook(w http.ResponseWriter, r *http.Request, sender string) {
	info := requestInfo(r.Context())
	info.sender = sender
	start := time.Now()
	label := "" // unknown names must not create unbounded label values
	var (
		outcome string
		err     error
	)
	if sd, ok := s.snapshot().Get(sender); ok {
		label = sender
		outcome, err = s.ingest(w, r, sd, info)
	} else {
		err = newProblem(probUnknownSender, fmt.Sprintf("No sender named %q is configured. Configured senders are listed in hookgate.yaml.", sender))
		closeUnread(w, r)
	}
	if err != nil {
		pe := writeProblem(w, err)
		outcome = outcomeFor(pe)
		info.err = pe
		if reason := shedReason(pe); reason != "" {
			s.shed.WithLabelValues(reason).Inc()
		}
	}
	info.outcome = outcome
	s.metrics.observe(label, outcome, info.eventTypeLabel, time.Since(start))
	if label != "" && outcome != outcomeURLVerification {
		s.traffic.Ingest(label, outcome)
	}
}

// CheckWebhookSubscription answers a provider's GET subscription check, as
// Meta sends ([sender.Sender.CheckSubscription]). It answers 200 with the
// challenge when the verify token matches, and 403 when it does not. It
// answers 400 for another request, 405 for a sender that gets no such
// check, and 404 for an unknown sender. Nothing is recorded.
func (s *Server) CheckWebhookSubscription(w http.ResponseWriter, r *http.Request, name string, _ api.CheckWebhookSubscriptionParams) {
	info := requestInfo(r.Context())
	info.sender = name
	start := time.Now()
	sd, ok := s.snapshot().Get(name)
	if !ok {
		info.err = writeProblem(w, newProblem(probUnknownSender, fmt.Sprintf("No sender named %q is configured. Configured senders are listed in hookgate.yaml.", name)))
		return
	}
	challenge, err := sd.CheckSubscription(r.URL.Query())
	switch {
	case errors.Is(err, sender.ErrNoSubscriptionCheck):
		w.Header().Set("Allow", http.MethodPost)
		err = newProblem(probMethodNotAllowed, fmt.Sprintf("Sender %q takes deliveries by POST; its preset sends no GET subscription check (only meta does).", name))
	case errors.Is(err, sender.ErrSubscriptionRequest):
		err = newProblem(probInvalidParameter, fmt.Sprintf("A subscription check has hub.mode=subscribe and a hub.challenge of 1 to %d bytes.", sender.MaxChallengeBytes))
	case errors.Is(err, sender.ErrVerifyToken):
		err = newProblem(probVerifyToken, fmt.Sprintf("hub.verify_token is not the verify_token of sender %q. Nothing was recorded.", name))
	}
	outcome := outcomeURLVerification
	if err != nil {
		pe := writeProblem(w, err)
		info.err, outcome = pe, outcomeFor(pe)
	} else {
		writeResponse(w, http.StatusOK, "text/plain; charset=utf-8", []byte(challenge))
	}
	info.outcome = outcome
	s.metrics.observe(name, outcome, "", time.Since(start))
}

// ingest answers one delivery for sender. It reads the body within the
// sender's limit and its share of the body budget. [sender.Sender.Prepare]
// turns the request into a delivery, record stores it, and ingest answers.
func (s *Server) ingest(w http.ResponseWriter, r *http.Request, sd *sender.Sender, info *reqInfo) (string, error) {
	gzipped, err := contentEncoding(w, r, sd)
	if err != nil {
		closeUnread(w, r)
		return "", err
	}
	// The body's bytes count against the budget of bodies, and its
	// client's share of it, until the request ends.
	hold := s.budget.hold(r.Context(), s.authLimit.ClientKey(r), w)
	defer hold.release()
	body, err := s.readBody(w, r, sd.MaxBodyBytes, hold)
	if err != nil {
		return "", err
	}
	var inflate func([]byte) ([]byte, error)
	if gzipped {
		inflate = func(b []byte) ([]byte, error) { return gunzip(b, sd.MaxBodyBytes, hold) }
	}
	now := s.now()
	p, err := sd.Prepare(r, body, inflate, now)
	if err != nil {
		return "", err
	}
	if p.Handshake {
		// A validly signed handshake is answered and leaves no trace.
		writeResponse(w, p.Reply.Status, p.Reply.ContentType, p.Reply.Body)
		return outcomeURLVerification, nil
	}
	info.deliveryID = p.DeliveryID
	info.eventType, info.eventTypeLabel = p.EventType, p.EventTypeLabel
	res, err := s.record(r.Context(), sd, &p, now)
	if err != nil {
		return "", err
	}
	outcome := outcomeAccepted
	if res.Replayed {
		w.Header().Set("Idempotent-Replayed", "true")
		outcome = outcomeReplayed
	}
	writeResponse(w, res.Response.Status, res.Response.ContentType, res.Response.Body)
	return outcome, nil
}

// record claims the delivery's key and stores its event and outbox rows in
// one transaction ([dedup.Store.Run]). A first delivery's forwards then go
// to the fast path.
func (s *Server) record(ctx context.Context, sd *sender.Sender, p *sender.Prepared, now time.Time) (dedup.Result, error) {
	receivedAt := now.UTC().Truncate(time.Microsecond) // PostgreSQL keeps microseconds
	eventID, err := uuid.NewV7()
	if err != nil {
		return dedup.Result{}, fmt.Errorf("new event id: %w", err)
	}
	d := idempotency.Delivery{
		Key:           idempotency.Key{Sender: sd.Name, DeliveryID: p.DeliveryID},
		RequestSHA256: p.BodySHA256,
		EventID:       eventID,
		Response: idempotency.Response{Status: http.StatusAccepted, ContentType: "application/json",
			Body: appendAccepted(make([]byte, 0, 160), eventID, sd.Name, p.DeliveryID, receivedAt)},
		ReceivedAt: receivedAt,
		ExpiresAt:  receivedAt.Add(time.Duration(sd.Retention)),
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
	defer cancel()
	if p.HasNonce {
		// The token is claimed in its own statement, before the delivery's
		// transaction. A token this same delivery claimed before goes on:
		// only the key decides what a duplicate is.
		fresh, err := s.tokens.Claim(ctx, sigtoken.Use{Sender: sd.Name, Token: p.Nonce.Token, SignedAt: p.Nonce.SignedAt,
			DeliveryID: p.DeliveryID, RequestSHA256: p.BodySHA256})
		if err != nil {
			return dedup.Result{}, err
		}
		if !fresh {
			return dedup.Result{}, newProblem(probSignature, "The request's signature token was used by another delivery (Mailgun signs its timestamp and token, not the event: a token is accepted for one delivery ID and body only). Nothing was recorded.")
		}
	}
	fast := s.fast != nil && len(p.Targets) > 0
	var lease forward.Lease
	if fast {
		lease = s.fast.Lease(sd.Sender, p.Targets, len(p.Body))
	}
	change := func(b *dedup.Batch) {
		events.QueueInsert(b, events.Event{ID: eventID, Sender: sd.Name, DeliveryID: p.DeliveryID, ReceivedAt: receivedAt,
			EventType: p.EventType, Headers: p.Header, Body: p.Body, RuleErrors: p.RuleErrors})
		forward.QueueOrderedOutbox(b, eventID, p.DeliveryID, receivedAt, p.Targets, p.OrderKeys, lease)
	}
	res, err := s.deliveries.Run(ctx, d, change)
	if err != nil {
		return dedup.Result{}, err
	}
	if !res.Replayed {
		// A filter that failed is counted once, with the event that
		// records it; a replay evaluated it again for nothing.
		for _, e := range p.RuleErrors {
			s.metrics.ruleErrors.Inc(sd.Name, e.Target, forward.RuleFilter)
		}
	}
	if fast && !res.Replayed {
		// Committed, with its outbox rows leased to this process. With a
		// zero lease they are the relay's, which Dispatch wakes.
		s.fast.Dispatch(&forward.Fast{Sender: sd.Sender, EventID: eventID, DeliveryID: p.DeliveryID, EventType: p.EventType,
			Headers: p.Header, Body: p.Body, Parsed: p.Parsed, Targets: p.Targets, OrderKeys: p.OrderKeys, Lease: lease, New: true})
	}
	return res, nil
}

// writeResponse writes a response whose body is known in full.
func writeResponse(w http.ResponseWriter, status int, contentType string, body []byte) {
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// appendAccepted appends the JSON body of a first delivery's 202 response
// and a newline. The bytes are those encoding/json would write.
func appendAccepted(dst []byte, eventID uuid.UUID, sender, deliveryID string, receivedAt time.Time) []byte {
	dst = append(dst, `{"event_id":"`...)
	var id [36]byte
	hex.Encode(id[0:8], eventID[0:4])
	id[8] = '-'
	hex.Encode(id[9:13], eventID[4:6])
	id[13] = '-'
	hex.Encode(id[14:18], eventID[6:8])
	id[18] = '-'
	hex.Encode(id[19:23], eventID[8:10])
	id[23] = '-'
	hex.Encode(id[24:], eventID[10:])
	dst = append(dst, id[:]...)
	dst = append(dst, `","sender":`...)
	dst = appendJSONString(dst, sender)
	dst = append(dst, `,"delivery_id":`...)
	dst = appendJSONString(dst, deliveryID)
	dst = append(dst, `,"received_at":"`...)
	dst = receivedAt.AppendFormat(dst, time.RFC3339Nano)
	return append(dst, "\"}\n"...)
}

// appendJSONString appends s, a sender name or a delivery ID, as
// encoding/json encodes it. It escapes quotes and backslashes, and <, > and
// & as \u003c, \u003e and \u0026. Other bytes go through encoding/json.
func appendJSONString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f {
			b, _ := json.Marshal(s) // a string always encodes
			return append(dst, b...)
		}
	}
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '<':
			dst = append(dst, `\u003c`...)
		case '>':
			dst = append(dst, `\u003e`...)
		case '&':
			dst = append(dst, `\u0026`...)
		default:
			dst = append(dst, c)
		}
	}
	return append(dst, '"')
}

// readBody reads the whole request body, refusing more than limit bytes. It
// holds room for the bytes in h as they arrive, at the minimum rate of
// bodies: a slower body is a 408 problem. On any error the answer is sent
// at once and the connection closed after it ([closeUnread]).
func (s *Server) readBody(w http.ResponseWriter, r *http.Request, limit int64, h *bodyHold) ([]byte, error) {
	body, err := s.readBodyBytes(w, r, limit, h)
	if err != nil {
		closeUnread(w, r)
	}
	return body, err
}

// closeUnread makes the answer to r, whose body was not read whole, close
// the connection. Otherwise net/http would read up to 256 KiB of the body
// before answering, for as long as the client takes. What is left may still
// arrive for [bodyDrain], so the client is not reset before it reads the
// answer.
func closeUnread(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength == 0 {
		return
	}
	w.Header().Set("Connection", "close")
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(bodyDrain))
}

// bodyDrain is how long the rest of a body answered early may still arrive
// before its connection is closed. Closing with unread bytes makes the
// kernel reset the connection, and the client can lose the answer.
const bodyDrain = time.Second

func (s *Server) readBodyBytes(w http.ResponseWriter, r *http.Request, limit int64, h *bodyHold) ([]byte, error) {
	// The problem is made only when needed: formatting it for every request
	// showed in the CPU profile.
	tooLarge := func() error {
		return newProblem(probTooLarge, fmt.Sprintf("The body exceeds this sender's limit of %d bytes. Nothing was recorded.", limit))
	}
	if r.ContentLength > limit {
		return nil, tooLarge()
	}
	if r.ContentLength == 0 {
		return []byte{}, nil
	}
	src := r.Body
	if r.ContentLength < 0 {
		src = http.MaxBytesReader(w, r.Body, limit)
	}
	p := s.pace(w)
	body, err := h.readAll(src, 0, r.ContentLength, limit, &p)
	h.read.Store(true)
	p.done()
	var (
		mbe *http.MaxBytesError
		pe  *problemError
	)
	switch {
	case err == nil:
		return body, nil
	case errors.As(err, &mbe):
		return nil, tooLarge()
	case errors.As(err, &pe):
		return nil, pe
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil, &problemError{typ: probBodyTimeout, detail: s.slowBodyDetail(), cause: err}
	default:
		return nil, &problemError{typ: probInvalidBody, detail: "The request body could not be read completely. Nothing was recorded.", cause: err}
	}
}

// pace returns the pace of a body read for w from now on. It does nothing
// without a minimum rate or a bound on pauses.
func (s *Server) pace(w http.ResponseWriter) bodyPace {
	if s.minRate == 0 && s.idleTimeout == 0 {
		return bodyPace{}
	}
	now := time.Now()
	return bodyPace{w: w, rate: s.minRate, grace: s.minRateGrace, idle: s.idleTimeout, start: now, end: now.Add(s.readTimeout)}
}

// slowBodyDetail is the detail of a 408 for a body that did not arrive in
// time.
func (s *Server) slowBodyDetail() string {
	var rules []string
	if s.idleTimeout > 0 {
		rules = append(rules, fmt.Sprintf("no byte of it may take more than %s to come", s.idleTimeout))
	}
	if s.minRate > 0 {
		rules = append(rules, fmt.Sprintf("after its first %s it must arrive at %d bytes per second or more on average", s.minRateGrace, s.minRate))
	}
	rules = append(rules, fmt.Sprintf("all of it must arrive within %s", s.readTimeout))
	return "The body did not arrive in time: " + strings.Join(rules, ", ") + ". Nothing was recorded; the connection is closed."
}
