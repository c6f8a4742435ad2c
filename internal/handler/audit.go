package handler

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5/middleware"
	"github.com/google/uuid"

	"github.com/hookgate/hookgate/api"
	"github.com/hookgate/hookgate/internal/access"
	"github.com/hookgate/hookgate/internal/store"
)

// The audit trail: every request of a checked token that may change
// something (any method but GET and HEAD under /v1) is recorded in
// audit_log after it is answered, with its token's name, its client's
// address, the action its path names, and its outcome: whether it was
// carried out, refused (403 for a read token, any other 4xx) or failed
// (5xx). The record is written before the answer leaves, so a client that
// got its answer finds the row in GET /v1/audit.

// auditWrite bounds the write of one audit row.
const auditWrite = 5 * time.Second

// audited wraps w to see the status of a changing request of caller, and
// returns the wrapped writer and the function that records the request
// once it is answered.
func (s *Server) audited(w http.ResponseWriter, r *http.Request, caller access.Caller) (http.ResponseWriter, func()) {
	ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
	return ww, func() {
		status := ww.Status()
		if status == 0 {
			status = http.StatusOK
		}
		info := requestInfo(r.Context())
		e := pathAudit(r.URL.Path)
		e.Token = caller.Name
		if a := s.authLimit.ClientOf(r); a.IsValid() {
			e.Client = a.String()
		}
		if e.DeliveryID == "" {
			e.DeliveryID = info.deliveryID
		}
		if e.Sender == "" {
			e.Sender = info.sender
		}
		e.Details = info.audit
		if e.Action == store.ActionOther {
			if e.Details == nil {
				e.Details = map[string]any{}
			}
			e.Details["method"], e.Details["path"] = r.Method, r.URL.Path
		}
		e.Outcome, e.Detail = outcome(status, info.err)
		s.recordAudit(r.Context(), e)
	}
}

// outcome is the audit trail's outcome of a request answered status, with
// the problem err (nil for none): its problem type, never its detail.
func outcome(status int, err *problemError) (string, string) {
	word := ""
	if err != nil {
		word = err.typ.slug
	} else if status >= 400 {
		word = strconv.Itoa(status)
	}
	switch {
	case status >= 500:
		return store.OutcomeError, word
	case status >= 400:
		return store.OutcomeRefused, word
	}
	return store.OutcomeOK, word
}

// recordAudit writes e, logging a failure: the action is done, and only its
// record is missing.
func (s *Server) recordAudit(ctx context.Context, e store.AuditEntry) {
	if s.q == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), auditWrite)
	defer cancel()
	if err := s.q.RecordAudit(ctx, e); err != nil {
		s.log.Error("audit trail: an operator action could not be recorded", "action", e.Action, "token", e.Token, "err", err)
	}
}

// pathAudit returns the action of a changing request to path under /v1,
// and what it concerns.
func pathAudit(path string) store.AuditEntry {
	seg := strings.Split(strings.TrimPrefix(path, operatorPrefix+"/"), "/")
	switch {
	case len(seg) == 3 && seg[0] == "events" && seg[2] == "redeliver":
		e := store.AuditEntry{Action: store.ActionRedeliver}
		if id, err := uuid.Parse(seg[1]); err == nil {
			e.EventID = id
		}
		return e
	case len(seg) == 5 && seg[0] == "senders" && seg[2] == "targets":
		e := store.AuditEntry{Sender: seg[1], Target: seg[3]}
		switch seg[4] {
		case "redeliver":
			e.Action = store.ActionRedeliverBulk
		case "pause":
			e.Action = store.ActionPause
		case "resume":
			e.Action = store.ActionResume
		default:
			e.Action = store.ActionOther
		}
		return e
	case len(seg) == 7 && seg[0] == "senders" && seg[2] == "targets" && seg[4] == "forwards" && seg[6] == "skip":
		e := store.AuditEntry{Action: store.ActionSkip, Sender: seg[1], Target: seg[3]}
		if id, err := uuid.Parse(seg[5]); err == nil {
			e.EventID = id
		}
		return e
	case len(seg) == 2 && seg[0] == "config" && seg[1] == "reload":
		return store.AuditEntry{Action: store.ActionReload}
	}
	return store.AuditEntry{Action: store.ActionOther}
}

// ReloadAudit is the audit trail's record of a reload by name ("signal",
// "watch", or a token's) that gave res and err: the hashes and whether it
// changed anything, or that it was refused (a file that failed a check).
func ReloadAudit(name string, res ConfigReload, err error) store.AuditEntry {
	e := store.AuditEntry{Token: name, Action: store.ActionReload, Outcome: store.OutcomeOK,
		Details: map[string]any{"hash": res.To.Hash, "previous_hash": res.From.Hash, "changed": res.To != res.From}}
	if err != nil {
		e.Outcome, e.Detail = store.OutcomeRefused, probConfigRefused.slug
	}
	return e
}

// auditItem shows e in the API.
func auditItem(e store.AuditEntry) api.AuditEntry {
	out := api.AuditEntry{Id: e.ID, At: e.At.UTC(), Token: e.Token, Action: e.Action, Outcome: api.AuditEntryOutcome(e.Outcome)}
	opt := func(v string) *string {
		if v == "" {
			return nil
		}
		return &v
	}
	out.Client, out.Sender, out.Target, out.DeliveryId, out.Detail = opt(e.Client), opt(e.Sender), opt(e.Target), opt(e.DeliveryID), opt(e.Detail)
	if e.EventID != uuid.Nil {
		id := e.EventID
		out.EventId = &id
	}
	if e.Details != nil {
		d := e.Details
		out.Details = &d
	}
	return out
}

// ListAudit answers a page of the audit trail, newest first, only the rows of
// an action or a token when asked: 400 for a limit outside 1..500 or a
// cursor this API did not return.
func (s *Server) ListAudit(w http.ResponseWriter, r *http.Request, params api.ListAuditParams) {
	limit, err := pageLimit(r, params.Limit)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var f store.AuditFilter
	if params.Action != nil {
		f.Action = *params.Action
	}
	if params.Token != nil {
		f.Token = *params.Token
	}
	var after string
	if params.Cursor != nil {
		if _, err := store.ParseAuditCursor(*params.Cursor); err != nil {
			s.fail(w, r, badCursor(err))
			return
		}
		after = *params.Cursor
	}
	if s.q == nil {
		s.fail(w, r, dbProblem(errNoDB))
		return
	}
	page, err := s.q.ListAudit(r.Context(), f, limit, after)
	if err != nil {
		s.fail(w, r, dbProblem(err))
		return
	}
	out := api.AuditPage{Items: make([]api.AuditEntry, 0, len(page.Entries))}
	for _, e := range page.Entries {
		out.Items = append(out.Items, auditItem(e))
	}
	if page.Next != "" {
		out.NextCursor = &page.Next
	}
	writeJSON(w, http.StatusOK, out)
}
