package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/handler"
	"github.com/hookgate/hookgate/internal/queue"
	"github.com/hookgate/hookgate/internal/sender"
	"github.com/hookgate/hookgate/internal/store"
)

// Reloading the configuration, see docs/operations.md.
//
// SIGHUP, POST /v1/config/reload and, with --config-watch, a change of the
// file make the process read hookgate.yaml again. It checks the file as
// start-up does, see [loadSenders]. A process that works forwards also
// checks its River client's rescue horizon. The new configuration is then
// swapped whole into the process's [sender.Live].
//
// A file that fails a check is refused with the check's message, logged at
// ERROR and counted. The running configuration keeps serving. Every
// component reads the configuration once per request or forward attempt,
// so each uses one configuration, old or new.

// Results of a reload: the values of hookgate_config_reloads_total's
// result label.
const (
	reloadApplied   = "applied"   // a new configuration is in force
	reloadUnchanged = "unchanged" // the file is the one in force: nothing to do
	reloadRefused   = "refused"   // the file failed a check: the running one serves on
)

// fixedAtStart is what start-up derived from the configuration for the
// whole process. Only a restart changes it.
type fixedAtStart struct {
	// work is set when the process works forwards. The other fields are
	// zero otherwise.
	work bool
	// rescueAfter is the River client's rescue horizon. computed is set
	// when --forward-rescue-after was unset: the longest target timeout
	// plus 5s plus 1m.
	rescueAfter time.Duration
	computed    bool
	// jobRetention is how long River keeps finished forward jobs: the
	// longest sender retention at start.
	jobRetention time.Duration
}

// kept returns the settings fixed at start that cfg would set otherwise.
func (f fixedAtStart) kept(cfg *config.Config) []handler.KeptSetting {
	if !f.work {
		return nil
	}
	var out []handler.KeptSetting
	d := queue.DefaultClientConfig(cfg)
	if d.Retention != f.jobRetention {
		out = append(out, handler.KeptSetting{Name: "forward job retention (River keeps finished forward jobs for the longest sender retention at start-up)",
			Running: shortDuration(f.jobRetention), File: shortDuration(d.Retention)})
	}
	if f.computed && d.RescueAfter != f.rescueAfter {
		out = append(out, handler.KeptSetting{Name: "forward rescue horizon (--forward-rescue-after unset: the longest target timeout at start-up + 5s + 1m)",
			Running: shortDuration(f.rescueAfter), File: shortDuration(d.RescueAfter)})
	}
	return out
}

// check refuses cfg when the process's River client could not work its
// forwards: a target whose timeout its rescue horizon does not exceed.
func (f fixedAtStart) check(cfg *config.Config) error {
	if !f.work {
		return nil
	}
	return queue.CheckRescueAfter(cfg, f.rescueAfter)
}

// reloader reloads the process's configuration, one reload at a time. It
// tells the components that keep state per target.
type reloader struct {
	s     *settings
	live  *sender.Live
	fixed fixedAtStart
	log   *slog.Logger
	// applied are called, in order, after a new configuration is in force,
	// with it and what changed.
	applied []func(to *sender.Snapshot, c config.Changes)

	// audit records a reload of SIGHUP or --config-watch in the audit
	// trail (nil: none). The API's reloads are recorded by the handler.
	audit func(ctx context.Context, e store.AuditEntry)

	reloads *prometheus.CounterVec
	info    *prometheus.GaugeVec

	mu sync.Mutex
}

// newReloader returns the reloader of live. It registers
// hookgate_config_reloads_total and hookgate_config_info on reg.
func newReloader(s *settings, live *sender.Live, fixed fixedAtStart, reg prometheus.Registerer, log *slog.Logger) *reloader {
	r := &reloader{s: s, live: live, fixed: fixed, log: log,
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookgate_config_reloads_total",
			Help: "Reloads of the configuration file (SIGHUP, POST /v1/config/reload, --config-watch), by result: applied (a new configuration is in force), unchanged (the file is the one in force), refused (the file failed a check: the running configuration serves on).",
		}, []string{"result"}),
		info: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "hookgate_config_info",
			Help: "1 for the configuration in force in this process, labelled with the SHA-256 of its file (sha256sum hookgate.yaml prints it).",
		}, []string{"hash"}),
	}
	for _, res := range []string{reloadApplied, reloadUnchanged, reloadRefused} {
		r.reloads.WithLabelValues(res)
	}
	r.info.WithLabelValues(live.Snapshot().Hash).Set(1)
	reg.MustRegister(r.reloads, r.info)
	return r
}

