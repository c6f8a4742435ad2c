package dedup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// KeyConstraint is the name of the processed_messages constraint whose
// violation, and only whose violation, means "duplicate".
const KeyConstraint = "processed_messages_key"

// DefaultInFlightWait is how long a delivery waits for a concurrent delivery
// of the same key to finish before Run gives up with ErrInFlight.
const DefaultInFlightWait = 3 * time.Second

var (
	// ErrPayloadMismatch means the key is held by a delivery whose request
	// body had a different SHA-256. Nothing was changed.
	ErrPayloadMismatch = errors.New("dedup: delivery ID reused with a different payload")
	// ErrInFlight means another transaction still held the key when the
	// in-flight wait ran out. Nothing was recorded; a retry can succeed.
	ErrInFlight = errors.New("dedup: delivery is still being processed")
)

// Key identifies a delivery: the sender's name and the sender's delivery ID.
type Key struct {
	Sender     string
	DeliveryID string
}

// Response is a stored HTTP response.
type Response struct {
	Status      int
	ContentType string
	Body        []byte
}

// Delivery is one attempt to deliver a message.
type Delivery struct {
	Key
	// RequestSHA256 fingerprints the request body; a later delivery with the
	// same key and a different fingerprint is a mismatch.
	RequestSHA256 [32]byte
	// EventID is the ID of the event this delivery creates if it is new.
	EventID uuid.UUID
	// Response is stored with the key and returned if the delivery is new.
	Response Response
	// ReceivedAt is when the delivery arrived; ExpiresAt is when its key may
	// be forgotten.
	ReceivedAt time.Time
	ExpiresAt  time.Time
}

// Result is the outcome of Run.
type Result struct {
	// Response is the response to send: the new one, or the stored one.
	Response Response
	// EventID is the event created by the delivery that holds the key.
	EventID uuid.UUID
	// Replayed is true when the key was already held by a committed delivery
	// with the same fingerprint, and Response is that delivery's response.
	Replayed bool
}

// Change queues the statements of a state change on b. They run after the
// claim, in the same transaction, in the order queued, and only if the claim
// succeeded. A Change must not perform effects outside the database.
type Change func(b *pgx.Batch)

// Apply is the part of a state change that needs a transaction object, such
// as River's InsertManyTx: it runs on tx after the claim and the queued
// Change, before COMMIT. A non-nil error rolls everything back.
type Apply func(ctx context.Context, tx pgx.Tx) error

// Querier is the part of *pgxpool.Pool (or *pgx.Conn) that Store uses. It
// must not be a pgx.Tx: Run relies on its pipeline being its own implicit
// transaction, committed at the pipeline's end. RunTx with an Apply needs a
// *pgxpool.Pool.
type Querier interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Store runs deliveries against PostgreSQL.
type Store struct {
	db           Querier
	inFlightWait string // lock_timeout value in milliseconds
}

// MaxInFlightWait is the longest in-flight wait New accepts; longer ones are
// cut to it.
const MaxInFlightWait = time.Hour

// New returns a Store on db. inFlightWait bounds how long a delivery waits for
// a concurrent delivery of the same key: DefaultInFlightWait when zero or
// negative, rounded up to whole milliseconds, at most MaxInFlightWait.
func New(db Querier, inFlightWait time.Duration) *Store {
	if inFlightWait <= 0 {
		inFlightWait = DefaultInFlightWait
	}
	inFlightWait = min(inFlightWait, MaxInFlightWait)
	ms := (inFlightWait + time.Millisecond - 1) / time.Millisecond // never 0, which would mean "wait forever"
	return &Store{db: db, inFlightWait: strconv.FormatInt(int64(ms), 10)}
}

