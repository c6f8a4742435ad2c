package handler

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/hookgate/hookgate/api"
	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/forward"
	"github.com/hookgate/hookgate/internal/queue"
	"github.com/hookgate/hookgate/internal/redact"
	"github.com/hookgate/hookgate/internal/store"
)

// The operator API of forward targets: their breakers and counts, their
// forwards, and bulk recovery. The queries are package forward's.

// ListTargets answers sender's targets in configuration order, each with
// its breaker (closed when no worker recorded one), an operator's pause
// while it holds, and its forwards by state: 404 for an unknown sender.
func (s *Server) ListTargets(w http.ResponseWriter, r *http.Request, sender api.Sender) {
	sd, ok := s.snapshot().Config().Sender(sender)
	if !ok {
		s.fail(w, r, unknownSender(sender))
		return
	}
	if s.q == nil {
		s.fail(w, r, dbProblem(errNoDB))
		return
	}
	breakers, err := s.q.Breakers(r.Context(), sender)
	if err != nil {
		s.fail(w, r, dbProblem(err))
		return
	}
	pauses, err := s.q.TargetPausesOf(r.Context(), sender)
	if err != nil {
		s.fail(w, r, dbProblem(err))
		return
	}
	counts, err := s.jobs.CountForwards(r.Context(), sender, true)
	if err != nil {
		s.fail(w, r, dbProblem(err))
		return
	}
	now := s.now()
	out := api.TargetList{Items: make([]api.TargetStatus, 0, len(sd.Forward))}
	for i := range sd.Forward {
		t := &sd.Forward[i]
		ts := api.TargetStatus{
			Name:       t.Name,
			Url:        redact.URL(t.URL, t.SecretPath),
			EventTypes: append([]string{}, t.EventTypes...),
			Breaker:    api.BreakerStatus{State: forward.BreakerClosed},
			Pause:      shownPause(pauses, t.Name, now),
		}
		if !t.Rate.IsZero() {
			rate, burst := t.Rate.String(), t.RateBurst()
			ts.Rate, ts.Burst = &rate, &burst
		}
		if b, ok := breakers[t.Name]; ok {
			ts.Breaker.State = api.BreakerStatusState(b.State)
			if !b.OpenedAt.IsZero() && b.State != forward.BreakerClosed {
				at := b.OpenedAt.UTC()
				ts.Breaker.OpenedAt = &at
			}
			if b.PausedUntil.After(now) {
				until := b.PausedUntil.UTC()
				ts.Breaker.PausedUntil = &until
			}
		}
		c := counts[t.Name]
		ts.Forwards = api.ForwardCounts{Pending: c.Pending, Running: c.Running, Retrying: c.Retrying, Delivered: c.Delivered, Failed: c.Failed}
		out.Items = append(out.Items, ts)
	}
	// The targets removed from the configuration whose forwards are
	// unfinished: held until a target of that name is configured again.
	held := forward.HeldTargetRemoved
	for _, name := range forward.RemovedTargets(sd, counts) {
		c := counts[name]
		out.Items = append(out.Items, api.TargetStatus{Name: name, EventTypes: []string{}, Breaker: api.BreakerStatus{State: forward.BreakerClosed}, Held: &held,
			Forwards: api.ForwardCounts{Pending: c.Pending, Running: c.Running, Retrying: c.Retrying, Delivered: c.Delivered, Failed: c.Failed}})
	}
	writeJSON(w, http.StatusOK, out)
}

// target returns sender's target named name, or the 404 problem.
func (s *Server) target(sender, name string) (*config.Sender, *config.Target, error) {
	sd, ok := s.snapshot().Config().Sender(sender)
	if !ok {
		return nil, nil, unknownSender(sender)
	}
	t, ok := sd.Target(name)
	if !ok {
		return nil, nil, newProblem(probNotFound, fmt.Sprintf("Sender %q has no forward target named %s.", sender, quote(name)))
	}
	return sd, t, nil
}

