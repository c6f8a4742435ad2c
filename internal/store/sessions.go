package store

import (
	"context"
	"fmt"
	"time"
)

// console_revoked_sessions and console_signouts: console sessions ended
// before they expire, for every process on the database. A session signed
// out is recorded until it would have expired, and "sign out everywhere"
// records a time before which every session issued is over. The console
// asks SessionRevoked on each request.

// RevokeSession ends the console session id, which would have expired at
// expires. Sessions revoked earlier whose expiry has passed are forgotten
// at the same time (their cookies are refused for their expiry anyway).
func (q *Queries) RevokeSession(ctx context.Context, id string, expires, now time.Time) error {
	_, err := q.db.Exec(ctx, `WITH gone AS (DELETE FROM console_revoked_sessions WHERE expires_at < $3)
INSERT INTO console_revoked_sessions (session_id, expires_at) VALUES ($1, $2)
ON CONFLICT (session_id) DO NOTHING`, id, expires, now)
	if err != nil {
		return fmt.Errorf("revoke console session: %w", err)
	}
	return nil
}

// RevokeAllSessions ends every console session issued at or before before.
func (q *Queries) RevokeAllSessions(ctx context.Context, before time.Time) error {
	_, err := q.db.Exec(ctx, `INSERT INTO console_signouts (singleton, issued_before) VALUES (true, $1)
ON CONFLICT (singleton) DO UPDATE SET issued_before = greatest(console_signouts.issued_before, excluded.issued_before)`, before)
	if err != nil {
		return fmt.Errorf("revoke every console session: %w", err)
	}
	return nil
}

// SessionRevoked reports whether the console session id, issued at issued,
// was signed out (by RevokeSession, or by a RevokeAllSessions at or after
// issued). An error means the database could not say: the caller must not
// take the session as valid.
func (q *Queries) SessionRevoked(ctx context.Context, id string, issued time.Time) (bool, error) {
	var revoked bool
	err := q.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM console_revoked_sessions WHERE session_id = $1)
    OR EXISTS (SELECT 1 FROM console_signouts WHERE issued_before >= $2)`, id, issued).Scan(&revoked)
	if err != nil {
		return false, fmt.Errorf("read console session revocation: %w", err)
	}
	return revoked, nil
}
