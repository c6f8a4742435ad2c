package handler

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/hookgate/hookgate/api"
	"github.com/hookgate/hookgate/internal/access"
	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/forward"
	"github.com/hookgate/hookgate/internal/queue"
	"github.com/hookgate/hookgate/internal/store"
)

// Pausing and resuming a target: the operator's pause is a row of
// paused_targets (package store), which every process reads about once a
// second (forward.Pauses) and holds the target's forwards by.

// maxPauseBody bounds the body of a pause request.
const maxPauseBody = 4 << 10

// PauseTarget pauses a target until it is resumed, or until the body's
// until, for the body's reason (the body is optional), and answers 200
// with the pause: 404 for an unknown sender or target, 400 for a body
// that is not a valid request, a reason too long or with a control
// character, or an until that is not in the future.
func (s *Server) PauseTarget(w http.ResponseWriter, r *http.Request, sender api.Sender, target api.Target) {
	if _, _, err := s.target(sender, target); err != nil {
		s.fail(w, r, err)
		return
	}
	var req api.PauseRequest
	body, err := io.ReadAll(io.LimitReader(r.Body, maxPauseBody+1))
	if err == nil && len(body) > maxPauseBody {
		err = errPauseBodyTooLarge
	}
	if err == nil && len(bytes.TrimSpace(body)) > 0 {
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		err = dec.Decode(&req)
	}
	if err != nil {
		s.fail(w, r, &problemError{typ: probInvalidParameter, cause: err,
			detail: `The request body must be empty or a JSON object {"reason": text, "until": RFC 3339 time} (both optional), with no other members.`})
		return
	}
	p := store.TargetPause{Sender: sender, Target: target, By: store.PausedBy(access.Name(r.Context()), "operator API", s.authLimit.ClientOf(r))}
	if req.Reason != nil {
		p.Reason = *req.Reason
	}
	if req.Until != nil {
		p.Until = *req.Until
	}
	if why := store.CheckPause(p.Reason, p.Until, s.now()); why != "" {
		s.fail(w, r, newProblem(probInvalidParameter, "The pause's "+why+"."))
		return
	}
	if s.q == nil {
		s.fail(w, r, dbProblem(errNoDB))
		return
	}
	p, err = s.q.PauseTarget(r.Context(), p)
	if err != nil {
		s.fail(w, r, dbProblem(err))
		return
	}
	if s.pauses != nil {
		s.pauses.Poke()
	}
	s.log.Info("target paused by an operator", "sender", sender, "target", target, "until", p.Until, "reason", p.Reason, "by", p.By)
	requestInfo(r.Context()).audit = PauseAudit(p)
	writeJSON(w, http.StatusOK, pauseState(p, true))
}

// PauseAudit is what the audit trail keeps of pause p: its reason and
// end, when it has them; nil for neither.
func PauseAudit(p store.TargetPause) map[string]any {
	d := map[string]any{}
	if p.Reason != "" {
		d["reason"] = p.Reason
	}
	if !p.Until.IsZero() {
		d["until"] = p.Until.UTC()
	}
	if len(d) == 0 {
		return nil
	}
	return d
}

// errPauseBodyTooLarge is the cause (logged, never sent) of a 400 for a
// pause request's body over maxPauseBody.
var errPauseBodyTooLarge = errors.New("pause request body over 4 KiB")

// ResumeTarget ends a target's pause, if any, and answers 200 saying it is
// not paused: 404 for an unknown sender or target.
func (s *Server) ResumeTarget(w http.ResponseWriter, r *http.Request, sender api.Sender, target api.Target) {
	if _, _, err := s.target(sender, target); err != nil {
		s.fail(w, r, err)
		return
	}
	if s.q == nil {
		s.fail(w, r, dbProblem(errNoDB))
		return
	}
	p, was, err := s.q.ResumeTarget(r.Context(), sender, target)
	if err != nil {
		s.fail(w, r, dbProblem(err))
		return
	}
	if s.pauses != nil {
		s.pauses.Poke()
	}
	if was {
		s.log.Info("target resumed by an operator", "sender", sender, "target", target, "paused_since", p.Since, "reason", p.Reason,
			"by", store.PausedBy(access.Name(r.Context()), "operator API", s.authLimit.ClientOf(r)))
	}
	writeJSON(w, http.StatusOK, pauseState(store.TargetPause{Sender: sender, Target: target}, false))
}

// pauseState is the answer of a pause (paused: p) or a resume.
func pauseState(p store.TargetPause, paused bool) api.TargetPause {
	out := api.TargetPause{Sender: p.Sender, Target: p.Target, Paused: paused}
	if paused {
		op := operatorPause(p)
		out.Since, out.Until, out.Reason, out.By = &op.Since, op.Until, &op.Reason, &op.By
	}
	return out
}

// operatorPause shows p in the API.
func operatorPause(p store.TargetPause) api.OperatorPause {
	out := api.OperatorPause{Since: p.Since.UTC(), Reason: p.Reason, By: p.By}
	if !p.Until.IsZero() {
		u := p.Until.UTC()
		out.Until = &u
	}
	return out
}

// shownPause is sender's target's pause in the target list: nil unless one
// holds at now.
func shownPause(pauses map[string]store.TargetPause, target string, now time.Time) *api.OperatorPause {
	p := forward.ActivePause(pauses, target, now)
	if p == nil {
		return nil
	}
	op := operatorPause(*p)
	return &op
}

// holds are what may hold a sender's forwards now: its targets' breakers
// and operators' pauses (forward.Held).
type holds struct {
	breakers map[string]store.BreakerState
	pauses   map[string]store.TargetPause
	now      time.Time
	// sender is the sender's configuration (nil when it is not
	// configured): its targets' rates hold their forwards too.
	sender *config.Sender
}

// readHolds reads what may hold sender's forwards.
func (s *Server) readHolds(ctx context.Context, sender string) (holds, error) {
	h := holds{now: s.now()}
	h.sender, _ = s.snapshot().Config().Sender(sender)
	var err error
	if h.breakers, err = s.q.Breakers(ctx, sender); err != nil {
		return h, err
	}
	h.pauses, err = s.q.TargetPausesOf(ctx, sender)
	return h, err
}

// of says why a forward to target in state st waits although its attempt
// is due (forward.Held); nil when nothing holds it, or it is not waiting
// (running, delivered or failed).
func (h holds) of(target string, st queue.State) *string {
	if st == queue.StateRunning || !st.Unfinished() {
		return nil
	}
	var t *config.Target
	if h.sender != nil {
		var ok bool
		if t, ok = h.sender.Target(target); !ok {
			held := forward.HeldTargetRemoved
			return &held
		}
	}
	held, _ := forward.Held(h.breakers[target], forward.ActivePause(h.pauses, target, h.now), h.now)
	if held == "" {
		held, _ = forward.HeldByRate(t)
	}
	if held == "" {
		return nil
	}
	return &held
}
