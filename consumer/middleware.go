package consumer

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// DefaultMaxBodyBytes is the default of [MiddlewareConfig.MaxBodyBytes]. It
// is hookgate's own default limit for a delivery's body.
const DefaultMaxBodyBytes = 1 << 20

// Headers the middleware reads and writes.
const (
	// HeaderWebhookID carries the message ID of a Standard Webhooks
	// delivery; hookgate puts the event ID there.
	HeaderWebhookID = "Webhook-Id"
	// HeaderIdempotencyKey carries the message ID of an unsigned forward,
	// which has no webhook-id. hookgate puts the event ID there too.
	HeaderIdempotencyKey = "Idempotency-Key"
	// HeaderReplayed is set to "true" on a replayed response.
	HeaderReplayed = "Idempotent-Replayed"
)

// MiddlewareConfig configures [Middleware]. A field left at zero takes its
// documented default, which [DefaultMiddlewareConfig] spells out. This is a
// public library, so its zero value stays usable and compatible.
type MiddlewareConfig struct {
	// DB is the database that the state changes are applied to. It must
	// hold the package's table. Required.
	DB DB
	// Consumer names this service or handler. A message ID is processed at
	// most once per consumer name. Required.
	Consumer string
	// Secrets are the target's Standard Webhooks signing secrets, "whsec_"
	// followed by base64. hookgate's target configuration has one as
	// signing_secret. A request passes when its signature is valid under
	// any of them, so a secret can be rotated. Required unless Unsigned is
	// set.
	Secrets []string
	// Unsigned accepts requests without checking a signature, taking the
	// message ID from webhook-id or Idempotency-Key. Use it only where
	// nobody but hookgate can reach the service.
	Unsigned bool
	// MaxBodyBytes bounds a request's body; larger ones are answered 413.
	// Zero means [DefaultMaxBodyBytes], and a negative value is refused.
	MaxBodyBytes int64
	// InFlightWait is [Config.InFlightWait]. Zero means
	// [DefaultInFlightWait].
	InFlightWait time.Duration
	// Logger receives the errors answered 5xx, never a secret or a body.
	// Nil logs nothing.
	Logger *slog.Logger
}

// DefaultMiddlewareConfig returns the defaults of [Middleware]. The caller
// sets DB, Consumer and Secrets.
func DefaultMiddlewareConfig() MiddlewareConfig {
	return MiddlewareConfig{MaxBodyBytes: DefaultMaxBodyBytes, InFlightWait: DefaultInFlightWait}
}

type txKey struct{}

// Tx returns the transaction in which [Middleware] runs the current
// request's handler. The handler applies its state change on it. The change
// is committed with the message's key and the handler's response, or not at
// all. Tx returns nil outside such a handler.
func Tx(ctx context.Context) pgx.Tx {
	tx, _ := ctx.Value(txKey{}).(pgx.Tx)
	return tx
}

