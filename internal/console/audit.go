package console

import (
	"github.com/google/uuid"

	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5/middleware"

	"github.com/hookgate/hookgate/internal/access"
	"github.com/hookgate/hookgate/internal/store"
)

// The audit page lists the audit trail, newest first, and this file
// records the console's operator actions in it: each sign-in, and every
// POST of a session (sign-out, redelivery, pause, resume), carried out or
// refused, after it is answered.

// auditPageSize is how many rows the audit page shows at once.
const auditPageSize = 100

// auditView is the audit page's data.
type auditView struct {
	Action, Token string
	Entries       []store.AuditEntry
	Next          string // the address of the next page, "" on the last
}

// audit shows a page of the audit trail, only the rows of an action or a
// token when asked (?action=, ?token=).
func (c *Console) audit(w http.ResponseWriter, r *http.Request) {
	qv := r.URL.Query()
	f := store.AuditFilter{Action: strings.TrimSpace(qv.Get("action")), Token: strings.TrimSpace(qv.Get("token"))}
	view := auditView{Action: f.Action, Token: f.Token}
	cursor := qv.Get("cursor")
	if cursor != "" {
		if _, err := store.ParseAuditCursor(cursor); err != nil {
			c.render(w, r, http.StatusBadRequest, "audit", page{Title: "Audit trail", Message: "This page's cursor is not one the console made. Start from the first page.", Data: view})
			return
		}
	}
	p, err := c.q.ListAudit(r.Context(), f, auditPageSize, cursor)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	view.Entries = p.Entries
	if p.Next != "" {
		next := url.Values{"cursor": {p.Next}}
		if f.Action != "" {
			next.Set("action", f.Action)
		}
		if f.Token != "" {
			next.Set("token", f.Token)
		}
		view.Next = Prefix + "/audit?" + next.Encode()
	}
	c.render(w, r, http.StatusOK, "audit", page{Title: "Audit trail", Data: view})
}

// audited records the POST r of the session s once next answered it.
func (c *Console) audited(w http.ResponseWriter, r *http.Request, s session, next func(w http.ResponseWriter, r *http.Request)) {
	ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
	next(ww, r)
	status := ww.Status()
	if status == 0 {
		status = http.StatusOK
	}
	e := c.postAudit(r)
	e.Token = s.caller.Name
	switch {
	case status >= 500:
		e.Outcome, e.Detail = store.OutcomeError, strconv.Itoa(status)
	case status >= 400:
		e.Outcome, e.Detail = store.OutcomeRefused, strconv.Itoa(status)
		if status == http.StatusForbidden && !s.canChange() {
			e.Detail = "scope-missing"
		}
	default:
		e.Outcome = store.OutcomeOK
	}
	c.record(r, e)
}

// postAudit returns the action of a console POST, what it concerns and the
// client's address.
func (c *Console) postAudit(r *http.Request) store.AuditEntry {
	e := store.AuditEntry{Sender: param(r, "sender"), Target: param(r, "target")}
	if a := c.opts.Limiter.ClientOf(r); a.IsValid() {
		e.Client = a.String()
	}
	path := strings.TrimPrefix(r.URL.Path, Prefix)
	switch {
	case path == "/logout":
		e.Action = store.ActionSignOut
	case path == "/logout-everywhere":
		e.Action = store.ActionSignOutAll
	case strings.HasSuffix(path, "/redeliver") && e.Target != "":
		e.Action = store.ActionRedeliverBulk
	case strings.HasSuffix(path, "/redeliver"):
		e.Action, e.DeliveryID = store.ActionRedeliver, deliveryID(r)
	case strings.HasSuffix(path, "/pause") && e.Target != "":
		e.Action = store.ActionPause
		if reason := r.PostFormValue("reason"); reason != "" {
			e.Details = map[string]any{"reason": reason}
		}
	case strings.HasSuffix(path, "/resume") && e.Target != "":
		e.Action = store.ActionResume
	case strings.HasSuffix(path, "/skip") && e.Target != "":
		e.Action = store.ActionSkip
		if id, err := uuid.Parse(r.PostFormValue("event_id")); err == nil {
			e.EventID = id
		}
	default:
		e.Action = store.ActionOther
		e.Details = map[string]any{"method": r.Method, "path": r.URL.Path}
	}
	return e
}

// signedIn records the sign-in of caller by r.
func (c *Console) signedIn(r *http.Request, caller access.Caller) {
	e := store.AuditEntry{Token: caller.Name, Action: store.ActionSignIn, Outcome: store.OutcomeOK}
	if a := c.opts.Limiter.ClientOf(r); a.IsValid() {
		e.Client = a.String()
	}
	c.record(r, e)
}

// record writes e, logging a failure: the action is done, and only its
// record is missing.
func (c *Console) record(r *http.Request, e store.AuditEntry) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 5*time.Second)
	defer cancel()
	if err := c.q.RecordAudit(ctx, e); err != nil {
		c.log.Error("console: audit trail: an operator action could not be recorded", "action", e.Action, "token", e.Token, "err", err)
	}
}
