package handler

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/hookgate/hookgate/internal/dedup"
	"github.com/hookgate/hookgate/internal/sender"
)

// problemType is one kind of error response: its status, RFC 9457 type and
// title, and the Retry-After it carries (0 for none).
type problemType struct {
	status     int
	slug       string
	title      string
	retryAfter int
}

// The problem types hookgate answers with. This table, with classify, is the
// one place where errors become statuses.
var (
	probInvalidDeliveryID   = problemType{http.StatusBadRequest, "invalid-delivery-id", "Missing or invalid delivery ID", 0}
	probInvalidBody         = problemType{http.StatusBadRequest, "invalid-body", "Request body could not be read", 0}
	probSignature           = problemType{http.StatusUnauthorized, "invalid-signature", "Signature verification failed", 0}
	probUnknownSender       = problemType{http.StatusNotFound, "unknown-sender", "Unknown sender", 0}
	probVerifyToken         = problemType{http.StatusForbidden, "invalid-verify-token", "Verify token does not match", 0}
	probNotFound            = problemType{http.StatusNotFound, "not-found", "Not found", 0}
	probMethodNotAllowed    = problemType{http.StatusMethodNotAllowed, "method-not-allowed", "Method not allowed", 0}
	probInvalidParameter    = problemType{http.StatusBadRequest, "invalid-parameter", "Invalid parameter", 0}
	probUnauthorized        = problemType{http.StatusUnauthorized, "unauthorized", "Unauthorized", 0}
	probOperatorDisabled    = problemType{http.StatusForbidden, "operator-disabled", "Operator API disabled", 0}
	probScopeMissing        = problemType{http.StatusForbidden, "scope-missing", "Token lacks the scope", 0}
	probTooManyAttempts     = problemType{http.StatusTooManyRequests, "too-many-attempts", "Too many failed authentication attempts", 1}
	probNoTargets           = problemType{http.StatusConflict, "no-targets", "No forward targets", 0}
	probInFlight            = problemType{http.StatusConflict, "in-flight", "Delivery is still being processed", 1}
	probNotBlocked          = problemType{http.StatusConflict, "not-blocked", "Forward does not block its key", 0}
	probTooLarge            = problemType{http.StatusRequestEntityTooLarge, "payload-too-large", "Request body too large", 0}
	probBodyTimeout         = problemType{http.StatusRequestTimeout, "request-timeout", "Request body not received in time", 0}
	probUnsupportedEncoding = problemType{http.StatusUnsupportedMediaType, "unsupported-encoding", "Unsupported Content-Encoding", 0}
	probMismatch            = problemType{http.StatusUnprocessableEntity, "payload-mismatch", "Delivery ID reused with a different body", 0}
	probConfigRefused       = problemType{http.StatusUnprocessableEntity, "config-refused", "Configuration refused", 0}
	probUnavailable         = problemType{http.StatusServiceUnavailable, "unavailable", "Service unavailable", 5}
	probOverloaded          = problemType{http.StatusServiceUnavailable, "overloaded", "Too many deliveries waiting", 2}
	probInternal            = problemType{http.StatusInternalServerError, "internal", "Internal error", 5}
)

// problemError is an error with the problem type and the client-facing
// detail it becomes. Its cause, if any, is logged and never sent.
type problemError struct {
	typ    problemType
	detail string
	cause  error
}

func (e *problemError) Error() string {
	if e.cause != nil {
		return e.typ.slug + ": " + e.detail + ": " + e.cause.Error()
	}
	return e.typ.slug + ": " + e.detail
}

func (e *problemError) Unwrap() error { return e.cause }

func newProblem(t problemType, detail string) *problemError {
	return &problemError{typ: t, detail: detail}
}

// classify maps any error to the problem it is answered with: a
// problemError as it is; the known dedup outcomes (mismatch 422, in flight
// 409); a transient failure (the database unreachable, the connection lost,
// a timeout, a serialization failure: dedup.Transient) 503 "retry later";
// and every other error — an invariant violation, another constraint's
// violation, a bug — 500, which the request log records with its cause. The
// internal text never reaches the client.
func classify(err error) *problemError {
	var (
		pe  *problemError
		se  *sender.SignatureError
		ide *sender.DeliveryIDError
	)
	switch {
	case errors.As(err, &pe):
		return pe
	case errors.As(err, &se):
		return &problemError{typ: probSignature, detail: "The request's signature could not be verified (" + se.Err.Error() + "). Nothing was recorded.", cause: se.Err}
	case errors.As(err, &ide):
		return newProblem(probInvalidDeliveryID, ide.Detail)
	case errors.Is(err, dedup.ErrPayloadMismatch):
		return &problemError{typ: probMismatch, detail: "This delivery ID was already accepted with a different body (its SHA-256 differs). Nothing was changed; send a new delivery ID for a new message.", cause: err}
	case errors.Is(err, dedup.ErrOverloaded):
		return &problemError{typ: probOverloaded, detail: "The database cannot take this delivery in time; nothing was recorded. Retry after the time in Retry-After.", cause: err}
	case errors.Is(err, dedup.ErrInFlight):
		return &problemError{typ: probInFlight, detail: "Another request with this delivery ID is still being processed. Retry after the time in Retry-After.", cause: err}
	case errors.Is(err, dedup.ErrOutcomeUnknown):
		return &problemError{typ: probUnavailable, detail: "The database did not confirm the delivery, which may have been stored. Retry with the same delivery ID: a stored delivery is answered with its stored response, one that was not is stored then.", cause: err}
	case dedup.Transient(err):
		return &problemError{typ: probUnavailable, detail: "The delivery could not be stored and nothing was recorded. Retry later.", cause: err}
	default:
		return &problemError{typ: probInternal, detail: "An unexpected error occurred and nothing was recorded.", cause: err}
	}
}

// problemBody is the RFC 9457 problem details document.
type problemBody struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
}

// writeProblem writes err as application/problem+json.
func writeProblem(w http.ResponseWriter, err error) *problemError {
	pe := classify(err)
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	if pe.typ.retryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(pe.typ.retryAfter))
	}
	w.WriteHeader(pe.typ.status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // details quote header formats such as sha256=<hex>
	_ = enc.Encode(problemBody{
		Type:   "urn:hookgate:problem:" + pe.typ.slug,
		Title:  pe.typ.title,
		Status: pe.typ.status,
		Detail: pe.detail,
	})
	return pe
}