// Middleware returns an HTTP middleware for a service that receives
// hookgate's forwards. It works with net/http and chi. For each request it
// does the following:
//
//   - It reads the body, up to MaxBodyBytes or else 413. It verifies the
//     Standard Webhooks signature under any of Secrets, with a timestamp
//     within 5 minutes. A bad or missing signature gets 401 and records
//     nothing.
//   - It takes the message ID from webhook-id, or else Idempotency-Key. A
//     missing or invalid ID gets 400.
//   - It runs the next handler through [Process], in a transaction that
//     claimed the message ID. [Tx] gives the handler that transaction, and
//     the body is readable again. When the handler answers 2xx, its status,
//     Content-Type and body are stored and committed with its change, then
//     sent. Any other answer rolls everything back and is sent, so hookgate
//     retries, or gives up on a 4xx.
//   - It answers a message already processed with the stored status,
//     Content-Type and body, and Idempotent-Replayed: true. The handler is
//     not called.
//   - It answers 503 with Retry-After when another transaction holds the
//     message past the in-flight wait, or when the database fails. So
//     hookgate retries.
//
// It fails when cfg lacks DB or Consumer, or has no secret unless Unsigned.
// It also fails for a secret that is empty, malformed or shorter than
// [MinSecretBytes], even with Unsigned, since a given secret is meant to be
// checked. A negative MaxBodyBytes or InFlightWait fails too.
func Middleware(cfg MiddlewareConfig) (func(http.Handler) http.Handler, error) {
	if cfg.DB == nil {
		return nil, errors.New("consumer: MiddlewareConfig.DB is required")
	}
	if !validKey(cfg.Consumer) {
		return nil, errors.New("consumer: MiddlewareConfig.Consumer must be 1 to 255 bytes of UTF-8 without NUL")
	}
	var hooks []*standardwebhooks.Webhook
	for i, s := range cfg.Secrets {
		key, err := signingKey(s)
		if err != nil {
			return nil, fmt.Errorf("consumer: MiddlewareConfig.Secrets[%d] %w", i, err)
		}
		wh, err := standardwebhooks.NewWebhookRaw(key)
		if err != nil {
			return nil, fmt.Errorf("consumer: MiddlewareConfig.Secrets[%d]: %w", i, err)
		}
		hooks = append(hooks, wh)
	}
	if len(hooks) == 0 && !cfg.Unsigned {
		return nil, errors.New("consumer: MiddlewareConfig.Secrets is empty: give the target's signing secret, or set Unsigned")
	}
	if cfg.MaxBodyBytes < 0 {
		return nil, fmt.Errorf("consumer: MiddlewareConfig.MaxBodyBytes %d is negative", cfg.MaxBodyBytes)
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	p, err := New(cfg.DB, Config{InFlightWait: cfg.InFlightWait})
	if err != nil {
		return nil, err
	}
	m := &middleware{cfg: cfg, hooks: hooks, p: p}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { m.serve(w, r, next) })
	}, nil
}

// MinSecretBytes is the shortest signing key that [Middleware] accepts. A
// secret whose base64 after "whsec_" decodes to fewer bytes is refused. An
// empty one matters most, since anybody can sign with an empty HMAC key.
const MinSecretBytes = 16

// signingKey returns the HMAC key of a Standard Webhooks secret. The
// "whsec_" prefix is optional, as in the Standard Webhooks libraries. An
// error says what is wrong without repeating the secret.
func signingKey(secret string) ([]byte, error) {
	if strings.TrimSpace(secret) == "" {
		return nil, errors.New("is empty (is the environment variable it is read from set?): give the target's signing_secret, whsec_ and base64")
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return nil, errors.New("is not a Standard Webhooks secret (whsec_ and base64)")
	}
	if len(key) < MinSecretBytes {
		return nil, fmt.Errorf("decodes to a %d-byte key: a signing secret needs at least %d bytes (for example whsec_ and the output of openssl rand -base64 24)", len(key), MinSecretBytes)
	}
	return key, nil
}

type middleware struct {
	cfg   MiddlewareConfig
	hooks []*standardwebhooks.Webhook
	p     *Processor
}

// errNotStored makes Process roll back when the handler did not answer 2xx,
// or its answer is too large to store.
var errNotStored = errors.New("consumer: the handler did not answer 2xx")

