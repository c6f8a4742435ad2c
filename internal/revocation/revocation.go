// Package revocation ends console sessions before they expire, for every
// process on the database: a session signed out is recorded until it would
// have expired, and "sign out everywhere" records a time before which
// every session issued is over. The console asks Revoked on each request.
package revocation

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DB is what revocations are read and written with: a *pgxpool.Pool.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Revoke ends the session id, which would have expired at expires. Sessions
// revoked earlier whose expiry has passed are forgotten at the same time
// (their cookies are refused for their expiry anyway).
func Revoke(ctx context.Context, db DB, id string, expires, now time.Time) error {
	_, err := db.Exec(ctx, `WITH gone AS (DELETE FROM console_revoked_sessions WHERE expires_at < $3)
INSERT INTO console_revoked_sessions (session_id, expires_at) VALUES ($1, $2)
ON CONFLICT (session_id) DO NOTHING`, id, expires, now)
	if err != nil {
		return fmt.Errorf("revoke console session: %w", err)
	}
	return nil
}

// RevokeAll ends every session issued at or before before.
func RevokeAll(ctx context.Context, db DB, before time.Time) error {
	_, err := db.Exec(ctx, `INSERT INTO console_signouts (singleton, issued_before) VALUES (true, $1)
ON CONFLICT (singleton) DO UPDATE SET issued_before = greatest(console_signouts.issued_before, excluded.issued_before)`, before)
	if err != nil {
		return fmt.Errorf("revoke every console session: %w", err)
	}
	return nil
}

// Revoked reports whether the session id, issued at issued, was signed out
// (by Revoke, or by a RevokeAll at or after issued). An error means the
// database could not say: the caller must not take the session as valid.
func Revoked(ctx context.Context, db DB, id string, issued time.Time) (bool, error) {
	var revoked bool
	err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM console_revoked_sessions WHERE session_id = $1)
    OR EXISTS (SELECT 1 FROM console_signouts WHERE issued_before >= $2)`, id, issued).Scan(&revoked)
	if err != nil {
		return false, fmt.Errorf("read console session revocation: %w", err)
	}
	return revoked, nil
}