const (
	setLockTimeoutSQL = `SELECT set_config('lock_timeout', $1, true)`
	// forgetExpiredSQL removes a key whose retention has passed, found by a
	// conflicting claim before the retention job deleted it, so that the
	// claim can be retried and the delivery treated as new.
	forgetExpiredSQL = `WITH gone AS (
  DELETE FROM processed_messages WHERE sender = $1 AND delivery_id = $2 AND expires_at <= $3 RETURNING 1)
SELECT count(*) FROM gone`
	claimSQL = `INSERT INTO processed_messages
  (sender, delivery_id, request_sha256, event_id, response_status, response_content_type, response_body, created_at, expires_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`
	storedSQL = `SELECT request_sha256, event_id, response_status, response_content_type, response_body, expires_at
FROM processed_messages WHERE sender = $1 AND delivery_id = $2`
)

// Run claims d's key and applies change in one transaction, as the package
// documentation describes, in one round trip. It returns Replayed results
// for duplicates, ErrPayloadMismatch or ErrInFlight (wrapped) for those
// cases, and any other failure as an error after which nothing of the
// delivery is recorded — or, when the connection was lost during COMMIT,
// possibly everything, in which case a retry replays.
func (s *Store) Run(ctx context.Context, d Delivery, change Change) (Result, error) {
	return s.RunTx(ctx, d, change, nil)
}

// RunTx is Run with a second part of the state change, apply, that runs on
// the transaction after change and before COMMIT. With a nil apply it is
// Run. Otherwise the claim and change go in the transaction's first round
// trip (BEGIN is pipelined with them), apply takes its own round trips, and
// COMMIT one more. apply does not run for a duplicate or after any failure.
func (s *Store) RunTx(ctx context.Context, d Delivery, change Change, apply Apply) (Result, error) {
	res, err := s.runOnce(ctx, d, change, apply)
	if !errors.Is(err, errExpired) {
		return res, err
	}
	// The key's retention had passed: forget it and claim again, once.
	var n int64
	if err := s.db.QueryRow(ctx, forgetExpiredSQL, d.Sender, d.DeliveryID, d.ReceivedAt).Scan(&n); err != nil {
		return Result{}, fmt.Errorf("forget expired key: %w", err)
	}
	res, err = s.runOnce(ctx, d, change, apply)
	if errors.Is(err, errExpired) {
		// Only a concurrent delivery that claimed, and expired, in between
		// could cause this; the sender's retry sorts it out.
		return Result{}, errors.New("claim delivery: key expired twice")
	}
	return res, err
}

// errExpired marks a claim that conflicted with a key whose retention has
// passed; it never leaves RunTx.
var errExpired = errors.New("expired key")

func (s *Store) runOnce(ctx context.Context, d Delivery, change Change, apply Apply) (Result, error) {
	body := d.Response.Body
	if body == nil {
		body = []byte{} // stored as an empty body, not NULL
	}
	b := &pgx.Batch{}
	if apply != nil {
		b.Queue("BEGIN")
	}
	b.Queue(setLockTimeoutSQL, s.inFlightWait)
	b.Queue(claimSQL, d.Sender, d.DeliveryID, d.RequestSHA256[:], [16]byte(d.EventID), // [16]byte: pgx encodes it directly, a uuid.UUID goes through text
		d.Response.Status, d.Response.ContentType, body, d.ReceivedAt, d.ExpiresAt)
	if change != nil {
		change(b)
	}
	var err error
	if apply == nil {
		err = s.send(ctx, s.db, b, 0)
	} else {
		err = s.sendTx(ctx, b, apply)
	}
	switch {
	case err == nil:
		return Result{Response: d.Response, EventID: d.EventID}, nil
	case errors.Is(err, errClaimConflict):
		return s.replay(ctx, d)
	default:
		return Result{}, err
	}
}

