// Package sigtoken remembers the single-use tokens of the signature schemes
// that sign a token and a timestamp instead of the request's body
// (Mailgun's, signature.NonceVerifier), in the table signature_tokens.
//
// Such a signature proves that the token came from the provider, not that
// the event beside it did: a genuine signature object, copied into a body
// with another event, passes the check. So each token is accepted for one
// delivery only, its delivery ID and the SHA-256 of its stored body, which
// the provider's retries of that delivery carry again; any other use of it
// is refused. The table's primary key (sender, token) decides, not a read
// before the write: of requests racing with one token, the first to insert
// it holds it, and every other sees that row (waiting, if need be, until
// its insert commits). Nothing here touches the delivery's own transaction
// or its key: a token claimed for a delivery whose transaction then fails
// is claimed for that same delivery, whose retry goes through.
//
// A token is remembered while its signed timestamp is within its sender's
// tolerance: a request with the token passes the signature check only then
// (and with its own timestamp, which is the row's: the signature binds the
// two), so a row never needs to be taken over, only deleted once the
// signature check refuses its token for good. The retention job deletes
// those rows (Senders, DeleteSignedBefore), sender by sender, in batches,
// with the tolerance configured when it runs plus ClockMargin: a longer
// tolerance configured later still finds the tokens not deleted by then,
// whatever tolerance they were claimed under (but not those deleted
// before: a request signed between the old window and the new one is not
// known). Only genuinely signed requests insert rows, so the table holds
// at most the tokens of the provider's deliveries of about one tolerance,
// plus the margin and one retention interval.
package sigtoken

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DB is what the Store runs its statements on (a *pgxpool.Pool).
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Store claims and forgets tokens on a DB. It is safe for concurrent use.
type Store struct{ db DB }

// New returns the Store of db.
func New(db DB) *Store { return &Store{db: db} }

// ClockMargin is how much longer than its sender's tolerance a token is
// remembered, for the clocks of the replicas, which check timestamps each
// by its own, and of the one that deletes the tokens.
const ClockMargin = time.Minute

// Use is one request's use of a token: the sender and the token, its
// signed timestamp, and the delivery the request is (its ID and the
// SHA-256 of its stored body).
type Use struct {
	Sender        string
	Token         string
	SignedAt      time.Time
	DeliveryID    string
	RequestSHA256 [32]byte
}

// The statements on signature_tokens. Each names its sender ($1), so that
// on Citus it runs on the sender's shard alone.
const (
	// claimSQL inserts the token for its delivery. A row that holds the
	// token already is returned (its no-op update locks it until the
	// statement ends) only when it is the same delivery's with the same
	// body; for any other delivery nothing is returned.
	claimSQL = `INSERT INTO signature_tokens AS t (sender, token_sha256, delivery_id, request_sha256, signed_at)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT ON CONSTRAINT signature_tokens_pkey DO UPDATE SET signed_at = t.signed_at
  WHERE t.delivery_id = EXCLUDED.delivery_id AND t.request_sha256 = EXCLUDED.request_sha256
RETURNING true`
	// The senders that have tokens: a small table (about one tolerance of
	// tokens), read whole.
	sendersSQL      = `SELECT DISTINCT sender FROM signature_tokens`
	deleteBeforeSQL = `DELETE FROM signature_tokens
WHERE sender = $1 AND token_sha256 IN (
  SELECT token_sha256 FROM signature_tokens WHERE sender = $1 AND signed_at < $2 LIMIT $3)`
)

// Claim records that u's token is used by u's delivery, and reports
// whether the request may go on: true when the token was not in use, or is
// used by the same delivery with the same body (the provider's retry, or
// the request again after a failure); false when another delivery, or the
// same delivery ID with another body, used it first: a replay of a genuine
// signature, to refuse (401), which changes nothing. Concurrent claims of
// one token are decided by the table's primary key: at most one delivery
// gets true. An error is the database's, wrapped: nothing is decided, and
// the request is to fail as any other failure to reach the database does.
func (s *Store) Claim(ctx context.Context, u Use) (bool, error) {
	tok := sha256.Sum256([]byte(u.Token))
	var ok bool
	err := s.db.QueryRow(ctx, claimSQL, u.Sender, tok[:], u.DeliveryID, u.RequestSHA256[:], u.SignedAt).Scan(&ok)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("claim signature token of %s: %w", u.Sender, err)
	}
	return true, nil
}

// Senders returns the senders that have tokens, configured or not.
func (s *Store) Senders(ctx context.Context) ([]string, error) {
	rows, err := s.db.Query(ctx, sendersSQL)
	if err != nil {
		return nil, fmt.Errorf("find senders with signature tokens: %w", err)
	}
	senders, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("find senders with signature tokens: %w", err)
	}
	return senders, nil
}

// DeleteSignedBefore deletes up to limit of sender's tokens signed before
// cutoff, in one short statement, and returns how many it deleted: fewer
// than limit means none of the sender's are left. The retention job's
// cutoff is now less the sender's tolerance and ClockMargin: the signature
// check refuses those tokens anyway.
func (s *Store) DeleteSignedBefore(ctx context.Context, sender string, cutoff time.Time, limit int) (int64, error) {
	tag, err := s.db.Exec(ctx, deleteBeforeSQL, sender, cutoff, limit)
	if err != nil {
		return 0, fmt.Errorf("delete old signature tokens of %s: %w", sender, err)
	}
	return tag.RowsAffected(), nil
}
