package handler

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5/middleware"
	"github.com/google/uuid"

	"github.com/hookgate/hookgate/internal/access"
)

// maxClientRequestIDBytes caps the client's X-Request-Id as logged.
const maxClientRequestIDBytes = 64

// assignRequestID gives every request an ID of hookgate's own (a random
// UUID), kept in the request's reqInfo (requestInfo(ctx).id) and sent back in
// X-Request-Id. A client's X-Request-Id is never taken as the request ID, so
// a client cannot forge the correlation of log lines; logRequests logs it
// apart, as client_request_id. The reqInfo is the one logRequests logs and
// the handlers fill in: one context value per request, not one per
// middleware (each costs a copy of the request, seen in make bench's
// profile).
func assignRequestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		info := &reqInfo{id: uuid.NewString()}
		w.Header().Set("X-Request-Id", info.id)
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), reqInfoKey{}, info)))
	})
}

// clientRequestID returns the request's first X-Request-Id cut to
// maxClientRequestIDBytes, with bytes outside visible ASCII replaced by
// '?'; "" when there is none.
func clientRequestID(r *http.Request) string {
	v := r.Header.Get("X-Request-Id")
	if len(v) > maxClientRequestIDBytes {
		v = v[:maxClientRequestIDBytes]
	}
	return strings.Map(func(c rune) rune {
		if c < 0x21 || c > 0x7e {
			return '?'
		}
		return c
	}, v)
}

// reqInfo collects what a handler learned about a request, for its log line.
type reqInfo struct {
	id         string // the request ID (assignRequestID)
	sender     string
	deliveryID string
	// eventType is the delivery's event type (logged when not empty);
	// eventTypeLabel its value as a metric label, "" when the delivery was
	// refused before its event type was read.
	eventType      string
	eventTypeLabel string
	outcome        string
	// caller is the name of the operator API's checked token (never its
	// value), logged as token.
	caller string
	// audit holds a few facts of an operator's action for its row of the
	// audit trail (store.AuditEntry.Details); nil for none.
	audit map[string]any
	err   *problemError
}

type reqInfoKey struct{}

// NoteCaller keeps the name of the caller the console checked, for the
// log line (access.Noter).
func (ri *reqInfo) NoteCaller(c access.Caller) { ri.caller = c.Name }

// noteCallers lets the console's session check name the caller in the
// request's log line.
func noteCallers(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r.WithContext(access.WithNoter(r.Context(), requestInfo(r.Context()))))
	})
}

// requestInfo returns the request's reqInfo; a throwaway one when the request
// did not pass through assignRequestID (so handlers never check for nil).
func requestInfo(ctx context.Context) *reqInfo {
	if ri, ok := ctx.Value(reqInfoKey{}).(*reqInfo); ok {
		return ri
	}
	return &reqInfo{}
}

// logRequests writes one structured line per request: request id (and the
// client's X-Request-Id, if any, as client_request_id), method, path,
// status, duration, the name of the operator's token (never its value),
// and for ingest the sender, delivery ID, event type (when
// not empty) and outcome.
// 5xx lines are errors and carry the cause; bodies and secrets never appear.
func (s *Server) logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		info := requestInfo(r.Context())
		ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		next.ServeHTTP(ww, r)
		status := ww.Status()
		if status == 0 {
			status = http.StatusOK
		}
		attrs := []slog.Attr{
			slog.String("request_id", info.id),
			slog.String("method", r.Method),
			slog.String("path", r.URL.Path),
			slog.Int("status", status),
			slog.Duration("duration", time.Since(start)),
		}
		if id := clientRequestID(r); id != "" {
			attrs = append(attrs, slog.String("client_request_id", id))
		}
		if info.caller != "" {
			attrs = append(attrs, slog.String("token", info.caller))
		}
		if info.sender != "" {
			attrs = append(attrs, slog.String("sender", info.sender))
		}
		if info.deliveryID != "" {
			attrs = append(attrs, slog.String("delivery_id", info.deliveryID))
		}
		if info.eventType != "" {
			attrs = append(attrs, slog.String("event_type", info.eventType))
		}
		if info.outcome != "" {
			attrs = append(attrs, slog.String("outcome", info.outcome))
		}
		level := slog.LevelInfo
		if status >= 500 {
			level = slog.LevelError
			if info.err != nil && info.err.cause != nil {
				attrs = append(attrs, slog.String("err", info.err.cause.Error()))
			}
		}
		logRecord(r.Context(), s.log, level, "request", attrs)
	})
}

// logRecord logs msg with attrs at level, as [slog.Logger.LogAttrs] does
// but without the caller's program counter: LogAttrs takes it with
// runtime.Callers for every record, which hookgate's handlers never print
// (no AddSource), and which cost up to 2 µs of a delivery's CPU in make
// bench's profile, one line per request.
func logRecord(ctx context.Context, log *slog.Logger, level slog.Level, msg string, attrs []slog.Attr) {
	h := log.Handler()
	if !h.Enabled(ctx, level) {
		return
	}
	rec := slog.NewRecord(time.Now(), level, msg, 0)
	rec.AddAttrs(attrs...)
	_ = h.Handle(ctx, rec)
}

// recoverPanics turns a panic in a handler into a 500 problem and logs it.
func (s *Server) recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if err, ok := v.(error); ok && errors.Is(err, http.ErrAbortHandler) {
					panic(v)
				}
				s.log.Error("panic", "request_id", requestInfo(r.Context()).id, "panic", v)
				_ = writeProblem(w, newProblem(probInternal, "An unexpected error occurred. Nothing was recorded; retry later."))
			}
		}()
		next.ServeHTTP(w, r)
	})
}