// ReloadConfig reads the configuration file again. When it passes every
// check start-up makes, it is put in force. trigger names what asked, for
// the log. A refused file leaves the running configuration in force. The
// check's error names the field and holds no secret. ReloadConfig
// implements [handler.ConfigReloader].
func (r *reloader) ReloadConfig(trigger string) (handler.ConfigReload, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	from := r.live.Snapshot()
	to, err := loadSenders(r.s, r.log)
	if err == nil {
		err = r.fixed.check(to.Config())
	}
	if err != nil {
		r.reloads.WithLabelValues(reloadRefused).Inc()
		r.log.Error("configuration reload refused: the running configuration keeps serving",
			"trigger", trigger, "config", r.s.configPath, "running_hash", from.Hash, "err", err)
		return handler.ConfigReload{From: from, To: from}, err
	}
	if to.Hash == from.Hash {
		r.reloads.WithLabelValues(reloadUnchanged).Inc()
		r.log.Info("configuration reload: the file is the one in force", "trigger", trigger, "hash", from.Hash)
		return handler.ConfigReload{From: from, To: from}, nil
	}
	res := handler.ConfigReload{From: from, To: to, Changes: config.Diff(from.Config(), to.Config()), Kept: r.fixed.kept(to.Config())}
	r.live.Swap(to)
	r.info.Reset()
	r.info.WithLabelValues(to.Hash).Set(1)
	r.reloads.WithLabelValues(reloadApplied).Inc()
	for _, f := range r.applied {
		f(to, res.Changes)
	}
	r.log.Info("configuration reloaded", append([]any{"trigger", trigger, "hash", to.Hash, "previous_hash", from.Hash}, changeAttrs(res.Changes)...)...)
	for _, k := range res.Kept {
		r.log.Warn("configuration reload: a setting only a restart changes keeps its running value", "setting", k.Name, "running", k.Running, "file", k.File)
	}
	return res, nil
}

// changeAttrs returns the log attributes of c: the names of what was
// added, removed and changed, never a value.
func changeAttrs(c config.Changes) []any {
	var out []any
	add := func(key string, names []string) {
		if len(names) > 0 {
			out = append(out, key, strings.Join(names, ","))
		}
	}
	targets := func(ns []config.TargetName) []string {
		out := make([]string, len(ns))
		for i, n := range ns {
			out[i] = n.String()
		}
		return out
	}
	changed := func(cs []config.Changed) []string {
		out := make([]string, len(cs))
		for i, ch := range cs {
			out[i] = ch.String() + "(" + strings.Join(ch.Fields, " ") + ")"
		}
		return out
	}
	add("senders_added", c.SendersAdded)
	add("senders_removed", c.SendersRemoved)
	add("senders_changed", changed(c.SendersChanged))
	add("targets_added", targets(c.TargetsAdded))
	add("targets_removed", targets(c.TargetsRemoved))
	add("targets_changed", changed(c.TargetsChanged))
	return out
}

// onSIGHUP reloads on each SIGHUP until ctx is done. A SIGHUP during a
// reload makes one more reload after it.
func (r *reloader) onSIGHUP(ctx context.Context, hup <-chan os.Signal) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			res, err := r.ReloadConfig("SIGHUP") // logged
			r.record(ctx, "signal", res, err)
		}
	}
}

// record writes a reload by name ("signal" or "watch") in the audit
// trail.
func (r *reloader) record(ctx context.Context, name string, res handler.ConfigReload, err error) {
	if r.audit != nil {
		r.audit(ctx, handler.ReloadAudit(name, res, err))
	}
}

// watchEvery is how often --config-watch reads the file.
const watchEvery = time.Second

// watch reads the configuration file every interval until ctx is done. It
// reloads when the content changed and then stayed the same for one read.
// So a file written in place in several steps is loaded once whole. Each
// read follows the path's symbolic links, so a Kubernetes ConfigMap's
// update is seen. A file that cannot be read is refused once, and the
// running configuration is kept.
func (r *reloader) watch(ctx context.Context, interval time.Duration) {
	tried := r.live.Snapshot().Hash // the content last loaded or refused
	last := tried
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		h := fileHash(r.s.configPath)
		if h == last && h != tried {
			tried = h
			res, err := r.ReloadConfig("file change (--config-watch)") // logged
			r.record(ctx, "watch", res, err)
		}
		last = h
	}
}

// fileHash returns the hex SHA-256 of the file at path, as
// [sender.Snapshot].Hash does, or the text of the read's error.
func fileHash(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return "error: " + err.Error()
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// notifySIGHUP returns the channel that receives SIGHUP from now on,
// instead of the process ending, and the function that stops that.
func notifySIGHUP() (<-chan os.Signal, func()) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGHUP)
	return ch, func() { signal.Stop(ch) }
}
