package store

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"
)

// audit_log is the operators' audit trail: one row per operator action,
// written after it by the operator API, the console and the reloads.

// The actions of the audit trail.
const (
	ActionSignIn        = "sign-in"
	ActionSignOut       = "sign-out"
	ActionSignOutAll    = "sign-out-everywhere"
	ActionRedeliver     = "redeliver"
	ActionRedeliverBulk = "redeliver-bulk"
	ActionSkip          = "skip"
	ActionPause         = "pause"
	ActionResume        = "resume"
	ActionReload        = "reload"
	ActionOther         = "other"
	OutcomeOK           = "ok"
	OutcomeRefused      = "refused"
	OutcomeError        = "error"
	// maxAuditDetailsBytes bounds details as encoding/json writes them.
	// The table's CHECK bounds them at 4096 bytes as PostgreSQL writes
	// jsonb as text, with a space after each colon and comma: at most 1.5
	// times as many bytes.
	maxAuditDetailsBytes   = 2730
	maxAuditDetailRunes    = 256
	maxAuditNameRunes      = 64
	maxAuditResourceRunes  = 256
	maxAuditDeliveryIDRune = 1024
)

// AuditEntry is one row of the audit trail.
type AuditEntry struct {
	ID int64
	At time.Time
	// Token is the name of the token (never its value): "admin", a read
	// token's name, or "signal" or "watch" for a reload without a request.
	Token string
	// Client is the client's address, as the wrong-token limit sees it;
	// "" for none.
	Client string
	Action string
	// What the action concerns, "" (or uuid.Nil) for what it does not.
	Sender, Target, DeliveryID string
	EventID                    uuid.UUID
	// Outcome is OutcomeOK, OutcomeRefused or OutcomeError; Detail a short
	// word on it, such as the problem type of a refusal.
	Outcome, Detail string
	// Details are a few facts of the action; nil for none. Over 4 KiB
	// encoded, they are replaced by {"truncated": true}.
	Details map[string]any
}

// clean returns s as valid UTF-8 without control characters, cut to max
// characters: what a client sent never fails the insert.
func clean(s string, max int) string {
	s = strings.ToValidUTF8(s, "?")
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return '?'
		}
		return r
	}, s)
	if utf8.RuneCountInString(s) > max {
		s = string([]rune(s)[:max])
	}
	return s
}

// Refused requests a token may write to the audit trail: at most
// maxRefusedRows a minute. The others are counted, and the next refused
// row of the token says how many were left out. A token's holder cannot fill
// the table by sending requests it may not make.
const (
	maxRefusedRows     = 60
	refusedRowsWindow  = time.Minute
	refusedNotRecorded = "refusals_not_recorded"
)

// auditThrottle counts each token's refused rows in the current window.
// Its map holds the names of the configured tokens only.
type auditThrottle struct {
	mu   sync.Mutex
	byTk map[string]*refusedWindow
}

type refusedWindow struct {
	start            time.Time
	written, skipped int
}

// allow reports whether token may write a refused row at now, and how
// many of its rows were left out before it.
func (t *auditThrottle) allow(token string, now time.Time) (bool, int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byTk == nil {
		t.byTk = map[string]*refusedWindow{}
	}
	w := t.byTk[token]
	if w == nil {
		w = &refusedWindow{start: now}
		t.byTk[token] = w
	}
	if now.Sub(w.start) >= refusedRowsWindow {
		w.start, w.written = now, 0
	}
	if w.written >= maxRefusedRows {
		w.skipped++
		return false, 0
	}
	w.written++
	skipped := w.skipped
	w.skipped = 0
	return true, skipped
}

// RecordAudit writes e to the audit trail; e.At zero is the database's
// now. Every text is cleaned and cut to its bound. A token's refused
// requests beyond maxRefusedRows a minute are counted, not written; the
// next row says how many.
func (q *Queries) RecordAudit(ctx context.Context, e AuditEntry) error {
	if e.Outcome == OutcomeRefused && q.refused != nil {
		ok, skipped := q.refused.allow(e.Token, time.Now())
		if !ok {
			return nil
		}
		if skipped > 0 {
			e.Details = maps.Clone(e.Details)
			if e.Details == nil {
				e.Details = map[string]any{}
			}
			e.Details[refusedNotRecorded] = skipped
		}
	}
	// JSON, not bytes: a connection that prepares nothing (exec mode)
	// would send bytes as bytea.
	var details json.RawMessage
	if e.Details != nil {
		b, err := json.Marshal(e.Details)
		if err != nil || len(b) > maxAuditDetailsBytes {
			b = []byte(`{"truncated":true}`)
		}
		details = b
	}
	var at any
	if !e.At.IsZero() {
		at = e.At
	}
	var event any
	if e.EventID != uuid.Nil {
		event = e.EventID
	}
	_, err := q.db.Exec(ctx, `INSERT INTO audit_log (at, token_name, client_addr, action, sender, target, event_id, delivery_id, outcome, detail, details)
VALUES (coalesce($1, now()), $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`,
		at, clean(e.Token, maxAuditNameRunes), clean(e.Client, maxAuditNameRunes), clean(e.Action, maxAuditNameRunes),
		clean(e.Sender, maxAuditResourceRunes), clean(e.Target, maxAuditResourceRunes), event, clean(e.DeliveryID, maxAuditDeliveryIDRune),
		e.Outcome, clean(e.Detail, maxAuditDetailRunes), details)
	if err != nil {
		return fmt.Errorf("record audit %s: %w", e.Action, err)
	}
	return nil
}

