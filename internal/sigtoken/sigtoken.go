// Package sigtoken remembers the single-use tokens of signature schemes
// that sign a token and a timestamp instead of the body, such as Mailgun's.
// It keeps them in the table signature_tokens.
//
// Such a signature proves that the token came from the provider, not that
// the event beside it did. A genuine signature copied into a body with
// another event passes the check. So each token is accepted for one
// delivery only: its delivery ID and the SHA-256 of its stored body. The
// provider's retries of that delivery carry both again, and any other use
// is refused. The table's primary key decides, not a read before the
// write. Of racing requests, the first to insert the token holds it.
// A token claimed for a delivery whose transaction then fails stays
// claimed for that delivery, so its retry goes through.
//
// A token is kept while its signed timestamp is within the sender's
// tolerance, because only then does the signature check pass. The
// retention job deletes older tokens in batches, sender by sender, with
// the tolerance plus [ClockMargin]. A tolerance raised later does not
// bring back the tokens deleted before. Only genuinely signed requests
// insert rows, so the table holds about one tolerance of the provider's
// deliveries.
package sigtoken

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/hookgate/hookgate/internal/store"
)

// DB is what the [Store] runs its statements on, such as a *pgxpool.Pool.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// Store claims and forgets tokens on a DB. It is safe for concurrent use.
type Store struct{ db DB }

// New returns the Store of db.
func New(db DB) *Store { return &Store{db: db} }

// ClockMargin is how much longer than its sender's tolerance a token is
// kept. It covers the skew between the replicas' clocks, which each check
// timestamps on their own.
const ClockMargin = time.Minute

// Use is one request's use of a token: the sender, the token, its signed
// timestamp, the delivery ID and the SHA-256 of the stored body.
type Use struct {
	Sender        string
	Token         string
	SignedAt      time.Time
	DeliveryID    string
	RequestSHA256 [32]byte
}

// The statements on signature_tokens. Each names its sender as $1, so on
// Citus it runs on the sender's shard alone.
const (
	// claimSQL inserts the token for its delivery. When a row holds the
	// token already, it returns that row only for the same delivery with
	// the same body. The no-op update locks the row until the statement
	// ends.
	claimSQL = `INSERT INTO signature_tokens AS t (sender, token_sha256, delivery_id, request_sha256, signed_at)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT ON CONSTRAINT signature_tokens_pkey DO UPDATE SET signed_at = t.signed_at
  WHERE t.delivery_id = EXCLUDED.delivery_id AND t.request_sha256 = EXCLUDED.request_sha256
RETURNING true`
	// The table is small, so reading the senders reads it whole.
	sendersSQL = `SELECT DISTINCT sender FROM signature_tokens`
	// DeleteBeforeSQL deletes a batch of sender $1's tokens signed before
	// $2, at most $3, the oldest first: its InitPlan reads them through
	// the index of the sender's tokens by time, in its order, and the
	// DELETE takes them by ctid, under [store.TIDScans]. A batch reads
	// about its own tokens. By the tokens in an array, the DELETE read
	// every old token of the sender for each batch, or on other
	// statistics every token of the sender; as a semi-join with the
	// subquery (IN), PostgreSQL ran the subquery once per token of the
	// sender when its statistics said the table was small (a batch of
	// 1,000 among 25,000 tokens visited 24.5 million rows in 12 s). A
	// token claimed again while the statement runs may be left for the
	// next run (the signature check refuses it meanwhile): depending on
	// its minor version, PostgreSQL skips a row updated since the
	// InitPlan read it, or deletes the newest version if it is still old.
	DeleteBeforeSQL = `DELETE FROM signature_tokens
WHERE sender = $1 AND signed_at < $2 AND ctid = ANY(ARRAY(
  SELECT ctid FROM signature_tokens WHERE sender = $1 AND signed_at < $2 ORDER BY signed_at LIMIT $3))`
)

// Claim records that u's delivery uses u's token, and reports whether the
// request may go on. It returns true when the token was unused, or used by
// the same delivery with the same body, as in a retry. It returns false
// when another delivery used it first. That is a replay of a genuine
// signature, to refuse with 401. Of concurrent claims, at most one delivery
// gets true. An error comes from the database and decides nothing.
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
// cutoff, oldest first ([DeleteBeforeSQL]), in one short statement. It returns how many it deleted; fewer
// than limit means none are left. The retention job's cutoff is now less
// the tolerance and [ClockMargin], since the signature check refuses those
// tokens anyway.
func (s *Store) DeleteSignedBefore(ctx context.Context, sender string, cutoff time.Time, limit int) (int64, error) {
	tag, err := store.ExecOnlyUnder(ctx, s.db, store.TIDScans, DeleteBeforeSQL, sender, cutoff, limit)
	if err != nil {
		return 0, fmt.Errorf("delete old signature tokens of %s: %w", sender, err)
	}
	return tag.RowsAffected(), nil
}