// sendTx runs b, which starts with BEGIN, then apply, then COMMIT, on one
// connection. Any failure rolls back; a connection whose state is unknown is
// closed rather than returned to the pool.
func (s *Store) sendTx(ctx context.Context, b *pgx.Batch, apply Apply) (err error) {
	pool, ok := s.db.(*pgxpool.Pool)
	if !ok {
		return errors.New("claim delivery: a state change with Apply needs a *pgxpool.Pool")
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("claim delivery: acquire connection: %w", err)
	}
	defer conn.Release()
	tx := &connTx{conn: conn.Conn()}
	defer func() {
		if err != nil && !tx.done {
			if rbErr := tx.Rollback(context.WithoutCancel(ctx)); rbErr != nil {
				// The connection's transaction state is unknown: drop it.
				_ = conn.Conn().Close(context.WithoutCancel(ctx))
			}
		}
	}()
	if err := s.send(ctx, conn.Conn(), b, 1); err != nil {
		return err
	}
	if err := apply(ctx, tx); err != nil {
		return fmt.Errorf("apply state change: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit delivery: %w", err)
	}
	return nil
}

// errClaimConflict marks a claim that hit KeyConstraint; it never leaves Run.
var errClaimConflict = errors.New("claim conflict")

// batchSender is what send needs of a pool or a connection.
type batchSender interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// send executes the pipeline and classifies the first error by the statement
// that raised it: only the claim (statement offset+1, after the optional
// BEGIN and the lock timeout) can be a duplicate or in flight.
func (s *Store) send(ctx context.Context, db batchSender, b *pgx.Batch, offset int) error {
	claim := offset + 1
	n := b.Len()
	br := db.SendBatch(ctx, b)
	var first error
	for i := 0; i < n && first == nil; i++ {
		_, err := br.Exec()
		if err == nil {
			continue
		}
		switch {
		case i == claim && IsDuplicate(err):
			first = errClaimConflict
		case i == claim && isLockTimeout(err):
			first = fmt.Errorf("claim delivery: %w", ErrInFlight)
		case i <= claim:
			// PostgreSQL may hold back earlier results until the claim is
			// done, so a failure while claiming can surface on any of them.
			first = fmt.Errorf("claim delivery: %w", err)
		default:
			first = fmt.Errorf("apply state change (statement %d): %w", i-claim, err)
		}
	}
	// Close reads the result of the implicit COMMIT at Sync: an error here
	// means the transaction did not commit (or its outcome is unknown).
	if err := br.Close(); err != nil && first == nil {
		first = fmt.Errorf("commit delivery: %w", err)
	}
	return first
}

// replay reads the committed delivery that holds d's key. It returns
// errExpired when that key's retention had passed when d was received.
func (s *Store) replay(ctx context.Context, d Delivery) (Result, error) {
	var (
		sum     []byte
		res     Result
		status  int16
		expires time.Time
	)
	err := s.db.QueryRow(ctx, storedSQL, d.Sender, d.DeliveryID).
		Scan(&sum, &res.EventID, &status, &res.Response.ContentType, &res.Response.Body, &expires)
	if errors.Is(err, pgx.ErrNoRows) {
		// The key expired and was deleted between the claim and this read;
		// the sender's retry will be accepted as new.
		return Result{}, errors.New("read stored delivery: key vanished after conflict")
	}
	if err != nil {
		return Result{}, fmt.Errorf("read stored delivery: %w", err)
	}
	if !expires.After(d.ReceivedAt) {
		return Result{}, errExpired
	}
	if !bytes.Equal(sum, d.RequestSHA256[:]) {
		return Result{}, ErrPayloadMismatch
	}
	res.Response.Status = int(status)
	res.Replayed = true
	return res, nil
}

// IsDuplicate reports whether err is, or wraps, a unique violation (SQLSTATE
// 23505) of KeyConstraint. Every other error, including a unique violation of
// any other constraint, and nil, is not a duplicate.
func IsDuplicate(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505" && pgErr.ConstraintName == KeyConstraint
}

// isLockTimeout reports whether err is PostgreSQL's lock_not_available
// (SQLSTATE 55P03), raised when lock_timeout expires.
func isLockTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55P03"
}