// AuditFilter selects rows of the audit trail: "" selects every action or
// token.
type AuditFilter struct {
	Action, Token string
}

// AuditPage is a page of the audit trail, newest first; Next is the
// cursor of the page after it, "" on the last.
type AuditPage struct {
	Entries []AuditEntry
	Next    string
}

// ListAudit returns a page of at most limit rows of the audit trail that
// f selects, newest first, after the cursor after ("" for the first
// page): an error wrapping [ErrBadCursor] for a cursor [AuditPage] did
// not return.
func (q *Queries) ListAudit(ctx context.Context, f AuditFilter, limit int, after string) (AuditPage, error) {
	if limit < 1 || limit > MaxListLimit {
		return AuditPage{}, fmt.Errorf("list audit: limit %d is not from 1 to %d", limit, MaxListLimit)
	}
	var before *int64
	if after != "" {
		id, err := ParseAuditCursor(after)
		if err != nil {
			return AuditPage{}, err
		}
		before = &id
	}
	rows, err := q.db.Query(ctx, `SELECT id, at, token_name, client_addr, action, sender, target, event_id, delivery_id, outcome, detail, details
FROM audit_log
WHERE ($1::bigint IS NULL OR id < $1) AND ($2 = '' OR action = $2) AND ($3 = '' OR token_name = $3)
ORDER BY id DESC LIMIT $4`, before, f.Action, f.Token, limit+1)
	if err != nil {
		return AuditPage{}, fmt.Errorf("list audit: %w", err)
	}
	defer rows.Close()
	page := AuditPage{Entries: []AuditEntry{}}
	for rows.Next() {
		var (
			e       AuditEntry
			event   *uuid.UUID
			details []byte
		)
		if err := rows.Scan(&e.ID, &e.At, &e.Token, &e.Client, &e.Action, &e.Sender, &e.Target, &event, &e.DeliveryID, &e.Outcome, &e.Detail, &details); err != nil {
			return AuditPage{}, fmt.Errorf("list audit: %w", err)
		}
		if event != nil {
			e.EventID = *event
		}
		if details != nil {
			if err := json.Unmarshal(details, &e.Details); err != nil {
				return AuditPage{}, fmt.Errorf("list audit: details of %d: %w", e.ID, err)
			}
		}
		page.Entries = append(page.Entries, e)
	}
	if err := rows.Err(); err != nil {
		return AuditPage{}, fmt.Errorf("list audit: %w", err)
	}
	if len(page.Entries) > limit {
		page.Entries = page.Entries[:limit]
		page.Next = auditCursor(page.Entries[limit-1].ID)
	}
	return page, nil
}

// auditCursor is the opaque cursor of the page after the row id.
func auditCursor(id int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte(`{"a":` + strconv.FormatInt(id, 10) + `}`))
}

// ParseAuditCursor returns the row ID of a cursor of [AuditPage]: an
// error wrapping [ErrBadCursor] for anything else (a cursor of deliveries
// or forwards too).
func ParseAuditCursor(s string) (int64, error) {
	raw, err := base64.RawURLEncoding.Strict().DecodeString(s)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrBadCursor, err)
	}
	num, ok := strings.CutPrefix(string(raw), `{"a":`)
	num, ok2 := strings.CutSuffix(num, "}")
	id, err := strconv.ParseInt(num, 10, 64)
	if !ok || !ok2 || err != nil || id < 1 || auditCursor(id) != s {
		return 0, fmt.Errorf("%w: not a cursor of the audit trail", ErrBadCursor)
	}
	return id, nil
}

// DeleteAuditBefore deletes at most limit rows of the audit trail older
// than before, and returns how many it deleted.
func (q *Queries) DeleteAuditBefore(ctx context.Context, before time.Time, limit int) (int64, error) {
	tag, err := q.db.Exec(ctx, `DELETE FROM audit_log WHERE id IN (SELECT id FROM audit_log WHERE at < $1 ORDER BY at LIMIT $2)`, before, limit)
	if err != nil {
		return 0, fmt.Errorf("delete old audit rows: %w", err)
	}
	return tag.RowsAffected(), nil
}
