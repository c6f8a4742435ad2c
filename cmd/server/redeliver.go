package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/hookgate/hookgate/internal/access"
	"github.com/hookgate/hookgate/internal/queue"
	senderpkg "github.com/hookgate/hookgate/internal/sender"
	"github.com/hookgate/hookgate/internal/store"
)

// redeliver is `hookgate redeliver`: the operator API's bulk redelivery
// from the command line, through [queue.River.BulkRedeliver]. It prints how
// many forwards it matched, which the worker processes forward again. When
// none matched, it says that nothing was enqueued.
func redeliver(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	c := newCmdFlags("hookgate redeliver",
		"hookgate redeliver --sender S --target T [--state failed|delivered|running|retrying] [--since 2h|RFC3339] [--until 30m|RFC3339]",
		"Forward a target's failed (or delivered, running, retrying) forwards again, straight through the database.\n"+
			"hookgate api redeliver does the same through a running hookgate's HTTP API.", getenv)
	var databaseURL, configPath, sender, target, state, since, until string
	c.String(&databaseURL, "database-url", "URL", "DATABASE_URL", "", "PostgreSQL connection URL (required)")
	c.String(&configPath, "config", "FILE", "HOOKGATE_CONFIG", "hookgate.yaml", "senders configuration file")
	c.String(&sender, "sender", "S", "", "", "the sender's name (required)")
	c.String(&target, "target", "T", "", "", "the target's name (required)")
	c.String(&state, "state", "STATE", "", "failed", "redeliver the forwards in this state: failed, delivered, running or retrying")
	c.String(&since, "since", "TIME", "", "", "only forwards that reached the state at or after this time: a duration ago (2h) or an RFC 3339 time")
	c.String(&until, "until", "TIME", "", "", "only forwards that reached the state before this time: a duration ago (30m) or an RFC 3339 time")
	if done, err := c.parse(args, stdout); done || err != nil {
		return err
	}
	if err := c.noArgs(); err != nil {
		return err
	}
	if sender == "" || target == "" {
		return errors.New("redeliver: --sender and --target are required")
	}
	st := queue.State(state)
	switch st {
	case queue.StateFailed, queue.StateDelivered, queue.StateRunning, queue.StateRetrying:
	default:
		return fmt.Errorf("redeliver: --state %q: must be failed, delivered, running or retrying", state)
	}
	now := time.Now()
	from, err := pointInTime(since, now)
	if err != nil {
		return fmt.Errorf("redeliver: --since: %w", err)
	}
	to, err := pointInTime(until, now)
	if err != nil {
		return fmt.Errorf("redeliver: --until: %w", err)
	}
	if databaseURL == "" {
		return errors.New("DATABASE_URL is not set: give the PostgreSQL URL in DATABASE_URL or --database-url")
	}
	senders, err := senderpkg.Load(configPath)
	if err != nil {
		return err
	}
	cfg := senders.Config()
	sd, ok := cfg.Sender(sender)
	if !ok {
		return fmt.Errorf("redeliver: no sender named %q is configured in %s", sender, configPath)
	}
	if _, ok := sd.Target(target); !ok {
		return fmt.Errorf("redeliver: sender %q has no forward target named %q in %s", sender, target, configPath)
	}
	pool, err := newPool(ctx, databaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	log := newLogger("text", stderr)
	cc := queue.DefaultClientConfig(cfg)
	cc.Pool, cc.Senders, cc.Log = pool, cfg, log // no Worker: it inserts only
	q, err := queue.New(cc)
	if err != nil {
		return err
	}
	// The redelivered forwards' attempts say who asked: this command.
	ctx = access.With(ctx, access.Caller{Name: redeliverActor, Scope: access.Admin})
	res, err := q.BulkRedeliver(ctx, queue.BulkRequest{Sender: sd, Target: target, State: st, Since: from, Until: to})
	// The audit trail keeps it as it keeps the API's bulk redeliveries: by
	// this command's name, without a client address.
	audit := store.AuditEntry{Token: redeliverActor, Action: store.ActionRedeliverBulk, Sender: sender, Target: target,
		Outcome: store.OutcomeOK, Details: map[string]any{"state": string(st), "matched": res.Matched}}
	if err != nil {
		audit.Outcome, audit.Detail, audit.Details = store.OutcomeError, "failed", nil
	}
	if aerr := store.New(pool).RecordAudit(ctx, audit); aerr != nil {
		log.Error("the audit trail could not record the redelivery", "err", aerr)
	}
	if err != nil {
		return err
	}
	if res.Matched == 0 {
		var window []string
		if !from.IsZero() {
			window = append(window, "since "+from.UTC().Format(time.RFC3339))
		}
		if !to.IsZero() {
			window = append(window, "before "+to.UTC().Format(time.RFC3339))
		}
		in := ""
		if len(window) > 0 {
			in = " (" + strings.Join(window, ", ") + ")"
		}
		fmt.Fprintf(stdout, "matched no %s forwards of %s/%s%s: nothing was enqueued\n", st, sender, target, in)
		return nil
	}
	if res.AfterCurrent {
		fmt.Fprintf(stdout, "matched %d %s forwards of %s/%s; the worker processes forward each again after the current one has ended\n", res.Matched, st, sender, target)
		return nil
	}
	fmt.Fprintf(stdout, "matched %d %s forwards of %s/%s; the worker processes forward them again\n", res.Matched, st, sender, target)
	return nil
}

// pointInTime reads an RFC 3339 time, or a positive duration before now.
// It returns the zero time for "".
func pointInTime(v string, now time.Time) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(v); err == nil {
		if d <= 0 {
			return time.Time{}, fmt.Errorf("%q: a duration must be positive (how long ago)", v)
		}
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is neither a duration such as 2h nor an RFC 3339 time such as 2026-11-30T04:00:00Z", v)
	}
	return t, nil
}

// redeliverActor is who a redelivery by the redeliver command is recorded
// as, in its forwards' attempts.
const redeliverActor = "hookgate redeliver"
