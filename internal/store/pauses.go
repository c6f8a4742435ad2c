package store

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
)

// paused_targets holds the targets an operator paused. Every process reads
// it about once a second and holds a paused target's forwards. The
// operator API and the console pause and resume through these queries.

// TargetPause is an operator's pause of a target.
type TargetPause struct {
	Sender, Target string
	// Since is when the pause began. A pause renewed while it held keeps its
	// start.
	Since time.Time
	// Until is when it ends by itself; zero until an operator resumes it.
	Until time.Time
	// Reason is what the operator wrote ("" when nothing).
	Reason string
	// By says who paused it: the operator API or the console, and the
	// client's address.
	By string
}

// Active reports whether p holds the target's forwards at now: it has no
// end, or its end has not come.
func (p TargetPause) Active(now time.Time) bool { return p.Until.IsZero() || now.Before(p.Until) }

// PausedBy names who pauses a target: the token's name (none when token is
// ""), via, "operator API" or "console", and the client's address,
// "unknown" when it has none: "admin via console (10.0.3.7)".
func PausedBy(token, via string, client netip.Addr) string {
	by := via
	if token != "" {
		by = token + " via " + via
	}
	if !client.IsValid() {
		return by + " (unknown)"
	}
	return by + " (" + client.String() + ")"
}

// MaxPauseReason bounds the reason of a pause, in characters.
const MaxPauseReason = 200

// CheckPause returns why a pause with reason and until cannot be taken at
// now, in words that complete "The pause's …", or "". The reason must be
// UTF-8 without control characters, at most [MaxPauseReason] characters.
// The end, if any, must be after now.
func CheckPause(reason string, until, now time.Time) string {
	switch {
	case !utf8.ValidString(reason):
		return "reason is not valid UTF-8"
	case utf8.RuneCountInString(reason) > MaxPauseReason:
		return fmt.Sprintf("reason has %d characters; at most %d are kept", utf8.RuneCountInString(reason), MaxPauseReason)
	}
	for _, r := range reason {
		if unicode.IsControl(r) {
			return fmt.Sprintf("reason has a control character (%U); write it on one line", r)
		}
	}
	if !until.IsZero() && !until.After(now) {
		return fmt.Sprintf("until, %s, is not in the future (it is %s now)", until.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	return ""
}

// pauseSQL pauses target $2 of sender $1 until $3, NULL until resumed, for
// reason $4, by $5. A target still paused keeps its pause's start and takes
// the new end, reason and author.
const pauseSQL = `INSERT INTO paused_targets AS p (sender, target, paused_at, paused_until, reason, paused_by)
VALUES ($1, $2, statement_timestamp(), $3, $4, $5)
ON CONFLICT ON CONSTRAINT paused_targets_pkey DO UPDATE
SET paused_at = CASE WHEN p.paused_until IS NOT NULL AND p.paused_until <= statement_timestamp() THEN excluded.paused_at ELSE p.paused_at END,
    paused_until = excluded.paused_until, reason = excluded.reason, paused_by = excluded.paused_by
RETURNING paused_at, paused_until, reason, paused_by`

// PauseTarget pauses p.Target of p.Sender until p.Until, zero until
// resumed, and returns the pause as stored. A target already paused keeps
// when its pause began. The caller checks the pause first ([CheckPause]).
func (q *Queries) PauseTarget(ctx context.Context, p TargetPause) (TargetPause, error) {
	var until *time.Time
	if !p.Until.IsZero() {
		until = &p.Until
	}
	out := TargetPause{Sender: p.Sender, Target: p.Target}
	var stored *time.Time
	if err := q.db.QueryRow(ctx, pauseSQL, p.Sender, p.Target, until, p.Reason, p.By).Scan(&out.Since, &stored, &out.Reason, &out.By); err != nil {
		return out, fmt.Errorf("pause %s/%s: %w", p.Sender, p.Target, err)
	}
	if stored != nil {
		out.Until = *stored
	}
	return out, nil
}

// ResumeTarget ends the pause of sender's target, if any, and returns it. ok
// is false when the target was not paused at the database's time.
func (q *Queries) ResumeTarget(ctx context.Context, sender, target string) (p TargetPause, ok bool, err error) {
	p = TargetPause{Sender: sender, Target: target}
	var until *time.Time
	err = q.db.QueryRow(ctx, `DELETE FROM paused_targets WHERE sender = $1 AND target = $2
RETURNING paused_at, paused_until, reason, paused_by, paused_until IS NULL OR paused_until > statement_timestamp()`, sender, target).
		Scan(&p.Since, &until, &p.Reason, &p.By, &ok)
	if errors.Is(err, pgx.ErrNoRows) {
		return p, false, nil
	}
	if err != nil {
		return p, false, fmt.Errorf("resume %s/%s: %w", sender, target, err)
	}
	if until != nil {
		p.Until = *until
	}
	return p, ok, nil
}

// TargetPauses returns every recorded pause, of every sender. Some may have
// ended ([TargetPause.Active]).
func (q *Queries) TargetPauses(ctx context.Context) ([]TargetPause, error) {
	return q.pauses(ctx, `SELECT sender, target, paused_at, paused_until, reason, paused_by FROM paused_targets`)
}

// TargetPausesOf returns the recorded pauses of sender's targets, by target
// name. Some may have ended.
func (q *Queries) TargetPausesOf(ctx context.Context, sender string) (map[string]TargetPause, error) {
	ps, err := q.pauses(ctx, `SELECT sender, target, paused_at, paused_until, reason, paused_by FROM paused_targets WHERE sender = $1`, sender)
	if err != nil {
		return nil, err
	}
	out := make(map[string]TargetPause, len(ps))
	for _, p := range ps {
		out[p.Target] = p
	}
	return out, nil
}

func (q *Queries) pauses(ctx context.Context, sql string, args ...any) ([]TargetPause, error) {
	rows, err := q.db.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("read target pauses: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (TargetPause, error) {
		var (
			p     TargetPause
			until *time.Time
		)
		err := r.Scan(&p.Sender, &p.Target, &p.Since, &until, &p.Reason, &p.By)
		if until != nil {
			p.Until = *until
		}
		return p, err
	})
	if err != nil {
		return nil, fmt.Errorf("read target pauses: %w", err)
	}
	return out, nil
}

// DeleteEndedPauses deletes the pauses whose end has passed at the
// database's time, and returns how many.
func (q *Queries) DeleteEndedPauses(ctx context.Context) (int64, error) {
	tag, err := q.db.Exec(ctx, `DELETE FROM paused_targets WHERE paused_until <= statement_timestamp()`)
	if err != nil {
		return 0, fmt.Errorf("delete ended target pauses: %w", err)
	}
	return tag.RowsAffected(), nil
}