// ListTargetForwards answers a page of a target's forwards, newest first,
// with what holds those that wait: 404 for an unknown sender or target,
// 400 for an invalid state, window, limit or cursor.
func (s *Server) ListTargetForwards(w http.ResponseWriter, r *http.Request, sender api.Sender, target api.Target, params api.ListTargetForwardsParams) {
	_, t, err := s.target(sender, target)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	f := queue.Filter{Sender: sender, Target: target}
	if params.State != nil {
		f.State = queue.State(*params.State)
		if !queue.ValidState(f.State) {
			s.fail(w, r, newProblem(probInvalidParameter, fmt.Sprintf("Query parameter state must be pending, running, retrying, delivered or failed; got %s.", quote(string(f.State)))))
			return
		}
	}
	if params.Since != nil {
		f.Since = *params.Since
	}
	if params.Until != nil {
		f.Until = *params.Until
	}
	limit, err := pageLimit(r, params.Limit)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var after *store.Cursor
	if params.Cursor != nil {
		c, err := store.ParseForwardCursor(*params.Cursor)
		if err != nil {
			s.fail(w, r, badCursor(err))
			return
		}
		after = &c
	}
	if s.q == nil {
		s.fail(w, r, dbProblem(errNoDB))
		return
	}
	page, err := s.jobs.ListTargetForwards(r.Context(), f, limit, after)
	switch {
	case store.IsBadCursor(err): // a cursor of the list in another order (state=failed or not)
		s.fail(w, r, badCursor(err))
		return
	case err != nil:
		s.fail(w, r, dbProblem(err))
		return
	}
	h, err := s.readHolds(r.Context(), sender)
	if err != nil {
		s.fail(w, r, dbProblem(err))
		return
	}
	out := api.TargetForwardPage{Items: make([]api.TargetForward, 0, len(page.Forwards))}
	for _, tf := range page.Forwards {
		item := api.TargetForward{
			JobId:       tf.JobID,
			EventId:     tf.EventID,
			DeliveryId:  tf.DeliveryID,
			EventType:   tf.EventType,
			State:       api.TargetForwardState(tf.State),
			Held:        h.of(target, tf.State),
			Attempts:    tf.Attempts,
			MaxAttempts: tf.MaxAttempts,
			CreatedAt:   tf.CreatedAt.UTC(),
		}
		if tf.LastStatus != 0 {
			item.LastStatus = &tf.LastStatus
		}
		if tf.LastError != "" {
			e := redact.URLInText(tf.LastError, t.URL, t.SecretPath)
			item.LastError = &e
		}
		item.AttemptedAt = utcOrNil(tf.AttemptedAt)
		item.FinishedAt = utcOrNil(tf.FinishedAt)
		item.DeliveredAt = utcOrNil(tf.DeliveredAt)
		out.Items = append(out.Items, item)
	}
	if page.Next != nil {
		c := page.Next.String()
		out.NextCursor = &c
	}
	writeJSON(w, http.StatusOK, out)
}

// maxBulkBody bounds the body of a bulk redelivery request.
const maxBulkBody = 4 << 10

// RedeliverTarget forwards again, in the background, every forward of the
// target in the requested state and window (those running or retrying
// after the one under way), and answers 202 with how many it matched and
// whether they are queued after the current ones: 404 for an unknown sender
// or target, 400 for a body that is not a valid request.
func (s *Server) RedeliverTarget(w http.ResponseWriter, r *http.Request, sender api.Sender, target api.Target) {
	sd, _, err := s.target(sender, target)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var req api.BulkRedeliverRequest
	dec := json.NewDecoder(io.LimitReader(r.Body, maxBulkBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		s.fail(w, r, &problemError{typ: probInvalidParameter, cause: err,
			detail: `The request body must be a JSON object {"state": "failed", "delivered", "running" or "retrying", "since": RFC 3339 time, "until": RFC 3339 time} (times optional), with no other members.`})
		return
	}
	state := queue.State(req.State)
	if !req.State.Valid() {
		s.fail(w, r, newProblem(probInvalidParameter, fmt.Sprintf(`The request body's state must be "failed", "delivered", "running" or "retrying"; got %s.`, quote(string(req.State)))))
		return
	}
	if s.q == nil {
		s.fail(w, r, dbProblem(errNoDB))
		return
	}
	if s.redeliver == nil {
		s.fail(w, r, dbProblem(errNoRedeliverer))
		return
	}
	br := queue.BulkRequest{Sender: sd, Target: target, State: state}
	if req.Since != nil {
		br.Since = *req.Since
	}
	if req.Until != nil {
		br.Until = *req.Until
	}
	res, err := s.redeliver.BulkRedeliver(r.Context(), br)
	if errors.Is(err, queue.ErrUnknownTarget) || errors.Is(err, queue.ErrBulkState) {
		s.fail(w, r, &problemError{typ: probInvalidParameter, cause: err, detail: "The request cannot be redelivered: " + err.Error() + "."})
		return
	}
	if err != nil {
		s.fail(w, r, dbProblem(err))
		return
	}
	requestInfo(r.Context()).audit = bulkAudit(br, res)
	writeJSON(w, http.StatusAccepted, api.BulkRedelivery{Matched: res.Matched, AfterCurrent: res.AfterCurrent})
}

// bulkAudit is what the audit trail keeps of a bulk redelivery: its
// state, its window and how many forwards it matched.
func bulkAudit(br queue.BulkRequest, res queue.Bulk) map[string]any {
	d := map[string]any{"state": string(br.State), "matched": res.Matched}
	if !br.Since.IsZero() {
		d["since"] = br.Since.UTC()
	}
	if !br.Until.IsZero() {
		d["until"] = br.Until.UTC()
	}
	return d
}

func utcOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}
