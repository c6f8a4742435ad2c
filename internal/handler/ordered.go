package handler

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/google/uuid"

	"github.com/hookgate/hookgate/api"
	"github.com/hookgate/hookgate/internal/store"
)

// Ordered targets (docs/forwarding.md, "Ordered delivery"): the keys a
// failed forward holds, and skipping that forward.

// ListBlockedKeys answers the target's ordering keys that a failed forward
// holds, oldest block first: 404 for an unknown sender or target, 400 for
// a limit outside 1 to 500.
func (s *Server) ListBlockedKeys(w http.ResponseWriter, r *http.Request, sender api.Sender, target api.Target, params api.ListBlockedKeysParams) {
	if _, _, err := s.target(sender, target); err != nil {
		s.fail(w, r, err)
		return
	}
	limit := 100
	if params.Limit != nil {
		limit = *params.Limit
	}
	if limit < 1 || limit > 500 {
		s.fail(w, r, newProblem(probInvalidParameter, "Query parameter limit must be a whole number from 1 to 500."))
		return
	}
	if s.q == nil {
		s.fail(w, r, dbProblem(errNoDB))
		return
	}
	keys, err := s.q.BlockedKeys(r.Context(), sender, target, limit)
	if err != nil {
		s.fail(w, r, dbProblem(err))
		return
	}
	out := api.BlockedKeyList{Items: make([]api.BlockedKey, 0, len(keys))}
	for _, k := range keys {
		out.Items = append(out.Items, api.BlockedKey{Key: k.Key, EventId: k.EventID, BlockedAt: k.BlockedAt.UTC(), Waiting: k.Waiting,
			Summary: k.Summary()})
	}
	writeJSON(w, http.StatusOK, out)
}

// SkipForward skips the failed forward of an event that holds its ordering
// key: the key's next forward is released. It answers 404 for an unknown
// sender or target, and 409 for a forward that holds no key.
func (s *Server) SkipForward(w http.ResponseWriter, r *http.Request, sender api.Sender, target api.Target, eventID api.EventID) {
	if _, _, err := s.target(sender, target); err != nil {
		s.fail(w, r, err)
		return
	}
	if s.q == nil {
		s.fail(w, r, dbProblem(errNoDB))
		return
	}
	k, err := s.q.SkipBlocked(r.Context(), sender, target, uuid.UUID(eventID))
	if errors.Is(err, store.ErrNotBlocked) {
		s.fail(w, r, newProblem(probNotBlocked, fmt.Sprintf("The forward of event %s to target %s does not hold an ordering key: only a forward that failed for good on a target with ordering (on_failure: hold) can be skipped.", uuid.UUID(eventID), quote(target))))
		return
	}
	if err != nil {
		s.fail(w, r, dbProblem(err))
		return
	}
	s.log.Info("ordered forward skipped by an operator", "sender", sender, "target", target, "event_id", k.EventID, "released", k.Waiting)
	requestInfo(r.Context()).audit = map[string]any{"key": k.Key, "released": k.Waiting}
	writeJSON(w, http.StatusOK, api.SkippedForward{Sender: sender, Target: target, EventId: k.EventID, Key: k.Key, Released: k.Waiting})
}
