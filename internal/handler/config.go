package handler

import (
	"net/http"

	"github.com/hookgate/hookgate/api"
	"github.com/hookgate/hookgate/internal/access"
	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/sender"
)

// The operator API of the configuration: the one in force in this process
// (GetConfig) and its reload (ReloadConfig).

// ConfigReloader reloads the configuration of the process (the gateway's
// reloader, which SIGHUP and --config-watch use too): trigger names what
// asked, for its log. A file that fails a check is refused with an error
// whose text is the check's message, which names the field and never holds
// a secret; the running configuration keeps serving.
type ConfigReloader interface {
	ReloadConfig(trigger string) (ConfigReload, error)
}

// ConfigReload is what a reload did: the snapshot in force before (From)
// and after it (To, From itself when the file was the one in force), what
// differs between them, and the settings that only a restart changes whose
// value the file would have changed (which kept their running value).
type ConfigReload struct {
	From, To *sender.Snapshot
	Changes  config.Changes
	Kept     []KeptSetting
}

// KeptSetting is a setting that only a restart changes, whose value the
// reloaded file would have made File, and which keeps its value Running.
type KeptSetting struct {
	Name, Running, File string
}

// GetConfig answers the configuration in force: its file's hash, when it
// was loaded, and its senders without any secret (ListSenders').
func (s *Server) GetConfig(w http.ResponseWriter, r *http.Request) {
	snap := s.snapshot()
	cfg := snap.Config()
	out := api.ConfigInfo{Hash: snap.Hash, LoadedAt: snap.LoadedAt.UTC(), Senders: make([]api.SenderInfo, 0, len(cfg.Senders))}
	for i := range cfg.Senders {
		out.Senders = append(out.Senders, senderInfo(&cfg.Senders[i]))
	}
	writeJSON(w, http.StatusOK, out)
}

// ReloadConfig reloads the process's configuration (Config.Reloader) and
// answers what changed: 422 with the check's message when the file is
// refused, 503 when the Server has no Reloader.
func (s *Server) ReloadConfig(w http.ResponseWriter, r *http.Request) {
	if s.reloader == nil {
		s.fail(w, r, newProblem(probUnavailable, "This server cannot reload its configuration."))
		return
	}
	res, err := s.reloader.ReloadConfig("POST /v1/config/reload by token " + access.Name(r.Context()))
	requestInfo(r.Context()).audit = ReloadAudit("", res, err).Details
	if err != nil {
		s.fail(w, r, &problemError{typ: probConfigRefused, cause: err,
			detail: err.Error() + ". The running configuration keeps serving."})
		return
	}
	writeJSON(w, http.StatusOK, configReload(res))
}

// configReload is res as the API shows it: names only, never a value.
func configReload(res ConfigReload) api.ConfigReload {
	c := res.Changes
	out := api.ConfigReload{
		Changed:      res.To != res.From,
		Hash:         res.To.Hash,
		PreviousHash: res.From.Hash,
		LoadedAt:     res.To.LoadedAt.UTC(),
		Senders: api.SenderChanges{Added: orEmpty(c.SendersAdded), Removed: orEmpty(c.SendersRemoved),
			Changed: make([]api.SenderChange, 0, len(c.SendersChanged))},
		Targets: api.TargetChanges{Added: targetRefs(c.TargetsAdded), Removed: targetRefs(c.TargetsRemoved),
			Changed: make([]api.TargetChange, 0, len(c.TargetsChanged))},
		Kept: make([]api.KeptSetting, 0, len(res.Kept)),
	}
	for _, ch := range c.SendersChanged {
		out.Senders.Changed = append(out.Senders.Changed, api.SenderChange{Sender: ch.Sender, Fields: ch.Fields})
	}
	for _, ch := range c.TargetsChanged {
		out.Targets.Changed = append(out.Targets.Changed, api.TargetChange{Sender: ch.Sender, Target: ch.Target, Fields: ch.Fields})
	}
	for _, k := range res.Kept {
		out.Kept = append(out.Kept, api.KeptSetting{Setting: k.Name, Running: k.Running, File: k.File})
	}
	return out
}

// targetRefs returns ns as the API names targets ([] for none).
func targetRefs(ns []config.TargetName) []api.TargetRef {
	out := make([]api.TargetRef, 0, len(ns))
	for _, n := range ns {
		out = append(out, api.TargetRef{Sender: n.Sender, Target: n.Target})
	}
	return out
}

// orEmpty returns ss, or an empty slice for nil (a JSON [] rather than null).
func orEmpty(ss []string) []string {
	if ss == nil {
		return []string{}
	}
	return ss
}