func (m *middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, m.cfg.MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			problem(w, http.StatusRequestEntityTooLarge, "Body too large", fmt.Sprintf("The body is over %d bytes.", m.cfg.MaxBodyBytes))
			return
		}
		problem(w, http.StatusBadRequest, "Unreadable body", "The request body could not be read.")
		return
	}
	if !m.verified(body, r.Header) {
		problem(w, http.StatusUnauthorized, "Invalid signature",
			"The webhook-signature is missing, not valid under the target's signing secret, or its webhook-timestamp is not within 5 minutes.")
		return
	}
	id := r.Header.Get(HeaderWebhookID)
	if id == "" {
		id = r.Header.Get(HeaderIdempotencyKey)
	}
	if !validKey(id) {
		problem(w, http.StatusBadRequest, "Invalid message ID",
			"The request needs a webhook-id (or Idempotency-Key) header of 1 to 255 bytes of UTF-8 without NUL.")
		return
	}

	var rec *recorder
	res, err := m.p.Process(r.Context(), m.cfg.Consumer, id, func(ctx context.Context, tx pgx.Tx) (Response, error) {
		rec = newRecorder()
		req := r.WithContext(context.WithValue(ctx, txKey{}, tx))
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.ContentLength = int64(len(body))
		next.ServeHTTP(rec, req)
		if rec.status < 200 || rec.status > 299 || rec.overflow {
			return Response{}, errNotStored
		}
		return Response{Status: rec.status, ContentType: rec.header.Get("Content-Type"), Body: rec.body.Bytes()}, nil
	})
	switch {
	case err == nil && res.Duplicate:
		h := w.Header()
		if res.Response.ContentType != "" {
			h.Set("Content-Type", res.Response.ContentType)
		}
		h.Set(HeaderReplayed, "true")
		h.Set("Content-Length", strconv.Itoa(len(res.Response.Body)))
		w.WriteHeader(res.Response.Status)
		_, _ = w.Write(res.Response.Body)
	case err == nil:
		rec.replay(w) // committed: the handler's answer, its headers included
	case errors.Is(err, errNotStored) && rec.overflow:
		m.log(r, "the handler's response body is over MaxResponseBytes: rolled back", nil)
		problem(w, http.StatusInternalServerError, "Response too large", "The handler's response could not be stored.")
	case errors.Is(err, errNotStored):
		rec.replay(w) // rolled back: the handler's non-2xx answer
	case errors.Is(err, ErrInFlight):
		w.Header().Set("Retry-After", "1")
		problem(w, http.StatusServiceUnavailable, "Message in flight", "The message is being processed by another request. Retry later.")
	default:
		m.log(r, "processing the message failed", err)
		w.Header().Set("Retry-After", "1")
		problem(w, http.StatusServiceUnavailable, "Processing failed", "The message could not be processed. Retry later.")
	}
}

// verified reports whether body and h carry a valid Standard Webhooks
// signature under one of the secrets. It is always true when Unsigned.
func (m *middleware) verified(body []byte, h http.Header) bool {
	if m.cfg.Unsigned {
		return true
	}
	for _, wh := range m.hooks {
		if wh.Verify(body, h) == nil {
			return true
		}
	}
	return false
}

func (m *middleware) log(r *http.Request, msg string, err error) {
	if m.cfg.Logger == nil {
		return
	}
	attrs := []any{"consumer", m.cfg.Consumer, "method", r.Method, "path", r.URL.Path}
	if err != nil {
		attrs = append(attrs, "error", err.Error())
	}
	m.cfg.Logger.ErrorContext(r.Context(), msg, attrs...)
}

// problem writes an RFC 9457 problem+json answer.
func problem(w http.ResponseWriter, status int, title, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"type":"about:blank","title":%q,"status":%d,"detail":%q}`, title, status, detail)
}

// recorder buffers a handler's answer until the transaction's outcome is
// known.
type recorder struct {
	header   http.Header
	status   int
	body     bytes.Buffer
	overflow bool // the body passed MaxResponseBytes
}

func newRecorder() *recorder { return &recorder{header: http.Header{}} }

func (rec *recorder) Header() http.Header { return rec.header }

func (rec *recorder) WriteHeader(status int) {
	if rec.status == 0 {
		rec.status = status
	}
}

func (rec *recorder) Write(p []byte) (int, error) {
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	if rec.body.Len()+len(p) > MaxResponseBytes {
		rec.overflow = true
		return 0, ErrResponseTooLarge
	}
	return rec.body.Write(p)
}

// replay writes the recorded answer to w.
func (rec *recorder) replay(w http.ResponseWriter) {
	h := w.Header()
	for k, v := range rec.header {
		h[k] = v
	}
	status := rec.status
	if status == 0 {
		status = http.StatusOK
	}
	w.WriteHeader(status)
	_, _ = w.Write(rec.body.Bytes())
}
